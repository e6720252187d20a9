"""What an administrator does to a share group's offsets (Kafka 4.3's AlterShareGroupOffsets and
DeleteShareGroupOffsets, `kafka-share-groups.sh --reset-offsets / --delete-offsets`), through the
share coordinators of the group's share-partitions (`persister.py`), so it takes effect whichever
broker receives it. Only for an empty group; the handler checks that.

Altering gives a share-partition a new start offset with nothing in flight: Kafka's group
coordinator initialises the state afresh (InitializeShareGroupState) with a higher state epoch, so a
share-partition leader still holding the old state is fenced on its next write and reads the new
one. Deleting drops a topic's share-partition states (DeleteShareGroupState): the group starts them
again from `share.auto.offset.reset` on its next fetch.
"""
from __future__ import annotations

from kproto.errors import ErrorCode as E


async def reset_start(svc, group_id: str, topic_id, index: int, start_offset: int) -> int:
    """AlterShareGroupOffsets for one share-partition: its state starts afresh at `start_offset`
    (a negative one, as Kafka's "uninitialised" -1, leaves it to share.auto.offset.reset). NONE, or
    the coordinator's error."""
    summary = await svc.persister.summary(group_id, topic_id, index)
    if summary.error_code != E.NONE:
        return summary.error_code
    res = await svc.persister.initialize(group_id, topic_id, index, summary.state_epoch + 1,
                                         start_offset if start_offset >= 0 else -1)
    svc.drop((group_id, topic_id, index))            # held here: read again on the next fetch
    if res.error_code == E.NONE:
        svc.group_topics.setdefault(group_id, set()).add(topic_id)
    return res.error_code


async def partitions_with_state(svc, group_id: str, topic_id, partitions: int) -> list:
    """The partitions of a topic of which the group has share-partition state (ReadShareGroupStateSummary:
    start offset -1 is none); None when a coordinator does not answer."""
    out = []
    for index in range(partitions):
        res = await svc.persister.summary(group_id, topic_id, index)
        if res.error_code != E.NONE:
            return None
        if res.start_offset >= 0 or (group_id, topic_id, index) in svc.partitions:
            out.append(index)
    return out


async def delete_topic(svc, group_id: str, topic_id, indexes) -> int:
    """DeleteShareGroupOffsets for one topic: every share-partition state of it is dropped. NONE, or
    the first coordinator error."""
    for index in indexes:
        svc.drop((group_id, topic_id, index))
        res = await svc.persister.delete(group_id, topic_id, index)
        if res.error_code != E.NONE:
            return res.error_code
    return E.NONE

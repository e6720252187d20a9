"""What an administrator does to a share group's offsets (Kafka 4.3's AlterShareGroupOffsets and
DeleteShareGroupOffsets, `kafka-share-groups.sh --reset-offsets / --delete-offsets`), on the
share-partitions of one broker's ShareService. Only for an empty group; the handler checks that.

Altering gives a share-partition a new start offset with nothing in flight (Kafka's share
coordinator initialises the state afresh, InitializeShareGroupState); the next ShareFetch reads from
there. Deleting drops a topic's share-partition states (DeleteShareGroupState): the group starts
them again from `share.auto.offset.reset` on its next fetch. Both are written to
`__share_group_state` before the answer (a snapshot, a tombstone), so a restart keeps them.
"""
from __future__ import annotations

from broker.coordination.topic import ensure_internal_topic
from broker.share import state_store
from broker.share.partition import SharePartition


def _ready(svc) -> None:
    if not svc._loaded:           # what was read back must not come back over what is changed now
        svc._load()


def state_topic_ready(svc) -> bool:
    """Whether __share_group_state exists and this broker leads its partitions as the metadata says
    (else, while it is created, the answer is COORDINATOR_NOT_AVAILABLE, which the admin client retries)."""
    broker = svc.broker
    topic = broker.image.topics.get(state_store.TOPIC)
    if topic is None:
        ensure_internal_topic(broker, state_store.TOPIC, False, lambda: None)
        return False
    # and this broker serves the partitions the metadata says it leads (just created: not yet)
    return all(p is not None and p.is_leader
               for p in (broker.partitions.get(state_store.TOPIC, i)
                         for i, info in topic.partitions.items() if info.leader == broker.node_id))


def reset_start(svc, group_id: str, topic_id, index: int, start_offset: int) -> bool:
    """AlterShareGroupOffsets for one share-partition: its state starts afresh at `start_offset`
    (a negative one, as Kafka's "uninitialised" -1, leaves it to share.auto.offset.reset). False when
    the new state cannot be written here (the __share_group_state partition is not led by this broker,
    or the topic is being created: the client retries)."""
    _ready(svc)
    key = (group_id, topic_id, index)
    if start_offset < 0:
        return forget(svc, key)
    sp = SharePartition(start_offset,
                        delivery_count_limit=int(svc.group_config(group_id, "share.delivery.count.limit")),
                        max_record_locks=svc.max_record_locks, lock_duration_ms=svc.lock_duration_ms)
    if not svc.persist(key, sp):
        return False
    svc.partitions[key] = sp
    svc.stored.pop(key, None)
    return True


def topics_with_state(svc, group_id: str) -> set:
    """The topic ids of which the group has share-partition state on this broker."""
    _ready(svc)
    return {tid for gid, tid, _idx in list(svc.partitions) + list(svc.stored) if gid == group_id}


def delete_topic(svc, group_id: str, topic_id) -> bool:
    """DeleteShareGroupOffsets for one topic: every share-partition state of it is dropped. False
    when a tombstone cannot be written here (the client retries)."""
    _ready(svc)
    keys = {k for k in list(svc.partitions) + list(svc.stored) if k[0] == group_id and k[1] == topic_id}
    return all([forget(svc, k) for k in sorted(keys)])


def forget(svc, key: tuple) -> bool:
    if key not in svc.partitions and key not in svc.stored:
        return True
    if not svc.tombstone(key):
        return False
    svc.partitions.pop(key, None)
    svc.stored.pop(key, None)
    svc._epochs.pop(key, None)
    return True

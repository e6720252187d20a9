"""A large metadata commit on a quorum node decoded a slice of the event loop at a time and
applied whole (issue 26, broker/quorum/replicated.py _load_loop, as Kafka's MetadataLoader): a
leadership move of thousands of partitions was decoded and applied in the step that learned of
its commit (0.1-0.5 s at 3,000-10,000 partitions). Readers see the image before the batch or
after it, never half of it, and the metadata listeners are told once, with the whole batch."""
from __future__ import annotations

import uuid
from collections import deque
from types import SimpleNamespace

import trio

from kproto.metadata.partition_change_record import PartitionChangeRecord
from kproto.metadata.partition_record import PartitionRecord
from kproto.metadata.topic_record import TopicRecord

from broker.metadata import serde
from broker.metadata.image import MetadataImage
from broker.metadata.log import MetadataLog
from broker.quorum.replicated import LOAD_SLICE_RECORDS, ReplicatedMetadata
from raft import messages as m

PARTITIONS = 2000


def _node():
    image = MetadataImage()
    tid = uuid.uuid4()
    image.apply(TopicRecord(name="t", topic_id=tid))
    for p in range(PARTITIONS):
        image.apply(PartitionRecord(partition_id=p, topic_id=tid, replicas=[1, 2, 3], isr=[1, 2, 3],
                                    leader=1, leader_epoch=0, partition_epoch=0))
    image.offset = 99
    q = ReplicatedMetadata.__new__(ReplicatedMetadata)   # what the commit path uses, no quorum shell
    q.image = image
    q.metadata = MetadataLog(None, image)
    q.liveness = SimpleNamespace(register_offsets={})
    q.broker = SimpleNamespace(partitions=None)
    q.commit_count = 0
    q._undo = SimpleNamespace(committed=lambda _applied: None)
    q._when_committed = []
    q._loading, q._load_wake, q._load_generation = deque(), None, 0
    return q, tid


def test_a_large_commit_is_decoded_in_slices_and_applied_whole():
    q, tid = _node()
    batches = []
    q.metadata.subscribe(lambda records: batches.append(len(records)))
    moves = [PartitionChangeRecord(partition_id=p, topic_id=tid, leader=2, isr=[2, 3]) for p in range(PARTITIONS)]
    entries = [m.Entry(100 + i, 1, serde.encode(r), batch_end=i == PARTITIONS - 1) for i, r in enumerate(moves)]
    seen = []

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(q._load_loop)
            q._on_commit(entries)
            assert q.image.offset == 99 and q.image.topics["t"].partitions[0].leader == 1   # not yet
            for _ in range(1000):   # a reader between steps: how many partitions moved
                seen.append(sum(1 for p in q.image.topics["t"].partitions.values() if p.leader == 2))
                if q.image.offset == 100 + PARTITIONS - 1:
                    break
                await trio.sleep(0)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert seen[-1] == PARTITIONS and q.image.offset == 100 + PARTITIONS - 1
    assert set(seen) == {0, PARTITIONS}, "a reader saw part of the batch"
    assert len(seen) > PARTITIONS // LOAD_SLICE_RECORDS, f"applied after {len(seen)} steps"
    assert batches == [PARTITIONS] and q.commit_count == PARTITIONS


def test_a_commit_that_arrives_while_a_short_last_slice_is_decoded_is_applied_whole():
    """Issue 26: a restarted node's first commit (the whole log, 3,046 records: not a multiple of
    the slice) was being decoded when the fence committed. The loader counted a full slice for the
    short last one, so the first records committed meanwhile (the fence's first partitions) were
    skipped: the node kept leading them in its image, never fetched them and stayed out of their
    ISRs. Every committed record must reach the image, in order."""
    q, tid = _node()
    first_n = 4 * LOAD_SLICE_RECORDS + 44    # decoded in 5 steps, the last one short
    second_n = 300                           # committed meanwhile (the fence)
    moves = [PartitionChangeRecord(partition_id=p, topic_id=tid, leader=2, isr=[2, 3])
             for p in range(first_n + second_n)]
    entries = [m.Entry(100 + i, 1, serde.encode(r), batch_end=i in (first_n - 1, first_n + second_n - 1))
               for i, r in enumerate(moves)]
    last = 100 + first_n + second_n - 1

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(q._load_loop)
            q._on_commit(entries[:first_n])
            await trio.sleep(0)
            assert q.image.offset == 99, "the first commit was applied before the second came"
            q._on_commit(entries[first_n:])
            for _ in range(1000):
                if q.image.offset == last:
                    break
                await trio.sleep(0)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert q.image.offset == last
    stale = [p for p, part in q.image.topics["t"].partitions.items() if p < first_n + second_n and part.leader != 2]
    assert not stale, f"{len(stale)} committed changes never applied, from partition {stale[0]}"
    assert q.commit_count == first_n + second_n

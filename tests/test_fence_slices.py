"""A fence's batch made in slices of the controller's event loop (issue 26,
broker/quorum/liveness.py fence_records_sliced): at 10,000 RF=3 partitions a fence is 10,000
elections, computed and encoded in the step that proposed them (0.2-0.5 s of the loop). Now the
loop runs between slices, and the batch proposed is still the one the image asks for when it
is proposed: a partition the metadata changed meanwhile is elected again from its new state."""
from __future__ import annotations

import uuid
from types import SimpleNamespace

import trio

from kproto.metadata.partition_change_record import PartitionChangeRecord
from kproto.metadata.partition_record import PartitionRecord
from kproto.metadata.register_broker_record import RegisterBrokerRecord
from kproto.metadata.topic_record import TopicRecord

from broker.config import BrokerConfig
from broker.metadata import serde
from broker.metadata.image import MetadataImage
from broker.metadata.log import MetadataLog
from broker.quorum.liveness import Liveness
from broker.replication.brokers import brokers_from_image

TOPICS, PARTITIONS = 30, 100   # 3,000 RF=3 partitions, each with broker 3 in its ISR


def _quorum():
    image = MetadataImage()
    for b in (1, 2, 3):
        image.apply(RegisterBrokerRecord(broker_id=b, incarnation_id=uuid.uuid4(), broker_epoch=10 + b,
                                         end_points=[], features=[], rack=None, fenced=False))
    for t in range(TOPICS):
        tid = uuid.uuid4()
        image.apply(TopicRecord(name=f"t{t}", topic_id=tid))
        for p in range(PARTITIONS):
            replicas = [(t + p + i) % 3 + 1 for i in range(3)]
            image.apply(PartitionRecord(partition_id=p, topic_id=tid, replicas=replicas, isr=replicas,
                                        leader=replicas[0], leader_epoch=0, partition_epoch=0))
    metadata = MetadataLog(None, image)
    controller = SimpleNamespace(brokers=lambda: brokers_from_image(image, 1))
    return SimpleNamespace(image=image, metadata=metadata, config=BrokerConfig({}), node_id=1,
                           is_active_controller=True, broker=SimpleNamespace(controller=controller))


def _apply(q, records) -> None:
    for r in records:
        q.image.apply(r)
    for listener in q.metadata._listeners:
        listener(records)


def test_a_fence_batch_is_made_in_slices_and_takes_in_what_changed_meanwhile():
    q = _quorum()
    liveness = Liveness(q)
    t5 = q.image.topics["t5"]
    moved = t5.partitions[7]
    steps = []

    async def main():
        async def meanwhile():
            # while the batch is being made: broker 3 leaves t5-7's ISR (its leader's AlterPartition)
            for _ in range(1000):
                steps.append(None)
                if len(steps) == 2:
                    _apply(q, [PartitionChangeRecord(partition_id=7, topic_id=t5.topic_id, isr=[b for b in moved.isr if b != 3], leader=next(b for b in moved.isr if b != 3))])
                await trio.sleep(0)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(meanwhile)
            made = await liveness.fence_records_sliced(3, 13)
            nursery.cancel_scope.cancel()
        return made

    records, datas, undos = trio.run(main)
    assert len(steps) > 5, f"the loop ran {len(steps)} other steps while the batch was made"
    expected = liveness.fence_records(3, 13)   # the batch made in one step, from the image as it is now
    assert [serde.encode(r) for r in records] == [serde.encode(r) for r in expected] == datas
    # every partition's election, but t5-7's: broker 3 left its ISR meanwhile; the fence last
    assert len(records) == TOPICS * PARTITIONS and type(records[-1]).__name__ == "FenceBrokerRecord"
    assert not [r for r in records[:-1] if r.topic_id == t5.topic_id and r.partition_id == 7]
    assert not q.metadata._listeners   # (the watch is gone)
    # the undos made along the way take the image back to where it was before the batch
    from broker.quorum.image_undo import ImageUndo
    before = {(t.name, i): (p.leader, list(p.isr), p.partition_epoch)
              for t in q.image.topics.values() for i, p in t.partitions.items()}
    undo = ImageUndo()
    undo.proposed(q.image, 1000, records, undos)
    _apply(q, records)
    assert undo.undo(q.image, 1000)
    assert before == {(t.name, i): (p.leader, list(p.isr), p.partition_epoch)
                      for t in q.image.topics.values() for i, p in t.partitions.items()}
    assert not q.image.brokers[3].fenced

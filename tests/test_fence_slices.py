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


def _fencing(q, liveness, meanwhile_step):
    """Liveness._fence(3, ...) run to its end beside a task that calls meanwhile_step(n) at each of
    its steps (n from 1): the batches proposed, and how many steps the loop ran meanwhile."""
    proposed, steps = [], []
    q.propose_nowait = lambda records, datas, undos: proposed.append(records)

    async def main():
        async def meanwhile():
            for n in range(1, 1000):
                steps.append(n)
                meanwhile_step(n)
                await trio.sleep(0)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(meanwhile)
            await liveness._fence(3, 13, 0.0, "test")
            nursery.cancel_scope.cancel()

    trio.run(main)
    return proposed, len(steps)


def test_a_fence_is_not_proposed_by_a_node_that_lost_the_quorum_s_leadership_between_slices():
    """Issue 26: the node stops being the active controller (the metadata quorum elected another
    leader) while the fence's batch is made: nothing is proposed, not even a batch made before."""
    q = _quorum()
    liveness = Liveness(q)

    def lose(n):
        if n == 2:
            q.is_active_controller = False
    proposed, steps = _fencing(q, liveness, lose)
    assert steps >= 2                    # (the loss came between slices, not before the batch)
    assert proposed == []


def test_a_fence_takes_a_leader_changed_between_slices_from_its_new_state():
    """Issue 26: a partition the fence had elected already gets a new leader meanwhile (its ISR
    unchanged): its election in the batch proposed is made again from the new state."""
    q = _quorum()
    liveness = Liveness(q)
    t0 = q.image.topics["t0"]
    # (the first of t0's partitions led by broker 3: elected in the first slice)
    index, p = next((i, p) for i, p in sorted(t0.partitions.items()) if p.leader == 3)
    other = [b for b in p.isr if b != 3]
    before = liveness.fence_records(3, 13)
    first = next(r for r in before[:-1] if r.topic_id == t0.topic_id and r.partition_id == index)
    new_leader = next(b for b in other if b != first.leader)   # not the one the fence would pick

    def move(n):
        if n == 3:
            _apply(q, [PartitionChangeRecord(partition_id=index, topic_id=t0.topic_id, leader=new_leader)])
    proposed, steps = _fencing(q, liveness, move)
    assert steps > 3
    assert len(proposed) == 1
    records = proposed[0]
    mine = [r for r in records[:-1] if r.topic_id == t0.topic_id and r.partition_id == index]
    assert len(mine) == 1
    assert first.leader != -2 and mine[0].leader == -2   # the new leader kept (-2: no change) ...
    assert mine[0].isr == [b for b in other]              # ... and only broker 3 leaves the ISR
    expected = liveness.fence_records(3, 13)   # from the image as it is now (order aside)
    assert sorted(serde.encode(r) for r in records[:-1]) == sorted(serde.encode(r) for r in expected[:-1])
    assert serde.encode(records[-1]) == serde.encode(expected[-1])   # the fence last

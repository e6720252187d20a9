"""Controller side of replication (broker/replication/): replica placement,
leader election on fencing / controlled shutdown / unfencing, preferred
election and AlterPartition, checked against what Kafka 3.9's controller
does. Pure: no processes."""
from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest

from kproto.errors import ErrorCode, KafkaError
from kproto.messages.alter_partition_request import AlterPartitionRequest
from kproto.metadata.partition_record import PartitionRecord
from kproto.metadata.topic_record import TopicRecord

from broker.metadata.image import MetadataImage
from broker.replication import alter_partition, election, placement
from broker.replication.brokers import BrokerInfo


def _brokers(n, racks=None, fenced=()):
    return {i: BrokerInfo(i, racks[i % len(racks)] if racks else None, i in fenced, epoch=100 + i)
            for i in range(1, n + 1)}


# -- placement ---------------------------------------------------------------------------

def test_placement_spreads_leaders_and_replicas_over_brokers():
    out = placement.place(_brokers(3), 6, 3, random.Random(1))
    assert all(sorted(r) == [1, 2, 3] for r in out)
    leaders = Counter(r[0] for r in out)
    assert leaders == {1: 2, 2: 2, 3: 2}


def test_placement_puts_replicas_on_distinct_racks():
    brokers = _brokers(6, racks=["a", "b", "c"])
    rack = {b.id: b.rack for b in brokers.values()}
    out = placement.place(brokers, 12, 3, random.Random(7))
    for replicas in out:
        assert len(set(replicas)) == 3
        assert len({rack[b] for b in replicas}) == 3, replicas
    assert Counter(rack[r[0]] for r in out) == {"a": 4, "b": 4, "c": 4}
    assert set(Counter(r[0] for r in out)) == set(brokers)   # every broker leads some


def test_placement_never_makes_a_fenced_broker_the_first_replica():
    out = placement.place(_brokers(3, fenced={2}), 9, 3, random.Random(3))
    assert all(r[0] != 2 and sorted(r) == [1, 2, 3] for r in out)
    out = placement.place(_brokers(3, fenced={2}), 9, 2, random.Random(3))
    assert all(2 not in r for r in out)     # enough unfenced brokers: the fenced one is not used


@pytest.mark.parametrize("rf,brokers,message", [
    (4, _brokers(3), "Unable to replicate the partition 4 time(s): The target replication factor of 4 "
                     "cannot be reached because only 3 broker(s) are registered."),
    (1, _brokers(2, fenced={1, 2}), "Unable to replicate the partition 1 time(s): All brokers are currently fenced."),
    (0, _brokers(2), "Unable to replicate the partition 0 time(s): Invalid replication factor 0: "
                     "the replication factor must be positive."),
])
def test_invalid_replication_factor_as_kafka(rf, brokers, message):
    with pytest.raises(KafkaError) as exc:
        placement.place(brokers, 1, rf)
    assert exc.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert str(exc.value.message) == message


# -- elections ---------------------------------------------------------------------------

def _image(replicas=(1, 2, 3), isr=None, leader=None, configs=None):
    img = MetadataImage()
    tid = uuid.uuid4()
    img.apply(TopicRecord(name="t", topic_id=tid))
    img.topics["t"].configs.update(configs or {})
    isr = list(replicas if isr is None else isr)
    img.apply(PartitionRecord(partition_id=0, topic_id=tid, replicas=list(replicas), isr=isr,
                              leader=isr[0] if leader is None else leader, leader_epoch=0, partition_epoch=0))
    return img, img.topics["t"].partitions[0]


def _fence(brokers, b, shutdown=False):
    info = brokers[b]
    return {**brokers, b: BrokerInfo(b, info.rack, not shutdown, shutdown, info.epoch)}


def _apply(img, records):
    for r in records:
        img.apply(r)


def test_fencing_the_leader_elects_the_next_isr_member_and_bumps_the_epoch():
    img, p = _image()
    brokers = _fence(_brokers(3), 1)
    _apply(img, election.on_broker_gone(img, 1, brokers))
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (2, [2, 3], 1, 1)


def test_fencing_a_follower_shrinks_the_isr_without_a_new_leader_epoch():
    img, p = _image()
    _apply(img, election.on_broker_gone(img, 3, _fence(_brokers(3), 3, shutdown=True)))
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (1, [1, 2], 0, 1)


def test_out_of_sync_replica_is_never_elected_unless_unclean():
    img, p = _image(isr=[1])            # 2 and 3 are out of sync
    brokers = _fence(_brokers(3), 1)
    _apply(img, election.on_broker_gone(img, 1, brokers))
    assert (p.leader, p.isr) == (-1, [1])  # offline, the last ISR member kept
    # it comes back: it is elected again (its log holds every acknowledged record)
    brokers = _brokers(3)
    _apply(img, election.on_broker_unfenced(img, 1, brokers))
    assert (p.leader, p.isr, p.leader_epoch) == (1, [1], 2)


def test_unclean_election_takes_an_out_of_sync_replica_alone_in_the_isr():
    img, p = _image(isr=[1], configs={"unclean.leader.election.enable": "true"})
    _apply(img, election.on_broker_gone(img, 1, _fence(_brokers(3), 1)))
    assert (p.leader, p.isr) == (2, [2])


def test_preferred_election_moves_leadership_back_to_the_first_replica():
    img, p = _image(leader=2, isr=[2, 3, 1])
    _apply(img, election.preferred_elections(img, _brokers(3)))
    assert (p.leader, p.leader_epoch) == (1, 1)
    assert election.preferred_elections(img, _brokers(3)) == []


# -- AlterPartition ------------------------------------------------------------------------

def _alter(img, p, new_isr, broker=1, leader_epoch=None, partition_epoch=None, version=3, brokers=None):
    brokers = brokers or _brokers(3)
    t = img.topics["t"]
    pd = AlterPartitionRequest.PartitionData(
        partition_index=0, leader_epoch=p.leader_epoch if leader_epoch is None else leader_epoch,
        new_isr=list(new_isr),
        new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=b, broker_epoch=brokers[b].epoch if b in brokers else -1)
                             for b in new_isr],
        leader_recovery_state=0, partition_epoch=p.partition_epoch if partition_epoch is None else partition_epoch)
    req = AlterPartitionRequest(broker_id=broker, broker_epoch=brokers[broker].epoch, topics=[
        AlterPartitionRequest.TopicData(topic_name="t", topic_id=t.topic_id, partitions=[pd])])
    resp, records = alter_partition.handle(img, req, version, brokers)
    _apply(img, records)
    return resp.error_code or resp.topics[0].partitions[0].error_code, resp


def test_alter_partition_shrinks_and_expands_the_isr():
    img, p = _image()
    code, resp = _alter(img, p, [1, 2])
    assert code == 0 and p.isr == [1, 2] and p.partition_epoch == 1
    assert resp.topics[0].partitions[0].partition_epoch == 1
    code, _ = _alter(img, p, [1, 2, 3])
    assert code == 0 and p.isr == [1, 2, 3] and p.partition_epoch == 2


@pytest.mark.parametrize("kwargs,code", [
    (dict(partition_epoch=0, new_isr=[1, 2]), ErrorCode.INVALID_UPDATE_VERSION),
    (dict(broker=2, new_isr=[1, 2]), ErrorCode.INVALID_REQUEST),          # not the leader
    (dict(new_isr=[2, 3]), ErrorCode.INVALID_REQUEST),                    # leader left out
    (dict(new_isr=[1, 4]), ErrorCode.INVALID_REQUEST),                    # not a replica
    (dict(leader_epoch=5, new_isr=[1]), ErrorCode.NOT_CONTROLLER),
])
def test_alter_partition_errors_as_kafka(kwargs, code):
    img, p = _image()
    _alter(img, p, [1, 2, 3], leader_epoch=None)       # partition epoch 0 -> 0 (unchanged ISR)
    _alter(img, p, [1, 2])                              # partition epoch 1
    _alter(img, p, [1, 2, 3])                           # partition epoch 2
    new_isr = kwargs.pop("new_isr")
    assert _alter(img, p, new_isr, **kwargs)[0] == code
    assert p.isr == [1, 2, 3]


def test_alter_partition_refuses_a_fenced_replica_and_an_old_leader_epoch():
    img, p = _image(isr=[1, 2])
    assert _alter(img, p, [1, 2, 3], brokers=_fence(_brokers(3), 3))[0] == ErrorCode.INELIGIBLE_REPLICA
    assert _alter(img, p, [1, 2, 3], brokers=_fence(_brokers(3), 3), version=0)[0] == \
        ErrorCode.OPERATION_NOT_ATTEMPTED
    _apply(img, election.on_broker_gone(img, 1, _fence(_brokers(3), 1)))   # 2 leads, epoch 1
    assert _alter(img, p, [1, 2], broker=1, leader_epoch=0, partition_epoch=1)[0] == \
        ErrorCode.FENCED_LEADER_EPOCH


# -- a new partition's ISR -------------------------------------------------------------------

def _controller_with(fenced: set[int], shutting_down: set[int] = frozenset()):
    from kproto.metadata.register_broker_record import RegisterBrokerRecord
    from broker.controller.controller import Controller
    img = MetadataImage()
    for bid in (1, 2, 3):
        img.apply(RegisterBrokerRecord(broker_id=bid, broker_epoch=100 + bid, incarnation_id=uuid.uuid4(),
                                       fenced=bid in fenced, in_controlled_shutdown=bid in shutting_down))
    ctl = Controller.__new__(Controller)
    ctl.image, ctl.node_id = img, 1
    return ctl


def test_a_new_partitions_isr_is_its_replicas_on_active_brokers():
    # Kafka's createTopic: isr = replicas filtered by isActive, leader = isr[0]; a replica on a
    # fenced broker (registered, not caught up yet) joins the ISR only once it fetched
    tid = uuid.uuid4()
    rec = _controller_with(fenced={2})._partition_record(tid, 0, [2, 1, 3])
    assert (rec.replicas, rec.isr, rec.leader) == ([2, 1, 3], [1, 3], 1)
    rec = _controller_with(fenced=set(), shutting_down={1})._partition_record(tid, 0, [1, 2, 3])
    assert (rec.isr, rec.leader) == ([2, 3], 2)
    rec = _controller_with(fenced=set())._partition_record(tid, 0, [3, 1, 2])
    assert (rec.isr, rec.leader) == ([3, 1, 2], 3)
    with pytest.raises(KafkaError) as e:
        _controller_with(fenced={1, 2})._partition_record(tid, 4, [2, 1], manual=True)
    assert e.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert str(e.value) == ("All brokers specified in the manual partition assignment for partition 4 "
                            "are fenced or in controlled shutdown.")
    with pytest.raises(KafkaError) as e:
        _controller_with(fenced={1, 2})._partition_record(tid, 0, [2, 1])
    assert e.value.code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_alter_partition_batch_asks_for_many_partitions_in_one_request():
    """A leader's queued ISR changes go out as one request (Kafka's AlterPartitionManager
    batches its unsent items): each partition's answer is its own, a partition queued twice is
    asked for once with its latest change."""
    img = MetadataImage()
    for name in ("a", "b"):
        tid = uuid.uuid4()
        img.apply(TopicRecord(name=name, topic_id=tid))
        for i in range(3):
            img.apply(PartitionRecord(partition_id=i, topic_id=tid, replicas=[1, 2, 3], isr=[1], leader=1,
                                      leader_epoch=0, partition_epoch=0))

    class State:
        def __init__(self, p, partition_epoch=None):
            self.leader_epoch = p.leader_epoch
            self.partition_epoch = p.partition_epoch if partition_epoch is None else partition_epoch

    class Part:
        def __init__(self, index):
            self.index = index
    batch = alter_partition.Batch(1)
    a, b = img.topics["a"], img.topics["b"]
    batch.add(a.topic_id, Part(0), State(a.partitions[0]), [1, 2])
    batch.add(b.topic_id, Part(2), State(b.partitions[2]), [1, 3])
    batch.add(a.topic_id, Part(0), State(a.partitions[0]), [1, 2, 3])        # the later change wins
    batch.add(a.topic_id, Part(1), State(a.partitions[1], partition_epoch=5), [1, 2])   # stale
    req = batch.request()
    assert len(req.topics) == 2 and sum(len(t.partitions) for t in req.topics) == 3
    resp, records = alter_partition.handle(img, req, 2, _brokers(3))
    assert batch.codes(resp) == [ErrorCode.NONE, ErrorCode.NONE, ErrorCode.NOT_CONTROLLER]
    _apply(img, records)
    assert (a.partitions[0].isr, b.partitions[2].isr, a.partitions[1].isr) == ([1, 2, 3], [1, 3], [1])
    stale_broker = alter_partition.handle(img, AlterPartitionRequest(broker_id=9, broker_epoch=-1, topics=req.topics),
                                          2, _brokers(3))[0]
    assert batch.codes(stale_broker) == [ErrorCode.STALE_BROKER_EPOCH] * 3

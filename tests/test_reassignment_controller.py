"""Partition reassignment on the controller (broker/replication/reassignment.py),
checked against what Kafka 3.9's controller writes: the merged replica list
with adding/removing replicas, completion once the ISR holds the new replicas
(leader moved off a removed replica, leader epoch bumped), cancellation, and
Kafka's errors. Pure: the records are applied to a MetadataImage."""
from __future__ import annotations

import uuid

import pytest

from kproto.errors import ErrorCode, KafkaError
from kproto.metadata.partition_change_record import PartitionChangeRecord
from kproto.metadata.partition_record import PartitionRecord
from kproto.metadata.topic_record import TopicRecord

from broker.metadata.image import MetadataImage
from broker.metadata.snapshotter import image_records
from broker.replication import reassignment
from broker.replication.brokers import BrokerInfo


def _brokers(n, fenced=()):
    return {i: BrokerInfo(i, None, i in fenced) for i in range(1, n + 1)}


def _image(replicas=(1, 2, 3), isr=None, leader=None):
    img = MetadataImage()
    tid = uuid.uuid4()
    img.apply(TopicRecord(name="t", topic_id=tid))
    isr = list(replicas if isr is None else isr)
    img.apply(PartitionRecord(partition_id=0, topic_id=tid, replicas=list(replicas), isr=isr,
                              leader=isr[0] if leader is None else leader, leader_epoch=0, partition_epoch=0))
    return img, img.topics["t"].partitions[0]


def _isr(img, p, isr):
    """The leader's AlterPartition, as committed."""
    img.apply(PartitionChangeRecord(partition_id=0, topic_id=img.topics["t"].topic_id, isr=list(isr)))


def test_move_to_new_brokers_adds_then_completes_when_the_isr_has_them():
    img, p = _image((1, 2, 3))
    brokers = _brokers(5)
    r = reassignment.alter(img, brokers, "t", 0, [3, 4, 5])
    img.apply(r)
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ([3, 4, 5, 1, 2], [4, 5], [1, 2])
    assert p.isr == [1, 2, 3] and p.leader == 1 and p.leader_epoch == 0   # nothing moves yet
    assert [(n, q.partition) for n, q in reassignment.ongoing(img)] == [("t", 0)]
    assert reassignment.completions(img, brokers) == []
    _isr(img, p, [1, 2, 3, 4])
    assert reassignment.completions(img, brokers) == []   # 5 has not caught up
    _isr(img, p, [1, 2, 3, 4, 5])
    [done] = reassignment.completions(img, brokers)
    img.apply(done)
    assert (p.replicas, p.isr, p.adding_replicas, p.removing_replicas) == ([3, 4, 5], [3, 4, 5], [], [])
    assert p.leader == 3 and p.leader_epoch == 1      # the removed leader hands over to the first target
    assert reassignment.ongoing(img) == []


def test_removed_replicas_bump_the_leader_epoch_even_when_the_leader_stays():
    img, p = _image((1, 2, 3))
    img.apply(reassignment.alter(img, _brokers(3), "t", 0, [1, 2]))   # no replica to add: done at once
    assert (p.replicas, p.isr, p.leader, p.leader_epoch) == ([1, 2], [1, 2], 1, 1)
    assert reassignment.ongoing(img) == []


def test_reordering_only_changes_the_replica_order():
    img, p = _image((1, 2, 3))
    img.apply(reassignment.alter(img, _brokers(3), "t", 0, [3, 2, 1]))
    assert (p.replicas, p.leader, p.leader_epoch) == ([3, 2, 1], 1, 0)
    assert reassignment.alter(img, _brokers(3), "t", 0, [3, 2, 1]) is None   # unchanged: no record


def test_cancel_reverts_to_the_original_replicas():
    img, p = _image((1, 2, 3))
    brokers = _brokers(5)
    img.apply(reassignment.alter(img, brokers, "t", 0, [3, 4, 5]))
    _isr(img, p, [1, 2, 3, 4])
    img.apply(reassignment.alter(img, brokers, "t", 0, None))
    # Kafka's PartitionReassignmentRevert keeps the merged order without the adding replicas
    assert (p.replicas, p.isr, p.adding_replicas, p.removing_replicas) == ([3, 1, 2], [1, 2, 3], [], [])
    assert p.leader == 1
    with pytest.raises(KafkaError) as exc:
        reassignment.alter(img, brokers, "t", 0, None)
    assert exc.value.code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


@pytest.mark.parametrize("topic,index,target,code,message", [
    ("nope", 0, [1], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope."),
    ("t", 7, [1], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:7."),
    ("t", 0, [], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes an empty replica list."),
    ("t", 0, [1, 9], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes broker 9, but no such broker is registered."),
    ("t", 0, [2, 2], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes the broker 2 more than once."),
])
def test_errors_as_kafka(topic, index, target, code, message):
    img, _p = _image((1, 2, 3))
    with pytest.raises(KafkaError) as exc:
        reassignment.alter(img, _brokers(3), topic, index, target)
    assert (exc.value.code, exc.value.message) == (code, message)


def test_list_filters_by_topic_and_partition_and_skips_unknown_names():
    img, _p = _image((1, 2, 3))
    img.apply(reassignment.alter(img, _brokers(4), "t", 0, [2, 3, 4]))
    assert [q.partition for _n, q in reassignment.ongoing(img, [("t", [0, 5]), ("other", [0])])] == [0]
    assert reassignment.ongoing(img, [("t", [1])]) == []


def test_an_ongoing_reassignment_survives_a_metadata_snapshot():
    img, p = _image((1, 2, 3))
    img.apply(reassignment.alter(img, _brokers(4), "t", 0, [2, 3, 4]))
    copy = MetadataImage()
    for r in image_records(img, 21, 1):
        copy.apply(r)
    q = copy.topics["t"].partitions[0]
    assert (q.replicas, q.adding_replicas, q.removing_replicas) == ([2, 3, 4, 1], [4], [1])

"""A metadata record that names a topic, partition or broker the image does not have is a fault,
as in Kafka's loader (TopicsDelta / ClusterDelta throw, the loader's fault handler logs an ERROR
and counts it in metadata-apply-error-count, and replay goes on): the image reports and counts
it, applies nothing of it, and applies the records after it."""
from __future__ import annotations

import uuid

from kproto.metadata.broker_registration_change_record import BrokerRegistrationChangeRecord
from kproto.metadata.partition_change_record import PartitionChangeRecord
from kproto.metadata.partition_record import PartitionRecord
from kproto.metadata.remove_topic_record import RemoveTopicRecord
from kproto.metadata.topic_record import TopicRecord

from broker.metadata.image import MetadataImage


def _partition(tid, index):
    return PartitionRecord(partition_id=index, topic_id=tid, replicas=[1], isr=[1], leader=1, leader_epoch=0,
                           partition_epoch=0, removing_replicas=[], adding_replicas=[], directories=[],
                           leader_recovery_state=0)


def test_records_naming_what_the_image_lacks_are_reported_counted_and_skipped():
    image = MetadataImage()
    faults = []
    image.on_fault = faults.append
    tid, ghost = uuid.uuid4(), uuid.uuid4()
    image.apply(TopicRecord(name="t", topic_id=tid))
    image.apply(_partition(tid, 0))
    assert (image.apply_errors, faults) == (0, [])

    image.apply(_partition(ghost, 0))                                              # unknown topic
    image.apply(PartitionChangeRecord(partition_id=5, topic_id=tid, leader=1))    # unknown partition
    image.apply(PartitionChangeRecord(partition_id=0, topic_id=ghost, leader=1))  # unknown topic
    image.apply(RemoveTopicRecord(topic_id=ghost))
    image.apply(BrokerRegistrationChangeRecord(broker_id=7, broker_epoch=1, fenced=1))
    assert image.apply_errors == 5
    assert [f.split(" for ")[0] for f in faults] == [
        "PartitionRecord", "PartitionChangeRecord", "PartitionChangeRecord", "RemoveTopicRecord",
        "BrokerRegistrationChangeRecord"]
    assert "unknown partition 5 of topic t" in faults[1] and str(ghost) in faults[2]
    # nothing of them applied, and the image still takes the next record
    assert set(image.topics) == {"t"} and set(image.topics_by_id) == {tid}
    assert list(image.topics["t"].partitions) == [0] and image.brokers == {}
    image.apply(PartitionChangeRecord(partition_id=0, topic_id=tid, leader=1, isr=[1]))
    assert image.topics["t"].partitions[0].leader_epoch == 1 and image.apply_errors == 5


def test_without_a_reporter_faults_are_still_counted():
    image = MetadataImage()
    image.apply(RemoveTopicRecord(topic_id=uuid.uuid4()))
    assert image.apply_errors == 1

"""The log maker's queue (broker/partitions/replicas.py, creation.py) without a broker process:
which queued partitions go to the maker's worker thread and which are made on the event loop."""
from __future__ import annotations

import uuid

from kproto.metadata.partition_record import PartitionRecord
from kproto.metadata.register_broker_record import RegisterBrokerRecord
from kproto.metadata.topic_record import TopicRecord

from broker.config import BrokerConfig
from broker.metadata.image import MetadataImage
from broker.partitions.replicas import ReplicaManager
from broker.storage.logmanager import LogManager


def _replicas(tmp_path, topics: dict[str, int]) -> ReplicaManager:
    image = MetadataImage()
    records = [RegisterBrokerRecord(broker_id=1, broker_epoch=1)]
    for name, n in topics.items():
        tid = uuid.uuid4()
        records.append(TopicRecord(name=name, topic_id=tid))
        records += [PartitionRecord(partition_id=i, topic_id=tid, replicas=[1], isr=[1], leader=1,
                                    leader_epoch=0, partition_epoch=0) for i in range(n)]
    for r in records:
        image.apply(r)
    image.offset = len(records) - 1
    replicas = ReplicaManager(1, image, LogManager(str(tmp_path), None, None, False), BrokerConfig.load())
    replicas.reconcile()
    return replicas


def test_a_coordinator_topics_logs_are_made_on_the_loop_all_in_one_slice(tmp_path):
    # __consumer_offsets' 50 logs, queued behind a wide topic's: the maker's thread gets the wide
    # topic's only, and one slice of the loop, however short, makes all 50, so that their
    # coordinators load together and groups that start together are answered together
    # (docs/performance.md, "The reverted log making, re-landed")
    replicas = _replicas(tmp_path, {"__consumer_offsets": 50, "wide": 40})
    assert replicas.pending_count() == 90
    assert {key[0] for key, _, _ in replicas.to_open(128)} == {"wide"}
    made = replicas.make_pending(0.0, opened_only=True)
    assert sorted((p.topic, p.index) for p in made) == [("__consumer_offsets", i) for i in range(50)]
    assert replicas.pending_count() == 40      # the wide topic's wait for the thread

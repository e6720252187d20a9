"""A metadata leader that loses its leadership with proposals not committed takes its image back
to the committed state by undoing them (broker/quorum/image_undo.py), not by building the image
again from every committed record (seconds at 10,000 partitions, at each lost leadership)."""
from __future__ import annotations

import dataclasses
import uuid

from kproto.metadata.broker_registration_change_record import BrokerRegistrationChangeRecord
from kproto.metadata.config_record import ConfigRecord
from kproto.metadata.fence_broker_record import FenceBrokerRecord
from kproto.metadata.partition_change_record import PartitionChangeRecord
from kproto.metadata.partition_record import PartitionRecord
from kproto.metadata.producer_ids_record import ProducerIdsRecord
from kproto.metadata.register_broker_record import RegisterBrokerRecord
from kproto.metadata.topic_record import TopicRecord

from broker.metadata.image import MetadataImage
from broker.quorum.image_undo import ImageUndo

TID = uuid.uuid4()


def _committed() -> list:
    out = [TopicRecord(name="t", topic_id=TID)]
    out += [PartitionRecord(partition_id=i, topic_id=TID, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1 + i % 3,
                            leader_epoch=0, partition_epoch=0) for i in range(6)]
    out += [RegisterBrokerRecord(broker_id=b, broker_epoch=b) for b in (1, 2, 3)]
    return out


def _state(image: MetadataImage):
    return ({i: dataclasses.astuple(p) for i, p in image.topics["t"].partitions.items()},
            {b: (r.fenced, r.in_controlled_shutdown) for b, r in image.brokers.items()},
            image.next_producer_id, image.offset)


def _image(records) -> MetadataImage:
    image = MetadataImage()
    for r in records:
        image.apply(r)
    image.offset = len(records) - 1
    return image


def _propose(image, undo, records):
    undo.proposed(image, image.offset + 1, records)
    for r in records:
        image.apply(r)
    image.offset += len(records)


def test_uncommitted_proposals_are_undone_newest_first():
    committed = _committed()
    image, undo = _image(committed), ImageUndo()
    want = _state(_image(committed))
    # a broker fenced: its partitions' leadership moves (what a leader proposes under churn)
    _propose(image, undo, [FenceBrokerRecord(id=1, epoch=1)]
             + [PartitionChangeRecord(partition_id=i, topic_id=TID, leader=2, isr=[2, 3]) for i in (0, 3)])
    _propose(image, undo, [PartitionChangeRecord(partition_id=0, topic_id=TID, isr=[2]),
                           BrokerRegistrationChangeRecord(broker_id=3, broker_epoch=3, fenced=1),
                           ProducerIdsRecord(broker_id=1, broker_epoch=1, next_producer_id=5000),
                           PartitionRecord(partition_id=6, topic_id=TID, replicas=[2], isr=[2], leader=2)])
    assert _state(image) != want
    assert undo.undo(image, len(committed))   # nothing of them committed
    assert _state(image) == want
    assert len(undo) == 0


def test_only_what_did_not_commit_is_undone():
    committed = _committed()
    image, undo = _image(committed), ImageUndo()
    first = [PartitionChangeRecord(partition_id=1, topic_id=TID, leader=3, isr=[3])]
    _propose(image, undo, first)
    _propose(image, undo, [PartitionChangeRecord(partition_id=1, topic_id=TID, leader=2, isr=[2, 3])])
    undo.committed(len(committed) + 1)        # the first proposal committed
    assert undo.undo(image, len(committed) + 1)
    assert _state(image) == _state(_image(committed + first))


def test_a_record_it_cannot_undo_leaves_the_image_to_a_rebuild():
    committed = _committed()
    image, undo = _image(committed), ImageUndo()
    _propose(image, undo, [ConfigRecord(resource_type=2, resource_name="t", name="retention.ms", value="1")])
    before = _state(image)
    assert not undo.undo(image, len(committed))
    assert _state(image) == before            # untouched: the caller builds the image again


def test_a_deposed_leaders_image_is_the_one_a_rebuild_would_give(monkeypatch):
    # ReplicatedMetadata._rebuild itself: no committed record decoded again, the undone image holds
    # what the committed log holds (the image built from it, as before), and the listeners are told
    # of a rebuilt image
    from types import SimpleNamespace
    from broker.metadata import serde
    from broker.quorum.replicated import ReplicatedMetadata
    from raft.messages import Entry
    committed = _committed()
    proposals = [FenceBrokerRecord(id=2, epoch=2)] + [
        PartitionChangeRecord(partition_id=i, topic_id=TID, leader=3, isr=[3]) for i in range(6)]
    entries = [Entry(i, 1, bytes(serde.encode(r))) for i, r in enumerate(committed + proposals)]
    told = []
    q = object.__new__(ReplicatedMetadata)
    q.shell = SimpleNamespace(node=SimpleNamespace(applied=len(committed), entries=entries, snapshot_id=None,
                                                   snapshot_data=None))
    q.image = _image(committed)
    q.metadata = SimpleNamespace(_listeners=[told.append])
    q._undo, q.rebuilds = ImageUndo(), 0
    _propose(q.image, q._undo, proposals)
    decoded = []
    real = serde.decode
    monkeypatch.setattr(serde, "decode", lambda data: (decoded.append(1), real(data))[1])
    q._rebuild()
    assert decoded == []                     # undone, not built again from the log
    monkeypatch.setattr(serde, "decode", real)
    assert _state(q.image) == _state(q._committed_image(len(committed)))
    assert told == [[]] and q.rebuilds == 1


def test_a_rebuilt_image_remakes_no_unchanged_log_config():
    # After a rebuilt (or undone) image every topic's config was refreshed by a walk of every
    # hosted partition per topic: 10,000 x 100 at 10,000 partitions, each log's config made again.
    # Now one walk, and a log's config is made again only where the topic's effective config moved.
    from broker.config import BrokerConfig
    from broker.partitions.replicas import ReplicaManager
    image = _image(_committed() + [TopicRecord(name="u", topic_id=uuid.uuid4())])
    replicas = ReplicaManager(1, image, None, BrokerConfig.load())
    remade = []

    class Part:
        def __init__(self, topic):
            self.config = replicas.topic_config(topic)

        def update_config(self, cfg):
            remade.append(cfg)
            self.config = cfg
    for topic, n in (("t", 6), ("u", 4)):
        for i in range(n):
            replicas._partitions[(topic, i)] = Part(topic)
    looked = []
    real = replicas.topic_config
    replicas.topic_config = lambda topic: (looked.append(topic), real(topic))[1]
    assert replicas.refresh_all_configs() == 0 and remade == []
    assert sorted(looked) == ["t", "u"]      # each topic's config computed once
    image.topics["u"].configs["retention.ms"] = "1000"
    assert replicas.refresh_all_configs() == 4 and all(str(c["retention.ms"]) == "1000" for c in remade)

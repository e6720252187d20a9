"""Metadata's answer written from cached partition arrays (broker/handlers/metadata_wire.py): the
bytes are the generated codec's at every version, and an answer follows every change of the image
that shows in it (a new partition, a leader or ISR change, a fenced broker's offline replicas),
however often the same answer was encoded before, and after the image is rebuilt in place. Against
real brokers the same shows in tests/test_admin.py (test_confluent_create_partitions: partitions
added after a client asked) and tests/test_leader_election_cluster.py (leaders, ISRs and offline
replicas after a broker stops)."""
from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from kproto.messages.metadata_response import MetadataResponse
from kproto.metadata.fence_broker_record import FenceBrokerRecord
from kproto.metadata.partition_change_record import PartitionChangeRecord
from kproto.metadata.partition_record import PartitionRecord
from kproto.metadata.register_broker_record import RegisterBrokerRecord
from kproto.metadata.topic_record import TopicRecord
from kproto.metadata.unfence_broker_record import UnfenceBrokerRecord

from broker.handlers.metadata_wire import ImageTopic, MetadataAnswer
from broker.metadata.image import MetadataImage

R = MetadataResponse
ID_A, ID_B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)


def _image(brokers=(1, 2, 3)) -> MetadataImage:
    img = MetadataImage()
    for b in brokers:
        img.apply(RegisterBrokerRecord(broker_id=b, fenced=False))
    img.apply(TopicRecord(name="alpha", topic_id=ID_A))
    img.apply(TopicRecord(name="__consumer_offsets", topic_id=ID_B))
    for i in range(3):
        reps = [1 + (i + k) % 3 for k in range(3)]
        img.apply(PartitionRecord(partition_id=i, topic_id=ID_A, replicas=reps, isr=reps[:2], leader=reps[0],
                                  leader_epoch=4, removing_replicas=[], adding_replicas=[]))
    img.apply(PartitionRecord(partition_id=0, topic_id=ID_B, replicas=[2], isr=[2], leader=-1,
                              leader_epoch=0, removing_replicas=[], adding_replicas=[]))
    return img


def _answer(img, version, ops=-2147483648, cls=MetadataAnswer, extra=()):
    node = SimpleNamespace(image=img)
    topics = [ImageTopic(node, t, ops) for t in img.topics.values()]
    if cls is not MetadataAnswer:   # the same answer as plain generated objects
        topics = [R.MetadataResponseTopic(error_code=0, name=t.name, topic_id=t.topic_id, is_internal=t.is_internal,
                                          partitions=t.partitions, topic_authorized_operations=ops) for t in topics]
    return cls(throttle_time_ms=7, brokers=[R.MetadataResponseBroker(node_id=1, host="h1", port=9092, rack="r1"),
                                            R.MetadataResponseBroker(node_id=2, host="h2", port=9093, rack=None)],
               cluster_id="c-id" if version >= 2 else None, controller_id=2, topics=topics + list(extra),
               cluster_authorized_operations=8112 if 8 <= version <= 10 else -2147483648, error_code=0)


def _decoded(img, version):
    out = bytearray()
    _answer(img, version).encode_into(out, version, [], strict=False)
    return {t.name: {p.partition_index: p for p in t.partitions} for t in R.decode(bytes(out), version).topics}


@pytest.mark.parametrize("version", range(0, 14))
def test_bytes_are_the_generated_codecs(version):
    img = _image()
    img.apply(FenceBrokerRecord(id=3, epoch=0))   # an offline replica in every alpha partition
    error_entry = R.MetadataResponseTopic(error_code=3, name="missing", topic_id=uuid.UUID(int=0), partitions=[])
    for ops in (-2147483648, 3576):
        ours, theirs = bytearray(), bytearray()
        _answer(img, version, ops, extra=[error_entry]).encode_into(ours, version, [], strict=False)
        _answer(img, version, ops, cls=MetadataResponse, extra=[error_entry]).encode_into(
            theirs, version, [], strict=False)
        assert bytes(ours) == bytes(theirs)
    if version >= 5:
        assert [p.offline_replicas for p in _decoded(img, version)["alpha"].values()] == [[3], [3], [3]]


@pytest.mark.parametrize("version", [1, 7, 12])
def test_an_answer_follows_the_image(version):
    img = _image()
    before = _decoded(img, version)
    assert _decoded(img, version) == before   # encoded again from the cache: the same answer
    assert sorted(before["alpha"]) == [0, 1, 2] and before["alpha"][0].leader_id == 1

    img.apply(PartitionChangeRecord(partition_id=0, topic_id=ID_A, leader=2, isr=[2, 3]))
    img.apply(PartitionRecord(partition_id=3, topic_id=ID_A, replicas=[3, 1], isr=[3, 1], leader=3,
                              leader_epoch=0, removing_replicas=[], adding_replicas=[]))
    after = _decoded(img, version)["alpha"]
    assert sorted(after) == [0, 1, 2, 3]
    assert (after[0].leader_id, after[0].isr_nodes) == (2, [2, 3])
    if version >= 7:
        assert after[0].leader_epoch == 5
    if version >= 5:
        assert after[1].offline_replicas == []
        img.apply(FenceBrokerRecord(id=1, epoch=0))     # broker 1's replicas go offline
        assert _decoded(img, version)["alpha"][1].offline_replicas == [1]
        img.apply(UnfenceBrokerRecord(id=1, epoch=0))
        assert _decoded(img, version)["alpha"][1].offline_replicas == []


def test_an_image_rebuilt_in_place_is_answered_as_rebuilt():
    # a quorum leader that loses its leadership rebuilds its image in place (broker/quorum/
    # replicated.py): the same object, the same number of records applied, other contents
    img = _image()
    assert _decoded(img, 12)["alpha"][0].leader_id == 1
    other = _image()
    other.apply(PartitionChangeRecord(partition_id=0, topic_id=ID_A, leader=3, isr=[3]))
    img.apply(PartitionChangeRecord(partition_id=0, topic_id=ID_A, leader=2, isr=[2]))
    assert _decoded(img, 12)["alpha"][0].leader_id == 2
    img.__dict__.clear()
    img.__dict__.update(other.__dict__)
    assert (_decoded(img, 12)["alpha"][0].leader_id, _decoded(img, 12)["alpha"][0].isr_nodes) == (3, [3])

"""Metadata's answer written as bytes: each topic's partition array is encoded once per shape of
the wire format and kept on the image's topic until a record changes one of its partitions or a
broker registration changes (offline replicas). A full Metadata answer at 10,000 partitions then
costs a join of cached arrays instead of building and encoding 10,000 objects per request.

`MetadataAnswer` is a `MetadataResponse` whose `encode_into` writes what the generated codec
would (tests/test_metadata_wire.py compares them byte for byte, every version); `ImageTopic`
is a topic entry read from the image, with the attributes the authorizer's filter uses (name,
error code, authorized operations) and its partitions built as objects only when asked for.
"""
from __future__ import annotations

import struct

from kproto._codec import write_str, write_uvarint
from kproto.messages.metadata_response import MetadataResponse

from broker.replication.leader_hint import offline_replicas, partition_error

_Topic = MetadataResponse.MetadataResponseTopic
_Partition = MetadataResponse.MetadataResponsePartition

_h = struct.Struct(">h")
_i = struct.Struct(">i")
_hii = struct.Struct(">hii")
_hiii = struct.Struct(">hiii")
_UUID_ZERO = bytes(16)


def _shape(v: int) -> int:
    """The partition array's encodings: 0 = v0-4, 1 = v5-6 (offline replicas), 2 = v7-8
    (leader epoch), 3 = v9+ (flexible)."""
    return 3 if v >= 9 else 2 if v >= 7 else 1 if v >= 5 else 0


def _ints(out: bytearray, values, flex: bool) -> None:
    n = len(values)
    if flex:
        write_uvarint(out, n + 1)
    else:
        out += _i.pack(n)
    if n:
        out += struct.pack(">%di" % n, *values)


def encode_partitions(rows, shape: int) -> bytes:
    """The Partitions array (count included) of (error, index, leader, leader epoch, replicas,
    isr, offline replicas) rows."""
    out = bytearray()
    flex = shape == 3
    if flex:
        write_uvarint(out, len(rows) + 1)
    else:
        out += _i.pack(len(rows))
    for err, index, leader, epoch, replicas, isr, offline in rows:
        if flex:
            out += _hiii.pack(err, index, leader, epoch)
        else:
            out += _hii.pack(err, index, leader)
            if shape >= 2:
                out += _i.pack(epoch)
        _ints(out, replicas, flex)
        _ints(out, isr, flex)
        if shape >= 1:
            _ints(out, offline, flex)
        if flex:
            out.append(0)   # no tagged fields
    return bytes(out)


def _image_rows(broker, topic) -> list:
    return [(partition_error(p), p.partition, p.leader, p.leader_epoch, p.replicas, p.isr,
             offline_replicas(broker, p)) for p in topic.partitions.values()]


def _object_rows(parts) -> list:
    return [(p.error_code, p.partition_index, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes,
             p.offline_replicas) for p in parts]


class ImageTopic(_Topic):
    """A topic of the metadata image in a Metadata answer."""
    __slots__ = ("_broker", "_image_topic")

    def __init__(self, broker, topic, topic_authorized_operations: int):
        self._broker = broker
        self._image_topic = topic
        self.error_code = 0
        self.name = topic.name
        self.topic_id = topic.topic_id
        self.is_internal = topic.internal
        self.topic_authorized_operations = topic_authorized_operations
        self._unknown = None

    @property
    def partitions(self) -> list:
        """As objects, for readers other than the encoder."""
        return [_Partition(error_code=e, partition_index=i, leader_id=l, leader_epoch=ep,
                           replica_nodes=list(r), isr_nodes=list(s), offline_replicas=o)
                for e, i, l, ep, r, s, o in _image_rows(self._broker, self._image_topic)]

    def encoded_partitions(self, shape: int) -> bytes:
        t = self._image_topic
        brokers_epoch = getattr(self._broker.image, "brokers_epoch", 0)
        key = ("metadata", shape)
        hit = t.derived.get(key)
        if hit is not None and hit[0] == t.epoch and hit[1] == brokers_epoch:
            return hit[2]
        data = encode_partitions(_image_rows(self._broker, t), shape)
        t.derived[key] = (t.epoch, brokers_epoch, data)
        return data


class MetadataAnswer(MetadataResponse):
    """A MetadataResponse written straight to bytes, image topics from their cached arrays."""
    __slots__ = ()

    def encode_into(self, out, version, regions=None, strict=True):
        v = version
        if not self.MIN_VERSION <= v <= self.MAX_VERSION:
            return super().encode_into(out, version, regions, strict)
        flex = v >= 9
        shape = _shape(v)
        if v >= 3:
            out += _i.pack(self.throttle_time_ms)
        if flex:
            write_uvarint(out, len(self.brokers) + 1)
        else:
            out += _i.pack(len(self.brokers))
        for b in self.brokers:
            out += _i.pack(b.node_id)
            write_str(out, b.host, flex, False, "Host")
            out += _i.pack(b.port)
            if v >= 1:
                write_str(out, b.rack, flex, True, "Rack")
            if flex:
                out.append(0)
        if v >= 2:
            write_str(out, self.cluster_id, flex, True, "ClusterId")
        if v >= 1:
            out += _i.pack(self.controller_id)
        if flex:
            write_uvarint(out, len(self.topics) + 1)
        else:
            out += _i.pack(len(self.topics))
        for t in self.topics:
            out += _h.pack(t.error_code)
            write_str(out, t.name, flex, v >= 12, "Name")
            if v >= 10:
                out += t.topic_id.bytes if t.topic_id is not None else _UUID_ZERO
            if v >= 1:
                out.append(1 if t.is_internal else 0)
            if isinstance(t, ImageTopic):
                out += t.encoded_partitions(shape)
            else:
                out += encode_partitions(_object_rows(t.partitions), shape)
            if v >= 8:
                out += _i.pack(t.topic_authorized_operations)
            if flex:
                out.append(0)
        if 8 <= v <= 10:
            out += _i.pack(self.cluster_authorized_operations)
        if v >= 13:
            out += _h.pack(self.error_code)
        if flex:
            out.append(0)

"""The records of `__remote_log_metadata` with Kafka's layouts (storage/Remote*.json, version 0,
flexible) and Kafka's framing (RemoteLogMetadataSerde: unsigned varints frame version 1, api key,
version, then the message). The one place that knows the bytes, so swapping in generated codecs is
local. Records are plain dataclasses."""
from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from broker.admin.partitioner import murmur2

FRAME_VERSION = 1
SEGMENT_METADATA = 0          # RemoteLogSegmentMetadataRecord
SEGMENT_UPDATE = 1            # RemoteLogSegmentMetadataUpdateRecord
PARTITION_DELETE = 2          # RemotePartitionDeleteMetadataRecord

# RemoteLogSegmentState ids
COPY_SEGMENT_STARTED = 0
COPY_SEGMENT_FINISHED = 1
DELETE_SEGMENT_STARTED = 2
DELETE_SEGMENT_FINISHED = 3
# RemotePartitionDeleteState ids
DELETE_PARTITION_MARKED = 0
DELETE_PARTITION_STARTED = 1
DELETE_PARTITION_FINISHED = 2


class MetadataDecodeError(ValueError):
    pass


@dataclass(frozen=True)
class TopicIdPartition:
    topic: str
    topic_id: uuid.UUID
    partition: int

    def __str__(self) -> str:   # Kafka's TopicIdPartition.toString: "<id>:<topic>-<partition>"
        return f"{uuid_to_kafka(self.topic_id)}:{self.topic}-{self.partition}"


@dataclass
class SegmentMetadata:
    """RemoteLogSegmentMetadataRecord: a segment's copy begins (state COPY_SEGMENT_STARTED)."""
    tp: TopicIdPartition
    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    broker_id: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    leader_epochs: list[tuple[int, int]] = field(default_factory=list)   # (epoch, start offset)
    size: int = 0
    state: int = COPY_SEGMENT_STARTED
    custom: bytes | None = None


@dataclass
class SegmentUpdate:
    """RemoteLogSegmentMetadataUpdateRecord: a segment's new state."""
    tp: TopicIdPartition
    segment_id: uuid.UUID
    broker_id: int
    event_timestamp_ms: int
    state: int
    custom: bytes | None = None


@dataclass
class PartitionDelete:
    """RemotePartitionDeleteMetadataRecord: a partition's remote data is being deleted."""
    tp: TopicIdPartition
    broker_id: int
    event_timestamp_ms: int
    state: int


def uuid_to_kafka(u: uuid.UUID) -> str:
    import base64
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode()


# ---------------------------------------------------------------- primitives

def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_uvarint(buf, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise MetadataDecodeError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _string(s: str) -> bytes:
    raw = s.encode()
    return _uvarint(len(raw) + 1) + raw


def _nbytes(b: bytes | None) -> bytes:
    return b"\x00" if b is None else _uvarint(len(b) + 1) + b


def _tp(tp: TopicIdPartition) -> bytes:
    return _string(tp.topic) + tp.topic_id.bytes + struct.pack(">i", tp.partition) + b"\x00"


def _segment_id(tp: TopicIdPartition, segment_id: uuid.UUID) -> bytes:
    return _tp(tp) + segment_id.bytes + b"\x00"


class _Reader:
    def __init__(self, buf):
        self.buf = bytes(buf)
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise MetadataDecodeError("truncated record")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def uvarint(self) -> int:
        v, self.pos = _read_uvarint(self.buf, self.pos)
        return v

    def i8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def i64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise MetadataDecodeError("null string")
        return self.take(n).decode()

    def nbytes(self) -> bytes | None:
        n = self.uvarint() - 1
        return None if n < 0 else self.take(n)

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.take(16))

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())

    def tp(self) -> TopicIdPartition:
        topic = self.string()
        tid = self.uuid()
        part = self.i32()
        self.tags()
        return TopicIdPartition(topic, tid, part)

    def segment_id(self) -> tuple[TopicIdPartition, uuid.UUID]:
        tp = self.tp()
        sid = self.uuid()
        self.tags()
        return tp, sid


# ---------------------------------------------------------------- records

def encode(record) -> bytes:
    if isinstance(record, SegmentMetadata):
        body = (_segment_id(record.tp, record.segment_id)
                + struct.pack(">qqiqq", record.start_offset, record.end_offset, record.broker_id,
                              record.max_timestamp_ms, record.event_timestamp_ms)
                + _uvarint(len(record.leader_epochs) + 1)
                + b"".join(struct.pack(">iq", e, o) + b"\x00" for e, o in record.leader_epochs)
                + struct.pack(">i", record.size) + _nbytes(record.custom)
                + struct.pack(">b", record.state) + b"\x00")
        key = SEGMENT_METADATA
    elif isinstance(record, SegmentUpdate):
        body = (_segment_id(record.tp, record.segment_id)
                + struct.pack(">iq", record.broker_id, record.event_timestamp_ms)
                + _nbytes(record.custom) + struct.pack(">b", record.state) + b"\x00")
        key = SEGMENT_UPDATE
    elif isinstance(record, PartitionDelete):
        body = (_tp(record.tp) + struct.pack(">iqb", record.broker_id, record.event_timestamp_ms, record.state)
                + b"\x00")
        key = PARTITION_DELETE
    else:
        raise TypeError(f"not a remote log metadata record: {record!r}")
    return _uvarint(FRAME_VERSION) + _uvarint(key) + _uvarint(0) + body


def decode(data):
    r = _Reader(data)
    frame = r.uvarint()
    if frame != FRAME_VERSION:
        raise MetadataDecodeError(f"unknown frame version {frame}")
    key = r.uvarint()
    version = r.uvarint()
    if version != 0:
        raise MetadataDecodeError(f"unknown version {version} of record type {key}")
    if key == SEGMENT_METADATA:
        tp, sid = r.segment_id()
        start, end, broker, max_ts, event = r.i64(), r.i64(), r.i32(), r.i64(), r.i64()
        epochs = []
        for _ in range(r.uvarint() - 1):
            epochs.append((r.i32(), r.i64()))
            r.tags()
        size = r.i32()
        custom = r.nbytes()
        state = r.i8()
        r.tags()
        return SegmentMetadata(tp, sid, start, end, broker, max_ts, event, epochs, size, state, custom)
    if key == SEGMENT_UPDATE:
        tp, sid = r.segment_id()
        broker, event = r.i32(), r.i64()
        custom = r.nbytes()
        state = r.i8()
        r.tags()
        return SegmentUpdate(tp, sid, broker, event, state, custom)
    if key == PARTITION_DELETE:
        tp = r.tp()
        broker, event, state = r.i32(), r.i64(), r.i8()
        r.tags()
        return PartitionDelete(tp, broker, event, state)
    raise MetadataDecodeError(f"unknown record type {key}")


def metadata_partition(tp: TopicIdPartition, partitions: int) -> int:
    """RemoteLogMetadataTopicPartitioner: toPositive(murmur2(str(tp))) % partitions."""
    return (murmur2(str(tp).encode()) & 0x7FFFFFFF) % partitions

"""The records of `__remote_log_metadata`: Kafka's layouts (the generated codecs of
storage/Remote*.json in kproto/storage/, version 0) in Kafka's framing (RemoteLogMetadataSerde:
unsigned varints frame version 1, api key, version, then the message), read and written as the
plain dataclasses the rest of broker/tiered/ uses."""
from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from kproto._codec import DecodeError, read_uvarint, write_uvarint
from kproto.storage import remote_log_segment_metadata_record as gen
from kproto.storage import remote_log_segment_metadata_update_record as gen_update
from kproto.storage import remote_partition_delete_metadata_record as gen_delete

from broker.admin.partitioner import murmur2

from .keys import uuid_to_kafka  # noqa: F401 (mr.uuid_to_kafka)
from .segment_states import (  # noqa: F401
    COPY_SEGMENT_FINISHED, COPY_SEGMENT_STARTED, DELETE_PARTITION_FINISHED, DELETE_PARTITION_MARKED,
    DELETE_PARTITION_STARTED, DELETE_SEGMENT_FINISHED, DELETE_SEGMENT_STARTED)

FRAME_VERSION = 1
SEGMENT_METADATA = 0          # RemoteLogSegmentMetadataRecord
SEGMENT_UPDATE = 1            # RemoteLogSegmentMetadataUpdateRecord
PARTITION_DELETE = 2          # RemotePartitionDeleteMetadataRecord

# RemoteLogSegmentState and RemotePartitionDeleteState ids: segment_states.py (mr.<state> here too)


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


# ---------------------------------------------------------------- records

def _uvarint(n: int) -> bytes:
    out = bytearray()
    write_uvarint(out, n)
    return bytes(out)


def _read_uvarint(buf, pos: int) -> tuple[int, int]:
    try:
        return read_uvarint(buf, pos)
    except (IndexError, DecodeError):
        raise MetadataDecodeError("truncated varint") from None


def _tp_entry(cls, tp: TopicIdPartition):
    return cls.TopicIdPartitionEntry(name=tp.topic, id=tp.topic_id, partition=tp.partition)


def _segment_id(cls, tp: TopicIdPartition, segment_id: uuid.UUID):
    return cls.RemoteLogSegmentIdEntry(topic_id_partition=_tp_entry(cls, tp), id=segment_id)


def _tp_of(entry) -> TopicIdPartition:
    return TopicIdPartition(entry.name, entry.id, entry.partition)


def encode(record) -> bytes:
    """The value of a __remote_log_metadata record (the key is null, as Kafka writes it)."""
    if isinstance(record, SegmentMetadata):
        cls = gen.RemoteLogSegmentMetadataRecord
        msg = cls(remote_log_segment_id=_segment_id(cls, record.tp, record.segment_id),
                  start_offset=record.start_offset, end_offset=record.end_offset, broker_id=record.broker_id,
                  max_timestamp_ms=record.max_timestamp_ms, event_timestamp_ms=record.event_timestamp_ms,
                  segment_leader_epochs=[cls.SegmentLeaderEpochEntry(leader_epoch=e, offset=o)
                                         for e, o in record.leader_epochs],
                  segment_size_in_bytes=record.size, custom_metadata=record.custom,
                  remote_log_segment_state=record.state)
        key = SEGMENT_METADATA
    elif isinstance(record, SegmentUpdate):
        cls = gen_update.RemoteLogSegmentMetadataUpdateRecord
        msg = cls(remote_log_segment_id=_segment_id(cls, record.tp, record.segment_id), broker_id=record.broker_id,
                  event_timestamp_ms=record.event_timestamp_ms, custom_metadata=record.custom,
                  remote_log_segment_state=record.state)
        key = SEGMENT_UPDATE
    elif isinstance(record, PartitionDelete):
        cls = gen_delete.RemotePartitionDeleteMetadataRecord
        msg = cls(topic_id_partition=_tp_entry(cls, record.tp), broker_id=record.broker_id,
                  event_timestamp_ms=record.event_timestamp_ms, remote_partition_delete_state=record.state)
        key = PARTITION_DELETE
    else:
        raise TypeError(f"not a remote log metadata record: {record!r}")
    return _uvarint(FRAME_VERSION) + _uvarint(key) + _uvarint(0) + bytes(msg.encode(0))


def decode(data):
    data = bytes(data)
    frame, pos = _read_uvarint(data, 0)
    if frame != FRAME_VERSION:
        raise MetadataDecodeError(f"unknown frame version {frame}")
    key, pos = _read_uvarint(data, pos)
    version, pos = _read_uvarint(data, pos)
    if version != 0:
        raise MetadataDecodeError(f"unknown version {version} of record type {key}")
    try:
        if key == SEGMENT_METADATA:
            m = gen.RemoteLogSegmentMetadataRecord.decode(data, 0, pos)
            sid = m.remote_log_segment_id
            return SegmentMetadata(_tp_of(sid.topic_id_partition), sid.id, m.start_offset, m.end_offset, m.broker_id,
                                   m.max_timestamp_ms, m.event_timestamp_ms,
                                   [(e.leader_epoch, e.offset) for e in m.segment_leader_epochs],
                                   m.segment_size_in_bytes, m.remote_log_segment_state,
                                   None if m.custom_metadata is None else bytes(m.custom_metadata))
        if key == SEGMENT_UPDATE:
            m = gen_update.RemoteLogSegmentMetadataUpdateRecord.decode(data, 0, pos)
            sid = m.remote_log_segment_id
            return SegmentUpdate(_tp_of(sid.topic_id_partition), sid.id, m.broker_id, m.event_timestamp_ms,
                                 m.remote_log_segment_state,
                                 None if m.custom_metadata is None else bytes(m.custom_metadata))
        if key == PARTITION_DELETE:
            m = gen_delete.RemotePartitionDeleteMetadataRecord.decode(data, 0, pos)
            return PartitionDelete(_tp_of(m.topic_id_partition), m.broker_id, m.event_timestamp_ms,
                                   m.remote_partition_delete_state)
    except (DecodeError, ValueError, IndexError, struct.error) as exc:
        raise MetadataDecodeError(f"record type {key}: {exc}") from exc
    raise MetadataDecodeError(f"unknown record type {key}")


def metadata_partition(tp: TopicIdPartition, partitions: int) -> int:
    """RemoteLogMetadataTopicPartitioner: toPositive(murmur2(str(tp))) % partitions."""
    return (murmur2(str(tp).encode()) & 0x7FFFFFFF) % partitions

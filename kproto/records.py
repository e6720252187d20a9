"""Record batches (magic 2): header views, validation, offset assignment,
record decoding and batch building.

The broker keeps batches as bytes: it reads the 61-byte header through a
memoryview, checks the CRC, and rewrites baseOffset / partitionLeaderEpoch in
place (neither is covered by the CRC). Records are decoded only where
semantics need them (iter_records).
"""
from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator

import crc32c

from . import compression
from .compression import CorruptCompressionError

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
# baseSequence, recordCount
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
assert HEADER_SIZE == 61
# bytes before batchLength's coverage starts (baseOffset + batchLength)
LOG_OVERHEAD = 12
# offset of the first byte the CRC covers (attributes)
CRC_START = 21

_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1


class BatchHeader:
    """The decoded header of one batch at ``pos`` in some buffer."""

    __slots__ = (
        "base_offset", "batch_length", "partition_leader_epoch", "magic", "crc",
        "attributes", "last_offset_delta", "base_timestamp", "max_timestamp",
        "producer_id", "producer_epoch", "base_sequence", "record_count",
    )

    def __init__(self, buf, pos: int = 0):
        (self.base_offset, self.batch_length, self.partition_leader_epoch,
         self.magic, self.crc, self.attributes, self.last_offset_delta,
         self.base_timestamp, self.max_timestamp, self.producer_id,
         self.producer_epoch, self.base_sequence,
         self.record_count) = HEADER.unpack_from(buf, pos)

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_BIT else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    def __repr__(self) -> str:
        return (f"BatchHeader(base_offset={self.base_offset}, size={self.size}, "
                f"records={self.record_count}, attributes={self.attributes:#x}, "
                f"producer_id={self.producer_id}, epoch={self.producer_epoch}, "
                f"base_sequence={self.base_sequence})")


def set_base_offset(buf, pos: int, base_offset: int) -> None:
    """Rewrite baseOffset in place (not covered by the CRC)."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf, pos: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch in place (not covered by the CRC)."""
    _LEADER_EPOCH.pack_into(buf, pos + 12, epoch)

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

from .crc import crc32c
from . import compression as _compression
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
NO_TIMESTAMP = -1

MAGIC = 2
# Smallest batchLength a v2 batch can have: the header after batchLength.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49
# Smallest size of any message format (a v0 message); below that even the
# magic byte is not worth reading.
_MIN_LEGACY_LENGTH = 14
# baseOffset + batchLength + partitionLeaderEpoch + magic: enough to see the
# magic byte, which sits at the same place in every message format.
_MAGIC_END = 17
_MAGIC_OFFSET = 16
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_MAX_TIMESTAMP_OFFSET = 35

_CRC = struct.Struct(">I")
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_INT64 = struct.Struct(">q")


# ----------------------------------------------------------------------- errors
#
# Each error carries the Kafka error code a real broker (3.9) answers for that
# fault in a Produce request; see the notes on each class. Codes: 2
# CORRUPT_MESSAGE, 87 INVALID_RECORD, -1 UNKNOWN_SERVER_ERROR.

class CorruptRecordError(ValueError):
    """A record batch or record that cannot be accepted as is."""

    error_code = 2  # CORRUPT_MESSAGE (Kafka's CorruptRecordException)


class CrcMismatchError(CorruptRecordError):
    """The stored CRC-32C does not match the batch (Kafka: CORRUPT_MESSAGE)."""

    def __init__(self, stored: int, computed: int, pos: int = 0):
        super().__init__(f"record batch at {pos} is corrupt "
                         f"(stored crc = {stored}, computed crc = {computed})")
        self.stored = stored
        self.computed = computed


class InvalidBatchLengthError(CorruptRecordError):
    """batchLength is below any valid batch size (Kafka: CORRUPT_MESSAGE)."""


class InvalidRecordError(CorruptRecordError):
    """Kafka's InvalidRecordException: answered with INVALID_RECORD (87)."""

    error_code = 87


class TruncatedBatchError(InvalidRecordError):
    """The buffer ends before the batch does.

    Kafka's batch iterator stops at an incomplete batch, so a Produce whose
    only batch is truncated has "no batches" and gets INVALID_RECORD.
    """


class UnsupportedMagicError(InvalidRecordError):
    """magic != 2. Produce v3+ may only carry v2 batches: INVALID_RECORD."""

    def __init__(self, magic: int, pos: int = 0):
        super().__init__(f"record batch at {pos} has magic {magic}; only magic 2 is supported")
        self.magic = magic


class MultipleBatchesError(InvalidRecordError):
    """More batches than allowed (Produce v3+: exactly one per partition)."""


class RecordCountMismatchError(InvalidRecordError):
    """recordCount disagrees with the records actually in the batch."""


class MalformedRecordError(InvalidRecordError):
    """A record that does not parse: bad varint, negative or overlong lengths."""


class CorruptCompressedRecordsError(CorruptRecordError, CorruptCompressionError):
    """The records section does not decompress with the batch's codec.

    Kafka wraps the codec's IOException in a KafkaException, which reaches
    the client as UNKNOWN_SERVER_ERROR (observed for gzip and zstd).
    """

    error_code = -1


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


def set_crc(buf, pos: int = 0) -> int:
    """Recompute the CRC of the batch at ``pos`` in place; return it."""
    (batch_length,) = _INT32.unpack_from(buf, pos + 8)
    crc = crc32c(memoryview(buf)[pos + CRC_START:pos + LOG_OVERHEAD + batch_length])
    _CRC.pack_into(buf, pos + _CRC_OFFSET, crc)
    return crc


def set_log_append_time(buf, pos: int, timestamp_ms: int) -> None:
    """Mark the batch LogAppendTime with ``timestamp_ms`` as its maxTimestamp.

    Both fields are covered by the CRC, so it is recomputed (unless nothing
    changes, as Kafka does).
    """
    (attributes,) = _INT16.unpack_from(buf, pos + _ATTRIBUTES_OFFSET)
    (max_timestamp,) = _INT64.unpack_from(buf, pos + _MAX_TIMESTAMP_OFFSET)
    if attributes & TIMESTAMP_TYPE_BIT and max_timestamp == timestamp_ms:
        return
    _INT16.pack_into(buf, pos + _ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(buf, pos + _MAX_TIMESTAMP_OFFSET, timestamp_ms)
    set_crc(buf, pos)


# ------------------------------------------------------------------- validation

def _frame(buf, pos: int, end: int) -> int:
    """Check that a complete v2 batch starts at ``pos``; return its batchLength.

    Order follows Kafka's batch iterator: an impossible length is corrupt,
    an incomplete batch is truncated, then the magic byte is checked.
    """
    if end - pos < _MAGIC_END:
        raise TruncatedBatchError(
            f"record batch at {pos} is truncated: {end - pos} bytes, header needs {HEADER_SIZE}")
    (batch_length,) = _INT32.unpack_from(buf, pos + 8)
    if batch_length < _MIN_LEGACY_LENGTH:
        raise InvalidBatchLengthError(f"record batch at {pos} has invalid length {batch_length}")
    if pos + LOG_OVERHEAD + batch_length > end:
        raise TruncatedBatchError(
            f"record batch at {pos} is truncated: batchLength {batch_length} "
            f"but only {end - pos - LOG_OVERHEAD} bytes follow")
    magic = buf[pos + _MAGIC_OFFSET]
    if magic != MAGIC:
        raise UnsupportedMagicError(magic if magic < 128 else magic - 256, pos)
    if batch_length < MIN_BATCH_LENGTH:
        raise InvalidBatchLengthError(
            f"record batch at {pos} has length {batch_length}, below the minimum {MIN_BATCH_LENGTH}")
    return batch_length


def validate_batch(buf, pos: int = 0, end: int | None = None) -> BatchHeader:
    """Check framing, magic, CRC-32C and codec id of the batch at ``pos``.

    Records are not decoded (hot path). Returns the header.
    """
    if end is None:
        end = len(buf)
    batch_length = _frame(buf, pos, end)
    header = BatchHeader(buf, pos)
    computed = crc32c(memoryview(buf)[pos + CRC_START:pos + LOG_OVERHEAD + batch_length])
    if computed != header.crc:
        raise CrcMismatchError(header.crc, computed, pos)
    if header.attributes & COMPRESSION_MASK > _compression.ZSTD:
        raise CorruptCompressedRecordsError(
            f"record batch at {pos} uses unknown compression codec id "
            f"{header.attributes & COMPRESSION_MASK}")
    return header


def iter_batch_headers(buf, pos: int = 0, end: int | None = None, *,
                       allow_partial_tail: bool = False,
                       validate: bool = False) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(pos, header)`` for the consecutive batches in ``buf[pos:end]``.

    A trailing incomplete batch raises TruncatedBatchError unless
    ``allow_partial_tail`` (log recovery; fetch responses, which may end
    mid-batch): then iteration just stops. ``validate`` also checks each
    batch's CRC (validate_batch); otherwise only framing and magic.
    """
    if end is None:
        end = len(buf)
    while pos < end:
        try:
            if validate:
                header = validate_batch(buf, pos, end)
            else:
                _frame(buf, pos, end)
                header = BatchHeader(buf, pos)
        except TruncatedBatchError:
            if allow_partial_tail:
                return
            raise
        yield pos, header
        pos += header.batch_length + LOG_OVERHEAD


def validate_batches(buf, pos: int = 0, end: int | None = None, *,
                     max_batches: int | None = None,
                     allow_partial_tail: bool = False,
                     verify_crc: bool = True) -> list[BatchHeader]:
    """Validate every batch of a records blob; return their headers.

    Framing and magic of all batches are checked before any CRC, as Kafka
    checks a Produce request's shape before its contents. For Produce v3+
    pass ``max_batches=1``: Kafka answers INVALID_RECORD to two batches in one
    partition entry (MultipleBatchesError) and to a blob holding no complete
    batch (TruncatedBatchError, or InvalidRecordError when it is empty).
    ``verify_crc=False`` leaves the CRCs to a later validate_batch call (see
    check_client_batch for the order Kafka checks a produced batch in).

    Kafka's own reading (from its source, not observed): bytes after the
    last complete batch are dropped, not refused; ``allow_partial_tail=True``
    does the same, and then only the returned batches' bytes may be stored.
    """
    if end is None:
        end = len(buf)
    framed = list(iter_batch_headers(buf, pos, end, allow_partial_tail=allow_partial_tail))
    if not framed:
        if end > pos:
            raise TruncatedBatchError(f"no complete record batch in {end - pos} bytes")
        raise InvalidRecordError("no record batch")
    if max_batches is not None and len(framed) > max_batches:
        raise MultipleBatchesError(
            f"{len(framed)} record batches where at most {max_batches} are allowed")
    if not verify_crc:
        return [header for _, header in framed]
    return [validate_batch(buf, at, end) for at, _ in framed]


def check_client_batch(header: BatchHeader) -> None:
    """The extra header rules Kafka applies to batches written by clients.

    All are INVALID_RECORD. Kafka 3.9 checks a Produce partition entry in
    this order, and the first failure is the answer:

    1. shape: one complete v2 batch (validate_batches(max_batches=1,
       verify_crc=False)) -> INVALID_RECORD
    2. baseOffset != 0 (here) -> INVALID_RECORD
    3. size > max.message.bytes -> MESSAGE_TOO_LARGE (the broker's job)
    4. CRC and batchLength (validate_batch) -> CORRUPT_MESSAGE
    5. offset range, record count, control flag, sequence (here)
    6. records (iter_records): bad compression -> UNKNOWN_SERVER_ERROR,
       count mismatch / malformed record -> INVALID_RECORD
    """
    if header.base_offset != 0:
        raise InvalidRecordError(
            f"the baseOffset of a produced record batch should be 0, but it is {header.base_offset}")
    if header.last_offset_delta < 0:
        raise InvalidRecordError(f"batch has an invalid offset range (lastOffsetDelta "
                                 f"{header.last_offset_delta})")
    if header.record_count <= 0:
        raise RecordCountMismatchError(f"invalid reported count for record batch: "
                                       f"{header.record_count}")
    if header.last_offset_delta + 1 != header.record_count:
        raise RecordCountMismatchError(
            f"inconsistent batch offset range (lastOffsetDelta {header.last_offset_delta}) "
            f"and count of records {header.record_count}")
    if header.is_control:
        raise InvalidRecordError("clients are not allowed to write control records")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(f"invalid sequence number {header.base_sequence} in record "
                                 f"batch with producerId {header.producer_id}")


# ---------------------------------------------------------------------- records

class Record:
    """One decoded record. Constructor order matches build_batch's tuples."""

    __slots__ = ("key", "value", "headers", "timestamp", "offset", "attributes")

    def __init__(self, key: bytes | None = None, value: bytes | None = None,
                 headers: list[tuple[str, bytes | None]] | None = None,
                 timestamp: int | None = None, offset: int | None = None,
                 attributes: int = 0):
        self.key = key
        self.value = value
        self.headers = [] if headers is None else headers
        self.timestamp = timestamp
        self.offset = offset
        self.attributes = attributes

    def __eq__(self, other) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (self.offset == other.offset and self.timestamp == other.timestamp
                and self.key == other.key and self.value == other.value
                and list(self.headers) == list(other.headers)
                and self.attributes == other.attributes)

    __hash__ = None

    def __repr__(self) -> str:
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={_short(self.value)}, headers={self.headers!r})")


def _short(value: bytes | None) -> str:
    if value is None or len(value) <= 32:
        return repr(value)
    return f"<{len(value)} bytes {value[:16]!r}...>"


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag varint/varlong at ``pos``: (value, next pos). IndexError past the end."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise MalformedRecordError(f"varint longer than 10 bytes at {pos}")


def _read_bytes(buf: bytes, pos: int, limit: int) -> tuple[bytes | None, int]:
    """Varint-length-prefixed bytes (-1 = null) that must end by ``limit``."""
    b = buf[pos]
    if b < 0x80:  # lengths below 64 (and null): skip the general decoder
        n = (b >> 1) ^ -(b & 1)
        pos += 1
    else:
        n, pos = _read_varint(buf, pos)
    if n < 0:
        if n == -1:
            return None, pos
        raise MalformedRecordError(f"negative length {n}")
    if pos + n > limit:
        raise MalformedRecordError(f"length {n} at {pos} runs past the record")
    return buf[pos:pos + n], pos + n


def iter_records(batch, pos: int = 0, *,
                 max_uncompressed: int = _compression.DEFAULT_MAX_SIZE) -> Iterator[Record]:
    """Decode the records of the batch at ``batch[pos:]`` (decompressing them).

    Offsets and timestamps come out absolute; in a LogAppendTime batch every
    record's timestamp is the batch's maxTimestamp, as Kafka reports it. The
    CRC is not checked here (see validate_batch). Raises MalformedRecordError
    for unparseable records, RecordCountMismatchError when recordCount
    disagrees with the data, CorruptCompressedRecordsError for bad payloads.
    """
    _frame(batch, pos, len(batch))
    header = BatchHeader(batch, pos)
    return _iter_records(batch, pos, header, max_uncompressed)


def _iter_records(batch, pos: int, header: BatchHeader, max_uncompressed: int) -> Iterator[Record]:
    count = header.record_count
    if count == 0:
        return
    if count < 0:
        raise RecordCountMismatchError(f"invalid record count {count}")
    section = memoryview(batch)[pos + HEADER_SIZE:pos + LOG_OVERHEAD + header.batch_length]
    codec = header.attributes & COMPRESSION_MASK
    if codec == _compression.NONE:
        data = bytes(section)
    else:
        try:
            data = _compression.decompress(codec, section, max_uncompressed)
        except CorruptCompressionError as exc:
            raise CorruptCompressedRecordsError(str(exc)) from exc
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_BIT else None
    end = len(data)
    p = 0
    read = _read_varint
    read_bytes = _read_bytes
    for _ in range(count):
        if p >= end:
            raise RecordCountMismatchError(
                f"batch declares {count} records but its data ends after fewer")
        try:
            length, p = read(data, p)
            record_end = p + length
            if length < 0 or record_end > end:
                raise MalformedRecordError(f"record length {length} at {p} overruns the batch")
            attributes = data[p]
            # small deltas and header counts are one byte: decode inline
            b = data[p + 1]
            if b < 0x80:
                timestamp_delta = (b >> 1) ^ -(b & 1)
                p += 2
            else:
                timestamp_delta, p = read(data, p + 1)
            b = data[p]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                offset_delta, p = read(data, p)
            key, p = read_bytes(data, p, record_end)
            value, p = read_bytes(data, p, record_end)
            b = data[p]
            if b < 0x80:
                header_count = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                header_count, p = read(data, p)
            if header_count < 0 or header_count * 2 > record_end - p:
                raise MalformedRecordError(f"invalid header count {header_count}")
            headers = []
            for _ in range(header_count):
                header_key, p = read_bytes(data, p, record_end)
                if header_key is None:
                    raise MalformedRecordError("null header key")
                header_value, p = read_bytes(data, p, record_end)
                # Java decodes header keys leniently; keep undecodable bytes
                # round-trippable instead of failing.
                headers.append((header_key.decode("utf-8", "surrogateescape"), header_value))
        except IndexError:
            raise MalformedRecordError("record runs past the end of the batch") from None
        if p != record_end:
            raise MalformedRecordError(
                f"record declares {length} bytes but its fields take {length + p - record_end}")
        yield Record(key, value, headers,
                     base_timestamp + timestamp_delta if log_append_time is None else log_append_time,
                     base_offset + offset_delta, attributes)
    if p != end:
        raise RecordCountMismatchError(
            f"batch declares {count} records but {end - p} bytes remain after them")


# -------------------------------------------------------------- control records

ABORT = 0
COMMIT = 1
# KRaft's control records (raft/ uses them in the metadata log)
LEADER_CHANGE = 2
SNAPSHOT_HEADER = 3
SNAPSHOT_FOOTER = 4
KRAFT_VERSION = 5
KRAFT_VOTERS = 6

_CONTROL_KEY = struct.Struct(">hh")  # version, type
_END_TXN_MARKER = struct.Struct(">hi")  # version, coordinatorEpoch


def control_record_type(record: Record) -> int:
    """The type of a control record: ABORT (0), COMMIT (1) or a KRaft type."""
    key = record.key
    if key is None or len(key) < _CONTROL_KEY.size:
        raise MalformedRecordError(f"control record key {key!r} is too short")
    return _CONTROL_KEY.unpack_from(key)[1]


def parse_control_value(record: Record) -> tuple[int, int]:
    """``(version, coordinator_epoch)`` of a transaction marker's value."""
    value = record.value
    if value is None or len(value) < _END_TXN_MARKER.size:
        raise MalformedRecordError(f"transaction marker value {value!r} is too short")
    return _END_TXN_MARKER.unpack_from(value)


# ---------------------------------------------------------------------- builder

def _uvarint(z: int) -> bytes:
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# Zig-zag encodings of -8192..8191 (every 1- and 2-byte varint): lengths and
# deltas of typical records never reach the slow path.
_VARINT_CACHE_SIZE = 1 << 14
# (made whole from the two byte ranges: a third of the time of _uvarint over the range, issue #26)
_VARINT_CACHE = [bytes((z,)) for z in range(0x80)] + [bytes((low | 0x80, high)) for high in range(1, 0x80)
                                                      for low in range(0x80)]
_NULL_LENGTH = _VARINT_CACHE[1]  # zig-zag(-1)


def encode_varint(value: int) -> bytes:
    """Zig-zag varint/varlong encoding of a signed 64-bit value."""
    z = (value << 1) ^ (value >> 63)
    return _VARINT_CACHE[z] if z < _VARINT_CACHE_SIZE else _uvarint(z)


def _as_bytes(value) -> bytes | None:
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def build_batch(records: Iterable, *, base_offset: int = 0, compression: int = 0,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1,
                base_sequence: int = NO_SEQUENCE, transactional: bool = False,
                control: bool = False, partition_leader_epoch: int = -1,
                timestamp_type: int = 0, base_timestamp: int | None = None,
                preserve_offsets: bool = False,
                last_offset_delta: int | None = None,
                compression_level: int | None = None) -> bytes:
    """Build one v2 batch with a valid CRC.

    ``records`` are Record objects or tuples ``(key, value[, headers[,
    timestamp]])``; key/value are bytes-like, str (UTF-8) or None; headers
    ``[(str, bytes|None)]``. A missing timestamp means now. Offsets are
    consecutive from ``base_offset`` unless ``preserve_offsets`` (Records'
    own ``offset``, e.g. when compaction rewrites a batch);
    ``last_offset_delta`` overrides the header field (compaction keeps the
    original so producer sequences stay intact). baseTimestamp defaults to
    the first record's timestamp, maxTimestamp is the largest timestamp.
    An empty batch is written uncompressed, as Kafka never compresses one.
    """
    codec = compression
    out = bytearray(HEADER_SIZE)
    cache = _VARINT_CACHE
    cache_size = _VARINT_CACHE_SIZE
    uvarint = _uvarint
    now_ms = None
    max_timestamp = NO_TIMESTAMP
    count = 0
    delta = -1
    for rec in records:
        if type(rec) is Record:
            key, value, headers, timestamp = rec.key, rec.value, rec.headers, rec.timestamp
            attributes = rec.attributes
        else:
            key, value, headers, timestamp = (tuple(rec) + (None, None))[:4]
            attributes = 0
        if type(key) is not bytes and key is not None:
            key = _as_bytes(key)
        if type(value) is not bytes and value is not None:
            value = _as_bytes(value)
        if timestamp is None:
            if now_ms is None:
                now_ms = int(time.time() * 1000)
            timestamp = now_ms
        if base_timestamp is None:
            base_timestamp = timestamp
        if timestamp > max_timestamp:
            max_timestamp = timestamp
        if preserve_offsets:
            delta = rec.offset - base_offset
        else:
            delta += 1
        count += 1

        body = bytearray(b"\x00" if attributes == 0 else bytes((attributes,)))
        z = ((timestamp - base_timestamp) << 1) ^ ((timestamp - base_timestamp) >> 63)
        body += cache[z] if z < cache_size else uvarint(z)
        z = (delta << 1) ^ (delta >> 63)
        body += cache[z] if z < cache_size else uvarint(z)
        if key is None:
            body += _NULL_LENGTH
        else:
            z = len(key) << 1
            body += cache[z] if z < cache_size else uvarint(z)
            body += key
        if value is None:
            body += _NULL_LENGTH
        else:
            z = len(value) << 1
            body += cache[z] if z < cache_size else uvarint(z)
            body += value
        if not headers:
            body += b"\x00"
        else:
            body += encode_varint(len(headers))
            for header_key, header_value in headers:
                if type(header_key) is not bytes:
                    header_key = header_key.encode("utf-8", "surrogateescape")
                body += encode_varint(len(header_key))
                body += header_key
                if header_value is None:
                    body += _NULL_LENGTH
                else:
                    if type(header_value) is not bytes:
                        header_value = _as_bytes(header_value)
                    body += encode_varint(len(header_value))
                    body += header_value
        z = len(body) << 1
        out += cache[z] if z < cache_size else uvarint(z)
        out += body

    if count == 0:
        codec = 0
        delta = 0 if last_offset_delta is None else last_offset_delta
        if base_timestamp is None:
            base_timestamp = NO_TIMESTAMP
        else:
            max_timestamp = base_timestamp
    elif codec:
        payload = _compression.compress(codec, memoryview(out)[HEADER_SIZE:], compression_level)
        out = out[:HEADER_SIZE] + payload

    attributes = codec & COMPRESSION_MASK
    if timestamp_type:
        attributes |= TIMESTAMP_TYPE_BIT
    if transactional:
        attributes |= TRANSACTIONAL_BIT
    if control:
        attributes |= CONTROL_BIT
    HEADER.pack_into(
        out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, MAGIC, 0,
        attributes, delta if last_offset_delta is None else last_offset_delta,
        base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count)
    _CRC.pack_into(out, _CRC_OFFSET, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


_CONTROL_KINDS = {"abort": ABORT, "commit": COMMIT, ABORT: ABORT, COMMIT: COMMIT}


def build_control_batch(kind, producer_id: int, producer_epoch: int,
                        coordinator_epoch: int, base_offset: int = 0,
                        timestamp: int | None = None,
                        partition_leader_epoch: int = -1) -> bytes:
    """A transaction marker: one control record in a transactional control batch.

    ``kind`` is "commit"/"abort" or COMMIT/ABORT.
    """
    try:
        marker_type = _CONTROL_KINDS[kind.lower() if isinstance(kind, str) else kind]
    except KeyError:
        raise ValueError(f"unknown transaction marker kind {kind!r}") from None
    record = Record(_CONTROL_KEY.pack(0, marker_type),
                    _END_TXN_MARKER.pack(0, coordinator_epoch), [], timestamp)
    return build_batch([record], base_offset=base_offset, producer_id=producer_id,
                       producer_epoch=producer_epoch, transactional=True, control=True,
                       partition_leader_epoch=partition_leader_epoch)

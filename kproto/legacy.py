"""Legacy message sets (magic 0 and 1), as Produce v0-2 and Fetch v0-3 carry them.

Kafka 3.9 stores only v2 record batches. It converts what old producers send
on append (LogValidator): every message becomes a record of one new v2 batch,
compressed with the wrapper's codec when the messages came compressed. And
it down-converts what old fetchers read (RecordsUtil.downConvert): magic 0
for Fetch v0-1, magic 1 for Fetch v2-3. This is per-record work, which only
these old request versions need.

Layout of one message: offset int64, size int32, then crc uint32 (CRC-32 of
the rest), magic int8, attributes int8 (codec in bits 0-2, timestamp type in
bit 3), timestamp int64 (magic 1 only), key and value as int32-length bytes
(-1 = null). A compressed message (wrapper) holds a compressed message set
of inner messages as its value.
"""
from __future__ import annotations

import struct
import zlib

from . import compression as _compression
from .records import (
    COMPRESSION_MASK, TIMESTAMP_TYPE_BIT, CorruptCompressedRecordsError, CorruptRecordError, CrcMismatchError,
    InvalidRecordError, build_batch, iter_batch_headers, iter_records,
)

_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
LOG_OVERHEAD = 12
# smallest message after offset+size: crc, magic, attributes, key and value lengths
MIN_SIZE = {0: 14, 1: 22}
NO_TIMESTAMP = -1
MAGIC_OFFSET = 16


class UnsupportedCompressionTypeError(CorruptRecordError):
    """zstd in a legacy message: Kafka's UnsupportedCompressionTypeException."""

    error_code = 76  # UNSUPPORTED_COMPRESSION_TYPE


def is_legacy(buf) -> bool:
    """Whether a records field holds magic 0/1 messages (magic byte < 2)."""
    return len(buf) > MAGIC_OFFSET and buf[MAGIC_OFFSET] in (0, 1)


def _iter_messages(buf):
    """(magic, attributes, timestamp, key, value, size) of each whole message.

    As Kafka's shallow iterator: a trailing partial message ends the set, a
    size below the minimum is corrupt, and every message's CRC is checked.
    """
    view = memoryview(buf)
    pos, end = 0, len(view)
    while end - pos >= LOG_OVERHEAD:
        size = _I32.unpack_from(view, pos + 8)[0]
        if size < MIN_SIZE[0]:
            raise CorruptRecordError(f"message size {size} is less than the minimum message overhead")
        if pos + LOG_OVERHEAD + size > end:
            return
        _offset, _size, crc, magic, attributes = _HEAD.unpack_from(view, pos)
        if magic not in (0, 1):
            raise InvalidRecordError(f"message at {pos} has magic {magic} in a legacy message set")
        if size < MIN_SIZE[magic]:
            raise CorruptRecordError(f"message size {size} is less than the minimum for magic {magic}")
        body = view[pos + 16:pos + LOG_OVERHEAD + size]  # from magic to the end
        computed = zlib.crc32(body)
        if computed != crc:
            raise CrcMismatchError(crc, computed, pos)
        p = 2
        timestamp = NO_TIMESTAMP
        if magic == 1:
            timestamp = _I64.unpack_from(body, p)[0]
            p += 8
        key, p = _bytes(body, p)
        value, p = _bytes(body, p)
        if p != len(body):
            raise CorruptRecordError(f"message at {pos} has {len(body) - p} bytes after its value")
        yield magic, attributes, timestamp, key, value, size
        pos += LOG_OVERHEAD + size


def _bytes(body, p: int):
    if p + 4 > len(body):
        raise CorruptRecordError("message is truncated")
    n = _I32.unpack_from(body, p)[0]
    p += 4
    if n < 0:
        return None, p
    if p + n > len(body):
        raise CorruptRecordError("message key or value overruns the message")
    return bytes(body[p:p + n]), p + n


def convert(buf, now_ms: int) -> tuple[bytes | None, int]:
    """One v2 batch holding the records of a legacy message set (base offset 0),
    and the number of shallow messages; (None, 0) when the set holds no whole
    message (Kafka appends nothing then). Raises CorruptRecordError (with
    Kafka's error_code) for what Kafka refuses."""
    records = []
    codec = _compression.NONE
    shallow = 0
    for magic, attributes, timestamp, key, value, _size in _iter_messages(buf):
        shallow += 1
        wrapper_codec = attributes & COMPRESSION_MASK
        if wrapper_codec == _compression.NONE:
            records.append((key, value, [], timestamp))
            continue
        if wrapper_codec == _compression.ZSTD:
            raise UnsupportedCompressionTypeError("zstd is not allowed in messages of magic < 2")
        if wrapper_codec > _compression.ZSTD:
            raise CorruptRecordError(f"unknown compression codec {wrapper_codec}")
        if value is None:
            raise InvalidRecordError("compressed message has a null value")
        codec = wrapper_codec
        inner = _decompress(wrapper_codec, value, magic)
        log_append = magic == 1 and attributes & TIMESTAMP_TYPE_BIT
        for in_magic, in_attrs, in_ts, in_key, in_value, _s in _iter_messages(inner):
            if in_attrs & COMPRESSION_MASK:
                raise InvalidRecordError("compressed message holds a compressed message")
            if magic == 1 and in_magic != magic:
                raise InvalidRecordError("compressed message holds a message of another magic")
            records.append((in_key, in_value, [], timestamp if log_append else in_ts))
    if not records:
        return None, shallow
    # v0 messages keep NO_TIMESTAMP (-1), as Kafka converts them
    batch = build_batch(records, compression=codec)
    return batch, shallow


def _decompress(codec: int, value: bytes, magic: int) -> bytes:
    try:
        return _compression.decompress(codec, value)
    except _compression.CorruptCompressionError as exc:
        if codec == _compression.LZ4 and magic == 0:
            # Kafka before 0.10 wrote the lz4 frame's header checksum over the
            # magic number too; Kafka still reads those (KafkaLZ4BlockInputStream)
            try:
                return _compression.decompress(codec, _fix_lz4_header_checksum(value))
            except _compression.CorruptCompressionError:
                pass
        raise CorruptCompressedRecordsError(str(exc)) from None


def _fix_lz4_header_checksum(data: bytes, broken: bool = False) -> bytes:
    """The lz4 frame with its header checksum over the descriptor (the
    standard), or with ``broken`` over magic and descriptor (Kafka < 0.10)."""
    if len(data) < 7:
        return data
    flg = data[4]
    desc_end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(data) <= desc_end:
        return data
    hc = (_xxh32(data[0 if broken else 4:desc_end]) >> 8) & 0xFF
    return data[:desc_end] + bytes([hc]) + data[desc_end + 1:]


# -- down-conversion for Fetch v0-3 ------------------------------------------------------------

def message(offset: int, magic: int, attributes: int, timestamp: int, key, value) -> bytes:
    """One legacy message with its offset and size."""
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic == 1:
        body += _I64.pack(timestamp)
    for b in (key, value):
        if b is None:
            body += _I32.pack(-1)
        else:
            body += _I32.pack(len(b))
            body += b
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + bytes(body)


def down_convert(data, to_magic: int, first_offset: int) -> bytes:
    """The v2 batches in ``data`` as a magic-0/1 message set, as Kafka sends
    them to Fetch v0-3: control batches are left out, headers are dropped,
    uncompressed records before ``first_offset`` are skipped, a compressed
    batch becomes one wrapper message with its codec. zstd cannot be
    down-converted (UnsupportedCompressionTypeError)."""
    data = bytes(data)
    out = bytearray()
    for pos, h in iter_batch_headers(data, allow_partial_tail=True):
        if h.is_control:
            continue
        codec = h.compression
        if codec == _compression.ZSTD:
            raise UnsupportedCompressionTypeError("Down-conversion of zstandard-compressed batches is not supported")
        records = list(iter_records(data, pos))
        if not codec:
            records = [r for r in records if r.offset >= first_offset]
        if not records:
            continue
        log_append = h.timestamp_type == 1
        ts_bit = TIMESTAMP_TYPE_BIT if log_append and to_magic == 1 else 0
        if not codec:
            for r in records:
                out += message(r.offset, to_magic, ts_bit, r.timestamp, r.key, r.value)
            continue
        base = records[0].offset
        # magic 1 wrappers hold relative inner offsets, magic 0 absolute ones
        inner = b"".join(message(r.offset - base if to_magic == 1 else r.offset, to_magic, 0, r.timestamp,
                                 r.key, r.value) for r in records)
        payload = _compression.compress(codec, inner)
        if codec == _compression.LZ4 and to_magic == 0:
            payload = _fix_lz4_header_checksum(payload, broken=True)
        max_ts = h.max_timestamp if log_append else max(r.timestamp for r in records)
        out += message(records[-1].offset, to_magic, codec | ts_bit, max_ts, None, payload)
    return bytes(out)


def message_boundaries(data) -> list[int]:
    """End positions of the whole messages in a legacy message set."""
    ends, pos = [], 0
    while pos + LOG_OVERHEAD <= len(data):
        end = pos + LOG_OVERHEAD + _I32.unpack_from(data, pos + 8)[0]
        if end > len(data):
            break
        ends.append(end)
        pos = end
    return ends


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def _xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of a short input (< 16 bytes: a frame descriptor)."""
    assert len(data) < 16
    h = (seed + _P5 + len(data)) & _M
    p = 0
    while p + 4 <= len(data):
        h = (h + int.from_bytes(data[p:p + 4], "little") * _P3) & _M
        h = (_rotl(h, 17) * _P4) & _M
        p += 4
    while p < len(data):
        h = (h + data[p] * _P5) & _M
        h = (_rotl(h, 11) * _P1) & _M
        p += 1
    h ^= h >> 15
    h = (h * _P2) & _M
    h ^= h >> 13
    h = (h * _P3) & _M
    h ^= h >> 16
    return h

"""kproto.records: building, validating, rewriting and decoding v2 batches."""
from __future__ import annotations

import os
import struct
import types

import cramjam
import crc32c
import kafka.codec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from kproto import compression
from kproto.records import (
    ABORT, COMMIT, HEADER, HEADER_SIZE, BatchHeader, CorruptCompressedRecordsError,
    CorruptRecordError, CrcMismatchError, InvalidBatchLengthError, InvalidRecordError,
    MalformedRecordError, MultipleBatchesError, Record, RecordCountMismatchError,
    TruncatedBatchError, UnsupportedMagicError, build_batch, build_control_batch,
    check_client_batch, control_record_type, encode_varint, iter_batch_headers, iter_records,
    parse_control_value, set_base_offset, set_crc, set_log_append_time,
    set_partition_leader_epoch, validate_batch, validate_batches,
)

CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4,
          compression.ZSTD]
CODEC_IDS = ["none", "gzip", "snappy", "lz4", "zstd"]

T0 = 1_700_000_000_000

SAMPLE = [
    (b"key-0", b"value-0", [("trace", b"abc"), ("empty", b""), ("nil", None)], T0),
    (None, b"no key", [], T0 + 5),
    (b"tombstone", None, None, T0 - 3),  # timestamps need not be ordered
    (b"", b"", [], T0 + 100_000),  # empty, not null
    Record(b"obj", b"from a Record", [("h", b"v")], T0 + 7),
]


@pytest.fixture
def kafka_python_snappy(monkeypatch):
    """kafka-python's own xerial framing over real snappy (python-snappy is absent)."""
    shim = types.SimpleNamespace(
        compress=lambda data: bytes(cramjam.snappy.compress_raw(data)),
        decompress=lambda data: bytes(cramjam.snappy.decompress_raw(data)),
    )
    monkeypatch.setattr(kafka.codec, "snappy", shim)


def expected(records, base_offset=0):
    out = []
    for i, rec in enumerate(records):
        if isinstance(rec, Record):
            key, value, headers, ts = rec.key, rec.value, rec.headers, rec.timestamp
        else:
            key, value, headers, ts = rec
        out.append(Record(key, value, list(headers or []), ts, base_offset + i))
    return out


def raw_batch(section: bytes, count: int, *, attributes: int = 0, last_offset_delta=None,
              base_timestamp: int = T0) -> bytearray:
    """A batch around a hand-made records section, with a correct CRC."""
    buf = bytearray(HEADER_SIZE) + section
    HEADER.pack_into(buf, 0, 0, len(buf) - 12, 0, 2, 0, attributes,
                     count - 1 if last_offset_delta is None else last_offset_delta,
                     base_timestamp, base_timestamp, -1, -1, -1, count)
    set_crc(buf, 0)
    return buf


def raw_record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


# ------------------------------------------------------------- round trips

@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_build_validate_iterate_round_trip(codec):
    batch = build_batch(SAMPLE, base_offset=42, compression=codec, partition_leader_epoch=3)
    header = validate_batch(batch)
    assert header.base_offset == 42
    assert header.record_count == len(SAMPLE)
    assert header.last_offset_delta == len(SAMPLE) - 1
    assert header.last_offset == 42 + len(SAMPLE) - 1
    assert header.compression == codec
    assert header.size == len(batch)
    assert header.base_timestamp == T0  # the first record's
    assert header.max_timestamp == T0 + 100_000
    assert header.timestamp_type == 0
    assert header.partition_leader_epoch == 3
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert not header.is_transactional and not header.is_control
    assert list(iter_records(batch)) == expected(SAMPLE, 42)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_large_values_round_trip(codec):
    big = os.urandom(1 << 20)
    batch = build_batch([(b"k", big), (b"k2", big[:1000])], compression=codec)
    validate_batch(batch)
    records = list(iter_records(batch))
    assert [r.value for r in records] == [big, big[:1000]]


def test_strings_and_bytes_like_inputs_are_encoded():
    batch = build_batch([("clé", bytearray(b"v"), [(b"raw-key", memoryview(b"hv"))], T0)])
    (rec,) = iter_records(batch)
    assert (rec.key, rec.value, rec.headers) == ("clé".encode(), b"v", [("raw-key", b"hv")])


def test_missing_timestamp_means_now():
    import time
    before = int(time.time() * 1000)
    (rec,) = iter_records(build_batch([(b"k", b"v")]))
    assert before <= rec.timestamp <= int(time.time() * 1000)


def test_explicit_base_timestamp_and_producer_fields():
    batch = build_batch([(None, b"a", None, T0 + 10), (None, b"b", None, T0 + 20)],
                        base_timestamp=T0, producer_id=77, producer_epoch=3,
                        base_sequence=100, transactional=True)
    header = validate_batch(batch)
    assert header.base_timestamp == T0 and header.max_timestamp == T0 + 20
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 100)
    assert header.last_sequence == 101
    assert header.is_transactional and not header.is_control
    assert [r.timestamp for r in iter_records(batch)] == [T0 + 10, T0 + 20]


def test_empty_batch():
    batch = build_batch([], base_offset=9, compression=compression.GZIP)
    header = validate_batch(batch)
    assert header.record_count == 0 and header.size == HEADER_SIZE
    assert header.compression == 0  # Kafka never compresses an empty batch
    assert header.base_timestamp == -1
    assert list(iter_records(batch)) == []


def test_preserve_offsets_and_last_offset_delta_for_compaction():
    kept = [Record(b"a", b"1", [], T0, offset=100), Record(b"c", b"3", [], T0 + 2, offset=102)]
    batch = build_batch(kept, base_offset=100, preserve_offsets=True, last_offset_delta=4,
                        base_timestamp=T0, producer_id=5, producer_epoch=0, base_sequence=10)
    header = validate_batch(batch)
    assert header.record_count == 2 and header.last_offset_delta == 4
    assert header.last_sequence == 14
    assert [r.offset for r in iter_records(batch)] == [100, 102]


def test_non_utf8_header_key_round_trips_byte_exact():
    batch = build_batch([(b"k", b"v", [(b"\xff\xfe", b"x")], T0)])
    (rec,) = iter_records(batch)
    assert build_batch([rec]) == batch


def test_batch_inside_larger_buffer_via_pos_and_memoryview():
    first = build_batch([(b"a", b"1", None, T0)])
    second = build_batch([(b"b", b"2", None, T0)], base_offset=1, compression=compression.LZ4)
    view = memoryview(b"\x00" * 7 + first + second)
    assert validate_batch(view, 7).base_offset == 0
    header = validate_batch(view, 7 + len(first))
    assert header.base_offset == 1
    assert [r.value for r in iter_records(view, 7 + len(first))] == [b"2"]


# ---------------------------------------------------------- control batches

@pytest.mark.parametrize("kind,expected_type", [("commit", COMMIT), ("abort", ABORT),
                                                 (COMMIT, COMMIT), (ABORT, ABORT),
                                                 ("COMMIT", COMMIT)])
def test_control_batch(kind, expected_type):
    batch = build_control_batch(kind, producer_id=1234, producer_epoch=5, coordinator_epoch=9,
                                base_offset=50, timestamp=T0, partition_leader_epoch=2)
    header = validate_batch(batch)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1234, 5, -1)
    assert (header.base_offset, header.record_count, header.partition_leader_epoch) == (50, 1, 2)
    (rec,) = iter_records(batch)
    assert rec.offset == 50 and rec.timestamp == T0
    assert rec.key == struct.pack(">hh", 0, expected_type)
    assert control_record_type(rec) == expected_type
    assert parse_control_value(rec) == (0, 9)
    assert rec.value == struct.pack(">hi", 0, 9)


def test_control_batch_rejects_unknown_kind():
    with pytest.raises(ValueError):
        build_control_batch("maybe", 1, 0, 0)


def test_control_record_helpers_reject_short_fields():
    with pytest.raises(MalformedRecordError):
        control_record_type(Record(b"\x00", b""))
    with pytest.raises(MalformedRecordError):
        parse_control_value(Record(b"\x00\x00\x00\x01", None))


# ---------------------------------------------------------- in-place rewrites

def test_set_log_append_time_rewrites_and_recomputes_crc():
    buf = bytearray(build_batch(SAMPLE, compression=compression.ZSTD))
    old_crc = BatchHeader(buf).crc
    set_log_append_time(buf, 0, T0 + 999_999)
    header = validate_batch(buf)
    assert header.timestamp_type == 1 and header.max_timestamp == T0 + 999_999
    assert header.crc != old_crc
    assert header.compression == compression.ZSTD  # other bits untouched
    # readers report the log append time for every record
    assert {r.timestamp for r in iter_records(buf)} == {T0 + 999_999}
    kp = DefaultRecordBatch(bytearray(buf))
    assert kp.validate_crc() and kp.timestamp_type == 1


def test_set_log_append_time_in_the_middle_of_a_buffer():
    a = build_batch([(b"a", b"1", None, T0)])
    b = build_batch([(b"b", b"2", None, T0)], base_offset=1)
    buf = bytearray(a + b)
    set_log_append_time(buf, len(a), T0 + 1)
    assert [h.timestamp_type for h in validate_batches(buf)] == [0, 1]


def test_set_crc_repairs_after_a_covered_field_changes():
    buf = bytearray(build_batch(SAMPLE))
    struct.pack_into(">q", buf, 43, 999)  # producerId is covered by the CRC
    with pytest.raises(CrcMismatchError):
        validate_batch(buf)
    assert set_crc(buf, 0) == BatchHeader(buf).crc
    assert validate_batch(buf).producer_id == 999


def test_offset_and_epoch_rewrites_keep_the_crc_valid():
    buf = bytearray(build_batch(SAMPLE))
    set_base_offset(buf, 0, 1_000_000)
    set_partition_leader_epoch(buf, 0, 17)
    header = validate_batch(buf)
    assert (header.base_offset, header.partition_leader_epoch) == (1_000_000, 17)
    assert [r.offset for r in iter_records(buf)] == list(range(1_000_000, 1_000_005))


# --------------------------------------------------------- corrupted batches

def test_flipped_crc_byte():
    buf = bytearray(build_batch(SAMPLE))
    buf[18] ^= 0x01
    with pytest.raises(CrcMismatchError) as info:
        validate_batch(buf)
    assert info.value.error_code == 2  # CORRUPT_MESSAGE, as Kafka answers
    assert info.value.stored != info.value.computed


def test_flipped_value_byte():
    buf = bytearray(build_batch(SAMPLE))
    buf[-3] ^= 0x40
    with pytest.raises(CrcMismatchError):
        validate_batch(buf)


@pytest.mark.parametrize("cut", [1, 5, len(build_batch(SAMPLE)) - 20])
def test_truncated_batch(cut):
    buf = build_batch(SAMPLE)[:-cut]
    with pytest.raises(TruncatedBatchError) as info:
        validate_batch(buf)
    assert info.value.error_code == 87  # INVALID_RECORD, as Kafka answers
    with pytest.raises(TruncatedBatchError):
        list(iter_records(buf))


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_wrong_magic(magic):
    buf = bytearray(build_batch(SAMPLE))
    struct.pack_into(">b", buf, 16, magic)
    with pytest.raises(UnsupportedMagicError) as info:
        validate_batch(buf)
    assert info.value.magic == magic
    assert info.value.error_code == 87  # Kafka 3.9: INVALID_RECORD for a magic-1 set


def test_legacy_message_set_is_reported_by_magic():
    # A magic-1 message: offset, size, crc, magic=1, attributes, timestamp, key, value.
    body = struct.pack(">bbqi", 1, 0, T0, -1) + struct.pack(">i", 3) + b"abc"
    message = struct.pack(">qiI", 0, 4 + len(body), 0) + body
    with pytest.raises(UnsupportedMagicError) as info:
        validate_batches(message, max_batches=1)
    assert info.value.magic == 1


def test_batch_length_below_minimum():
    buf = bytearray(build_batch([]))
    struct.pack_into(">i", buf, 8, 40)
    with pytest.raises(InvalidBatchLengthError) as info:
        validate_batch(buf)
    assert info.value.error_code == 2
    struct.pack_into(">i", buf, 8, -5)
    with pytest.raises(InvalidBatchLengthError):
        validate_batch(buf)


def test_unknown_codec_bits_are_rejected_by_validation():
    buf = bytearray(build_batch(SAMPLE))
    struct.pack_into(">h", buf, 21, 6)
    set_crc(buf, 0)
    with pytest.raises(CorruptCompressedRecordsError):
        validate_batch(buf)


@pytest.mark.parametrize("declared", [4, 6, 100])
def test_record_count_mismatch(declared):
    buf = bytearray(build_batch(SAMPLE))
    struct.pack_into(">i", buf, 57, declared)
    set_crc(buf, 0)
    validate_batch(buf)  # the hot path does not decode records
    with pytest.raises(RecordCountMismatchError) as info:
        list(iter_records(buf))
    assert info.value.error_code == 87


@pytest.mark.parametrize("codec", CODECS[1:], ids=CODEC_IDS[1:])
def test_garbage_payload_claiming_compression(codec):
    buf = bytearray(build_batch(SAMPLE))  # uncompressed records...
    struct.pack_into(">h", buf, 21, codec)  # ...flagged as compressed
    set_crc(buf, 0)
    assert validate_batch(buf).compression == codec
    with pytest.raises(CorruptCompressedRecordsError) as info:
        list(iter_records(buf))
    assert isinstance(info.value, compression.CorruptCompressionError)
    assert isinstance(info.value, CorruptRecordError)
    assert info.value.error_code == -1  # Kafka 3.9: UNKNOWN_SERVER_ERROR


def test_decompression_bomb_is_bounded():
    batch = build_batch([(None, bytes(4 << 20))], compression=compression.ZSTD)
    assert len(batch) < 2000
    with pytest.raises(CorruptCompressedRecordsError):
        list(iter_records(batch, max_uncompressed=1 << 20))
    assert len(next(iter_records(batch)).value) == 4 << 20


# Record bodies below: attributes, timestampDelta, offsetDelta, key length,
# key, value length, value, header count (zig-zag varints: 0 -> \x00, -1 -> \x01,
# 1 -> \x02).
@pytest.mark.parametrize("section,match", [
    # record length runs past the batch
    (encode_varint(50) + b"\x00\x00\x00\x01\x01\x00", "overruns"),
    # key length beyond the record
    (raw_record(b"\x00\x00\x00" + encode_varint(40) + b"kk\x01\x00"), "past the record"),
    # negative length other than -1
    (raw_record(b"\x00\x00\x00" + encode_varint(-2) + b"\x01\x00"), "negative length"),
    # a varint that never ends
    (raw_record(b"\x00" + b"\xff" * 11 + b"\x01\x01\x01\x00"), "varint"),
    # null header key
    (raw_record(b"\x00\x00\x00\x01\x01\x02\x01\x01"), "null header key"),
    # absurd header count
    (raw_record(b"\x00\x00\x00\x01\x01" + encode_varint(1000)), "header count"),
    # the declared record length does not match its fields
    (raw_record(b"\x00\x00\x00\x01\x01\x00\x00\x00"), "declares"),
    # the data ends inside a record's fields
    (encode_varint(3) + b"\x00\x00\x00", "past the end"),
])
def test_malformed_records(section, match):
    buf = raw_batch(section, 1)
    validate_batch(buf)
    with pytest.raises(MalformedRecordError, match=match) as info:
        list(iter_records(buf))
    assert info.value.error_code == 87
    assert isinstance(info.value, InvalidRecordError)


def test_hand_made_record_decodes():
    # guards the malformed cases above: the same layout, well formed
    section = raw_record(b"\x00" + encode_varint(-5) + b"\x00\x02k\x01\x02\x02h\x01")
    (rec,) = iter_records(raw_batch(section, 1))
    assert (rec.key, rec.value, rec.headers, rec.timestamp) == (b"k", None, [("h", None)], T0 - 5)


# ------------------------------------------------------ batch sequences

def test_iter_batch_headers_walks_consecutive_batches():
    batches = [build_batch([(b"k", b"v" * i)], base_offset=i, compression=i % 5)
               for i in range(5)]
    buf = b"".join(batches)
    walked = list(iter_batch_headers(buf))
    assert [h.base_offset for _, h in walked] == list(range(5))
    positions = [0]
    for b in batches[:-1]:
        positions.append(positions[-1] + len(b))
    assert [p for p, _ in walked] == positions


def test_iter_batch_headers_partial_tail():
    buf = build_batch(SAMPLE) + build_batch(SAMPLE, base_offset=5)[:-10]
    with pytest.raises(TruncatedBatchError):
        list(iter_batch_headers(buf))
    assert [h.base_offset for _, h in iter_batch_headers(buf, allow_partial_tail=True)] == [0]
    # a tail shorter than a header is partial too
    tail = build_batch(SAMPLE) + b"\x00" * 11
    assert len(list(iter_batch_headers(tail, allow_partial_tail=True))) == 1


def test_iter_batch_headers_validate_checks_crcs():
    bad = bytearray(build_batch(SAMPLE, base_offset=5))
    bad[-1] ^= 1
    buf = build_batch(SAMPLE) + bytes(bad)
    assert len(list(iter_batch_headers(buf))) == 2  # framing only
    with pytest.raises(CrcMismatchError):
        list(iter_batch_headers(buf, validate=True))


def test_iter_batch_headers_corrupt_length_is_not_a_partial_tail():
    buf = bytearray(build_batch(SAMPLE) * 2)
    struct.pack_into(">i", buf, len(buf) // 2 + 8, 3)
    with pytest.raises(InvalidBatchLengthError):
        list(iter_batch_headers(buf, allow_partial_tail=True))


def test_validate_batches():
    buf = build_batch(SAMPLE) + build_batch(SAMPLE, base_offset=5, compression=compression.GZIP)
    headers = validate_batches(buf)
    assert [h.base_offset for h in headers] == [0, 5]
    with pytest.raises(MultipleBatchesError) as info:
        validate_batches(buf, max_batches=1)
    assert info.value.error_code == 87  # Kafka 3.9: INVALID_RECORD for two batches
    assert len(validate_batches(buf[:len(buf) - 1], allow_partial_tail=True)) == 1


def test_validate_batches_checks_shape_before_crc():
    bad = bytearray(build_batch(SAMPLE))
    bad[-1] ^= 1
    buf = bytes(bad) + build_batch(SAMPLE)
    with pytest.raises(MultipleBatchesError):
        validate_batches(buf, max_batches=1)
    with pytest.raises(CrcMismatchError):
        validate_batches(buf)
    assert len(validate_batches(buf, verify_crc=False)) == 2


def test_validate_batches_without_a_batch():
    with pytest.raises(InvalidRecordError):
        validate_batches(b"")
    with pytest.raises(TruncatedBatchError):
        validate_batches(build_batch(SAMPLE)[:30])


# ------------------------------------------------------ client batch rules

def test_check_client_batch():
    check_client_batch(validate_batch(build_batch(SAMPLE)))
    check_client_batch(validate_batch(build_batch(SAMPLE, producer_id=3, producer_epoch=0,
                                                  base_sequence=0)))
    with pytest.raises(InvalidRecordError, match="control"):
        check_client_batch(validate_batch(build_control_batch("commit", 1, 0, 0)))
    with pytest.raises(InvalidRecordError, match="sequence"):
        check_client_batch(validate_batch(build_batch(SAMPLE, producer_id=3, producer_epoch=0)))
    with pytest.raises(RecordCountMismatchError):
        check_client_batch(validate_batch(build_batch([])))
    with pytest.raises(RecordCountMismatchError, match="inconsistent"):
        check_client_batch(validate_batch(build_batch(SAMPLE, last_offset_delta=9)))
    with pytest.raises(InvalidRecordError, match="baseOffset"):
        check_client_batch(validate_batch(build_batch(SAMPLE, base_offset=3)))


# ------------------------------------------------------ kafka-python interop

@pytest.mark.usefixtures("kafka_python_snappy")
@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_kafka_python_batches_read_by_us(codec):
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=True, producer_id=99,
        producer_epoch=4, base_sequence=12, batch_size=1 << 22)
    sent = []
    for i in range(200):
        key = None if i % 7 == 0 else b"key-%d" % i
        value = None if i % 11 == 0 else os.urandom(i * 3)
        headers = [("h%d" % j, b"v" * j) for j in range(i % 3)]
        builder.append(i, T0 + i * 13, key, value, headers)
        sent.append(Record(key, value, headers, T0 + i * 13, i))
    buf = bytes(builder.build())
    header = validate_batch(buf)
    assert header.compression == codec
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (99, 4, 12)
    assert header.is_transactional and header.record_count == 200
    assert list(iter_records(buf)) == sent


@pytest.mark.usefixtures("kafka_python_snappy")
@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_our_batches_read_by_kafka_python(codec):
    records = [(None if i % 5 == 0 else b"k%d" % i, None if i % 9 == 0 else os.urandom(i * 50),
                [("idx", str(i).encode())], T0 + i) for i in range(100)]
    buf = build_batch(records, base_offset=1000, compression=codec, producer_id=5,
                      producer_epoch=1, base_sequence=0)
    batch = DefaultRecordBatch(bytearray(buf))
    assert batch.validate_crc()
    assert batch.compression_type == codec
    assert (batch.base_offset, batch.producer_id, batch.base_sequence) == (1000, 5, 0)
    got = [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in batch]
    assert got == [(1000 + i, k, v, [(hk, hv) for hk, hv in h], ts)
                   for i, (k, v, h, ts) in enumerate(records)]


# ------------------------------------------------------ property

_bytes_or_none = st.one_of(st.none(), st.binary(max_size=300))
_record = st.tuples(
    _bytes_or_none,
    _bytes_or_none,
    st.lists(st.tuples(st.text(max_size=20), _bytes_or_none), max_size=4),
    st.integers(min_value=0, max_value=2**45),
)


@settings(max_examples=150, deadline=None)
@given(records=st.lists(_record, max_size=40), codec=st.sampled_from(CODECS),
       base_offset=st.integers(min_value=0, max_value=2**62))
def test_property_build_iterate_round_trip(records, codec, base_offset):
    batch = build_batch(records, base_offset=base_offset, compression=codec)
    header = validate_batch(batch)
    assert header.record_count == len(records)
    assert list(iter_records(batch)) == expected(records, base_offset)
    if records:
        assert header.max_timestamp == max(r[3] for r in records)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_property_mangled_batches_raise_only_corrupt_record_errors(data):
    records = data.draw(st.lists(_record, min_size=1, max_size=5))
    buf = bytearray(build_batch(records, compression=data.draw(st.sampled_from(CODECS))))
    for _ in range(data.draw(st.integers(1, 4))):
        buf[data.draw(st.integers(HEADER_SIZE - 4, len(buf) - 1))] = data.draw(st.integers(0, 255))
    set_crc(buf, 0)
    try:
        validate_batch(buf)
        list(iter_records(buf))
    except CorruptRecordError:
        pass


def test_crc_matches_an_independent_computation():
    buf = build_batch(SAMPLE)
    assert BatchHeader(buf).crc == crc32c.crc32c(buf[21:])


def test_varints_of_the_cached_range_read_back_and_are_minimal():
    """encode_varint's table (every 1- and 2-byte varint, -8192..8191) reads back to the value
    and uses the shortest encoding, as Kafka's ByteUtils.writeVarint."""
    from kproto.records import _read_varint
    for value in range(-8192, 8192):
        data = encode_varint(value)
        assert len(data) == (1 if -64 <= value < 64 else 2)
        assert _read_varint(data, 0) == (value, len(data))
    assert encode_varint(8192) == b"\x80\x80\x01" and encode_varint(-8193) == b"\x81\x80\x01"

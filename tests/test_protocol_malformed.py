"""Malformed request frames: kproto.api.decode_request turns every one of them
into a DecodeError (or UnsupportedVersionError), never another exception,
never a hang, and never an allocation sized by a length field it has not
checked against the bytes that are really there."""
from __future__ import annotations

import os
import struct
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kproto._codec import DecodeError, UnsupportedVersionError
from kproto.api import (
    APIS, ApiKey, RequestHeader, UnknownApiError, decode_request, encode_request,
    request_class, request_header_version,
)
from kproto.messages.join_group_request import JoinGroupRequest
from kproto.messages.metadata_request import MetadataRequest
from kproto.messages.produce_request import ProduceRequest
from tests.protocol_strategies import message

ALLOWED = (DecodeError, UnsupportedVersionError)
CORRELATION_ID = 0x1234


def frame_of(req, version, client_id="malformed-test"):
    """A request frame without its size prefix, as decode_request takes it."""
    return encode_request(req, version, CORRELATION_ID, client_id)[4:]


def header(api_key, version, client_id="c"):
    h = RequestHeader(request_api_key=api_key, request_api_version=version,
                      correlation_id=CORRELATION_ID, client_id=client_id)
    return h.encode(request_header_version(api_key, version))


def i16(n):
    return struct.pack(">h", n)


def i32(n):
    return struct.pack(">i", n)


def s16(text: bytes):
    return i16(len(text)) + text


def uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


BATCH = bytes(range(256)) * 2   # records stay opaque bytes to the request codec


def produce(version):
    P = ProduceRequest
    return frame_of(P(acks=-1, timeout_ms=30000, transactional_id=None if version < 3 else "txn",
                      topic_data=[P.TopicProduceData(name="orders", partition_data=[
                          P.PartitionProduceData(index=0, records=BATCH),
                          P.PartitionProduceData(index=1, records=None)])]), version)


def metadata(version):
    M = MetadataRequest
    return frame_of(M(topics=[M.MetadataRequestTopic(name="orders"), M.MetadataRequestTopic(name="ünïcode")],
                      allow_auto_topic_creation=True), version)


def join_group(version):
    J = JoinGroupRequest
    return frame_of(J(group_id="group-1", session_timeout_ms=10000, rebalance_timeout_ms=60000,
                      member_id="", group_instance_id="static-1" if version >= 5 else None,
                      protocol_type="consumer", reason="rejoin" if version >= 8 else None,
                      protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x03sub")]),
                    version)


VALID = {
    "Produce-v3": produce(3), "Produce-v9": produce(9), "Produce-v11": produce(11),
    "Metadata-v0": metadata(0), "Metadata-v4": metadata(4), "Metadata-v12": metadata(12),
    "JoinGroup-v0": join_group(0), "JoinGroup-v5": join_group(5), "JoinGroup-v9": join_group(9),
}


def expect_decode_error(frame, match=None):
    with pytest.raises(DecodeError, match=match) as info:
        decode_request(frame)
    return info.value


# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_frames_decode(name):
    decode_request(VALID[name])


@pytest.mark.timeout(20)
@pytest.mark.parametrize("name", sorted(VALID))
def test_every_prefix_is_a_decode_error(name):
    frame = VALID[name]
    for n in range(len(frame)):
        with pytest.raises(DecodeError):
            decode_request(frame[:n])


def test_frame_shorter_than_a_header():
    for n in range(8):
        expect_decode_error(bytes(n), "shorter than a request header")


def _peak_allocation(fn):
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - t0
        return tracemalloc.get_traced_memory()[1], elapsed
    finally:
        tracemalloc.stop()


def _rejected_cheaply(frame, match):
    def run():
        with pytest.raises(DecodeError, match=match):
            decode_request(frame)
    run()   # the first call imports the message's module: not part of the measure
    peak, elapsed = _peak_allocation(run)
    assert peak < 256 * 1024, f"{peak} bytes allocated before rejecting"
    assert elapsed < 0.5


def test_string_length_beyond_the_frame():
    # Metadata v1: topics = [string of 0x7fff bytes], but 10 bytes follow
    frame = header(ApiKey.METADATA, 1) + i32(1) + i16(0x7FFF) + b"x" * 10
    _rejected_cheaply(frame, "runs past the end")


def test_compact_string_length_beyond_the_frame():
    # Metadata v12: topic name as a compact string claiming 2**31 bytes
    frame = header(ApiKey.METADATA, 12) + uvarint(2) + bytes(16) + uvarint(2**31) + b"x" * 10
    _rejected_cheaply(frame, "runs past the end")


def test_huge_array_count_is_rejected_before_allocating():
    frame = header(ApiKey.METADATA, 1) + i32(2**31 - 1) + s16(b"a")
    _rejected_cheaply(frame, "longer than the frame")


def test_huge_compact_array_count_is_rejected_before_allocating():
    frame = header(ApiKey.METADATA, 12) + uvarint(2**32 - 1) + bytes(20)
    _rejected_cheaply(frame, "longer than the frame")


def test_huge_fixed_width_array_count():
    # Fetch v7: ForgottenTopicsData.Partitions is an []int32 claiming 2**31-1 entries
    body = (i32(-1) + i32(500) + i32(1) + i32(1 << 20) + b"\x00" + i32(0) + i32(0)
            + i32(0)                                   # topics: []
            + i32(1) + s16(b"t") + i32(2**31 - 1) + i32(0))   # forgotten: t -> 2**31-1 partitions
    _rejected_cheaply(header(ApiKey.FETCH, 7) + body, "longer than the frame")


def test_huge_records_length():
    # Produce v3: one partition whose records claim 2**31-1 bytes
    body = (i16(-1) + i16(1) + i32(1000) + i32(1) + s16(b"t") + i32(1) + i32(0)
            + i32(2**31 - 1) + b"\x00" * 16)
    _rejected_cheaply(header(ApiKey.PRODUCE, 3) + body, "runs past the end")


def test_huge_bytes_length():
    # JoinGroup v1: protocol metadata claims 2**31-1 bytes
    body = (s16(b"g") + i32(10000) + i32(10000) + s16(b"") + s16(b"consumer")
            + i32(1) + s16(b"range") + i32(2**31 - 1) + b"abc")
    _rejected_cheaply(header(ApiKey.JOIN_GROUP, 1) + body, "runs past the end")


def test_array_longer_than_its_elements():
    frame = header(ApiKey.METADATA, 1) + i32(3) + s16(b"a")
    expect_decode_error(frame)


def test_varint_of_more_than_five_bytes():
    frame = header(ApiKey.METADATA, 12) + b"\xff\xff\xff\xff\xff\x01" + bytes(8)
    expect_decode_error(frame, "varint is too long")


def test_overlong_varint_in_tagged_fields():
    # valid Metadata v12 body, then a tag count with six continuation bytes
    body = uvarint(1) + b"\x01\x00" + b"\xff\xff\xff\xff\xff\xff\x01"
    expect_decode_error(header(ApiKey.METADATA, 12) + body, "varint is too long")


def test_tagged_field_longer_than_the_frame():
    body = uvarint(1) + b"\x01\x00" + uvarint(1) + uvarint(7) + uvarint(100) + b"xy"
    expect_decode_error(header(ApiKey.METADATA, 12) + body, "tagged field runs past")


def test_invalid_utf8_in_a_string():
    frame = header(ApiKey.METADATA, 1) + i32(1) + s16(b"bad\xc3\x28name")
    expect_decode_error(frame, "not valid UTF-8")


def test_invalid_utf8_in_a_compact_string():
    frame = header(ApiKey.METADATA, 12) + uvarint(2) + bytes(16) + uvarint(4) + b"\xff\xfe\xfd" + b"\x00" * 4
    expect_decode_error(frame, "not valid UTF-8")


def test_invalid_utf8_in_the_client_id():
    frame = struct.pack(">hhi", ApiKey.METADATA, 1, 9) + s16(b"\xc0\xaf") + i32(0)
    expect_decode_error(frame, "not valid UTF-8")


def test_null_for_a_non_nullable_string():
    # JoinGroup v5: GroupId as length -1
    body = i16(-1) + i32(10000) + i32(10000) + s16(b"") + i16(-1) + s16(b"consumer") + i32(0)
    expect_decode_error(header(ApiKey.JOIN_GROUP, 5) + body, "non-nullable field GroupId")


def test_null_for_a_non_nullable_compact_string():
    body = uvarint(0) + bytes(8) + uvarint(1) + uvarint(0) + uvarint(1) + uvarint(1) + uvarint(0) + b"\x00"
    expect_decode_error(header(ApiKey.JOIN_GROUP, 9) + body, "non-nullable field GroupId")


def test_null_for_a_non_nullable_array():
    body = s16(b"g") + i32(10000) + i32(10000) + s16(b"") + s16(b"consumer") + i32(-1)
    expect_decode_error(header(ApiKey.JOIN_GROUP, 1) + body, "non-nullable field Protocols")


def test_nullability_follows_the_version():
    # Metadata Topics is nullable (all topics) from v1 only
    _h, req = decode_request(header(ApiKey.METADATA, 1) + i32(-1))
    assert req.topics is None
    expect_decode_error(header(ApiKey.METADATA, 0) + i32(-1), "non-nullable field Topics")


@pytest.mark.parametrize("api_key", [12345, -1, 32767, 10000])
def test_unknown_api_key_carries_the_correlation_id(api_key):
    frame = struct.pack(">hhi", api_key, 3, 0x5EED) + s16(b"c") + b"rest"
    err = expect_decode_error(frame)
    assert isinstance(err, UnknownApiError)
    assert (err.api_key, err.api_version, err.correlation_id) == (api_key, 3, 0x5EED)


@pytest.mark.parametrize("version", [14, 99, 32767, -1])  # Metadata: 0-13
def test_unknown_version(version):
    frame = struct.pack(">hhi", ApiKey.METADATA, version, 1) + s16(b"c") + i32(0)
    with pytest.raises(UnsupportedVersionError):
        decode_request(frame)
    with pytest.raises(UnsupportedVersionError):
        MetadataRequest.decode(i32(0), version)


# ---------------------------------------------------------------------------
# Bounded fuzzing: only DecodeError / UnsupportedVersionError may come out

# KPROTO_FUZZ_EXAMPLES=50000 for a long run
EXAMPLES = int(os.environ.get("KPROTO_FUZZ_EXAMPLES", "400"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
KEYS = sorted(APIS)


def _decode_or_reject(frame):
    try:
        decode_request(frame)
    except ALLOWED:
        pass


@FUZZ
@given(st.binary(max_size=200))
def test_fuzz_random_bytes(data):
    _decode_or_reject(data)


@FUZZ
@given(st.sampled_from(KEYS), st.data(), st.binary(max_size=300))
def test_fuzz_valid_header_random_body(api_key, data, body):
    version = data.draw(st.integers(APIS[api_key][3], APIS[api_key][4]))
    _decode_or_reject(header(api_key, version) + body)


MUTATION = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("set"), st.integers(0, 10**6), st.sampled_from([0x00, 0x7F, 0x80, 0xFF])),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.binary(min_size=1, max_size=6)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 8)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.just(0)),
)


def mutate(frame: bytes, mutations) -> bytes:
    buf = bytearray(frame)
    for kind, at, arg in mutations:
        if not buf:
            break
        # never touch the api key / version, so the body codec is what is fuzzed
        at = 4 + at % max(1, len(buf) - 4) if len(buf) > 4 else at % len(buf)
        if kind == "flip":
            buf[at % len(buf)] ^= arg
        elif kind == "set":
            buf[at % len(buf)] = arg
        elif kind == "insert":
            buf[at:at] = arg
        elif kind == "delete":
            del buf[at:at + arg]
        else:
            del buf[at:]
    return bytes(buf)


@FUZZ
@given(st.sampled_from(sorted(VALID)), st.lists(MUTATION, min_size=1, max_size=4))
def test_fuzz_mutated_valid_frames(name, mutations):
    _decode_or_reject(mutate(VALID[name], mutations))


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_fuzz_mutated_random_requests_of_every_api(data):
    api_key = data.draw(st.sampled_from(KEYS))
    version = data.draw(st.integers(APIS[api_key][3], APIS[api_key][4]))
    cls = request_class(api_key)
    flexible = cls.FLEXIBLE_FROM is not None and version >= cls.FLEXIBLE_FROM
    req = data.draw(message(cls, version, flexible))
    frame = frame_of(req, version)
    _decode_or_reject(mutate(frame, data.draw(st.lists(MUTATION, min_size=1, max_size=3))))

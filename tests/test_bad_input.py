"""What a client can send that is wrong, over raw sockets against a real
`kproto serve`: broken frames close only their own connection, bad
requests get Kafka's error codes, and none of it loses stored data.

Every error-code assertion names the row of
/work/shared/kafka-observations/error-cases.csv (Kafka 3.9's answers) it
matches, as `# obs: <case>`.
"""
from __future__ import annotations

import struct
import time
import uuid
import zlib

import pytest

from kproto import legacy
from kproto import records as rec
from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.api_versions_request import ApiVersionsRequest
from tests.wire_client import (FETCH_V, LIST_OFFSETS_V, PRODUCE_V, WireClient, api_versions_ok, create_topic,
                                delete_records, fetch, fetch_req, list_offset, metadata, produce, produce_req)

pytestmark = pytest.mark.timeout(60)



def batch(n: int = 1, value_size: int = 10, **kw) -> bytes:
    return rec.build_batch([(b"k%d" % i, b"v" * value_size, [("h", b"1")]) for i in range(n)], **kw)


def legacy_message(value: bytes | None, magic: int = 1, key: bytes | None = None, attributes: int = 0,
                   timestamp: int | None = None, offset: int = 0) -> bytes:
    """One magic-0/1 message (offset, size, crc, magic, attributes[, timestamp], key, value)."""
    body = bytes([magic, attributes])
    if magic == 1:
        body += struct.pack(">q", int(time.time() * 1000) if timestamp is None else timestamp)
    for b in (key, value):
        body += struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b
    crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, len(body) + 4, crc) + body


def legacy_wrapper(inner: list[bytes], codec: int, magic: int = 1) -> bytes:
    """A compressed legacy message holding the messages `inner` (relative offsets)."""
    from kproto.compression import compress
    return legacy_message(compress(codec, b"".join(inner)), magic=magic, attributes=codec,
                          offset=len(inner) - 1)


def record_values(data) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of every record in a fetched record set."""
    out = []
    data = bytes(data)
    for pos, _header in rec.iter_batch_headers(data, allow_partial_tail=True):
        for r in rec.iter_records(data, pos):
            out.append((r.offset, r.key, r.value))
    return out


# -- fixtures -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def conn(broker):
    with WireClient(broker.bootstrap) as c:
        yield c


@pytest.fixture(scope="module", autouse=True)
def guarded(broker):
    """A topic written first and checked last: nothing below may lose it."""
    name = "bad-input-guarded"
    create_topic(broker.bootstrap, name)
    written = []
    with WireClient(broker.bootstrap) as c:
        for i in range(20):
            data = rec.build_batch([(b"g%d" % i, b"value-%d" % i, [("i", b"%d" % i)])],
                                   compression=i % 5)
            r = produce(c, name, data)
            assert r.error_code == 0
            written.append((r.base_offset, b"g%d" % i, b"value-%d" % i))
    return name, written


@pytest.fixture(scope="module")
def ten(broker):
    """A 1-partition topic holding offsets 0..9 with log start offset 5,
    like the observations' obs-e2-fetch topic; the 10th record carries the
    largest timestamp."""
    name = "bad-input-ten"
    create_topic(broker.bootstrap, name)
    now = int(time.time() * 1000)
    with WireClient(broker.bootstrap) as c:
        for i in range(10):
            ts = now + 1000 if i == 9 else now - 10_000 + i
            r = produce(c, name, rec.build_batch([(b"k", b"v%d" % i, [], ts)]))
            assert (r.error_code, r.base_offset) == (0, i)
        # obs: setup: delete records before offset 5 on a partition holding offsets 0..9
        d = delete_records(c, name, 5)
        assert (d.error_code, d.low_watermark) == (0, 5)
        tid = metadata(c, name).topic_id
    return name, tid, now


# -- framing: a broken frame closes its own connection only ---------------------------------------

@pytest.mark.parametrize("frame", [
    pytest.param(struct.pack(">i", 104857600 + 1), id="size-above-socket.request.max.bytes"),
    pytest.param(struct.pack(">i", -5), id="negative-size"),
    pytest.param(struct.pack(">i", 4) + b"\x00\x03\x00\x0c", id="truncated-header"),
    pytest.param(struct.pack(">i", 0), id="empty-frame"),
    pytest.param(struct.pack(">i", 24) + bytes(range(200, 224)), id="garbage"),
    pytest.param(struct.pack(">i", 12) + struct.pack(">hhi", 3, 12, 7) + b"\xff\xff\xff\xff", id="garbage-body"),
    pytest.param(struct.pack(">i", 12) + struct.pack(">hhih", 1000, 0, 1, -1) + b"\x00\x00", id="unknown-api-key"),
    pytest.param(struct.pack(">i", 12) + struct.pack(">hhih", 0, 99, 1, -1) + b"\x00\x00",
                 id="unsupported-produce-version"),
    pytest.param(struct.pack(">i", 12) + struct.pack(">hhih", ApiKey.METADATA, 13, 1, -1) + b"\x00\x00",
                 id="unsupported-metadata-version"),
    pytest.param(struct.pack(">i", 12) + struct.pack(">hhih", ApiKey.API_VERSIONS, -1, 1, -1) + b"\x00\x00",
                 id="negative-api-versions-version"),
])
def test_bad_frame_closes_only_its_connection(broker, conn, frame):
    with WireClient(broker.bootstrap) as other:
        assert api_versions_ok(other)
        with WireClient(broker.bootstrap) as bad:
            bad.send_raw(frame)
            assert bad.closed_by_peer(), "the broker kept a connection that sent a broken frame"
        # the connection opened before and one opened after are both served
        assert api_versions_ok(other)
    assert api_versions_ok(conn)
    with WireClient(broker.bootstrap) as after:
        assert api_versions_ok(after)


def test_frame_sent_slowly_is_still_one_request(broker):
    frame = ApiVersionsRequest(client_software_name="slow", client_software_version="1")
    from kproto.api import encode_request
    data = encode_request(frame, 3, 77, "slow")
    with WireClient(broker.bootstrap) as c:
        for i in range(len(data)):
            c.send_raw(data[i:i + 1])
        body = c.recv_frame()
        assert struct.unpack_from(">i", body, 0)[0] == 77


def test_api_versions_above_range_gets_v0_unsupported_version(broker):
    """obs: api-versions.json request_v5_unsupported: a v0 body with error 35
    listing ApiVersions 0-4 (header v0), and the connection stays usable."""
    import json
    obs = json.load(open("/work/shared/kafka-observations/api-versions.json"))["request_v5_unsupported"]
    with WireClient(broker.bootstrap) as c:
        from kproto.api import encode_request
        req = encode_request(ApiVersionsRequest(client_software_name="kproto-tests", client_software_version="1"),
                             4, 1, "obs")
        # same body at version 5: the broker cannot know v5's layout and must not need it
        c.send_raw(req[:6] + struct.pack(">h", 5) + req[8:])
        assert c.recv_frame().hex() == obs["response_bytes_hex_without_size_prefix"]
        assert api_versions_ok(c)


def test_pipelined_requests_answered_in_order(broker, conn):
    from kproto.api import decode_response, encode_request
    reqs = b"".join(encode_request(ApiVersionsRequest(client_software_name="p", client_software_version="1"),
                                   3, cid) for cid in range(100, 130))
    conn.send_raw(reqs)
    cids = [decode_response(conn.recv_frame(), ApiKey.API_VERSIONS, 3)[0] for _ in range(30)]
    assert cids == list(range(100, 130))


def test_requests_before_a_bad_frame_are_answered(broker):
    """Kafka handles a connection's requests one at a time: the ones before a
    broken frame are answered before the connection closes."""
    from kproto.api import decode_response, encode_request
    good = b"".join(encode_request(ApiVersionsRequest(client_software_name="p", client_software_version="1"),
                                   3, cid) for cid in (1, 2))
    bad = struct.pack(">i", 12) + struct.pack(">hhih", 1000, 0, 3, -1) + b"\x00\x00"
    with WireClient(broker.bootstrap) as c:
        c.send_raw(good + bad)
        assert [decode_response(c.recv_frame(), ApiKey.API_VERSIONS, 3)[0] for _ in range(2)] == [1, 2]
        assert c.closed_by_peer()


# -- Produce ----------------------------------------------------------------------------------

def test_produce_acks0(conn, broker):
    name = "bad-input-acks0"
    create_topic(broker.bootstrap, name)
    # no answer to a good acks=0 request: the next answer on the connection is the next request's
    conn.send(produce_req(name, batch(), acks=0), PRODUCE_V)
    assert api_versions_ok(conn)
    assert list_offset(conn, name, -1).offset == 1
    # Kafka (KafkaApis.handleProduceRequest) closes the connection of an acks=0
    # request that failed: the only signal such a producer gets
    with WireClient(broker.bootstrap) as c:
        c.send(produce_req("bad-input-nope", batch(), acks=0), PRODUCE_V)
        assert c.closed_by_peer()
    with WireClient(broker.bootstrap) as c:
        c.send(produce_req(name, batch() + batch(), acks=0), PRODUCE_V)
        assert c.closed_by_peer()
    assert list_offset(conn, name, -1).offset == 1


def test_produce_to_missing_topic_does_not_create_it(conn):
    # obs: produce to unknown topic (Produce never auto-creates; broker auto.create.topics.enable=true)
    r = produce(conn, "bad-input-never-created", batch())
    assert (r.error_code, r.base_offset) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
    # obs: metadata after that produce: topic still unknown
    assert metadata(conn, "bad-input-never-created").error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_produce_partition_out_of_range(conn, ten):
    # obs: produce to partition 5 of a 1-partition topic
    assert produce(conn, ten[0], batch(), partition=5).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_produce_corrupt_crc(conn, ten):
    data = bytearray(batch(3))
    data[-3] ^= 0xFF
    # obs: produce a v2 batch whose CRC does not match (one value byte flipped)
    assert produce(conn, ten[0], bytes(data)).error_code == ErrorCode.CORRUPT_MESSAGE
    data = bytearray(batch(3))
    data[17] ^= 0x01
    # obs: produce a v2 batch with the CRC field altered
    assert produce(conn, ten[0], bytes(data)).error_code == ErrorCode.CORRUPT_MESSAGE


def test_produce_too_large(broker, conn):
    name = "bad-input-large"
    create_topic(broker.bootstrap, name)
    # obs: produce a 1,100,000-byte record (topic default max.message.bytes 1048588)
    r = produce(conn, name, rec.build_batch([(None, b"x" * 1_100_000)]))
    assert (r.error_code, r.base_offset) == (ErrorCode.MESSAGE_TOO_LARGE, -1)
    # obs: produce a 1,048,000-byte record (batch just under 1048588)
    data = rec.build_batch([(None, b"x" * 1_048_000)])
    assert len(data) < 1048588
    r = produce(conn, name, data)
    assert (r.error_code, r.base_offset) == (0, 0)


@pytest.mark.parametrize("acks", [2, -2])
def test_produce_invalid_acks(conn, ten, acks):
    # obs: produce with acks=2 / produce with acks=-2
    r = produce(conn, ten[0], batch(), acks=acks)
    assert (r.error_code, r.base_offset) == (ErrorCode.INVALID_REQUIRED_ACKS, -1)


def test_produce_invalid_records(conn, ten):
    topic = ten[0]
    # obs: produce a magic-1 (legacy) message set with Produce v9
    assert produce(conn, topic, legacy_message(b"old")).error_code == ErrorCode.INVALID_RECORD
    # obs: produce two record batches in one partition entry (Produce v3+ allows exactly one batch)
    assert produce(conn, topic, batch() + batch()).error_code == ErrorCode.INVALID_RECORD
    # obs: produce a truncated batch (last 5 bytes cut, batchLength unchanged)
    assert produce(conn, topic, batch(3)[:-5]).error_code == ErrorCode.INVALID_RECORD
    # obs: produce with null Records: Kafka 3.9 never answers (NullPointerException);
    # kproto answers INVALID_RECORD (docs/compatibility.md) and keeps the connection
    assert produce(conn, topic, None).error_code == ErrorCode.INVALID_RECORD
    assert api_versions_ok(conn)


@pytest.mark.parametrize("codec", [1, 4])
def test_produce_payload_not_matching_codec(conn, ten, codec):
    data = bytearray(batch(2))
    struct.pack_into(">h", data, 21, codec)
    rec.set_crc(data)
    # obs: produce a batch flagged zstd (attributes=4) / gzip (attributes=1) whose payload is not zstd / gzip
    assert produce(conn, ten[0], bytes(data)).error_code == ErrorCode.UNKNOWN_SERVER_ERROR


def test_produce_to_internal_topic(broker, conn):
    # obs: produce to __consumer_offsets partition 0 before that topic exists
    if metadata(conn, "__consumer_offsets").error_code != 0:
        assert produce(conn, "__consumer_offsets", batch()).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # Metadata auto-creation makes an internal topic as Kafka's AutoTopicCreationManager does:
    # offsets.topic.num.partitions (50) partitions
    t = create_topic(broker.bootstrap, "__consumer_offsets", 50)
    assert t.is_internal
    # obs: produce from a client to internal topic __consumer_offsets partition 0
    assert produce(conn, "__consumer_offsets", batch()).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert produce(conn, "__consumer_offsets", batch(), partition=50).error_code == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_produce_transactional_without_transactional_id(conn, ten):
    # obs: produce a transactional-flagged batch with producerId -1 and no TransactionalId
    data = batch(transactional=True)
    assert produce(conn, ten[0], data).error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # obs: transactional batch sent with TransactionalId null in the request
    data = batch(transactional=True, producer_id=4242, producer_epoch=0, base_sequence=0)
    assert produce(conn, ten[0], data).error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


@pytest.mark.parametrize("version", [6, 7])
def test_produce_zstd_needs_produce_v7(broker, conn, version):
    name = "bad-input-zstd"
    create_topic(broker.bootstrap, name)
    # Kafka 3.9 ProduceRequest.validateRecords: zstd batches need Produce v7+
    r = conn.call(produce_req(name, batch(3, compression=4)), version).responses[0].partition_responses[0]
    assert r.error_code == (ErrorCode.UNSUPPORTED_COMPRESSION_TYPE if version < 7 else 0)


def test_produce_error_precedence(conn, ten):
    # unknown partitions answer UNKNOWN_TOPIC_OR_PARTITION whatever else is wrong (KafkaApis checks them first)
    r = produce(conn, "bad-input-nope", batch(), acks=2)
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    r = produce(conn, ten[0], batch(), partition=9, acks=2)
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # then the request-level shape of the records, then acks
    r = produce(conn, ten[0], batch() + batch(), acks=2)
    assert r.error_code == ErrorCode.INVALID_RECORD
    r = produce(conn, ten[0], bytes(bytearray(batch())[:-1]) + b"\x00", acks=2)
    assert r.error_code == ErrorCode.INVALID_REQUIRED_ACKS


def test_produce_rejections_append_nothing(conn, ten):
    assert list_offset(conn, ten[0], -1).offset == 10


# -- Produce v0-2: legacy message sets are converted to v2 batches ----------------------------------

@pytest.fixture(scope="module")
def legacy_topic(broker):
    name = "bad-input-legacy"
    create_topic(broker.bootstrap, name)
    return name


def _legacy_produce(c, topic, data, version):
    return c.call(produce_req(topic, data), version).responses[0].partition_responses[0]


def _fetch_records(c, topic, offset):
    data = bytes(_part(fetch(c, topic, offset)).records)
    out = []
    for pos, h in rec.iter_batch_headers(data, allow_partial_tail=True):
        out += [(h.compression, r.offset, r.key, r.value, r.timestamp) for r in rec.iter_records(data, pos)]
    return out


@pytest.mark.parametrize("version,magic", [(0, 0), (1, 0), (2, 1), (2, 0)])
@pytest.mark.parametrize("codec", [0, 1, 2, 3])
def test_produce_legacy_message_sets(conn, legacy_topic, version, magic, codec):
    ts = int(time.time() * 1000) - 5000
    msgs = [legacy_message(b"v%d" % i, magic=magic, key=b"k%d" % i if i else None, timestamp=ts + i, offset=i)
            for i in range(3)]
    data = b"".join(msgs) if codec == 0 else legacy_wrapper(msgs, codec, magic)
    end = list_offset(conn, legacy_topic, -1).offset
    r = _legacy_produce(conn, legacy_topic, data, version)
    assert (r.error_code, r.base_offset) == (0, end)
    got = _fetch_records(conn, legacy_topic, end)
    expected_ts = [ts + i if magic == 1 else -1 for i in range(3)]
    assert got == [(codec, end + i, b"k%d" % i if i else None, b"v%d" % i, expected_ts[i]) for i in range(3)]


def test_produce_legacy_lz4_with_pre_0_10_header_checksum(conn, legacy_topic):
    """Kafka before 0.10 computed the lz4 frame's header checksum over the
    magic number too; Kafka 3.9 still reads such magic-0 messages."""
    from kproto.compression import compress
    from kproto.legacy import _xxh32
    inner = [legacy_message(b"old-%d" % i, magic=0, offset=i) for i in range(3)]
    frame = bytearray(compress(3, b"".join(inner)))
    desc_end = 6 + (8 if frame[4] & 0x08 else 0) + (4 if frame[4] & 0x01 else 0)
    frame[desc_end] = (_xxh32(bytes(frame[:desc_end])) >> 8) & 0xFF
    data = legacy_message(bytes(frame), magic=0, attributes=3, offset=2)
    end = list_offset(conn, legacy_topic, -1).offset
    r = _legacy_produce(conn, legacy_topic, data, 1)
    assert (r.error_code, r.base_offset) == (0, end)
    assert [v for _c, _o, _k, v, _t in _fetch_records(conn, legacy_topic, end)] == [b"old-0", b"old-1", b"old-2"]


def test_produce_legacy_errors(conn, legacy_topic):
    bad = bytearray(legacy_message(b"value"))
    bad[-1] ^= 1
    assert _legacy_produce(conn, legacy_topic, bytes(bad), 2).error_code == ErrorCode.CORRUPT_MESSAGE
    inner = [legacy_message(b"a"), legacy_message(b"b")]
    bad = bytearray(legacy_wrapper(inner, 1))
    bad[-3] ^= 1  # inside the gzip stream: the wrapper's CRC is wrong first
    assert _legacy_produce(conn, legacy_topic, bytes(bad), 2).error_code == ErrorCode.CORRUPT_MESSAGE
    zstd = legacy_message(b"x" * 20, attributes=4)
    assert _legacy_produce(conn, legacy_topic, zstd, 2).error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    # Produce v3+ takes no legacy messages
    assert _legacy_produce(conn, legacy_topic, legacy_message(b"x"), 3).error_code == ErrorCode.INVALID_RECORD
    # a v2 batch in an old Produce version is stored as is
    end = list_offset(conn, legacy_topic, -1).offset
    r = _legacy_produce(conn, legacy_topic, batch(2), 2)
    assert (r.error_code, r.base_offset) == (0, end)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_v0_to_v3_down_converts(conn, legacy_topic, version):
    start = list_offset(conn, legacy_topic, -1).offset
    data = rec.build_batch([(b"k%d" % i, b"new-%d" % i, [("h", b"x")], 1_000_000 + i) for i in range(4)],
                           compression=1)
    assert produce(conn, legacy_topic, data).error_code == 0
    p = _part(conn.call(fetch_req(legacy_topic, start + 1), version))
    assert (p.error_code, p.high_watermark) == (0, start + 4)
    converted, _shallow = legacy.convert(bytes(p.records), 0)  # the magic 0/1 messages parse back
    magic = bytes(p.records)[16]
    assert magic == (0 if version < 2 else 1)
    got = [(start + r.offset, r.key, r.value, r.timestamp, r.headers) for r in rec.iter_records(converted)]
    # a compressed batch is sent whole, as one wrapper message
    assert got == [(start + i, b"k%d" % i, b"new-%d" % i, 1_000_000 + i if magic else -1, []) for i in range(4)]


def test_fetch_v3_cannot_down_convert_zstd(broker, conn):
    name = "bad-input-zstd-old-fetch"
    create_topic(broker.bootstrap, name)
    assert produce(conn, name, batch(2, compression=4)).error_code == 0
    # RecordsUtil.downConvert: "Down-conversion of zstandard-compressed batches is not supported"
    p = _part(conn.call(fetch_req(name, 0), 3))
    assert p.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert _part(conn.call(fetch_req(name, 0), 4)).error_code == 0


def test_list_offsets_v0(conn, ten):
    from kproto.messages.list_offsets_request import ListOffsetsRequest

    def old_style(ts, n):
        req = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=ten[0], partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=ts,
                                                                              max_num_offsets=n)])])
        p = conn.call(req, 0).topics[0].partitions[0]
        assert p.error_code == 0
        return p.old_style_offsets

    # Kafka's legacyFetchOffsetsBefore: segment starts (from the log start) and the log end, newest first
    assert old_style(-1, 1) == [10]
    assert old_style(-2, 1) == [5]
    assert old_style(-1, 5) == [10, 5]
    assert old_style(int(time.time() * 1000) + 60_000, 5) == [10, 5]
    assert old_style(0, 5) == []


# -- Fetch ------------------------------------------------------------------------------------

def _part(resp):
    assert resp.error_code == 0
    return resp.responses[0].partitions[0]


@pytest.mark.parametrize("offset", [11, 2, 1_000_000])
def test_fetch_out_of_range(conn, ten, offset):
    # obs: fetch offset 11 (high watermark 10; beyond end)
    # obs: fetch offset 2 (log start offset 5; before start)
    # obs: fetch offset 1000000
    p = _part(fetch(conn, ten[0], offset))
    assert (p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset) == (
        ErrorCode.OFFSET_OUT_OF_RANGE, -1, -1, -1)
    assert not p.records


def test_fetch_at_high_watermark_and_log_start(conn, ten):
    # obs: fetch offset 10 (exactly the high watermark)
    p = _part(fetch(conn, ten[0], 10))
    assert (p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset) == (0, 10, 10, 5)
    assert not p.records
    # obs: fetch offset 5 (log start offset)
    p = _part(fetch(conn, ten[0], 5))
    assert (p.error_code, p.high_watermark, p.log_start_offset) == (0, 10, 5)
    assert [o for o, _k, _v in record_values(p.records)] == [5, 6, 7, 8, 9]


def test_fetch_unknown_topic_and_partition(conn, ten):
    # obs: fetch unknown topic by name
    assert _part(fetch(conn, "bad-input-nope", 0)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # obs: fetch partition 3 of a 1-partition topic (by name)
    assert _part(fetch(conn, ten[0], 0, partition=3)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # obs: fetch unknown topic id (v16; top-level ErrorCode=0)
    p = _part(fetch(conn, "", 0, version=16, topic_id=uuid.uuid4()))
    assert p.error_code == ErrorCode.UNKNOWN_TOPIC_ID
    # obs: fetch partition 3 of a 1-partition topic (by topic id)
    p = _part(fetch(conn, "", 0, version=16, topic_id=ten[1], partition=3))
    assert p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # obs: fetch offset 11 beyond end (by topic id)
    p = _part(fetch(conn, "", 11, version=16, topic_id=ten[1]))
    assert (p.error_code, p.high_watermark, p.log_start_offset) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1, -1)


def test_fetch_leader_epoch_too_high(conn, ten):
    # obs: fetch with CurrentLeaderEpoch 7 (partition leader epoch is 0)
    assert _part(fetch(conn, ten[0], 5, leader_epoch=7)).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH


@pytest.mark.parametrize("session_id,session_epoch", [(12345, 3), (0, 5)])
def test_fetch_unknown_session(conn, ten, session_id, session_epoch):
    # obs: fetch with SessionId 12345 / SessionEpoch 3 (no such fetch session)
    # obs: fetch with SessionId 0 / SessionEpoch 5
    resp = fetch(conn, ten[0], 5, session_id=session_id, session_epoch=session_epoch)
    assert (resp.error_code, resp.responses) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, [])


def test_fetch_sessionless(conn, ten):
    # obs: fetch with SessionId 0 SessionEpoch -1 (sessionless full fetch)
    resp = fetch(conn, ten[0], 5, session_id=0, session_epoch=-1)
    assert (resp.error_code, resp.session_id) == (0, 0)


def test_fetch_returns_one_whole_batch_beyond_the_limits(conn, ten):
    # KIP-74: the first batch comes whole even when larger than the limits
    req = fetch_req(ten[0], 5)
    req.topics[0].partitions[0].partition_max_bytes = 1
    req.max_bytes = 1
    p = _part(conn.call(req, FETCH_V))
    assert [o for o, _k, _v in record_values(p.records)] == [5]


def test_fetch_with_an_unknown_topic_still_waits(conn, ten):
    # Kafka 3.9 (checked): partitions the metadata does not know are answered
    # after the others and do not end the wait (a fetch session holding a
    # deleted topic would otherwise make its consumer spin)
    req = fetch_req("bad-input-nope", 0, max_wait_ms=600)
    req.topics.append(fetch_req(ten[0], 10).topics[0])  # at the high watermark: waits
    started = time.monotonic()
    resp = conn.call(req, FETCH_V)
    assert time.monotonic() - started >= 0.5
    assert [(t.topic, t.partitions[0].error_code) for t in resp.responses] == [
        (ten[0], 0), ("bad-input-nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]


def test_fetch_long_poll_wakes_on_produce(broker, conn):
    import threading
    name = "bad-input-long-poll"
    create_topic(broker.bootstrap, name)
    result = {}

    def poll():
        with WireClient(broker.bootstrap) as c:
            started = time.monotonic()
            result["resp"] = c.call(fetch_req(name, 0, max_wait_ms=10_000), FETCH_V)
            result["took"] = time.monotonic() - started

    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.3)
    assert "resp" not in result, "the fetch should wait for data"
    assert produce(conn, name, batch()).error_code == 0
    t.join(10)
    assert result["took"] < 3
    assert [o for o, _k, _v in record_values(_part(result["resp"]).records)] == [0]


# -- ListOffsets ------------------------------------------------------------------------------

def test_list_offsets_unknown(conn, ten):
    # obs: list offsets of unknown topic (latest)
    p = list_offset(conn, "bad-input-nope", -1)
    assert (p.error_code, p.offset, p.timestamp, p.leader_epoch) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1)
    # obs: list offsets of partition 4 of a 1-partition topic
    p = list_offset(conn, ten[0], -1, partition=4)
    assert (p.error_code, p.offset) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)


def test_list_offsets_special_timestamps(conn, ten):
    topic, _tid, now = ten
    # obs: list offsets latest (-1) after delete-records
    p = list_offset(conn, topic, -1)
    assert (p.error_code, p.offset, p.timestamp, p.leader_epoch) == (0, 10, -1, 0)
    # obs: list offsets earliest (-2) after delete-records to 5
    p = list_offset(conn, topic, -2)
    assert (p.error_code, p.offset, p.timestamp, p.leader_epoch) == (0, 5, -1, 0)
    # obs: list offsets max-timestamp (-3)
    p = list_offset(conn, topic, -3)
    assert (p.error_code, p.offset, p.timestamp, p.leader_epoch) == (0, 9, now + 1000, 0)
    # obs: list offsets earliest-local (-4)
    p = list_offset(conn, topic, -4)
    assert (p.error_code, p.offset, p.timestamp, p.leader_epoch) == (0, 5, -1, 0)
    # obs: list offsets timestamp in the future
    p = list_offset(conn, topic, now + 3_600_000)
    assert (p.error_code, p.offset, p.timestamp, p.leader_epoch) == (0, -1, -1, -1)
    # obs: list offsets timestamp -5 (earliest-pending-upload, needs v9)
    p = list_offset(conn, topic, -5)
    assert (p.error_code, p.offset) == (0, -1)
    # a timestamp between records finds the next one at or after it (not deleted ones)
    p = list_offset(conn, topic, now - 10_000 + 6)
    assert (p.error_code, p.offset, p.timestamp) == (0, 6, now - 10_000 + 6)
    p = list_offset(conn, topic, now - 20_000)
    assert (p.error_code, p.offset) == (0, 5)


def test_list_offsets_leader_epoch_too_high(conn, ten):
    # obs: list offsets with CurrentLeaderEpoch 7 (leader epoch is 0)
    p = list_offset(conn, ten[0], -1, leader_epoch=7)
    assert (p.error_code, p.offset, p.timestamp, p.leader_epoch) == (ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1, -1)


def test_list_offsets_duplicate_partition(conn, ten):
    from kproto.messages.list_offsets_request import ListOffsetsRequest
    part = ListOffsetsRequest.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)
    req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=ten[0], partitions=[part, part])])
    resp = conn.call(req, LIST_OFFSETS_V)
    # Kafka: a partition asked twice is INVALID_REQUEST (both entries)
    assert [p.error_code for p in resp.topics[0].partitions] == [ErrorCode.INVALID_REQUEST] * 2


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_offset_for_leader_epoch(conn, ten, version):
    from kproto.messages.offset_for_leader_epoch_request import OffsetForLeaderEpochRequest as R
    req = R(replica_id=-1, topics=[R.OffsetForLeaderTopic(topic=ten[0], partitions=[
        R.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0),
        R.OffsetForLeaderPartition(partition=7, current_leader_epoch=-1, leader_epoch=0)])])
    parts = conn.call(req, version).topics[0].partitions
    assert (parts[0].error_code, parts[0].end_offset) == (0, 10)
    if version >= 1:
        assert parts[0].leader_epoch == 0
    assert parts[1].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -- Metadata ---------------------------------------------------------------------------------

@pytest.mark.parametrize("auto_create", [False, True])
def test_metadata_invalid_topic_name(conn, auto_create):
    # obs: metadata for invalid topic name "bad/name" (and with AllowAutoTopicCreation=true)
    t = metadata(conn, "bad/name", auto_create=auto_create)
    assert (t.error_code, t.partitions) == (ErrorCode.INVALID_TOPIC_EXCEPTION, [])


def test_metadata_unknown_topic_id(conn):
    # Kafka 3.9 (KafkaApis.getTopicMetadata): an unknown id at v12 is UNKNOWN_TOPIC_ID with a null name
    tid = uuid.uuid4()
    t = metadata(conn, None, topic_id=tid)
    assert (t.error_code, t.name, t.topic_id, t.partitions) == (ErrorCode.UNKNOWN_TOPIC_ID, None, tid, [])


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_topic_id_before_v12_is_invalid_request(conn, ten, version):
    # Kafka 3.9 KafkaApis: "Topic IDs are not supported in requests for version 10/11"
    t = metadata(conn, None, topic_id=ten[1], version=version)
    assert (t.error_code, t.name, t.partitions) == (ErrorCode.INVALID_REQUEST, "", [])
    assert api_versions_ok(conn)


def test_metadata_known_topic_id(conn, ten):
    t = metadata(conn, None, topic_id=ten[1])
    assert (t.error_code, t.name, len(t.partitions)) == (0, ten[0], 1)


@pytest.mark.parametrize("version", [12, 9, 4])
def test_metadata_auto_creation(conn, version):
    name = f"bad-input-auto-{version}"
    # obs: metadata for unknown topic, AllowAutoTopicCreation=false
    t = metadata(conn, name, auto_create=False, version=version)
    assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # obs: metadata for unknown topic, AllowAutoTopicCreation=true (Metadata v12 / v9 / v4)
    t = metadata(conn, name, auto_create=True, version=version)
    assert (t.error_code, t.partitions) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
    # obs: metadata for the auto-created topic after ~0.25s (partitions=1, num.partitions=1)
    deadline = time.monotonic() + 5
    while True:
        t = metadata(conn, name, auto_create=False, version=version)
        if t.error_code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert (t.error_code, len(t.partitions)) == (0, 1)


# -- DeleteRecords ----------------------------------------------------------------------------

def test_delete_records_errors(conn, ten):
    # obs: delete records up to offset 50 (beyond high watermark 10)
    d = delete_records(conn, ten[0], 50)
    assert (d.error_code, d.low_watermark) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    # obs: delete records on unknown topic
    d = delete_records(conn, "bad-input-nope", 1)
    assert (d.error_code, d.low_watermark) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
    assert list_offset(conn, ten[0], -2).offset == 5


def test_delete_records_refused_on_internal_and_compacted_topics(broker, conn):
    from kproto.messages.create_topics_request import CreateTopicsRequest
    create_topic(broker.bootstrap, "__consumer_offsets")
    # ReplicaManager.deleteRecordsOnLocalLog: "Cannot delete records of internal topic"
    assert delete_records(conn, "__consumer_offsets", 0).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    name = "bad-input-compacted"
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, assignments=[],
        configs=[CreateTopicsRequest.CreatableTopicConfig(name="cleanup.policy", value="compact")])])
    assert conn.call(req, 7).topics[0].error_code == 0
    create_topic(broker.bootstrap, name)
    assert produce(conn, name, batch()).error_code == 0
    # Partition.deleteRecordsOnLeader: "can not be deleted due to the configured policy"
    d = delete_records(conn, name, 1)
    assert (d.error_code, d.low_watermark) == (ErrorCode.POLICY_VIOLATION, -1)


# -- and nothing was lost ---------------------------------------------------------------------

def test_stored_data_is_intact(broker, guarded):
    name, written = guarded
    with WireClient(broker.bootstrap) as c:
        p = _part(fetch(c, name, 0))
        assert p.high_watermark == len(written)
        got = record_values(p.records)
    assert got == written
    assert broker.alive()

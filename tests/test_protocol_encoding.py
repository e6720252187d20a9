"""Encoding rules of the generated codec that random round trips cannot see:
ignorable vs non-ignorable fields, tagged fields, nullable structs, header
versions, string limits and FileRegion records."""
from __future__ import annotations

import os
import struct
import uuid

import pytest

from kproto._codec import DecodeError, EncodeError, FileRegion
from kproto.api import (
    APIS, ApiKey, RequestHeader, ResponseHeader, decode_request, decode_response,
    encode_request, request_header_version, response_header_version,
)
from kproto.messages.api_versions_response import ApiVersionsResponse
from kproto.messages.consumer_group_heartbeat_response import ConsumerGroupHeartbeatResponse
from kproto.messages.controlled_shutdown_request import ControlledShutdownRequest
from kproto.messages.describe_topic_partitions_request import DescribeTopicPartitionsRequest
from kproto.messages.fetch_request import FetchRequest
from kproto.messages.fetch_response import FetchResponse
from kproto.messages.join_group_request import JoinGroupRequest
from kproto.messages.metadata_request import MetadataRequest
from kproto.messages.produce_response import ProduceResponse


def uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# ---------------------------------------------------------------------------
# ignorable / non-ignorable fields

def test_non_ignorable_field_with_a_value_its_version_lacks():
    # AllowAutoTopicCreation (4+, default true) is not ignorable
    with pytest.raises(EncodeError, match="AllowAutoTopicCreation cannot be encoded at version 3"):
        MetadataRequest(topics=None, allow_auto_topic_creation=False).encode(3)
    # GroupInstanceId (5+, default null) is not ignorable
    with pytest.raises(EncodeError, match="GroupInstanceId"):
        JoinGroupRequest(group_id="g", group_instance_id="static").encode(4)
    # ReplicaId exists up to v14 only; from v15 it lives in ReplicaState
    with pytest.raises(EncodeError, match="ReplicaId cannot be encoded at version 15"):
        FetchRequest(replica_id=5).encode(15)


def test_non_ignorable_field_at_its_default_is_fine():
    assert MetadataRequest(topics=None).encode(3) == b"\xff\xff\xff\xff"
    FetchRequest(replica_id=-1).encode(15)
    JoinGroupRequest(group_id="g").encode(4)


def test_non_strict_encoding_drops_what_the_version_cannot_carry():
    # a broker answers in the client's version even if the handler filled newer fields
    req = JoinGroupRequest(group_id="g", group_instance_id="static")
    assert req.encode(4, strict=False) == JoinGroupRequest(group_id="g").encode(4)
    out, regions = bytearray(), []
    MetadataRequest(topics=None, allow_auto_topic_creation=False).encode_into(out, 3, regions, strict=False)
    assert bytes(out) == b"\xff\xff\xff\xff" and regions == []


def test_non_ignorable_nested_and_tagged_fields():
    P = ProduceResponse
    # CurrentLeader (tagged, 10+) is not ignorable: a leader hint cannot go to v9
    resp = P(responses=[P.TopicProduceResponse(name="t", partition_responses=[
        P.PartitionProduceResponse(current_leader=P.LeaderIdAndEpoch(leader_id=2, leader_epoch=5))])])
    resp.encode(10)
    with pytest.raises(EncodeError, match="CurrentLeader cannot be encoded at version 9"):
        resp.encode(9)
    with pytest.raises(EncodeError, match="NodeEndpoints"):
        P(node_endpoints=[P.NodeEndpoint(node_id=1, host="h", port=1)]).encode(9)


def test_ignorable_fields_are_dropped():
    P = ProduceResponse
    part = P.PartitionProduceResponse(index=3, error_code=0, base_offset=42, log_append_time_ms=1700,
                                      log_start_offset=7, error_message="ignored below v8")
    resp = P(responses=[P.TopicProduceResponse(name="t", partition_responses=[part])], throttle_time_ms=250)
    plain = P(responses=[P.TopicProduceResponse(name="t", partition_responses=[
        P.PartitionProduceResponse(index=3, base_offset=42)])])
    # v0 has neither ThrottleTimeMs, LogAppendTimeMs, LogStartOffset nor ErrorMessage
    assert resp.encode(0) == plain.encode(0)
    back = P.decode(resp.encode(0), 0)
    assert back.throttle_time_ms == 0
    assert back.responses[0].partition_responses[0].log_start_offset == -1
    assert back.responses[0].partition_responses[0].error_message is None
    # and each appears from its own version on
    assert P.decode(resp.encode(1), 1).throttle_time_ms == 250
    assert P.decode(resp.encode(5), 5).responses[0].partition_responses[0].log_start_offset == 7
    # FetchRequest IsolationLevel (4+) is ignorable too
    assert FetchRequest(isolation_level=1).encode(3) == FetchRequest().encode(3)


# ---------------------------------------------------------------------------
# tagged fields

def test_known_tagged_fields_are_written_only_when_not_default():
    body = ApiVersionsResponse(api_keys=[]).encode(3)
    assert body == b"\x00\x00" + b"\x01" + b"\x00\x00\x00\x00" + b"\x00"   # no tags
    # FinalizedFeaturesEpoch is tag 1 (default -1)
    body = ApiVersionsResponse(api_keys=[], finalized_features_epoch=7).encode(3)
    assert body.endswith(b"\x01" + b"\x01" + b"\x08" + struct.pack(">q", 7))
    # several tags go out in ascending tag order
    body = ApiVersionsResponse(api_keys=[], zk_migration_ready=True, supported_features=[
        ApiVersionsResponse.SupportedFeatureKey(name="f", min_version=1, max_version=2)]).encode(3)
    tags = body[7:]
    assert tags[0] == 2 and tags[1] == 0                     # two tags, the first is 0
    assert tags.endswith(b"\x03\x01\x01")                    # tag 3, 1 byte, true
    assert ApiVersionsResponse.decode(body, 3).zk_migration_ready is True


def test_tagged_struct_field_written_only_when_not_default():
    F = FetchResponse

    def response(leader):
        return F(responses=[F.FetchableTopicResponse(topic_id=uuid.UUID(int=1), partitions=[
            F.PartitionData(partition_index=0, records=b"", current_leader=leader)])])

    plain = response(F.LeaderIdAndEpoch())            # the default: not written
    hinted = response(F.LeaderIdAndEpoch(leader_id=3, leader_epoch=9))
    a, b = plain.encode(13), hinted.encode(13)
    # tag 1, size 9: int32 leader, int32 epoch, empty tag section
    assert len(b) - len(a) == 1 + 1 + 9
    assert b"\x01\x01\x09" + struct.pack(">ii", 3, 9) + b"\x00" in b
    assert F.decode(b, 13).responses[0].partitions[0].current_leader == F.LeaderIdAndEpoch(3, 9)
    assert F.decode(a, 13) == plain


def test_tagged_field_nullable_string_and_struct_in_a_request():
    req = FetchRequest(cluster_id="cluster-a", replica_state=FetchRequest.ReplicaState(replica_id=1, replica_epoch=4),
                       max_wait_ms=500, topics=[])
    back = FetchRequest.decode(req.encode(15), 15)
    assert back.cluster_id == "cluster-a" and back.replica_state.replica_epoch == 4
    assert FetchRequest.decode(FetchRequest().encode(15), 15).cluster_id is None


def _with_tags(body_without_tags: bytes, tags) -> bytes:
    out = bytearray(body_without_tags)
    out += uvarint(len(tags))
    for tag, data in tags:
        out += uvarint(tag) + uvarint(len(data)) + data
    return bytes(out)


def test_unknown_tags_are_kept_and_written_back():
    # ApiVersionsResponse v3: error, api_keys (one entry carrying an unknown
    # tag 9), throttle, then the top-level tags: known 1, unknown 5 and 300
    entry = struct.pack(">hhh", 18, 0, 4) + uvarint(1) + uvarint(9) + uvarint(2) + b"hi"
    head = b"\x00\x00" + uvarint(2) + entry + struct.pack(">i", 0)
    body = _with_tags(head, [(1, struct.pack(">q", 11)), (5, b"five"), (300, b"\x00" * 130)])
    msg = ApiVersionsResponse.decode(body, 3)
    assert msg.finalized_features_epoch == 11
    assert msg._unknown == [(5, b"five"), (300, b"\x00" * 130)]
    assert msg.api_keys[0]._unknown == [(9, b"hi")]
    assert msg.encode(3) == body                      # byte for byte, known and unknown merged in order
    # unknown tag 4 among known ones (0 SupportedFeatures, 3 ZkMigrationReady) keeps its place
    feature = uvarint(2) + uvarint(2) + b"f" + struct.pack(">hh", 1, 2) + b"\x00"
    body2 = _with_tags(head, [(0, feature), (3, b"\x01"), (4, b"new")])
    msg2 = ApiVersionsResponse.decode(body2, 3)
    assert msg2.zk_migration_ready is True and msg2.supported_features[0].name == "f"
    assert msg2._unknown == [(4, b"new")]
    assert msg2.encode(3) == body2


def test_known_tagged_field_sent_at_its_default_is_not_written_back():
    head = b"\x00\x00" + uvarint(1) + struct.pack(">i", 0)
    # FinalizedFeaturesEpoch -1 and an empty FinalizedFeatures (tag 2) are the defaults
    body = _with_tags(head, [(1, struct.pack(">q", -1)), (2, b"\x01")])
    msg = ApiVersionsResponse.decode(body, 3)
    assert msg.finalized_features_epoch == -1 and msg.finalized_features == []
    assert msg.encode(3) == head + b"\x00"


def test_unknown_tags_in_request_header_v2():
    h = RequestHeader(request_api_key=ApiKey.METADATA, request_api_version=12, correlation_id=5, client_id="c")
    raw = _with_tags(h.encode(2)[:-1], [(42, b"x")])
    frame = raw + MetadataRequest(topics=[]).encode(12)
    header, _req = decode_request(frame)
    assert header._unknown == [(42, b"x")]
    assert header.encode(2) == raw


# ---------------------------------------------------------------------------
# nullable structs

def test_nullable_struct_field():
    C = ConsumerGroupHeartbeatResponse
    empty = C(member_id="m", member_epoch=3, heartbeat_interval_ms=5000, assignment=None)
    data = empty.encode(0)
    assert data.endswith(b"\xff\x00")                    # null marker, then no tags
    assert C.decode(data, 0).assignment is None
    given = C(member_id="m", member_epoch=3, assignment=C.Assignment(topic_partitions=[
        C.TopicPartitions(topic_id=uuid.UUID(int=7), partitions=[0, 2])]))
    data = given.encode(0)
    back = C.decode(data, 0)
    assert back.assignment.topic_partitions[0].partitions == [0, 2]
    assert back == given
    # any non-negative marker means "present", as in Kafka's readers
    marker = data.index(b"\x01" + uvarint(2) + uuid.UUID(int=7).bytes)
    assert C.decode(data[:marker] + b"\x00" + data[marker + 1:], 0) == given


def test_nullable_struct_in_a_request():
    D = DescribeTopicPartitionsRequest
    req = D(topics=[D.TopicRequest(name="a")], response_partition_limit=100, cursor=None)
    assert D.decode(req.encode(0), 0).cursor is None
    req.cursor = D.Cursor(topic_name="a", partition_index=3)
    assert D.decode(req.encode(0), 0).cursor == D.Cursor(topic_name="a", partition_index=3)


def test_null_for_a_non_nullable_struct_is_an_encode_error():
    with pytest.raises(EncodeError):
        FetchRequest(replica_state=None).encode(15)


# ---------------------------------------------------------------------------
# header versions

def test_api_versions_response_header_is_always_v0():
    for v in range(0, 5):
        assert response_header_version(ApiKey.API_VERSIONS, v) == 0
    # ... though its body is flexible from v3 (and the request header too)
    assert request_header_version(ApiKey.API_VERSIONS, 3) == 2
    body = ApiVersionsResponse(api_keys=[ApiVersionsResponse.ApiVersion(api_key=0, min_version=0, max_version=11)])
    frame = ResponseHeader(correlation_id=77).encode(0) + body.encode(3)
    assert frame[:4] == struct.pack(">i", 77) and frame[4:6] == b"\x00\x00"  # no header tag byte
    assert decode_response(frame, ApiKey.API_VERSIONS, 3) == (77, body)


def test_controlled_shutdown_v0_request_header_has_no_client_id():
    assert request_header_version(ApiKey.CONTROLLED_SHUTDOWN, 0) == 0
    assert request_header_version(ApiKey.CONTROLLED_SHUTDOWN, 1) == 1
    frame = encode_request(ControlledShutdownRequest(broker_id=3), 0, 9, client_id="ignored")
    assert frame == struct.pack(">ihhii", 12, ApiKey.CONTROLLED_SHUTDOWN, 0, 9, 3)
    header, req = decode_request(frame[4:])
    assert header.correlation_id == 9 and req.broker_id == 3


def test_header_versions_follow_flexibility():
    for key, (name, _rq, _rs, lo, hi, req_flex, resp_flex) in APIS.items():
        for v in (lo, hi):
            want_req = 2 if req_flex is not None and v >= req_flex else 1
            if key == ApiKey.CONTROLLED_SHUTDOWN and v == 0:
                want_req = 0
            assert request_header_version(key, v) == want_req, (name, v)
            if key != ApiKey.API_VERSIONS:
                want_resp = 1 if resp_flex is not None and v >= resp_flex else 0
                assert response_header_version(key, v) == want_resp, (name, v)
    assert request_header_version(ApiKey.METADATA, 8) == 1
    assert request_header_version(ApiKey.METADATA, 9) == 2
    assert response_header_version(ApiKey.METADATA, 9) == 1


def test_request_header_v2_client_id_is_a_classic_string():
    frame = encode_request(MetadataRequest(topics=[]), 12, 1, client_id="abc")
    # size, key, version, correlation id, int16 length 3 (not a varint), "abc", tags
    assert frame[4:18] == struct.pack(">hhih", 3, 12, 1, 3) + b"abc" + b"\x00"


# ---------------------------------------------------------------------------
# string limits and unencodable text

def test_strings_longer_than_32767_bytes_cannot_be_encoded():
    long = "x" * 32768
    for version in (5, 6):                      # classic and compact
        with pytest.raises(EncodeError, match="longer than 32767"):
            JoinGroupRequest(group_id=long).encode(version)
    JoinGroupRequest(group_id="x" * 32767).encode(6)


def test_compact_string_longer_than_32767_bytes_is_refused():
    # JoinGroup v6 with a 40000-byte compact GroupId
    body = uvarint(40001) + b"g" * 40000 + bytes(64)
    with pytest.raises(DecodeError, match="invalid length"):
        JoinGroupRequest.decode(body, 6)


def test_unencodable_text_is_an_encode_error():
    with pytest.raises(EncodeError, match="UTF-8"):
        JoinGroupRequest(group_id="\udc80").encode(5)


def test_out_of_range_integers_are_encode_errors():
    with pytest.raises(EncodeError):
        JoinGroupRequest(session_timeout_ms=2**31).encode(5)
    with pytest.raises(EncodeError):
        JoinGroupRequest(session_timeout_ms=None).encode(5)


# ---------------------------------------------------------------------------
# FileRegion records

@pytest.fixture
def segment(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    data = bytes(range(256)) * 40
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    yield fd, data
    os.close(fd)


def _fetch_response(records_a, records_b):
    F = FetchResponse
    return F(responses=[F.FetchableTopicResponse(topic="t", topic_id=uuid.UUID(int=5), partitions=[
        F.PartitionData(partition_index=0, high_watermark=10, records=records_a),
        F.PartitionData(partition_index=1, high_watermark=20, records=records_b)])])


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_file_regions_are_left_out_and_located(segment, version):
    fd, data = segment
    a, b = FileRegion(fd, 100, 1000), FileRegion(fd, 5000, 4000)
    expected = _fetch_response(data[100:1100], data[5000:9000]).encode(version)

    out = bytearray(b"\x00\x00\x00\x00prefix")   # encode_into appends; positions are into out
    regions = []
    _fetch_response(a, b).encode_into(out, version, regions)
    assert [r for _, r in regions] == [a, b]
    assert len(out) == len(b"\x00\x00\x00\x00prefix") + len(expected) - 5000   # no record bytes copied
    # splicing the file bytes in at the recorded positions gives the full encoding
    spliced, last = bytearray(), 0
    for pos, region in regions:
        spliced += out[last:pos] + region.read()
        last = pos
    spliced += out[last:]
    assert bytes(spliced[10:]) == expected


def test_file_regions_are_read_without_a_regions_list(segment):
    fd, data = segment
    resp = _fetch_response(FileRegion(fd, 0, 256), None)
    assert resp.encode(12) == _fetch_response(data[:256], None).encode(12)
    assert FileRegion(fd, 0, 256) == data[:256]
    assert len(FileRegion(fd, 0, 256)) == 256

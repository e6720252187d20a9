"""raft/convert.py: every raft message survives a round trip through the
real generated codecs (whole frames, every version the codec has), and log
entries through Kafka record batches."""
import pytest

from kproto import records as rec
from kproto.api import (
    ResponseHeader, decode_request, decode_response, encode_request, response_header_version,
    version_range,
)
from kproto.messages.describe_quorum_response import DescribeQuorumResponse
from kproto.messages.leader_change_message import LeaderChangeMessage
from raft import convert
from raft import messages as m
from raft.node import leader_change_data

ENTRIES = (
    m.Entry(10, 3, leader_change_data(2, (1, 2, 3)), control=True),
    m.Entry(11, 3, b"topic-record-1", batch_end=False),   # one proposal of two records
    m.Entry(12, 3, b""),
    m.Entry(13, 4, leader_change_data(1, (1, 2, 3)), control=True),
    m.Entry(14, 4, b"x" * 300),
)


def _request_round_trip(msg, version, dst=7):
    kreq = convert.to_request(msg, cluster_id="abc-cluster", dst=dst, version=version)
    frame = encode_request(kreq, version, correlation_id=42)
    header, decoded = decode_request(frame[4:])
    assert header.correlation_id == 42 and header.request_api_version == version
    return convert.from_request(decoded), decoded


def _response_round_trip(msg, api_key, version, request=None):
    kresp = convert.to_response(msg, timestamp_ms=1700000000000)
    out = bytearray()
    ResponseHeader(correlation_id=9).encode_into(out, response_header_version(api_key, version))
    kresp.encode_into(out, version)
    corr, decoded = decode_response(bytes(out), api_key, version)
    assert corr == 9
    return convert.from_response(decoded, request)


VOTE_KEY = 52

REQUESTS = [
    m.VoteRequest(5, 2, 4, 1234),
    m.BeginQuorumEpochRequest(5, 2),
    m.EndQuorumEpochRequest(5, 2, (3, 1)),
    m.FetchRequest(3, 5, 1234, 4),
    m.FetchSnapshotRequest(3, 5, m.SnapshotId(1000, 4), 65536),
]


@pytest.mark.parametrize("msg", REQUESTS, ids=lambda x: type(x).__name__)
def test_requests_round_trip_at_every_version(msg):
    api_key = convert.to_request(msg).API_KEY
    lo, hi = version_range(api_key)
    if isinstance(msg, m.FetchRequest):
        lo = 12  # LastFetchedEpoch and CurrentLeaderEpoch exist from v12 (KRaft's minimum)
    for version in range(lo, hi + 1):
        back, decoded = _request_round_trip(msg, version)
        assert back == msg, version


def test_vote_v1_names_the_voter_and_the_cluster():
    _, decoded = _request_round_trip(REQUESTS[0], 1, dst=3)
    assert decoded.voter_id == 3 and decoded.cluster_id == "abc-cluster"
    p = decoded.topics[0].partitions[0]
    assert decoded.topics[0].topic_name == "__cluster_metadata" and p.partition_index == 0


def test_a_pre_vote_travels_as_vote_v2():
    """KIP-996: the candidate's pre-vote is Vote v2's PreVote; the answer is a pre-vote
    answer because of the request it answers (the response has no such field)."""
    pre = m.VoteRequest(5, 2, 4, 1234, pre_vote=True)
    back, decoded = _request_round_trip(pre, 2, dst=3)
    assert back == pre and decoded.topics[0].partitions[0].pre_vote is True
    with pytest.raises(ValueError, match="Vote v2"):
        convert.to_request(pre, "abc-cluster", dst=3, version=1)
    answer = _response_round_trip(m.VoteResponse(0, 4, -1, True, pre_vote=True), VOTE_KEY, 2, request=pre)
    assert answer == m.VoteResponse(0, 4, -1, True, pre_vote=True)


def test_fetch_uses_the_metadata_topic_id_and_replica_state():
    _, decoded = _request_round_trip(REQUESTS[3], 17)
    assert str(decoded.topics[0].topic_id) == "00000000-0000-0000-0000-000000000001"
    assert decoded.replica_state.replica_id == 3
    _, old = _request_round_trip(REQUESTS[3], 13)
    assert old.replica_id == 3


RESPONSES = [
    (m.VoteResponse(0, 5, -1, True), 52),
    (m.VoteResponse(m.FENCED_LEADER_EPOCH, 7, 3, False), 52),
    (m.BeginQuorumEpochResponse(0, 5, 2), 53),
    (m.EndQuorumEpochResponse(m.FENCED_LEADER_EPOCH, 6, 1), 54),
    (m.FetchSnapshotResponse(0, 5, 2, m.SnapshotId(1000, 4), 70000, 65536, b"chunk" * 10), 59),
    (m.FetchSnapshotResponse(m.SNAPSHOT_NOT_FOUND, 5, 2, None), 59),
]


@pytest.mark.parametrize("msg,api_key", RESPONSES, ids=lambda x: getattr(x, "__name__", ""))
def test_responses_round_trip_at_every_version(msg, api_key):
    lo, hi = version_range(api_key)
    for version in range(lo, hi + 1):
        assert _response_round_trip(msg, api_key, version) == msg, version


@pytest.mark.parametrize("resp", [
    m.FetchResponse(0, 4, 2, 12, 10, ENTRIES, 5),
    m.FetchResponse(0, 4, 2, 12, 14, (), 5, diverging=(3, 12)),
    m.FetchResponse(0, 4, 2, 12, 2, (), 5, snapshot_id=m.SnapshotId(5, 2)),
    m.FetchResponse(m.FENCED_LEADER_EPOCH, 4, 2, 12, 0, (), 5),
    m.FetchResponse(m.NOT_LEADER_OR_FOLLOWER, 4, -1, 12, 0, (), 5),
])
def test_fetch_responses_round_trip(resp):
    req = m.FetchRequest(3, 4, resp.fetch_offset, 3)
    for version in (12, 13, 16, 17):
        assert _response_round_trip(resp, 1, version, request=req) == resp, version


def test_entries_are_kafka_batches_with_the_epoch_as_partition_leader_epoch():
    buf = convert.entries_to_records(ENTRIES, timestamp_ms=1)
    headers = [h for _, h in rec.iter_batch_headers(buf, validate=True)]
    assert [(h.base_offset, h.partition_leader_epoch, h.is_control, h.record_count)
            for h in headers] == [(10, 3, True, 1), (11, 3, False, 2), (13, 4, True, 1),
                                  (14, 4, False, 1)]
    assert convert.records_to_entries(buf) == ENTRIES


def test_leader_change_is_kafkas_control_record():
    buf = convert.entries_to_records(ENTRIES[:1])
    (r,) = list(rec.iter_records(buf))
    assert rec.control_record_type(r) == 2  # LEADER_CHANGE
    msg = LeaderChangeMessage.decode(r.value, 0)
    assert msg.leader_id == 2 and [v.voter_id for v in msg.voters] == [1, 2, 3]


def test_a_truncated_tail_batch_is_dropped_and_a_corrupt_one_refused():
    buf = convert.entries_to_records(ENTRIES)
    assert convert.records_to_entries(buf[:-10]) == ENTRIES[:4]
    bad = bytearray(buf)
    bad[70] ^= 0xFF
    with pytest.raises(rec.CorruptRecordError):
        convert.records_to_entries(bytes(bad))


def test_describe_quorum_response_encodes():
    q = {"leader_id": 2, "leader_epoch": 5, "high_watermark": 99,
         "current_voters": [{"replica_id": 1, "log_end_offset": 99, "last_fetch_timestamp": 10,
                             "last_caught_up_timestamp": 10}],
         "observers": [{"replica_id": 100, "log_end_offset": 50, "last_fetch_timestamp": 9,
                        "last_caught_up_timestamp": -1}]}
    kresp = convert.describe_quorum_response(q)
    for version in (0, 1, 2):
        back = DescribeQuorumResponse.decode(kresp.encode(version), version)
        p = back.topics[0].partitions[0]
        assert (p.leader_id, p.leader_epoch, p.high_watermark) == (2, 5, 99)
        assert [r.replica_id for r in p.current_voters] == [1]
        assert p.observers[0].log_end_offset == 50


def test_not_a_raft_message_is_refused():
    with pytest.raises(TypeError):
        convert.to_request(m.VoteResponse(0, 1, 1, True))
    with pytest.raises(TypeError):
        convert.to_response(m.VoteRequest(1, 1, 1, 1))


def test_a_node_conversation_through_the_codecs():
    """Two nodes that only exchange encoded frames still elect and replicate."""
    import random
    from raft.node import RaftConfig, RaftNode
    nodes = {i: RaftNode(RaftConfig(i, (1, 2)), random.Random(i), 0) for i in (1, 2)}
    pending = {}   # correlation -> raft request (to decode a Fetch response)
    now = 0
    for _ in range(300):
        now += 50
        for n in nodes.values():
            n.tick(now)
        for i, n in nodes.items():
            r = n.ready()
            if r.sync_to:
                n.durable(*r.sync_to)
            for env in r.messages:
                if isinstance(env.msg, m.REQUESTS):
                    newest = version_range(convert.to_request(env.msg).API_KEY)[1]
                    back, _ = _request_round_trip(env.msg, newest)
                    pending[(env.src, env.correlation_id)] = back
                else:
                    req = pending.get((env.dst, env.correlation_id))
                    key = {m.VoteResponse: 52, m.BeginQuorumEpochResponse: 53,
                           m.EndQuorumEpochResponse: 54, m.FetchResponse: 1,
                           m.FetchSnapshotResponse: 59}[type(env.msg)]
                    back = _response_round_trip(env.msg, key, version_range(key)[1], req)
                nodes[env.dst].step(m.Envelope(env.src, env.dst, env.correlation_id, back), now)
        leader = next((n for n in nodes.values() if n.role == "leader"), None)
        if leader is not None and leader.end_offset < 5:
            leader.propose([b"rec-%d" % now])
    assert leader is not None
    follower = next(n for n in nodes.values() if n is not leader)
    assert follower.hwm == leader.hwm >= 5
    assert [e.data for e in follower.entries] == [e.data for e in leader.entries]


def test_start_of_epoch_records_are_one_control_batch():
    """LeaderChange, KRaftVersion and VotersRecord of a dynamic quorum's first epoch: one control batch
    (as Kafka's leader writes them, and as `storage format --standalone`'s first start did), read back
    to the same entries."""
    from raft.messages import Entry, VoterInfo, kraft_version_data, voters_data
    voters = (VoterInfo(1, "AAAAAAAAAAAAAAAAAAAAAQ", (("CONTROLLER", "127.0.0.1", 9093),)),)
    entries = [Entry(0, 1, leader_change_data(1, (1,)), control=True),
               Entry(1, 1, kraft_version_data(1), control=True),
               Entry(2, 1, voters_data(voters), control=True), Entry(3, 1, b"data")]
    buf = convert.entries_to_records(entries)
    headers = [(h.base_offset, h.is_control) for _pos, h in rec.iter_batch_headers(buf)]
    assert headers == [(0, True), (3, False)]
    types = [rec.control_record_type(r) for r in rec.iter_records(buf, 0)]
    assert types == [convert.LEADER_CHANGE, convert.KRAFT_VERSION, convert.KRAFT_VOTERS]
    assert list(convert.records_to_entries(buf)) == entries

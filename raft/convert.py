"""raft/messages.py values to and from kproto's generated codecs: the KRaft
RPCs (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch and FetchSnapshot on
__cluster_metadata-0, DescribeQuorum) and log entries to and from Kafka
record batches (a leader's LeaderChange entry is a control batch with a
LeaderChangeMessage, as Kafka writes it).

No I/O: the shell encodes what to_request/to_response return with
kproto.api and decodes replies with from_request/from_response."""
from __future__ import annotations

import struct
import uuid

from kproto import records as rec
from kproto.messages import (
    begin_quorum_epoch_request as bqe_req, begin_quorum_epoch_response as bqe_resp,
    describe_quorum_response as dq_resp, end_quorum_epoch_request as eqe_req,
    end_quorum_epoch_response as eqe_resp, fetch_request as f_req,
    fetch_response as f_resp, fetch_snapshot_request as fs_req,
    fetch_snapshot_response as fs_resp, leader_change_message as lcm,
    vote_request as v_req, vote_response as v_resp,
)
from raft import messages as m

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
# Kafka's Uuid.METADATA_TOPIC_ID (AAAAAAAAAAAAAAAAAAAAAQ)
METADATA_TOPIC_ID = uuid.UUID(int=1)

# control record types (Kafka's ControlRecordType)
LEADER_CHANGE = 2
SNAPSHOT_HEADER = 3
SNAPSHOT_FOOTER = 4
KRAFT_VERSION = 5
KRAFT_VOTERS = 6
_CONTROL_KEY = struct.Struct(">hh")

# the versions a kproto shell sends (the codec's highest)
VOTE_VERSION = 2       # the newest, which the quorum shell sends
PRE_VOTE_VERSION = 2   # Vote v2 carries PreVote (KIP-996)
BEGIN_VERSION = 1
END_VERSION = 1
FETCH_VERSION = 17
FETCH_SNAPSHOT_VERSION = 1


# ------------------------------------------------------------------ records

def leader_change_record(leader_id: int, voters, granting=()) -> bytes:
    msg = lcm.LeaderChangeMessage(
        version=0, leader_id=leader_id,
        voters=[lcm.Voter(voter_id=v) for v in voters],
        granting_voters=[lcm.Voter(voter_id=v) for v in granting])
    return msg.encode(0)


def voters_record(voters):
    """A voter set (raft.messages.VoterInfo, ...) as Kafka's VotersRecord (kraft.version 0-1)."""
    from kproto.messages import voters_record as vr
    return vr.VotersRecord(version=0, voters=[
        vr.Voter(voter_id=v.node_id,
                 voter_directory_id=uuid_from_text(v.directory_id),
                 endpoints=[vr.Endpoint(name=n, host=h, port=p) for n, h, p in v.endpoints],
                 k_raft_version_feature=vr.KRaftVersionFeature(min_supported_version=0,
                                                               max_supported_version=1))
        for v in voters])


def voters_from_record(rec_) -> tuple:
    return tuple(m.VoterInfo(v.voter_id, uuid_to_text(v.voter_directory_id),
                             tuple((e.name, e.host, e.port) for e in v.endpoints))
                 for v in rec_.voters)


def uuid_from_text(text: str) -> uuid.UUID:
    """Kafka's Uuid text (base64url, no padding) to a UUID; "" is Uuid.ZERO."""
    import base64
    if not text:
        return uuid.UUID(int=0)
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


def uuid_to_text(u) -> str:
    import base64
    if u is None or u.int == 0:
        return ""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def entries_to_records(entries, timestamp_ms: int = 0) -> bytes:
    """Entries as Kafka record batches: one batch per proposal (a run of data
    entries of one epoch up to its batch_end entry, so a torn write or a
    fetch cut short drops a proposal whole), its partition leader epoch the
    entries' epoch."""
    out = bytearray()
    i = 0
    entries = list(entries)
    while i < len(entries):
        j = i
        while (j < len(entries) and entries[j].epoch == entries[i].epoch
               and entries[j].control == entries[i].control and not entries[j].control):
            j += 1
            if entries[j - 1].batch_end:
                break
        if entries[i].control and _starts_epoch_records(entries, i):
            # LeaderChange, KRaftVersion, VotersRecord: one control batch, as Kafka's leader writes them
            e = entries[i]
            records = [_control_record(x, timestamp_ms) for x in entries[i:i + 3]]
            out += rec.build_batch(records, base_offset=e.offset, control=True, partition_leader_epoch=e.epoch)
            i += 3
            continue
        if entries[i].control:
            # a LeaderChange, or a voter set change (Kafka's VotersRecord, control type KRaftVoters)
            e = entries[i]
            out += rec.build_batch([_control_record(e, timestamp_ms)], base_offset=e.offset, control=True,
                                   partition_leader_epoch=e.epoch)
            i += 1
            continue
        batch = [rec.Record(None, e.data, [], timestamp_ms) for e in entries[i:j]]
        out += rec.build_batch(batch, base_offset=entries[i].offset,
                               partition_leader_epoch=entries[i].epoch)
        i = j
    return bytes(out)


def _starts_epoch_records(entries, i: int) -> bool:
    """A LeaderChange entry followed by the kraft.version and voters entries of its epoch."""
    if i + 2 >= len(entries):
        return False
    a, b, c = entries[i:i + 3]
    return (b.control and c.control and a.epoch == b.epoch == c.epoch
            and b.data.startswith(m.KRAFT_VERSION_PREFIX) and m.parse_voters(c.data) is not None)


def _control_record(e, timestamp_ms: int):
    vs = m.parse_voters(e.data)
    if vs is not None:
        return rec.Record(_CONTROL_KEY.pack(0, KRAFT_VOTERS), voters_record(vs).encode(0), [], timestamp_ms)
    if e.data.startswith(m.KRAFT_VERSION_PREFIX):
        from kproto.messages.k_raft_version_record import KRaftVersionRecord
        level = int(e.data[len(m.KRAFT_VERSION_PREFIX):])
        return rec.Record(_CONTROL_KEY.pack(0, KRAFT_VERSION),
                          KRaftVersionRecord(version=0, k_raft_version=level).encode(0), [], timestamp_ms)
    leader, _, voters = e.data.decode().partition(":")
    value = leader_change_record(int(leader), [int(v) for v in voters.split(",") if v])
    return rec.Record(_CONTROL_KEY.pack(0, LEADER_CHANGE), value, [], timestamp_ms)


def records_to_entries(buf) -> tuple:
    """Kafka record batches back to entries (CRCs checked)."""
    if buf is None:
        return ()
    buf = bytes(buf)
    out = []
    # a fetch response may end in the middle of a batch: drop the tail
    for pos, header in rec.iter_batch_headers(buf, allow_partial_tail=True, validate=True):
        out.extend(_batch_entries(buf, header, pos))
    return tuple(out)


def _batch_entries(buf, header, pos):
    epoch = header.partition_leader_epoch
    for r in rec.iter_records(buf, pos):
        if header.is_control:
            kind = rec.control_record_type(r)
            if kind == LEADER_CHANGE:
                msg = lcm.LeaderChangeMessage.decode(r.value, 0)
                data = ("%d:%s" % (msg.leader_id, ",".join(str(v.voter_id) for v in msg.voters))
                        ).encode()
            elif kind == KRAFT_VOTERS:
                from kproto.messages import voters_record as vr
                data = m.voters_data(voters_from_record(vr.VotersRecord.decode(r.value, 0)))
            elif kind == KRAFT_VERSION:
                from kproto.messages.k_raft_version_record import KRaftVersionRecord
                data = m.kraft_version_data(KRaftVersionRecord.decode(r.value, 0).k_raft_version)
            else:
                data = bytes(r.value or b"")
            yield m.Entry(r.offset, epoch, data, control=True)
        else:
            # a batch is one proposal: only its last record ends it
            yield m.Entry(r.offset, epoch, bytes(r.value or b""), batch_end=r.offset == header.last_offset)


# ----------------------------------------------------------------- requests

def to_request(msg, cluster_id=None, dst: int = -1, version: int | None = None):
    """A raft request as the kproto request object to send (dst is the
    recipient: Vote v1 and BeginQuorumEpoch v1 name it)."""
    if isinstance(msg, m.VoteRequest):
        v = VOTE_VERSION if version is None else version
        if msg.pre_vote and v < PRE_VOTE_VERSION:
            raise ValueError(f"a pre-vote (KIP-996) needs Vote v{PRE_VOTE_VERSION}, not v{v}")
        return v_req.VoteRequest(cluster_id=cluster_id, voter_id=dst if v >= 1 else -1, topics=[
            v_req.TopicData(topic_name=METADATA_TOPIC, partitions=[v_req.PartitionData(
                partition_index=METADATA_PARTITION, replica_epoch=msg.candidate_epoch,
                replica_id=msg.candidate_id, last_offset_epoch=msg.last_offset_epoch,
                last_offset=msg.last_offset, pre_vote=msg.pre_vote)])])
    if isinstance(msg, m.BeginQuorumEpochRequest):
        v = BEGIN_VERSION if version is None else version
        return bqe_req.BeginQuorumEpochRequest(
            cluster_id=cluster_id, voter_id=dst if v >= 1 else -1, topics=[
                bqe_req.TopicData(topic_name=METADATA_TOPIC, partitions=[bqe_req.PartitionData(
                    partition_index=METADATA_PARTITION, leader_id=msg.leader_id,
                    leader_epoch=msg.leader_epoch)])])
    if isinstance(msg, m.EndQuorumEpochRequest):
        v = END_VERSION if version is None else version
        p = eqe_req.PartitionData(partition_index=METADATA_PARTITION, leader_id=msg.leader_id,
                                  leader_epoch=msg.leader_epoch)
        if v >= 1:
            p.preferred_candidates = [eqe_req.ReplicaInfo(candidate_id=c)
                                      for c in msg.preferred_successors]
        else:
            p.preferred_successors = list(msg.preferred_successors)
        return eqe_req.EndQuorumEpochRequest(cluster_id=cluster_id, topics=[
            eqe_req.TopicData(topic_name=METADATA_TOPIC, partitions=[p])])
    if isinstance(msg, m.FetchRequest):
        v = FETCH_VERSION if version is None else version
        part = f_req.FetchPartition(partition=METADATA_PARTITION,
                                    current_leader_epoch=msg.leader_epoch,
                                    fetch_offset=msg.fetch_offset,
                                    last_fetched_epoch=msg.last_fetched_epoch,
                                    partition_max_bytes=1 << 20)
        topic = f_req.FetchTopic(partitions=[part])
        if v >= 13:
            topic.topic_id = METADATA_TOPIC_ID
        else:
            topic.topic = METADATA_TOPIC
        req = f_req.FetchRequest(cluster_id=cluster_id, max_wait_ms=500, min_bytes=0,
                                 topics=[topic])
        if v >= 15:
            req.replica_state = f_req.ReplicaState(replica_id=msg.replica_id)
        else:
            req.replica_id = msg.replica_id
        return req
    if isinstance(msg, m.FetchSnapshotRequest):
        return fs_req.FetchSnapshotRequest(cluster_id=cluster_id, replica_id=msg.replica_id,
                                           topics=[fs_req.TopicSnapshot(
                                               name=METADATA_TOPIC, partitions=[
                                                   fs_req.PartitionSnapshot(
                                                       partition=METADATA_PARTITION,
                                                       current_leader_epoch=msg.leader_epoch,
                                                       snapshot_id=fs_req.SnapshotId(
                                                           end_offset=msg.snapshot_id.end_offset,
                                                           epoch=msg.snapshot_id.epoch),
                                                       position=msg.position)])])
    raise TypeError(f"not a raft request: {msg!r}")


def _only_partition(topics, what):
    if len(topics) != 1 or len(topics[0].partitions) != 1:
        raise ValueError(f"{what}: expected one topic partition")
    return topics[0].partitions[0]


def from_request(req):
    """A decoded kproto request to the raft request it carries."""
    if isinstance(req, v_req.VoteRequest):
        p = _only_partition(req.topics, "Vote")
        return m.VoteRequest(p.replica_epoch, p.replica_id, p.last_offset_epoch,
                             p.last_offset, pre_vote=bool(p.pre_vote))
    if isinstance(req, bqe_req.BeginQuorumEpochRequest):
        p = _only_partition(req.topics, "BeginQuorumEpoch")
        return m.BeginQuorumEpochRequest(p.leader_epoch, p.leader_id)
    if isinstance(req, eqe_req.EndQuorumEpochRequest):
        p = _only_partition(req.topics, "EndQuorumEpoch")
        succ = tuple(p.preferred_successors) or tuple(c.candidate_id
                                                      for c in p.preferred_candidates)
        return m.EndQuorumEpochRequest(p.leader_epoch, p.leader_id, succ)
    if isinstance(req, f_req.FetchRequest):
        p = _only_partition(req.topics, "Fetch")
        rid = req.replica_id
        if rid == -1 and req.replica_state is not None:
            rid = req.replica_state.replica_id
        return m.FetchRequest(rid, p.current_leader_epoch, p.fetch_offset,
                              max(p.last_fetched_epoch, 0))
    if isinstance(req, fs_req.FetchSnapshotRequest):
        p = _only_partition(req.topics, "FetchSnapshot")
        return m.FetchSnapshotRequest(req.replica_id, p.current_leader_epoch,
                                      m.SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch),
                                      p.position)
    raise TypeError(f"not a raft request: {type(req).__name__}")


# ---------------------------------------------------------------- responses

def to_response(msg, timestamp_ms: int = 0):
    """A raft response as the kproto response object to send back."""
    if isinstance(msg, m.VoteResponse):
        return v_resp.VoteResponse(topics=[v_resp.TopicData(
            topic_name=METADATA_TOPIC, partitions=[v_resp.PartitionData(
                partition_index=METADATA_PARTITION, error_code=msg.error,
                leader_id=msg.leader_id, leader_epoch=msg.leader_epoch,
                vote_granted=msg.vote_granted)])])
    if isinstance(msg, m.BeginQuorumEpochResponse):
        return bqe_resp.BeginQuorumEpochResponse(topics=[bqe_resp.TopicData(
            topic_name=METADATA_TOPIC, partitions=[bqe_resp.PartitionData(
                partition_index=METADATA_PARTITION, error_code=msg.error,
                leader_id=msg.leader_id, leader_epoch=msg.leader_epoch)])])
    if isinstance(msg, m.EndQuorumEpochResponse):
        return eqe_resp.EndQuorumEpochResponse(topics=[eqe_resp.TopicData(
            topic_name=METADATA_TOPIC, partitions=[eqe_resp.PartitionData(
                partition_index=METADATA_PARTITION, error_code=msg.error,
                leader_id=msg.leader_id, leader_epoch=msg.leader_epoch)])])
    if isinstance(msg, m.FetchResponse):
        p = f_resp.PartitionData(
            partition_index=METADATA_PARTITION, error_code=msg.error,
            high_watermark=msg.high_watermark, log_start_offset=msg.log_start_offset,
            current_leader=f_resp.LeaderIdAndEpoch(leader_id=msg.leader_id,
                                                   leader_epoch=msg.leader_epoch),
            records=entries_to_records(msg.entries, timestamp_ms) if msg.entries else None)
        if msg.diverging is not None:
            p.diverging_epoch = f_resp.EpochEndOffset(epoch=msg.diverging[0],
                                                      end_offset=msg.diverging[1])
        if msg.snapshot_id is not None:
            p.snapshot_id = f_resp.SnapshotId(end_offset=msg.snapshot_id.end_offset,
                                              epoch=msg.snapshot_id.epoch)
        return f_resp.FetchResponse(responses=[f_resp.FetchableTopicResponse(
            topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[p])])
    if isinstance(msg, m.FetchSnapshotResponse):
        sid = msg.snapshot_id or m.SnapshotId(-1, -1)
        return fs_resp.FetchSnapshotResponse(topics=[fs_resp.TopicSnapshot(
            name=METADATA_TOPIC, partitions=[fs_resp.PartitionSnapshot(
                index=METADATA_PARTITION, error_code=msg.error,
                snapshot_id=fs_resp.SnapshotId(end_offset=sid.end_offset, epoch=sid.epoch),
                current_leader=fs_resp.LeaderIdAndEpoch(leader_id=msg.leader_id,
                                                        leader_epoch=msg.leader_epoch),
                size=msg.size, position=msg.position, unaligned_records=msg.data)])])
    raise TypeError(f"not a raft response: {msg!r}")


def from_response(resp, request=None):
    """A decoded kproto response to the raft response it carries. For Fetch,
    request is the raft FetchRequest it answers (the entries start at its
    fetch offset). A top-level error (e.g. INCONSISTENT_CLUSTER_ID) becomes
    the partition's error."""
    top = getattr(resp, "error_code", 0)
    if isinstance(resp, v_resp.VoteResponse):
        p = _only_partition(resp.topics, "Vote")
        # the response does not say it answers a pre-vote: the request it answers does
        return m.VoteResponse(top or p.error_code, p.leader_epoch, p.leader_id,
                              bool(p.vote_granted) and not top,
                              pre_vote=bool(getattr(request, "pre_vote", False)))
    if isinstance(resp, bqe_resp.BeginQuorumEpochResponse):
        p = _only_partition(resp.topics, "BeginQuorumEpoch")
        return m.BeginQuorumEpochResponse(top or p.error_code, p.leader_epoch, p.leader_id)
    if isinstance(resp, eqe_resp.EndQuorumEpochResponse):
        p = _only_partition(resp.topics, "EndQuorumEpoch")
        return m.EndQuorumEpochResponse(top or p.error_code, p.leader_epoch, p.leader_id)
    if isinstance(resp, f_resp.FetchResponse):
        p = _only_partition(resp.responses, "Fetch")
        entries = records_to_entries(p.records)
        fetch_offset = request.fetch_offset if request is not None else (
            entries[0].offset if entries else 0)
        div = p.diverging_epoch
        diverging = (div.epoch, div.end_offset) if div is not None and div.epoch >= 0 else None
        sid = p.snapshot_id
        snapshot_id = m.SnapshotId(sid.end_offset, sid.epoch) \
            if sid is not None and sid.end_offset >= 0 else None
        cl = p.current_leader
        return m.FetchResponse(top or p.error_code, cl.leader_epoch if cl else -1,
                               cl.leader_id if cl else -1, p.high_watermark, fetch_offset,
                               entries, p.log_start_offset, diverging, snapshot_id)
    if isinstance(resp, fs_resp.FetchSnapshotResponse):
        p = _only_partition(resp.topics, "FetchSnapshot")
        sid = p.snapshot_id
        cl = p.current_leader
        return m.FetchSnapshotResponse(
            top or p.error_code, cl.leader_epoch if cl else -1, cl.leader_id if cl else -1,
            m.SnapshotId(sid.end_offset, sid.epoch) if sid and sid.end_offset >= 0 else None,
            p.size, p.position, bytes(p.unaligned_records or b""))
    raise TypeError(f"not a raft response: {type(resp).__name__}")


def describe_quorum_response(quorum: dict, error_code: int = 0):
    """RaftNode.describe_quorum() as a DescribeQuorumResponse."""
    def rows(items):
        return [dq_resp.ReplicaState(replica_id=r["replica_id"],
                                     log_end_offset=r["log_end_offset"],
                                     last_fetch_timestamp=r["last_fetch_timestamp"],
                                     last_caught_up_timestamp=r["last_caught_up_timestamp"])
                for r in items]
    return dq_resp.DescribeQuorumResponse(topics=[dq_resp.TopicData(
        topic_name=METADATA_TOPIC, partitions=[dq_resp.PartitionData(
            partition_index=METADATA_PARTITION, error_code=error_code,
            leader_id=quorum["leader_id"], leader_epoch=quorum["leader_epoch"],
            high_watermark=quorum["high_watermark"],
            current_voters=rows(quorum["current_voters"]),
            observers=rows(quorum["observers"]))])])

"""The rules of raft/node.py one at a time: messages in, Ready out."""
import random

import pytest

from raft.messages import (
    Append, BeginQuorumEpochRequest, DeleteBefore, EndQuorumEpochRequest, Entry, Envelope,
    FENCED_LEADER_EPOCH, FetchRequest, FetchResponse, FetchSnapshotRequest,
    FetchSnapshotResponse, InstallSnapshot, NO_LEADER, NOT_LEADER_OR_FOLLOWER, NotLeader,
    Proposal, QuorumState, SnapshotId, Truncate, UNKNOWN_LEADER_EPOCH, VoteRequest,
    VoteResponse,
)
from raft.node import (
    CANDIDATE, FOLLOWER, LEADER, RESIGNED, UNATTACHED, Persisted, RaftConfig, RaftNode,
    SafetyError,
)

VOTERS = (1, 2, 3)


def mk(node_id=1, voters=VOTERS, now=0, persisted=None, seed=0, **cfg):
    return RaftNode(RaftConfig(node_id, voters, **cfg), random.Random(seed), now, persisted)


def entries(pairs, start=0):
    """[(epoch, data)] -> Entries from offset start."""
    return tuple(Entry(start + i, ep, d) for i, (ep, d) in enumerate(pairs))


def sent(ready, cls=None):
    return [m for m in ready.messages if cls is None or isinstance(m.msg, cls)]


def deliver(node, src, msg, now=0, corr=1):
    node.step(Envelope(src, node.id, corr, msg), now)
    return node.ready()


def elect(node, now=None):
    """Make node leader of a 3-voter quorum: time out, get one vote."""
    node.tick(node.next_deadline_ms() if now is None else now)
    r = node.ready()
    assert node.role == CANDIDATE
    vote = sent(r, VoteRequest)[0]
    node.step(Envelope(vote.dst, node.id, vote.correlation_id,
                       VoteResponse(0, node.epoch, NO_LEADER, True)), node.now)
    assert node.role == LEADER
    return node.ready()


def leader_with_followers(log=(), now=0):
    n = mk(1, persisted=Persisted(entries=entries(log)))
    elect(n, now or n.next_deadline_ms())
    n.durable(n.end_offset, n.generation)
    n.ready()
    return n


# -------------------------------------------------------------- elections

def test_a_fresh_voter_waits_a_randomised_election_timeout():
    n = mk(election_timeout_ms=1000)
    r = n.ready()
    assert n.role == UNATTACHED and n.leader_id == NO_LEADER and not r.messages
    assert 1000 <= n.next_deadline_ms() <= 2000
    deadlines = {mk(seed=s).next_deadline_ms() for s in range(20)}
    assert len(deadlines) > 5


def test_timeout_makes_a_candidate_that_persists_its_vote_before_asking():
    n = mk(persisted=Persisted(entries=entries([(1, b"a"), (1, b"b")])))
    n.tick(n.next_deadline_ms())
    r = n.ready()
    assert n.role == CANDIDATE and n.epoch == 1
    assert r.quorum_state == QuorumState(NO_LEADER, 1, 1)
    votes = sent(r, VoteRequest)
    assert sorted(m.dst for m in votes) == [2, 3]
    assert votes[0].msg == VoteRequest(1, 1, 1, 2)


def test_a_majority_makes_a_leader_that_writes_leader_change_and_begins_the_epoch():
    n = mk()
    r = elect(n)
    assert r.quorum_state == QuorumState(1, 1, 1)
    assert r.leader.leader_id == 1 and r.leader.epoch == 1
    (op,) = r.log_ops
    assert isinstance(op, Append) and op.entries[0].control and op.entries[0].epoch == 1
    assert r.sync_to == (1, n.generation)
    assert sorted(m.dst for m in sent(r, BeginQuorumEpochRequest)) == [2, 3]


def test_a_single_voter_elects_itself():
    n = mk(voters=(1,))
    n.tick(n.next_deadline_ms())
    assert n.role == LEADER
    r = n.ready()
    n.durable(*r.sync_to)
    assert n.ready().high_watermark == 1


def test_one_vote_per_epoch():
    n = mk(2)
    r = deliver(n, 1, VoteRequest(5, 1, 0, 0))
    assert r.quorum_state == QuorumState(NO_LEADER, 5, 1)
    assert sent(r)[0].msg.vote_granted
    r = deliver(n, 3, VoteRequest(5, 3, 0, 0))
    assert not sent(r)[0].msg.vote_granted
    # the same candidate asking again (a retry) gets the same answer
    assert sent(deliver(n, 1, VoteRequest(5, 1, 0, 0)))[0].msg.vote_granted


@pytest.mark.parametrize("cand_last,granted", [
    ((1, 3), False),   # older last epoch, longer log
    ((2, 2), False),   # same epoch, shorter
    ((2, 3), True),    # same log end
    ((2, 4), True),    # same epoch, longer
    ((3, 1), True),    # later last epoch, shorter
])
def test_vote_only_for_a_log_at_least_as_up_to_date(cand_last, granted):
    n = mk(2, persisted=Persisted(QuorumState(NO_LEADER, 2), entries=entries(
        [(1, b"a"), (2, b"b"), (2, b"c")])))
    r = deliver(n, 1, VoteRequest(3, 1, *cand_last))
    assert sent(r)[0].msg.vote_granted is granted
    assert n.epoch == 3


def test_a_vote_from_an_older_epoch_is_fenced():
    n = mk(2, persisted=Persisted(QuorumState(3, 7)))
    r = deliver(n, 1, VoteRequest(6, 1, 9, 9))
    resp = sent(r, VoteResponse)[0].msg
    assert resp.error == FENCED_LEADER_EPOCH and resp.leader_epoch == 7 and resp.leader_id == 3
    assert not resp.vote_granted and n.epoch == 7


def test_a_leader_steps_down_for_a_later_epoch():
    n = mk()
    elect(n)
    r = deliver(n, 2, VoteRequest(n.epoch + 1, 2, 1, 1), now=n.now)
    assert n.role == UNATTACHED and n.epoch == 2
    assert r.leader.leader_id == NO_LEADER
    assert r.quorum_state.leader_epoch == 2


def test_a_candidate_rejected_by_a_majority_backs_off():
    n = mk(election_backoff_max_ms=1000)
    n.tick(n.next_deadline_ms())
    r = n.ready()
    for m in sent(r, VoteRequest):
        n.step(Envelope(m.dst, 1, m.correlation_id, VoteResponse(0, 1, NO_LEADER, False)), n.now)
    assert n.role == CANDIDATE and n.backoff_until is not None
    assert n.backoff_until - n.now <= 1000
    n.tick(n.backoff_until)
    assert n.epoch == 2 and n.role == CANDIDATE


def test_a_candidate_follows_the_leader_that_won_its_epoch():
    n = mk()
    n.tick(n.next_deadline_ms())
    n.ready()
    r = deliver(n, 2, BeginQuorumEpochRequest(1, 2), now=n.now)
    assert n.role == FOLLOWER and n.leader_id == 2
    assert r.leader.leader_id == 2
    assert sent(r, FetchRequest)[0].dst == 2


def test_two_leaders_in_one_epoch_is_refused():
    n = mk()
    elect(n)
    with pytest.raises(SafetyError):
        n.step(Envelope(2, 1, 9, BeginQuorumEpochRequest(1, 2)), n.now)


# ------------------------------------------------------------ replication

def test_followers_fetch_and_the_high_watermark_needs_a_majority_durable():
    n = leader_with_followers()
    p = n.propose([b"x", b"y"])
    assert p == Proposal(1, 2, 1)
    r = n.ready()
    assert r.high_watermark is None
    n.durable(3, n.generation)
    assert n.ready().high_watermark is None   # the leader alone is not a majority
    r = deliver(n, 2, FetchRequest(2, 1, 3, 1), now=n.now)
    assert r.high_watermark == 3
    assert [e.data for e in r.committed] == [b"x", b"y"]  # the control entry is not applied


def test_the_leader_fsync_counts_too():
    n = leader_with_followers()
    n.propose([b"x"])
    n.ready()
    r = deliver(n, 2, FetchRequest(2, 1, 2, 1), now=n.now)
    assert r.high_watermark == 1  # follower has 2, the leader has fsynced only 1
    n.durable(2, n.generation)
    assert n.ready().high_watermark == 2


def test_entries_of_an_older_epoch_commit_only_with_one_of_the_leaders_epoch():
    # the leader of epoch 3 inherits uncommitted entries of epoch 1
    n = mk(1, persisted=Persisted(QuorumState(NO_LEADER, 2), entries=entries(
        [(1, b"a"), (1, b"b")])))
    elect(n)
    assert n.epoch == 3
    n.durable(n.end_offset, n.generation)
    n.ready()
    # a follower holds the old entries, not yet the LeaderChange at offset 2
    r = deliver(n, 2, FetchRequest(2, 3, 2, 1), now=n.now)
    assert r.high_watermark is None and n.hwm == 0
    r = deliver(n, 2, FetchRequest(2, 3, 3, 3), now=n.now, corr=2)
    assert r.high_watermark == 3
    assert [e.data for e in r.committed] == [b"a", b"b"]


def test_an_empty_fetch_is_held_until_there_is_something_to_send():
    n = leader_with_followers()
    deliver(n, 2, FetchRequest(2, 1, 1, 1), now=n.now)       # hwm moves to 1 and is sent
    r = deliver(n, 2, FetchRequest(2, 1, 1, 1), now=n.now, corr=2)
    assert not sent(r, FetchResponse)                        # held
    n.propose([b"x"])
    r = n.ready()
    (resp,) = sent(r, FetchResponse)
    assert resp.correlation_id == 2 and [e.data for e in resp.msg.entries] == [b"x"]
    # a held fetch is answered, empty, at fetch_max_wait_ms
    deliver(n, 3, FetchRequest(3, 1, 2, 1), now=n.now, corr=3)
    n.durable(2, n.generation)
    n.ready()
    t0 = n.now
    r = deliver(n, 3, FetchRequest(3, 1, 2, 1), now=t0, corr=4)
    (resp,) = sent(r, FetchResponse)         # nothing new but the high watermark: answered
    assert resp.msg.entries == () and resp.msg.high_watermark == 2
    r = deliver(n, 3, FetchRequest(3, 1, 2, 1), now=t0, corr=5)
    assert not sent(r, FetchResponse)                        # caught up: held
    n.tick(t0 + n.config.fetch_max_wait_ms - 1)
    assert not sent(n.ready(), FetchResponse)
    n.tick(t0 + n.config.fetch_max_wait_ms)
    (resp,) = sent(n.ready(), FetchResponse)
    assert resp.correlation_id == 5 and resp.msg.entries == () and resp.msg.high_watermark == 2


def test_a_follower_appends_and_fetches_again_only_once_durable():
    n = mk(2)
    deliver(n, 1, BeginQuorumEpochRequest(1, 1))
    corr = n.fetch_inflight
    r = deliver(n, 1, FetchResponse(0, 1, 1, 1, 0, entries([(1, b"lc"), (1, b"x")])), corr=corr)
    assert r.log_ops == [Append(entries([(1, b"lc"), (1, b"x")]))]
    assert r.high_watermark == 1 and not sent(r, FetchRequest)
    n.durable(*r.sync_to)
    (f,) = sent(n.ready(), FetchRequest)
    assert f.msg == FetchRequest(2, 1, 2, 1)


def test_a_late_or_duplicate_fetch_response_is_ignored():
    n = mk(2)
    deliver(n, 1, BeginQuorumEpochRequest(1, 1))
    r = deliver(n, 1, FetchResponse(0, 1, 1, 0, 0, entries([(1, b"x")])),
                corr=n.fetch_inflight + 100)
    assert not r.log_ops and n.end_offset == 0


def test_a_diverging_follower_truncates_to_the_leaders_epoch_end():
    # leader: epoch 1 at 0-1, epoch 3 from 2; follower has epoch 2 entries at 2-3
    n = mk(1, persisted=Persisted(QuorumState(NO_LEADER, 2), entries=entries(
        [(1, b"a"), (1, b"b")])))
    elect(n)
    r = deliver(n, 2, FetchRequest(2, 3, 4, 2), now=n.now)
    (resp,) = sent(r, FetchResponse)
    assert resp.msg.diverging == (1, 2)
    f = mk(2, persisted=Persisted(QuorumState(1, 3), entries=entries(
        [(1, b"a"), (1, b"b"), (2, b"c"), (2, b"d")])))
    f.ready()
    corr = f.fetch_inflight   # a follower fetches as soon as it starts
    assert corr is not None
    r = deliver(f, 1, resp.msg, corr=corr)
    assert Truncate(2) in r.log_ops and f.end_offset == 2
    (again,) = sent(r, FetchRequest)
    assert again.msg.fetch_offset == 2 and again.msg.last_fetched_epoch == 1


def test_truncating_below_the_high_watermark_is_refused():
    f = mk(2, persisted=Persisted(QuorumState(1, 3), entries=entries([(1, b"a"), (2, b"b")])))
    f.hwm = 2
    with pytest.raises(SafetyError):
        f._truncate(1)


def test_a_fetch_below_the_log_start_gets_the_snapshot_id_and_then_the_snapshot():
    sid = SnapshotId(5, 1)
    n = mk(1, persisted=Persisted(QuorumState(NO_LEADER, 1), sid, b"SNAPSHOT-BYTES",
                                  entries([(1, b"f")], start=5)), snapshot_chunk_bytes=4)
    elect(n)
    r = deliver(n, 2, FetchRequest(2, 2, 2, 1), now=n.now)
    (resp,) = sent(r, FetchResponse)
    assert resp.msg.snapshot_id == sid
    f = mk(2, persisted=Persisted(QuorumState(1, 2), entries=entries([(1, b"a"), (1, b"b")])))
    f.ready()
    r = deliver(f, 1, resp.msg, corr=f.fetch_inflight)
    (req,) = sent(r, FetchSnapshotRequest)
    assert req.msg == FetchSnapshotRequest(2, 2, sid, 0)
    while True:
        r = deliver(n, 2, req.msg, now=n.now, corr=req.correlation_id)
        (chunk,) = sent(r, FetchSnapshotResponse)
        assert chunk.msg.size == 14 and len(chunk.msg.data) <= 4
        r = deliver(f, 1, chunk.msg, corr=chunk.correlation_id)
        nxt = sent(r, FetchSnapshotRequest)
        if not nxt:
            break
        req = nxt[0]
    assert InstallSnapshot(sid, b"SNAPSHOT-BYTES") in r.log_ops
    assert r.load_snapshot == (sid, b"SNAPSHOT-BYTES")
    assert f.log_start == 5 and f.end_offset == 5 and f.hwm == 5
    (fetch,) = sent(r, FetchRequest)
    assert fetch.msg.fetch_offset == 5 and fetch.msg.last_fetched_epoch == 1


def test_fetch_errors_name_the_epoch_and_the_leader():
    n = mk(2)
    deliver(n, 1, BeginQuorumEpochRequest(4, 1))
    for epoch, err in ((3, FENCED_LEADER_EPOCH), (5, UNKNOWN_LEADER_EPOCH),
                       (4, NOT_LEADER_OR_FOLLOWER)):
        (resp,) = sent(deliver(n, 3, FetchRequest(3, epoch, 0, 0)), FetchResponse)
        assert (resp.msg.error, resp.msg.leader_epoch, resp.msg.leader_id) == (err, 4, 1)


def test_the_snapshot_is_due_after_enough_bytes_and_shrinks_the_log():
    n = leader_with_followers()
    n.config.max_bytes_between_snapshots = 10
    n.propose([b"12345", b"67890", b"x"])
    n.durable(n.end_offset, n.generation)
    r = deliver(n, 2, FetchRequest(2, 1, 4, 1), now=n.now)
    assert r.snapshot_due == SnapshotId(4, 1)
    n.snapshot_taken(r.snapshot_due, b"state")
    r = n.ready()
    assert DeleteBefore(4) in r.log_ops and n.log_start == 4
    assert r.leader_epochs == [(1, 4)]


def test_the_snapshot_is_due_after_the_interval_with_records_applied_meanwhile():
    # metadata.log.max.snapshot.interval.ms (KIP-876): a quiet log is snapshotted by time too
    n = leader_with_followers()
    n.config.max_interval_ms_between_snapshots = 60_000
    start = 0   # the node started at 0: the interval counts from its start
    n.propose([b"a"])
    n.durable(n.end_offset, n.generation)
    r = deliver(n, 2, FetchRequest(2, 1, n.end_offset, 1), now=start + 59_000)
    assert r.snapshot_due is None
    n.propose([b"b"])
    n.durable(n.end_offset, n.generation)
    r = deliver(n, 2, FetchRequest(2, 1, n.end_offset, 1), now=start + 60_000)
    assert r.snapshot_due == SnapshotId(n.end_offset, 1)
    n.snapshot_taken(r.snapshot_due, b"state")
    assert n.ready().snapshot_due is None
    # nothing applied since: no snapshot however long it waits
    r = deliver(n, 2, FetchRequest(2, 1, n.end_offset, 1), now=start + 200_000)
    assert r.snapshot_due is None
    # 0 turns the time trigger off
    n.config.max_interval_ms_between_snapshots = 0
    n.propose([b"c"])
    n.durable(n.end_offset, n.generation)
    r = deliver(n, 2, FetchRequest(2, 1, n.end_offset, 1), now=start + 400_000)
    assert r.snapshot_due is None


def test_durable_of_an_old_generation_is_ignored():
    f = mk(2, persisted=Persisted(QuorumState(1, 1), entries=entries([(1, b"a"), (1, b"b")])))
    f.ready()
    gen = f.generation
    f._truncate(1)
    f.durable(2, gen)
    assert f.durable_end == 1


# ------------------------------------------------------- failure handling

def test_a_follower_that_hears_nothing_stands_for_election():
    n = mk(2, fetch_timeout_ms=2000)
    deliver(n, 1, BeginQuorumEpochRequest(1, 1))
    n.tick(1999)
    assert n.role == FOLLOWER
    n.tick(2000)
    assert n.role == CANDIDATE and n.epoch == 2


def test_a_leader_without_fetches_from_a_majority_resigns():
    n = mk(fetch_timeout_ms=2000)
    elect(n, 2000)
    t0 = n.now
    n.tick(t0 + 1999)
    assert n.role == LEADER
    deliver(n, 2, FetchRequest(2, 1, 0, 0), now=t0 + 2000)
    n.tick(t0 + 3500)
    assert n.role == LEADER  # node 2 fetched at t0+2000
    n.tick(t0 + 2000 + 3000)
    r = n.ready()
    assert n.role == RESIGNED and r.leader.leader_id == NO_LEADER
    assert sorted(m.dst for m in sent(r, EndQuorumEpochRequest)) == [2, 3]


def test_resign_hands_over_to_the_best_placed_follower_first():
    n = leader_with_followers()
    n.propose([b"x"])
    n.durable(n.end_offset, n.generation)
    deliver(n, 3, FetchRequest(3, 1, 2, 1), now=n.now)
    deliver(n, 2, FetchRequest(2, 1, 1, 1), now=n.now, corr=2)
    n.resign()
    r = n.ready()
    ends = sent(r, EndQuorumEpochRequest)
    assert ends[0].msg.preferred_successors == (3, 2)
    f = mk(3)
    deliver(f, 1, BeginQuorumEpochRequest(1, 1), now=100)
    deliver(f, 1, ends[0].msg, now=100)
    assert f.role == UNATTACHED and f.next_deadline_ms() == 100   # stands at once
    assert n.role == RESIGNED and n.propose([b"y"]) == NotLeader(NO_LEADER, 1)


def test_propose_on_a_follower_names_the_leader():
    n = mk(2)
    deliver(n, 3, BeginQuorumEpochRequest(4, 3))
    assert n.propose([b"x"]) == NotLeader(3, 4)


def test_a_restarted_leader_does_not_lead_its_old_epoch():
    n = mk(1, persisted=Persisted(QuorumState(1, 6, 1), entries=entries([(6, b"lc")])))
    r = n.ready()
    assert n.role == RESIGNED and n.epoch == 6
    n.tick(n.next_deadline_ms() + 5000)
    assert n.role == CANDIDATE and n.epoch == 7


def test_a_restarted_voter_remembers_its_vote():
    n = mk(2, persisted=Persisted(QuorumState(NO_LEADER, 4, 3)))
    r = deliver(n, 1, VoteRequest(4, 1, 9, 9))
    assert not sent(r)[0].msg.vote_granted


# ---------------------------------------------------------------- observers

def test_an_observer_finds_the_leader_through_any_voter_and_does_not_count():
    o = mk(100)
    assert not o.is_voter
    o.tick(o.next_deadline_ms())
    (f,) = sent(o.ready(), FetchRequest)
    assert f.dst in VOTERS
    r = deliver(o, f.dst, FetchResponse(NOT_LEADER_OR_FOLLOWER, 2, 3), corr=f.correlation_id)
    assert o.role == FOLLOWER and o.leader_id == 3
    assert sent(r, FetchRequest)[0].dst == 3
    # an observer never stands for election
    o.tick(10 ** 6)
    assert o.role != CANDIDATE
    # and its fetches do not move the leader's high watermark
    n = leader_with_followers()
    n.propose([b"x"])
    n.durable(n.end_offset, n.generation)
    r = deliver(n, 100, FetchRequest(100, 1, 2, 1), now=n.now)
    assert r.high_watermark is None
    q = n.describe_quorum()
    assert [o["replica_id"] for o in q["observers"]] == [100]


def test_describe_quorum_on_the_leader():
    n = leader_with_followers()
    deliver(n, 2, FetchRequest(2, 1, 1, 1), now=n.now + 5)
    q = n.describe_quorum()
    assert q["leader_id"] == 1 and q["leader_epoch"] == 1 and q["high_watermark"] == 1
    rows = {v["replica_id"]: v for v in q["current_voters"]}
    assert rows[2]["log_end_offset"] == 1 and rows[2]["last_fetch_timestamp"] == n.now
    assert rows[3]["log_end_offset"] == -1


# ------------------------------------------------------------ pre-vote

def test_pre_vote_asks_without_bumping_the_epoch_and_then_stands():
    n = mk(pre_vote=True, persisted=Persisted(QuorumState(NO_LEADER, 4)))
    n.tick(n.next_deadline_ms())
    r = n.ready()
    assert n.role == "prospective" and n.epoch == 4 and r.quorum_state is None
    (req, _) = sent(r, VoteRequest)
    assert req.msg.pre_vote and req.msg.candidate_epoch == 5
    r = deliver(n, req.dst, VoteResponse(0, 4, NO_LEADER, True, pre_vote=True), now=n.now,
                corr=req.correlation_id)
    assert n.role == CANDIDATE and n.epoch == 5
    assert r.quorum_state == QuorumState(NO_LEADER, 5, 1)


def test_a_voter_answers_a_pre_vote_without_changing_state():
    n = mk(2, persisted=Persisted(QuorumState(NO_LEADER, 4)))
    r = deliver(n, 1, VoteRequest(5, 1, 0, 0, pre_vote=True))
    assert sent(r)[0].msg.vote_granted and sent(r)[0].msg.pre_vote
    assert n.epoch == 4 and n.voted_id == NO_LEADER and r.quorum_state is None
    # a follower that hears from its leader refuses
    deliver(n, 3, BeginQuorumEpochRequest(4, 3))
    r = deliver(n, 1, VoteRequest(5, 1, 0, 0, pre_vote=True))
    assert not sent(r, VoteResponse)[0].msg.vote_granted and n.leader_id == 3


def test_a_failed_pre_vote_does_not_disturb_the_quorum():
    n = mk(pre_vote=True, persisted=Persisted(QuorumState(NO_LEADER, 4)))
    n.tick(n.next_deadline_ms())
    r = n.ready()
    for m in sent(r, VoteRequest):
        n.step(Envelope(m.dst, 1, m.correlation_id,
                        VoteResponse(0, 4, NO_LEADER, False, pre_vote=True)), n.now)
    assert n.role == UNATTACHED and n.epoch == 4


def test_pre_vote_cannot_go_through_kafkas_vote_v1():
    from raft import convert
    # Vote v2 carries it (KIP-996, what kproto nodes send each other); v1, Kafka 3.9's, cannot
    with pytest.raises(ValueError, match="needs Vote v2, not v1"):
        convert.to_request(VoteRequest(5, 1, 0, 0, pre_vote=True), version=1)
    assert convert.to_request(VoteRequest(5, 1, 0, 0, pre_vote=True), version=2).topics[0].partitions[0].pre_vote

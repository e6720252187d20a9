"""Dynamic voters (KIP-853) in raft/node.py: the voter set is the last one in the log, the leader
changes it one voter at a time with Kafka's refusals, and the seeded simulation keeps every
invariant while the leader adds and removes voters under faults."""
from raft.messages import (
    DUPLICATE_VOTER, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, UNSUPPORTED_VERSION,
    VOTER_NOT_FOUND, Proposal, VoterChangeRefused, VoterInfo)
from raft.node import LEADER
from tests.raft_sim import NO_FAULTS, Sim, run_seed


def _settled(voters=3, observers=1, reconfig=True, ms=1500):
    """A fault-free dynamic quorum run until ms: a leader that has committed in its epoch."""
    sim = Sim(5, voters=voters, observers=observers, faults=NO_FAULTS, duration_ms=10 ** 9,
              config={"kraft_version": 1 if reconfig else 0})
    while sim.now < ms:
        sim.step()
    lead = sim._leader()
    assert lead is not None
    return sim, sim.nodes[lead]


def _until(sim, cond, ms=3000):
    end = sim.now + ms
    while sim.now < end and not cond():
        sim.step()
    assert cond()


def test_seeded_voter_changes_under_every_fault_keep_the_invariants():
    totals = {}
    for seed in range(30):
        stats = run_seed(seed, voters=3 if seed % 2 == 0 else 5, observers=2, reconfig_every_ms=300,
                         config={"pre_vote": seed % 4 >= 2})
        for k, v in stats.items():
            totals[k] = totals.get(k, 0) + v
    # the runs did change the voters, and were refused too (a change pending, not caught up)
    assert totals["voters_added"] > 60 and totals["voters_removed"] > 60
    assert totals["voter_changes_refused"] > 60 and totals["crashes"] > 40


def test_a_static_quorum_refuses_voter_changes_as_kafka():
    sim, node = _settled(reconfig=False)
    r = node.add_voter(VoterInfo(100))
    assert r == VoterChangeRefused(UNSUPPORTED_VERSION, "Cluster doesn't support adding voter "
                                   "because the kraft.version feature is 0")
    follower = next(n for n in sim.nodes.values() if n is not node and n.is_voter)
    assert follower.remove_voter(1).error == NOT_LEADER_OR_FOLLOWER


def test_add_then_remove_a_voter_one_change_at_a_time():
    sim, node = _settled()
    assert node.voters == (1, 2, 3)
    dup = node.add_voter(VoterInfo(2))
    assert dup.error == DUPLICATE_VOTER and "ReplicaKey(id=2" in dup.message
    assert node.remove_voter(7).error == VOTER_NOT_FOUND
    # the observer fetches and is caught up: it becomes a voter at once, and the next change
    # waits for that one to commit
    p = node.add_voter(VoterInfo(100))
    assert isinstance(p, Proposal) and node.voters == (1, 2, 3, 100)
    pending = node.remove_voter(2)
    assert pending.error == REQUEST_TIMED_OUT
    _until(sim, lambda: node.hwm > p.last_offset)
    assert sim.nodes[100].is_voter and sim.nodes[2].voters == (1, 2, 3, 100)
    r = node.remove_voter(2)
    assert isinstance(r, Proposal)
    _until(sim, lambda: not sim.nodes[2].is_voter)
    assert node.voters == (1, 3, 100)


def test_a_new_voter_must_be_caught_up():
    sim, node = _settled()
    # the observer stops fetching (partitioned away) for longer than the fetch timeout
    sim.blocked = {(100, v) for v in sim.ids} | {(v, 100) for v in sim.ids}
    end = sim.now + 2000
    while sim.now < end:
        sim.step()
    r = node.add_voter(VoterInfo(100))
    assert r.error == REQUEST_TIMED_OUT and "is not caught up" in r.message


def test_a_leader_that_removes_itself_hands_over_once_the_change_commits():
    sim, node = _settled()
    old = node.id
    p = node.remove_voter(old)
    assert isinstance(p, Proposal) and not node.is_voter and node.role == LEADER
    _until(sim, lambda: sim._leader() not in (None, old))
    assert not sim.nodes[old].is_voter and sim.nodes[old].role != LEADER
    new = sim.nodes[sim._leader()]
    assert old not in new.voters and len(new.voters) == 2
    # writes go on under the new leader, and the old one follows it as an observer
    n = len(sim.committed_data)
    _until(sim, lambda: len(sim.committed_data) > n + 3)
    _until(sim, lambda: sim.nodes[old].leader_id == new.id)


def test_the_checks_catch_a_leader_that_makes_two_voter_changes_at_once():
    import pytest
    from tests.raft_sim import Violation, mutate
    undo = mutate("two_voter_changes_at_once")
    try:
        with pytest.raises(Violation, match="leader completeness"):
            run_seed(209, voters=5, observers=2, reconfig_every_ms=300, config={"pre_vote": False})
    finally:
        undo()
    run_seed(209, voters=5, observers=2, reconfig_every_ms=300, config={"pre_vote": False})


def test_an_observer_with_no_voter_set_asks_a_bootstrap_server_and_follows_the_leader_it_names():
    """A node formatted --no-initial-controllers knows no voters: its fetch goes to a bootstrap server
    (Kafka's ids -2, -3, ...), whose answer names the leader; then it fetches from the leader."""
    import random

    from raft.messages import Envelope, FetchRequest, FetchResponse, FENCED_LEADER_EPOCH
    from raft.node import FOLLOWER, RaftConfig, RaftNode
    node = RaftNode(RaftConfig(4, (), kraft_version=1, bootstrap=(-2, -3)), random.Random(1), 0)
    node.tick(100)
    (sent,) = node.ready().messages
    assert sent.dst in (-2, -3) and isinstance(sent.msg, FetchRequest) and sent.msg.replica_id == 4
    node.step(Envelope(sent.dst, 4, sent.correlation_id, FetchResponse(FENCED_LEADER_EPOCH, 3, 1)), 110)
    assert (node.role, node.leader_id, node.epoch, node.is_voter) == (FOLLOWER, 1, 3, False)
    assert [e.dst for e in node.ready().messages] == [1]
    # with neither voters nor bootstrap servers, nothing to ask (and no crash)
    lone = RaftNode(RaftConfig(5, (), kraft_version=1), random.Random(1), 0)
    lone.tick(100)
    assert lone.ready().messages == []


def test_the_first_leader_writes_the_bootstrap_voter_set_into_the_log():
    """Voters from the bootstrap checkpoint (snapshot 0-0): the first leader's epoch starts with
    LeaderChange, kraft.version and the voter set, as Kafka's; a later leader writes LeaderChange alone."""
    import random

    from raft.messages import SnapshotId, kraft_version_data, parse_voters
    from raft.node import Persisted, RaftConfig, RaftNode
    infos = (VoterInfo(1, "dir-1", (("CONTROLLER", "h", 9093),)),)
    node = RaftNode(RaftConfig(1, (), kraft_version=1, snapshot_voters=lambda data: infos), random.Random(1), 0,
                    Persisted(snapshot_id=SnapshotId(0, 0), snapshot_data=b"bootstrap"))
    assert node.voters == (1,) and node.voters_offset == -1
    node.tick(10)
    assert node.role == LEADER
    first = [(e.offset, e.control) for e in node.entries]
    assert first == [(0, True), (1, True), (2, True)]
    assert node.entries[1].data == kraft_version_data(1) and parse_voters(node.entries[2].data) == infos
    assert node.voters_offset == 2
    node.resign()
    node.tick(10 ** 6)
    assert node.role == LEADER and len(node.entries) == 4   # the next epoch: LeaderChange only


def test_a_removed_voter_with_a_stale_voter_set_does_not_keep_the_quorum_from_electing():
    """Seed 225 (--reconfig, 5 voters, 1 observer): a node removed while cut off still counts
    itself and an observer-turned-voter as voters and stands again and again; every VoteRequest at a
    higher epoch pulled that voter away from the real leader before it caught up, and no write
    committed after the faults healed. A follower that hears from its leader now turns down a
    candidate outside its voter set without moving to its epoch."""
    import random

    from raft.messages import Envelope, FetchResponse
    from raft.node import FOLLOWER, RaftConfig, RaftNode, VoteRequest
    stats = run_seed(225, voters=5, observers=1, reconfig_every_ms=300, config={"pre_vote": False})
    assert stats["recovery_ms"] < 10000
    # the rule itself: a follower of a live leader, a candidate it does not count as a voter
    node = RaftNode(RaftConfig(2, (1, 2), kraft_version=1), random.Random(1), 0)
    node.step(Envelope(1, 2, 1, FetchResponse(0, 5, 1)), 10)
    assert (node.role, node.epoch) == (FOLLOWER, 5)
    node.ready()
    node.step(Envelope(9, 2, 2, VoteRequest(9, 9, 5, 100)), 20)
    assert (node.role, node.epoch, node.leader_id) == (FOLLOWER, 5, 1)
    (answer,) = node.ready().messages
    assert answer.dst == 9 and not answer.msg.vote_granted
    # a candidate among its voters still moves it to the new epoch (the rules of Kafka 3.9)
    node.step(Envelope(1, 2, 3, VoteRequest(6, 1, 5, 100)), 30)
    assert node.epoch == 6

"""The deterministic simulation of raft/node.py (tests/raft_sim.py) in CI:
many seeded runs with every fault on, exact replay, and proof that the
invariant checks catch a node that breaks a rule."""
import pytest

from raft.node import LEADER
from tests import raft_sim
from tests.raft_sim import NO_FAULTS, Faults, Sim, Violation, mutate, run_seed


def _run_many(seeds, voters, observers=1):
    totals = {}
    for seed in seeds:
        stats = run_seed(seed, voters=voters, observers=observers)
        for k, v in stats.items():
            totals[k] = totals.get(k, 0) + v
    return totals


# CI runs the first count; `pytest -m long` the second (and `python -m tests.raft_sim` any number)
@pytest.mark.parametrize("n", [120, pytest.param(300, marks=pytest.mark.long)])
def test_seeds_three_voters_every_fault(n):
    totals = _run_many(range(n), voters=3)
    # the runs did exercise what they claim to (per seed: the rates 300 seeds showed, halved)
    assert totals["crashes"] > n / 2 and totals["faults"] > 6.6 * n
    assert totals["elections"] > n and totals["snapshot_installs"] > n / 4
    assert totals["committed"] > 50 * n


@pytest.mark.parametrize("n", [60, pytest.param(150, marks=pytest.mark.long)])
def test_seeds_five_voters_every_fault(n):
    totals = _run_many(range(10000, 10000 + n), voters=5)
    assert totals["crashes"] > n / 2 and totals["elections"] > n


def test_a_seed_replays_exactly():
    a = Sim(4242, voters=5, observers=1)
    sa = a.run()
    b = Sim(4242, voters=5, observers=1)
    sb = b.run()
    assert sa == sb
    assert a.committed == b.committed and a.epoch_leader == b.epoch_leader
    c = Sim(4243, voters=5, observers=1)
    c.run()
    assert c.committed != a.committed


def test_without_faults_one_election_and_every_node_applies_everything():
    sim = Sim(7, voters=3, observers=2, faults=NO_FAULTS, duration_ms=3000)
    stats = sim.run()
    assert stats["elections"] == 1
    assert len(sim.epoch_leader) == 1
    for i in sim.ids:
        app = sim.apps[i]
        # everyone, observers too, applied the same committed data
        assert app == sim.committed_data[:len(app)]
        assert len(app) >= len(sim.committed_data) - 5
        assert sim.nodes[i].leader_id == next(iter(sim.epoch_leader.values()))


def test_single_voter_commits_alone():
    sim = Sim(3, voters=1, observers=1, faults=NO_FAULTS, duration_ms=1000)
    sim.run()
    assert sim.nodes[1].role == LEADER
    assert len(sim.committed_data) > 5


def test_followers_catch_up_through_snapshots():
    sim = Sim(11, voters=3, observers=1, snapshot_bytes=20)
    stats = sim.run()
    assert stats["snapshots"] > 0 and stats["snapshot_installs"] > 0


def test_partition_only_faults_keep_a_leader_after_heal():
    faults = Faults(drop=0, duplicate=0, crash=False, clock_jump=False)
    for seed in range(40):
        stats = run_seed(seed, voters=5, observers=0, faults=faults)
        assert stats["recovery_ms"] < 10000


@pytest.mark.parametrize("name,seeds", [
    ("vote_without_log_check", range(0, 10)),
    ("vote_twice_in_an_epoch", range(60, 100)),
    ("ignore_diverging_epoch", range(20, 40)),
    ("fetch_before_fsync", range(0, 40)),
])
def test_a_broken_rule_is_caught(name, seeds):
    undo = mutate(name)
    try:
        caught = []
        for seed in seeds:
            try:
                # as the command line runs them (pre-vote on every other pair)
                run_seed(seed, voters=3 if seed % 2 == 0 else 5, observers=1,
                         config={"pre_vote": (seed // 2) % 2 == 1})
            except Violation as exc:
                caught.append(exc)
        assert caught, f"mutation {name} went unnoticed"
        # the report names the seed, so the run can be replayed
        assert all(f"seed {exc.seed}:" in str(exc) for exc in caught)
    finally:
        undo()
    # and the real node passes the same seeds
    for seed in list(seeds)[:5]:
        run_seed(seed, voters=3 if seed % 2 == 0 else 5, observers=1)


def test_the_checker_rejects_a_changed_committed_entry():
    sim = Sim(5, voters=3, faults=NO_FAULTS, duration_ms=1000, snapshot_bytes=10 ** 9)
    sim.run()
    node = sim.nodes[1]
    assert len(sim.committed) > 3
    sim.committed[2] = (99, b"other", False)
    with pytest.raises(Violation, match="committed entry 2 changed"):
        sim._check_hwm(1, node, node.hwm)


def test_the_checker_rejects_two_leaders_in_one_epoch():
    sim = Sim(5, voters=3, faults=NO_FAULTS, duration_ms=1000, snapshot_bytes=10 ** 9)
    sim.run()
    epoch, leader = next(iter(sim.epoch_leader.items()))
    other = next(i for i in sim.voter_ids if i != leader)
    node = sim.nodes[other]
    node.role = LEADER
    with pytest.raises(Violation, match="election safety"):
        sim._on_new_leader(other, node, epoch)


def test_long_run_command_reports_totals(capsys):
    assert raft_sim.main(["--count", "4", "--first", "100"]) == 0
    out = capsys.readouterr().out
    assert "4 runs (seeds 100..103)" in out and "0 violations" in out


def test_long_run_command_prints_the_seed_of_a_violation(capsys):
    rc = raft_sim.main(["--count", "2", "--mutate", "vote_without_log_check"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "replay: python3 -m tests.raft_sim --seed 0" in out
    # the command put the real rule back
    assert raft_sim.main(["--count", "2"]) == 0


def test_100_seeds_with_pre_vote():
    totals = {}
    for seed in range(20000, 20100):
        stats = run_seed(seed, voters=3 if seed % 2 else 5, observers=1,
                         config={"pre_vote": True})
        totals["elections"] = totals.get("elections", 0) + stats["elections"]
    assert totals["elections"] > 100


def _run_until(sim, t):
    while sim.queue and sim.queue[0][0] <= t:
        sim.step()


@pytest.mark.parametrize("pre_vote", [False, True])
def test_an_isolated_leader_steps_down_and_its_uncommitted_writes_are_replaced(pre_vote):
    """As SIGSTOP/SIGCONT of the leader or a cut cable: the others elect a new
    leader, the old one resigns (check quorum), and when it comes back its
    log is reconciled without losing anything committed."""
    sim = Sim(21, voters=3, faults=NO_FAULTS, duration_ms=10 ** 9, snapshot_bytes=10 ** 9,
              config={"pre_vote": pre_vote})
    _run_until(sim, 2000)
    old = sim._leader()
    assert old is not None
    committed_before = list(sim.committed)
    others = [i for i in sim.ids if i != old]
    sim.blocked = {(old, o) for o in others} | {(o, old) for o in others}
    _run_until(sim, 2000 + 3000)
    new = sim._leader()
    assert new is not None and new != old
    assert sim.nodes[old].role != LEADER          # resigned: no fetches from a majority
    new_epoch = sim.nodes[new].epoch
    stale = sim.nodes[old].end_offset
    sim.blocked = set()
    _run_until(sim, 2000 + 3000 + 3000)
    lead = sim._leader()
    assert lead is not None and lead != old       # its log is behind: it cannot win
    if pre_vote:
        # pre-vote: the returning node did not bump epochs, the leader stayed
        assert (lead, sim.nodes[lead].epoch) == (new, new_epoch)
    assert sim.nodes[old].leader_id == lead
    assert sim.committed[:len(committed_before)] == committed_before
    # the old leader's log is now the leader's (its stale tail was truncated)
    a, b = sim.nodes[old], sim.nodes[lead]
    upto = min(a.end_offset, b.end_offset)
    assert [a.entry(o) for o in range(a.log_start, upto)] == \
        [b.entry(o) for o in range(a.log_start, upto)]
    assert stale > 0 and upto > len(committed_before)


def _figure8(stop_at_hwm):
    """Raft's "figure 8" trap, scripted. Node 1 holds e1 (epoch 1) at offset
    1; node 2 holds x1 (epoch 2) there, never committed; node 3 only e0.
    Node 2 is cut off while node 1 wins epoch 4 with node 3's vote and
    replicates one entry per fetch. As soon as node 1's high watermark
    passes e1, node 1 crashes and node 2 comes back. A correct leader only
    commits e1 together with its own LeaderChange entry, which then blocks
    node 2; one that commits e1 on its own lets node 2 win and overwrite it."""
    from raft.messages import Entry, QuorumState
    e0, e1, x1 = Entry(0, 1, b"e0"), Entry(1, 1, b"e1"), Entry(1, 2, b"x1")
    disks = {1: (QuorumState(-1, 3), [e0, e1]), 2: (QuorumState(-1, 3), [e0, x1]),
             3: (QuorumState(-1, 3), [e0])}
    cut = {(2, 1), (1, 2), (2, 3), (3, 2)}
    sim = Sim(1, voters=3, faults=NO_FAULTS, duration_ms=10 ** 9, snapshot_bytes=10 ** 9,
              propose_every_ms=10 ** 9, disks=disks, blocked=cut,
              config={"max_fetch_entries": 1, "election_timeout_ms": 100})
    # node 3 must not stand first: give node 1 the earliest timer
    while sim.queue and sim.now < 5000:
        sim.step()
        n1 = sim.nodes[1]
        if n1 is not None and n1.role == LEADER and n1.hwm >= stop_at_hwm:
            break
    assert sim.nodes[1].role == LEADER and sim.nodes[1].epoch >= 4
    sim._crash(1)
    sim.blocked = {(1, 2), (2, 1), (1, 3), (3, 1)}
    while sim.queue and sim.now < 10000:
        sim.step()
    return sim


def test_figure8_a_leader_commits_older_entries_only_with_its_own():
    sim = _figure8(stop_at_hwm=2)
    # e1 was committed with the LeaderChange entry; node 3 (which has it) leads
    assert sim.committed[1] == (1, b"e1", False)
    assert sim._leader() == 3


def test_figure8_is_caught_when_the_rule_is_broken():
    undo = mutate("commit_older_epoch")
    try:
        with pytest.raises(Violation, match="leader completeness|committed entry 1 changed"):
            _figure8(stop_at_hwm=2)
    finally:
        undo()

"""Leader failover in raft/node.py: a voter whose connection to its leader is refused (the shell
tells it with peer_unreachable; a kill -9 closes the leader's sockets at once) elects a new leader
well before controller.quorum.fetch.timeout.ms, the followers one after the other (no split vote)."""
import heapq

from raft.node import LEADER
from tests.raft_sim import NO_FAULTS, Sim


def _failover_ms(seed, voters, refused=True):
    sim = Sim(seed, voters=voters, observers=0, faults=NO_FAULTS, duration_ms=10 ** 9)
    while sim._leader() is None or sim.now < 1000:
        sim.step()
    old = sim._leader()
    t0 = sim.now
    sim._crash(old)
    if not refused:   # only the fetch timeout tells the followers
        sim.queue = [q for q in sim.queue if q[2] != "refused"]
        heapq.heapify(sim.queue)
    while sim._leader() in (None, old):
        sim.step()
    assert sim.nodes[sim._leader()].role == LEADER
    return sim.now - t0, sim.stats["elections"]


def test_a_refused_connection_to_the_leader_elects_before_the_fetch_timeout():
    import statistics
    fetch_timeout = 600    # the simulation's (election timeout 300 ms)
    for voters in (3, 5):
        took = [_failover_ms(seed, voters) for seed in range(20)]
        # (a follower whose fetch timeout was about to fire anyway may stand at once too, and
        # split the vote: rare)
        fast = [t for t, elections in took if t < fetch_timeout // 2 and elections == 2]
        assert len(fast) >= 18 and statistics.median(t for t, _ in took) < 100, took
    # without the signal the followers wait out the fetch timeout
    slow = [_failover_ms(seed, 3, refused=False)[0] for seed in range(6)]
    assert statistics.median(slow) > fetch_timeout // 2, slow

"""What an idle node off the metadata quorum's leader wakes up for. Each trio sleep that ends is a
cancellation, and at 10,000 partitions an idle node's timers were about 15% of its CPU: the
checks only the active controller makes (elections, reassignments: ReplicationManager.tick) and
the metadata bootstrap polled 10-20 times a second on every node. Off the leader they now wait
for the next leadership change (a second at most); on the leader they poll as before. Virtual
time (trio's MockClock): the wake-ups are counted, not timed."""
from __future__ import annotations

import types

import trio
import trio.testing

from broker.quorum.image_undo import ImageUndo
from broker.quorum.replicated import ReplicatedMetadata
from broker.replication.manager import ReplicationManager
from raft import messages as m
from raft.roles import FOLLOWER, LEADER


def _quorum(role: str) -> ReplicatedMetadata:
    q = ReplicatedMetadata.__new__(ReplicatedMetadata)   # (the loops' state only: no storage, no sockets)
    q.shell = types.SimpleNamespace(node=types.SimpleNamespace(role=role, applied=0, epoch_start_offset=0))
    q.leader_changed = trio.Event()
    q._bootstrapped = False
    return q


def _wakes(role: str, loop) -> int:
    """Times ``loop(q, count)`` counted in 10 virtual seconds on a node of ``role``."""
    q = _quorum(role)
    wakes = [0]

    async def main():
        with trio.move_on_after(10):
            await loop(q, wakes)
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return wakes[0]


async def _bootstrap(q, wakes):
    def look():
        wakes[0] += 1
    q._maybe_bootstrap = look
    await q._bootstrap_loop()


async def _controller_checks(q, wakes):
    manager = ReplicationManager.__new__(ReplicationManager)
    manager.broker = types.SimpleNamespace(quorum=q, image=types.SimpleNamespace(brokers={1: None}))
    while True:
        await manager.tick(0.1)
        wakes[0] += 1


def test_off_the_quorum_leader_the_bootstrap_and_controller_checks_wait_for_a_leadership_change():
    # before: 200 looks (every 50 ms) and 100 checks (every 100 ms) in 10 s, on every node
    assert _wakes(FOLLOWER, _bootstrap) <= 11
    assert _wakes(FOLLOWER, _controller_checks) <= 11
    # the leader (active, or about to be) still looks as often as before
    assert _wakes(LEADER, _bootstrap) >= 190
    assert _wakes(LEADER, _controller_checks) >= 95


def test_a_leadership_change_wakes_the_checks_at_once():
    q = _quorum(FOLLOWER)
    woke = []

    async def main():
        async with trio.open_nursery() as nursery:
            async def checks():
                manager = ReplicationManager.__new__(ReplicationManager)
                manager.broker = types.SimpleNamespace(quorum=q, image=types.SimpleNamespace(brokers={1: None}))
                await manager.tick(0.1)
                woke.append(trio.current_time())
            nursery.start_soon(checks)
            await trio.sleep(0.3)
            q.shell.node.role = LEADER   # this node won an election
            q._was_leader, q._undo, q.metadata, q.node_id = False, ImageUndo(), None, 1
            q._on_leader(m.LeaderChange(1, 2))
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert woke and abs(woke[0] - 0.3) < 1e-6, woke

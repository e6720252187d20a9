"""Metadata quorum figures for raft/ + broker/quorum/shell.py, in one process
over loopback sockets (Kafka framing and codecs, memory storage with an
optional real fsync of a scratch file):

- commit latency: a leader proposes one entry and waits for the high
  watermark to pass it (p50/p99);
- failover: the leader's tasks and sockets are cancelled (kill -9 as seen by
  the others); time until a write proposed to the new leader commits. The
  killed node then restarts from its storage, so every round has 3 nodes.

    python3 -m tools.bench.quorum --kills 20 --writes 500

Timeouts default to Kafka's (election 1000 ms, fetch 2000 ms, backoff max
1000 ms).
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile

import trio

from broker.quorum.shell import MemoryStorage, NotLeaderError, ProposalLostError, QuorumShell
from raft.node import LEADER, Persisted, RaftConfig, RaftNode


class FsyncStorage(MemoryStorage):
    """Memory storage whose fsync really fsyncs a scratch file (the cost of
    a metadata log fsync on this machine)."""

    fsync_in_thread = True   # a real fsync: off the trio thread, as LogStorage's

    def __init__(self, path):
        super().__init__()
        self.fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)

    def apply(self, op):
        super().apply(op)
        os.write(self.fd, b"x" * 64)

    def fsync(self):
        os.fdatasync(self.fd)


class Cluster:
    def __init__(self, n, timeouts, storage_dir):
        self.n = n
        self.timeouts = timeouts
        self.storages = {i: (FsyncStorage(os.path.join(storage_dir, f"n{i}")) if storage_dir
                             else MemoryStorage()) for i in range(1, n + 1)}
        self.shells = {}
        self.scopes = {}
        self.ports = {}

    async def start_all(self, nursery):
        listeners = {i: await trio.open_tcp_listeners(0, host="127.0.0.1")
                     for i in range(1, self.n + 1)}
        self.ports = {i: ls[0].socket.getsockname()[1] for i, ls in listeners.items()}
        for i in listeners:
            await nursery.start(self._run, i, listeners[i])

    async def restart(self, nursery, i):
        listeners = await trio.open_tcp_listeners(self.ports[i], host="127.0.0.1")
        await nursery.start(self._run, i, listeners)

    async def _run(self, i, listeners, task_status=trio.TASK_STATUS_IGNORED):
        st = self.storages[i]
        persisted = Persisted(st.quorum_state, st.snapshot[0] if st.snapshot else None,
                              st.snapshot[1] if st.snapshot else b"", tuple(st.entries))
        node = RaftNode(RaftConfig(i, tuple(range(1, self.n + 1)), **self.timeouts),
                        random.Random(), QuorumShell.now_ms(), persisted)
        peers = {j: ("127.0.0.1", p) for j, p in self.ports.items()}
        shell = QuorumShell(node, peers, st)
        self.shells[i] = shell
        with trio.CancelScope() as scope:
            self.scopes[i] = scope
            await shell.run(listeners, task_status=task_status)

    def kill(self, i):
        self.scopes[i].cancel()
        del self.shells[i]

    def leader(self):
        for i, s in self.shells.items():
            if s.node.role == LEADER:
                return i
        return None

    async def write(self, data):
        while True:
            i = self.leader()
            if i is None:
                await trio.sleep(0.002)
                continue
            try:
                await self.shells[i].propose([data])
                return i
            except (NotLeaderError, ProposalLostError):
                await trio.sleep(0.002)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def bench(args):
    timeouts = dict(election_timeout_ms=args.election_timeout_ms,
                    fetch_timeout_ms=args.fetch_timeout_ms,
                    election_backoff_max_ms=args.backoff_max_ms)
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(args.nodes, timeouts, tmp if args.fsync else None)
        async with trio.open_nursery() as nursery:
            await cluster.start_all(nursery)
            with trio.fail_after(30):
                await cluster.write(b"warm-up")
            lat = []
            for k in range(args.writes):
                t0 = trio.current_time()
                await cluster.write(b"w%d" % k)
                lat.append((trio.current_time() - t0) * 1000)
            print(f"commit latency ({args.nodes} nodes, {args.writes} writes, fsync "
                  f"{'on' if args.fsync else 'off'}): p50 {pct(lat, 50):.2f} ms, "
                  f"p99 {pct(lat, 99):.2f} ms")
            fail = []
            for k in range(args.kills):
                victim = cluster.leader()
                t0 = trio.current_time()
                cluster.kill(victim)
                with trio.fail_after(60):
                    await cluster.write(b"after-kill-%d" % k)
                fail.append((trio.current_time() - t0) * 1000)
                await cluster.restart(nursery, victim)
                # let the restarted node catch up before the next kill
                await trio.sleep(args.settle_s)
            if fail:
                print(f"leader kill -> next committed write ({args.kills} kills): "
                      f"p50 {pct(fail, 50):.0f} ms, p99 {pct(fail, 99):.0f} ms, "
                      f"max {max(fail):.0f} ms, mean {statistics.mean(fail):.0f} ms")
            nursery.cancel_scope.cancel()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--writes", type=int, default=500)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--election-timeout-ms", type=int, default=1000)
    ap.add_argument("--fetch-timeout-ms", type=int, default=2000)
    ap.add_argument("--backoff-max-ms", type=int, default=1000)
    ap.add_argument("--settle-s", type=float, default=1.0)
    ap.add_argument("--fsync", action="store_true", help="fdatasync a scratch file per fsync")
    args = ap.parse_args(argv)
    trio.run(bench, args)


if __name__ == "__main__":
    main()

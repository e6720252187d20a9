"""Replication figures for kproto (in one process: three brokers and a
fourth node as controller, tools/replication_cluster.py; the brokers talk over
real sockets, so every record goes leader -> followers by Fetch):

- produce throughput and ack latency (p50/p99) with RF=3 acks=all against
  RF=1 (acks=1 and acks=all), same record size, same number of producers;
- failover time: an idempotent acks=all producer at full speed, the
  partition leader killed repeatedly; last ack before the kill -> first ack
  after it (p50/p99).

    python3 -m tools.bench.replication --seconds 5 --kills 20

All four nodes share one Python process (and its GIL), so these figures are a
floor; a multi-process cluster spreads the work over cores.
"""
from __future__ import annotations

import argparse
import time

import trio

from broker.controller.controller import TopicSpec
from tools.replication_cluster import Cluster, RawClient

FAST = {"replica.lag.time.max.ms": "5000", "replica.fetch.wait.max.ms": "100",
        "replica.fetch.backoff.ms": "50"}


def _pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))] if values else float("nan")


async def _throughput(cluster, client_factory, topic, leader, acks, seconds, producers, records, size):
    lat = []
    count = 0
    deadline = time.monotonic() + seconds
    payload = b"x" * size

    async def one(k):
        nonlocal count
        client = client_factory()
        try:
            while time.monotonic() < deadline:
                t0 = time.perf_counter()
                r = await client.produce(leader, topic, [payload] * records, acks=acks)
                if r.error_code:
                    raise RuntimeError(f"produce failed: {r.error_code}")
                lat.append(time.perf_counter() - t0)
                count += records
        finally:
            await client.aclose()
    async with trio.open_nursery() as n:
        for k in range(producers):
            n.start_soon(one, k)
    return count / seconds, _pct(lat, 0.5), _pct(lat, 0.99)


async def _failover(cluster, kills):
    client = RawClient(cluster)
    acked, times, kill_at = [], [], []
    stop = trio.Event()

    async def producer():
        seq = 0
        while not stop.is_set():
            while True:
                leader = cluster.partition("f").leader
                if leader in cluster.scopes:
                    try:
                        with trio.fail_after(3):
                            r = await client.produce(leader, "f", [b"v%d" % seq], producer_id=9, seq=seq,
                                                     timeout_ms=2000)
                        if r.error_code == 0:
                            acked.append(seq)
                            times.append(time.monotonic())
                            break
                    except (OSError, EOFError, trio.TooSlowError, trio.BrokenResourceError):
                        client.conns.pop(leader, None)
                await trio.sleep(0.005)
            seq += 1
    async with trio.open_nursery() as n:
        n.start_soon(producer)
        for _ in range(kills):
            target = len(acked) + 100
            await cluster.wait_for(lambda: len(acked) >= target, 30)
            leader = cluster.partition("f").leader
            kill_at.append(len(acked))
            cluster.kill(leader)
            target = len(acked) + 20
            await cluster.wait_for(lambda: len(acked) >= target, 30)
            await cluster.start_node(leader)
            await cluster.wait_for(lambda: len(cluster.partition("f").isr) == 3, 30)
        stop.set()
    await client.aclose()
    gaps = [times[i] - times[i - 1] for i in kill_at if 0 < i < len(times)]
    return _pct(gaps, 0.5), _pct(gaps, 0.99), len(gaps)


async def main_async(args):
    cluster = Cluster(4, FAST, controller=4)
    try:
        async with trio.open_nursery() as nursery:
            await cluster.start(nursery)
            c = cluster.brokers[4].controller
            c.create_topic(TopicSpec("rf3", -1, -1, {"min.insync.replicas": "2"}, assignments=[(0, [1, 2, 3])]))
            c.create_topic(TopicSpec("rf1", -1, -1, {}, assignments=[(0, [1])]))
            c.create_topic(TopicSpec("f", -1, -1, {"min.insync.replicas": "2"}, assignments=[(0, [1, 2, 3])]))
            await cluster.wait_for(lambda: ("rf3", 0) in cluster.brokers[1].replication.leaders)
            print(f"{args.producers} producers, {args.records} records of {args.size} B per request, "
                  f"{args.seconds} s each")
            for label, topic, acks in (("RF=1 acks=1  ", "rf1", 1), ("RF=1 acks=all", "rf1", -1),
                                       ("RF=3 acks=1  ", "rf3", 1), ("RF=3 acks=all", "rf3", -1)):
                rate, p50, p99 = await _throughput(cluster, lambda: RawClient(cluster), topic, 1, acks,
                                                   args.seconds, args.producers, args.records, args.size)
                print(f"{label}: {rate:10.0f} records/s  ack p50 {p50 * 1000:6.2f} ms  p99 {p99 * 1000:6.2f} ms")
            if args.kills:
                p50, p99, n = await _failover(cluster, args.kills)
                print(f"failover over {n} leader kills (last ack before -> first ack after): "
                      f"p50 {p50 * 1000:.0f} ms  p99 {p99 * 1000:.0f} ms")
            nursery.cancel_scope.cancel()
    finally:
        cluster.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--records", type=int, default=100, help="records per produce request")
    ap.add_argument("--size", type=int, default=100, help="bytes per record value")
    ap.add_argument("--kills", type=int, default=10)
    args = ap.parse_args(argv)
    trio.run(main_async, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

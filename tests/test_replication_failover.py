"""Leader failover under an idempotent acks=all producer (three brokers and a
controller in one process, tools/replication_cluster.py): the partition
leader is killed repeatedly while the producer sends at full speed, then
comes back as a follower. Every acknowledged record is read back exactly
once and in order from every replica.

KPROTO_REPLICATION_KILLS sets the number of kills (3 in CI; the longer run
in the report used 100)."""
from __future__ import annotations

import os
import time

import trio

from broker.controller.controller import TopicSpec
from tools.replication_cluster import Cluster, RawClient, _values

KILLS = int(os.environ.get("KPROTO_REPLICATION_KILLS", "3"))
FAST = {"replica.lag.time.max.ms": "1500", "replica.fetch.wait.max.ms": "50",
        "replica.fetch.backoff.ms": "50"}


async def _producer(cluster, client, acked, stop, ack_times):
    seq = 0
    while not stop.is_set():
        value = b"r%06d" % seq
        while True:
            leader = cluster.partition("t").leader
            err = None
            if leader in cluster.scopes:
                try:
                    with trio.fail_after(3):
                        r = await client.produce(leader, "t", [value], producer_id=42, seq=seq, timeout_ms=2000)
                    err = r.error_code
                except (OSError, EOFError, trio.TooSlowError, trio.BrokenResourceError):
                    client.conns.pop(leader, None)
                    err = -1
            else:
                err = -2
            if err == 0:
                acked.append(value)
                ack_times.append(time.monotonic())
                break
            await trio.sleep(0.01)
        seq += 1


def test_leader_killed_repeatedly_loses_and_duplicates_nothing_acknowledged():
    async def main():
        cluster = Cluster(4, FAST, controller=4)
        client = RawClient(cluster)
        acked, ack_times, kill_at = [], [], []
        stop = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                await cluster.start(nursery)
                c = cluster.brokers[4].controller
                c.create_topic(TopicSpec("t", -1, -1, {"min.insync.replicas": "2"}, assignments=[(0, [1, 2, 3])]))
                await cluster.wait_for(lambda: ("t", 0) in cluster.brokers[1].replication.leaders)
                nursery.start_soon(_producer, cluster, client, acked, stop, ack_times)
                with trio.fail_after(30 + 10 * KILLS):
                    for _k in range(KILLS):
                        target = len(acked) + 50
                        await cluster.wait_for(lambda: len(acked) >= target, 20, "acks")
                        leader = cluster.partition("t").leader
                        kill_at.append(len(acked))
                        cluster.kill(leader)
                        await cluster.wait_for(lambda: cluster.partition("t").leader not in (leader, -1), 20,
                                               "a new leader")
                        target = len(acked) + 20
                        await cluster.wait_for(lambda: len(acked) >= target, 20, "acks after failover")
                        await cluster.start_node(leader)
                        await cluster.wait_for(lambda: len(cluster.partition("t").isr) == 3, 20, "isr of 3")
                    target = len(acked) + 20
                    await cluster.wait_for(lambda: len(acked) >= target, 20, "final acks")
                    stop.set()
                    await cluster.wait_for(lambda: len({cluster.brokers[n].partitions.get("t", 0).log.log_end_offset
                                                        for n in (1, 2, 3)}) == 1, 20, "replicas in step")
                for n in (1, 2, 3):
                    plog = cluster.brokers[n].partitions.get("t", 0).log
                    values = [v for _o, v in _values(bytes(plog.read_bytes(0)))]
                    # every acknowledged record exactly once, in order (an unacknowledged last one may follow)
                    assert values[:len(acked)] == acked, (n, len(values), len(acked))
                    assert len(values) - len(acked) <= 1
                    assert len(set(values)) == len(values)
                nursery.cancel_scope.cancel()
        finally:
            await client.aclose()
            cluster.close()
        # failover: last ack before the kill -> first ack after it
        gaps = sorted(ack_times[i] - ack_times[i - 1] for i in kill_at if 0 < i < len(ack_times))
        print(f"\n{KILLS} kills, {len(acked)} records acknowledged; failover p50 {gaps[len(gaps) // 2]:.3f}s "
              f"p99 {gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))]:.3f}s")
    trio.run(main)

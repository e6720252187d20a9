"""DeleteRecords on a replicated partition (in one process: three brokers and a fourth node as
controller, tools/replication_cluster.py, real sockets between them): how long the leader's answer
takes now that it waits for every live follower to adopt the new log start from its next fetch
answer (Kafka's low watermark, broker/replication/low_watermark.py), RF=3 against RF=1, at the
default replica.fetch.wait.max.ms (500: the leader wakes its followers' long polls at once).

    python3 -m tools.bench.delete_records --deletes 200
"""
from __future__ import annotations

import argparse
import time

import trio

from kproto.messages.delete_records_request import DeleteRecordsRequest as D

from broker.controller.controller import TopicSpec
from tools.bench.replication import _pct
from tools.replication_cluster import Cluster, RawClient


async def _deletes(client, topic: str, leader: int, count: int) -> list[float]:
    lat = []
    for i in range(count):
        r = await client.produce(leader, topic, [b"x" * 100] * 2)
        assert r.error_code == 0, r
        req = D(timeout_ms=30000, topics=[D.DeleteRecordsTopic(name=topic, partitions=[
            D.DeleteRecordsPartition(partition_index=0, offset=r.base_offset + 1)])])
        t0 = time.perf_counter()
        p = (await client.conn(leader).request(req, 2)).topics[0].partitions[0]
        lat.append(time.perf_counter() - t0)
        assert p.error_code == 0 and p.low_watermark == r.base_offset + 1, p
    return lat


async def main_async(args):
    cluster = Cluster(4, {}, controller=4)
    client = RawClient(cluster)
    try:
        async with trio.open_nursery() as nursery:
            await cluster.start(nursery)
            c = cluster.brokers[4].controller
            c.create_topic(TopicSpec("rf3", -1, -1, {"min.insync.replicas": "2"}, assignments=[(0, [1, 2, 3])]))
            c.create_topic(TopicSpec("rf1", -1, -1, {}, assignments=[(0, [1])]))
            await cluster.wait_for(lambda: ("rf3", 0) in cluster.brokers[1].replication.leaders)
            await cluster.wait_for(lambda: cluster.partition("rf3").isr == [1, 2, 3])
            for topic in ("rf1", "rf3"):
                lat = await _deletes(client, topic, 1, args.deletes)
                print(f"{topic}: {args.deletes} DeleteRecords, answer p50 {_pct(lat, 0.5) * 1000:.2f} ms  "
                      f"p99 {_pct(lat, 0.99) * 1000:.2f} ms  max {max(lat) * 1000:.2f} ms")
            nursery.cancel_scope.cancel()
    finally:
        await client.aclose()
        cluster.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deletes", type=int, default=200)
    trio.run(main_async, ap.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A small benchmark of the two coordinators through a real `kproto serve`:
synchronous offset commits of one group member, and transactions (begin,
one record, the offsets sent to the transaction, commit) of one
transactional producer. Prints rates and p50/p99 latency.

    python3 tools/coord_bench.py [--commits N] [--txns N] [--port P]

With --in-process it measures the coordinators alone instead (a stand-in
broker whose partitions take appends and markers without storing them): CPU
time per offset commit and per transaction (AddPartitions + EndTxn with its
markers), the best of 5 rounds; steadier than the end-to-end figures on a
busy machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from broker.launch.process import BrokerProcess  # noqa: E402


def _figures(name: str, samples: list[float], seconds: float) -> dict:
    samples = sorted(samples)
    return {"workload": name, "ops": len(samples), "ops_per_s": round(len(samples) / seconds, 1),
            "p50_ms": round(statistics.median(samples) * 1000, 2),
            "p99_ms": round(samples[int(len(samples) * 0.99) - 1] * 1000, 2)}


def offset_commits(bootstrap: str, topic: str, count: int) -> dict:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "coord-bench", "enable.auto.commit": False,
                         "session.timeout.ms": 10000})
    consumer.assign([TopicPartition(topic, 0, 0)])
    samples = []
    started = time.perf_counter()
    for i in range(count):
        t = time.perf_counter()
        consumer.commit(offsets=[TopicPartition(topic, 0, i + 1)], asynchronous=False)
        samples.append(time.perf_counter() - t)
    seconds = time.perf_counter() - started
    consumer.close()
    return _figures("offset commit", samples, seconds)


def transactions(bootstrap: str, topic: str, count: int) -> dict:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "coord-bench-txn", "linger.ms": 0})
    producer.init_transactions(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "coord-bench-txn-group",
                         "enable.auto.commit": False})
    meta = consumer.consumer_group_metadata()
    samples = []
    started = time.perf_counter()
    for i in range(count):
        t = time.perf_counter()
        producer.begin_transaction()
        producer.produce(topic, b"x" * 100, partition=0)
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, i + 1)], meta, 30)
        producer.commit_transaction(30)
        samples.append(time.perf_counter() - t)
    seconds = time.perf_counter() - started
    consumer.close()
    return _figures("transaction", samples, seconds)


class _Partition:
    """A __consumer_offsets / __transaction_state partition this node leads alone (no
    replication to wait for): an append is its commit."""
    is_leader = True
    replication = None

    def append(self, batch, header, now_ms):
        pass


class _StandIn:
    """What the coordinators use of a broker, minus storage."""

    class partitions:  # noqa: N801
        @staticmethod
        def get(topic, index):
            return _Partition()

    class producers:  # noqa: N801
        @staticmethod
        def write_marker(*args):
            pass

    class producer_ids:  # noqa: N801
        n = 0

        @classmethod
        def next_id(cls):
            cls.n += 1
            return cls.n

    groups = None

    node_id = 1

    class image:  # noqa: N801
        features: dict = {}   # (no finalized transaction.version: the coordinator's v1)
        # the transactions' one partition, led by this node: markers are appended here
        topics = {"topic": types.SimpleNamespace(partitions={0: types.SimpleNamespace(leader=1)})}


def _best_cpu_us(fn, n: int, rounds: int = 5) -> float:
    import trio

    async def run():
        best = None
        for _ in range(rounds):
            t = time.process_time()
            for i in range(n):
                await fn(i)
            dt = time.process_time() - t
            best = dt if best is None else min(best, dt)
        return best / n * 1e6

    return trio.run(run)


def in_process(commits: int, txns: int) -> list[dict]:
    from broker.config.groups import GroupConfig
    from broker.groups.coordinator import GroupCoordinator
    from broker.transactions.config import TxnConfig
    from broker.transactions.coordinator import TransactionCoordinator
    now = int(time.time() * 1000)
    groups = GroupCoordinator(_StandIn(), GroupConfig())
    groups._apply(groups.state.activate(1, now_ms=now))

    async def commit(i):
        res = await groups.commit_offsets(group_id="g", member_id="", generation_id=-1,
                                          offsets=[("t", 0, i, -1, "", -1)], api_version=9)
        assert not any(res.errors.values()), res

    txn = TransactionCoordinator(_StandIn(), TxnConfig())
    txn._apply(txn.state.activate(1, {0: 0}, now_ms=now))
    ids = {}

    async def transaction(i):
        if not ids:
            r = await txn.init_producer_id("t", 60000)
            ids["pid"], ids["epoch"] = r.producer_id, r.producer_epoch
        assert await txn.add_partitions("t", ids["pid"], ids["epoch"], [("topic", 0)]) == 0
        await txn.end_txn("t", ids["pid"], ids["epoch"], True)

    return [{"workload": "offset commit, in process", "cpu_us_per_op": round(_best_cpu_us(commit, commits), 2)},
            {"workload": "transaction, in process", "cpu_us_per_op": round(_best_cpu_us(transaction, txns), 2)}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=2000)
    ap.add_argument("--txns", type=int, default=300)
    ap.add_argument("--port", type=int)
    ap.add_argument("--in-process", action="store_true", help="the coordinators alone, CPU time per operation")
    args = ap.parse_args()
    if args.in_process:
        for result in in_process(args.commits * 10, args.txns * 10):
            print(json.dumps(result))
        return
    with BrokerProcess(port=args.port) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("coord-bench", 1, 1)]).values():
            f.result()
        # warm up: creates __consumer_offsets and __transaction_state
        offset_commits(broker.bootstrap, "coord-bench", 50)
        transactions(broker.bootstrap, "coord-bench", 10)
        for result in (offset_commits(broker.bootstrap, "coord-bench", args.commits),
                       transactions(broker.bootstrap, "coord-bench", args.txns)):
            print(json.dumps(result))


if __name__ == "__main__":
    main()

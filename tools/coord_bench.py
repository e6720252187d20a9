"""A small benchmark of the two coordinators through a real `kproto serve`:
synchronous offset commits of one group member, and transactions (begin,
one record, the offsets sent to the transaction, commit) of one
transactional producer. Prints rates and p50/p99 latency.

    python3 tools/coord_bench.py [--commits N] [--txns N] [--port P]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tools.broker_process import BrokerProcess  # noqa: E402


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=2000)
    ap.add_argument("--txns", type=int, default=300)
    ap.add_argument("--port", type=int)
    args = ap.parse_args()
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

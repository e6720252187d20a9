"""Partition reassignment figures on a 3-node KRaft cluster (kproto, or a real Kafka 3.9 with
--kafka and KAFKA_HOME), measured the same way on both: a topic of one partition on two brokers
(RF=2, min.insync.replicas=2) preloaded with --records records of --size bytes, then
AlterPartitionReassignments moving the leader's replica to the third broker while an idempotent
acks=all producer keeps writing. Prints the time from the request to the completed move (replicas
= target, nothing listed as ongoing), the producer's largest ack gap during it, and whether every
acknowledged record is read back exactly once.

    python3 -m tools.bench.reassignment [--kafka] [--records 20000 --size 1000]

Data in a temporary directory, ephemeral loopback ports; every process it starts is stopped."""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time

from tools.cluster_client import QUIET, create_topic, partition_state, wait_until


def _partition(admin, topic):
    return partition_state(admin, topic, timeout=10)


def _wait(pred, timeout, what):
    # polled finely: the move's time is measured by this wait
    wait_until(pred, timeout, what, interval=0.05)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kafka", action="store_true", help="a real Kafka 3.9 cluster (KAFKA_HOME)")
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--size", type=int, default=1000)
    args = ap.parse_args(argv)
    import confluent_kafka
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient, TopicPartition

    from tools.chaos.cluster import Cluster
    work = tempfile.mkdtemp(prefix="kproto-reassign-bench-")
    cluster = Cluster("kafka" if args.kafka else "kproto", 3, work, use_netns=False,
                      kafka_home=os.environ.get("KAFKA_HOME"), log=lambda *a: None,
                      props={"replica.lag.time.max.ms": "10000"})
    try:
        cluster.start()
        bootstrap = ",".join(n.bootstrap for n in cluster.nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        topic = "moved"
        _wait(lambda: create_topic(admin, topic, replica_assignment=[[1, 2]]), 120, "topic")
        _wait(lambda: len(_partition(admin, topic)[2]) == 2, 60, "ISR of 2")
        payload = b"x" * args.size
        acked, ack_times, errors = [], [], []

        def on_delivery(err, msg):
            if err is None:
                acked.append(msg.value()[:12])
                ack_times.append(time.monotonic())
            else:
                errors.append(err)
        p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                      "linger.ms": 5, **QUIET})
        for i in range(args.records):
            p.produce(topic, b"%012d" % i + payload, on_delivery=on_delivery)
            if i % 1000 == 0:
                p.poll(0)
        p.flush(120)
        stop = threading.Event()

        def produce():
            i = args.records
            while not stop.is_set():
                p.produce(topic, b"%012d" % i + payload, on_delivery=on_delivery)
                i += 1
                p.poll(0)
                time.sleep(0.001)
            p.flush(60)
        t = threading.Thread(target=produce)
        t.start()
        time.sleep(1)
        leader, replicas, _ = _partition(admin, topic)
        target = [3] + [b for b in replicas if b != leader]
        ka = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        t0 = time.monotonic()
        result = ka.alter_partition_reassignments({TopicPartition(topic, 0): target})
        _wait(lambda: sorted(_partition(admin, topic)[1]) == sorted(target)
              and not ka.list_partition_reassignments({topic: [0]}), 300, "move")
        moved = time.monotonic() - t0
        time.sleep(2)
        stop.set()
        t.join(90)
        ka.close()
        during = [b - a for a, b in zip(ack_times, ack_times[1:]) if a >= t0 - 1]
        c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-read",
                                      "auto.offset.reset": "earliest", **QUIET})
        c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        seen, deadline = [], time.monotonic() + 120
        while len(seen) < len(acked) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(m.value()[:12])
        c.close()
        ok = len(seen) == len(set(seen)) and set(acked) <= set(seen)
        print(f"{'kafka' if args.kafka else 'kproto'}: alter={result[TopicPartition(topic, 0)]} "
              f"{leader}->{target}, {args.records} x {args.size} B preloaded: move completed in {moved:.2f} s; "
              f"largest ack gap during the move {max(during) * 1000 if during else 0:.0f} ms; "
              f"{len(acked)} acked, {len(errors)} errors, read back exactly once: {ok}")
        return 0 if ok and not errors else 1
    finally:
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())

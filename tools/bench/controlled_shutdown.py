"""Produce pause when a partition leader stops: SIGTERM (controlled shutdown) against kill -9,
on a 3-node KRaft cluster of kproto processes and, with --kafka, of real Kafka 3.9 nodes
(KAFKA_HOME), both started by tools/chaos/cluster.py on loopback with the same settings.

An idempotent acks=all confluent-kafka producer writes to a RF=3 partition (min.insync.replicas=2)
(5000 records a second by default, --rate); each round stops the partition's leader (SIGTERM, then kill -9 rounds), waits
for acks to resume, restarts the node and waits for the ISR of 3. The pause is the last ack
before the signal to the first ack after it. At the end every acknowledged record must be read
back exactly once, in order.

    python3 -m tools.bench.controlled_shutdown --rounds 5 [--kafka]
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import tempfile
import time

from tools.cluster_client import (QUIET, AckedProducer, create_topic, longest_ack_gap, partition_state,
                                  read_partition, wait_until)

SETTINGS = {"broker.heartbeat.interval.ms": "500", "broker.session.timeout.ms": "9000",
            "replica.lag.time.max.ms": "10000", "auto.leader.rebalance.enable": "false"}
TOPIC = "pause"


def run(kind: str, rounds: int, kafka_home: str | None, rate: int = 5000) -> dict:
    from confluent_kafka.admin import AdminClient

    from tools.chaos.cluster import Cluster
    work = tempfile.mkdtemp(prefix=f"kproto-pause-{kind}-")
    cluster = Cluster(kind, 3, work, use_netns=False, kafka_home=kafka_home, log=lambda *a: None,
                      props=dict(SETTINGS))
    cluster.start()
    try:
        boot = ",".join(n.bootstrap for n in cluster.nodes)
        admin = AdminClient({"bootstrap.servers": boot, **QUIET})

        def part():
            leader, _replicas, isr = partition_state(admin, TOPIC)
            return leader, isr
        wait_until(lambda: create_topic(admin, TOPIC, timeout=30), 120, "the topic", interval=0.05)
        wait_until(lambda: len(part()[1]) == 3, 60, "an ISR of 3", interval=0.05)
        # (the read-back must stay short: a bounded rate)
        producer = AckedProducer(boot, TOPIC, b"m%09d", rate=rate, message_timeout_ms=120000,
                                 flush_timeout=120).start()
        acked = producer.acked
        pauses = {"sigterm": [], "kill -9": []}
        exits = []
        try:
            for how in ["sigterm"] * rounds + ["kill -9"] * rounds:
                producer.wait_for_acks(2000, 120, interval=0.05)
                leader = part()[0]
                node = cluster.nodes[leader - 1]
                at = time.monotonic()
                if how == "sigterm":
                    os.kill(node.proc.pid, signal.SIGTERM)
                    node.proc.wait(300)
                    exits.append(time.monotonic() - at)
                else:
                    node.kill()
                producer.wait_for_acks(500, 120, "acks after the leader stopped", interval=0.05)
                pauses[how].append(longest_ack_gap(producer.ack_times, at))
                new_leader = part()[0]
                print(f"  {kind} {how} of leader {leader}: pause {pauses[how][-1]:.3f} s, new leader {new_leader}",
                      flush=True)
                node.start()
                wait_until(lambda: len(part()[1]) == 3, 120, "the ISR of 3 again", interval=0.05)
        finally:
            producer.stop(180)
        values = read_partition(boot, TOPIC, len(acked), 300, group="pause-readback")
        return {"kind": kind, "pauses": pauses, "exits": exits, "acked": len(acked),
                "errors": [str(e) for e in producer.errors[:3]], "exactly_once_in_order": values == acked}
    finally:
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)


def _fmt(v):
    return f"p50 {statistics.median(v):.3f} s, max {max(v):.3f} s (n={len(v)})" if v else "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rate", type=int, default=5000, help="records a second (0: as fast as it goes)")
    ap.add_argument("--kafka", action="store_true", help="also a real Kafka 3.9 cluster (KAFKA_HOME)")
    args = ap.parse_args(argv)
    kinds = ["kproto"] + (["kafka"] if args.kafka else [])
    ok = True
    for kind in kinds:
        r = run(kind, args.rounds, os.environ.get("KAFKA_HOME"), args.rate)
        ok &= r["exactly_once_in_order"] and not r["errors"]
        print(f"{kind}: SIGTERM pause {_fmt(r['pauses']['sigterm'])}; kill -9 pause {_fmt(r['pauses']['kill -9'])}; "
              f"SIGTERM to exit {_fmt(r['exits'])}; {r['acked']} acked, read back once in order: "
              f"{r['exactly_once_in_order']}, errors {r['errors']}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

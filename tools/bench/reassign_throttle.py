"""Replication throttles with Kafka's own tool, on a 3-node KRaft cluster (kproto, or a real
Kafka 3.9 with --kafka; both need KAFKA_HOME for kafka-reassign-partitions.sh): two topics of one
partition on brokers 1 and 2, preloaded with --mb MB each, get a replica on broker 3 with
`kafka-reassign-partitions.sh --execute`, the first without and the second with `--throttle
--rate` (bytes/s), while an acks=all producer writes ~20 records/s to the throttled partition.
Prints each catch-up time (request to broker 3 in the ISR), the throttle configs the tool set
(kafka-configs.sh --describe), what `--verify` prints and the configs it leaves, and the
producer's acks during the throttled move.

    python3 -m tools.bench.reassign_throttle [--kafka] [--mb 3] [--rate 200000]

Data in a temporary directory, ephemeral loopback ports; every process it starts is stopped."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time

from tools.cluster_client import QUIET, AckProbe, create_topic, partition_state, wait_until

RECORD = 10_000


def _tool(home: str, name: str, *args: str) -> str:
    out = subprocess.run([os.path.join(home, "bin", name), *args], capture_output=True, text=True, timeout=120)
    return (out.stdout + out.stderr).strip()


def _throttle_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if "throttled" in line]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kafka", action="store_true", help="a real Kafka 3.9 cluster")
    ap.add_argument("--mb", type=float, default=3.0, help="MB preloaded into each topic")
    ap.add_argument("--rate", type=int, default=200_000, help="--throttle, bytes/s")
    args = ap.parse_args(argv)
    home = os.environ.get("KAFKA_HOME")
    if not home:
        print("KAFKA_HOME is not set: kafka-reassign-partitions.sh is needed")
        return 2
    import confluent_kafka
    from confluent_kafka.admin import AdminClient

    from tools.chaos.cluster import Cluster
    kind = "kafka" if args.kafka else "kproto"
    work = tempfile.mkdtemp(prefix="kproto-throttle-bench-")
    cluster = Cluster(kind, 3, work, use_netns=False, kafka_home=home, log=lambda *a: None,
                      props={"replica.lag.time.max.ms": "10000"})
    try:
        cluster.start()
        bootstrap = ",".join(n.bootstrap for n in cluster.nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                                      "compression.type": "none", **QUIET})
        for topic in ("free", "slow"):
            wait_until(lambda: create_topic(admin, topic, replica_assignment=[[1, 2]]), 120, "topic", interval=0.2)
            wait_until(lambda: len(partition_state(admin, topic, timeout=10)[2]) == 2, 60, "ISR of 2", interval=0.2)
            for _ in range(int(args.mb * 1e6) // RECORD):
                p.produce(topic, b"x" * RECORD)
                p.poll(0)
            assert p.flush(120) == 0

        def reassign(topic: str, *extra: str) -> tuple[float, str]:
            plan = os.path.join(work, f"{topic}.json")
            with open(plan, "w") as f:
                json.dump({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 2, 3]}]}, f)
            started = time.monotonic()
            out = _tool(home, "kafka-reassign-partitions.sh", "--bootstrap-server", bootstrap,
                        "--reassignment-json-file", plan, "--execute", *extra)
            wait_until(lambda: 3 in partition_state(admin, topic, timeout=10)[2], 600, f"{topic}: 3 in the ISR",
                       interval=0.1)
            return time.monotonic() - started, out

        free, _ = reassign("free")
        with AckProbe(bootstrap, "slow") as probe:
            slow, executed = reassign("slow", "--throttle", str(args.rate))
        lat, errors = probe.latencies, probe.errors

        def configs() -> list[str]:
            lines = []
            for b in (1, 2, 3):
                lines += [f"broker {b}: {x}" for x in _throttle_lines(_tool(
                    home, "kafka-configs.sh", "--bootstrap-server", bootstrap, "--entity-type", "brokers",
                    "--entity-name", str(b), "--describe"))]
            lines += [f"topic slow: {x}" for x in _throttle_lines(_tool(
                home, "kafka-configs.sh", "--bootstrap-server", bootstrap, "--entity-type", "topics",
                "--entity-name", "slow", "--describe"))]
            return lines

        set_by_execute = configs()
        plan = os.path.join(work, "slow.json")
        verify = _tool(home, "kafka-reassign-partitions.sh", "--bootstrap-server", bootstrap,
                       "--reassignment-json-file", plan, "--verify")
        left = configs()
        size = int(args.mb * 1e6) // RECORD * RECORD
        print(f"{kind}: {size / 1e6:.1f} MB per topic; catch-up unthrottled {free:.2f} s, "
              f"--throttle {args.rate} {slow:.2f} s ((size - 1 MiB) / rate = {(size - 1048576) / args.rate:.1f} s); "
              f"acks=all during the throttled move: {len(lat)} acks, {len(errors)} errors, "
              f"max {max(lat, default=0) * 1000:.0f} ms")
        print("--execute said:\n  " + "\n  ".join(executed.splitlines()[-3:]))
        print("throttles set:\n  " + "\n  ".join(set_by_execute or ["(none)"]))
        print("--verify said:\n  " + "\n  ".join(verify.splitlines()))
        print("throttles left after --verify:\n  " + "\n  ".join(left or ["(none)"]))
        return 0 if not errors and set_by_execute and not left else 1
    finally:
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())

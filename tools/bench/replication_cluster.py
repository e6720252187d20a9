"""Replication figures for a 3-node cluster of real processes, kproto and (with
--kafka and KAFKA_HOME) a real Kafka 3.9 cluster in the same run, on loopback
(combined broker,controller KRaft nodes, tools/chaos/cluster.py; the same
broker properties for both, Kafka's keys):

- produce throughput and ack latency (p50/p99 per record, delivery callback)
  of one confluent-kafka producer at full speed: RF=1 acks=1, RF=1 acks=all,
  RF=3 acks=all (idempotent; min.insync.replicas=2), each partition led by
  the same node;
- failover time: an idempotent acks=all producer at a steady rate, the
  partition leader killed (-9) --kills times; last ack before the kill ->
  first ack after it (p50/p99); the node is restarted and back in the ISR
  before the next kill.

    KAFKA_HOME=~/.cache/kproto-ref/kafka python3 -m tools.bench.replication_cluster --kafka --kills 10

(tools/bench/replication.py measures the same in one process, three brokers
sharing one interpreter.) Every process it starts is stopped at the end.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tools.chaos.cluster import Cluster
from tools.cluster_client import wait_until

QUIET = {"log_level": 0, "error_cb": lambda err: None}
SETTINGS = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "300",
            "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "group.initial.rebalance.delay.ms": "0"}


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def _partition(admin, topic):
    p = admin.list_topics(topic, timeout=5).topics[topic].partitions[0]
    return p.leader, list(p.isrs)


def _create(admin, topic, replicas, configs=None):
    def once():
        try:
            admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[replicas],
                                          config=configs or {})], request_timeout=15)[topic].result(30)
        except KafkaException as e:
            if "already exists" not in str(e).lower():
                raise   # (e.g. a node not registered yet: retried)
        return True
    wait_until(once, 90, f"{topic} created")
    wait_until(lambda: _partition(admin, topic) == (replicas[0], sorted(replicas)) or
               (_partition(admin, topic)[0] == replicas[0] and len(_partition(admin, topic)[1]) == len(replicas)),
               60, f"{topic} led by node {replicas[0]}")


def throughput(bootstrap, topic, acks, idempotent, seconds, size):
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": idempotent,
                  "linger.ms": 5, "queue.buffering.max.messages": 20000, **QUIET})
    lat, errors = [], []
    payload = b"x" * size

    def done(err, _msg, t0):
        if err is None:
            lat.append(time.perf_counter() - t0)
        else:
            errors.append(err)
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        try:
            t0 = time.perf_counter()
            p.produce(topic, payload, partition=0, on_delivery=lambda e, m, t0=t0: done(e, m, t0))
        except BufferError:
            p.poll(0.005)
        p.poll(0)
    p.flush(60)
    elapsed = time.perf_counter() - start
    return len(lat) / elapsed, pct(lat, .5), pct(lat, .99), len(errors)


def failover(cluster, admin, bootstrap, topic, kills, rate, log):
    acks = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2,
                  "message.timeout.ms": 120000, **QUIET})
    errors = []

    def done(err, _msg):
        if err is None:
            acks.append(time.monotonic())
        else:
            errors.append(err)
    gaps = []
    seq = 0
    start = time.monotonic()

    def pump(until):
        nonlocal seq
        while not until():
            due = start + seq / rate
            now = time.monotonic()
            if due > now:
                p.poll(min(due - now, 0.05))
                continue
            try:
                p.produce(topic, b"v%d" % seq, partition=0, on_delivery=done)
                seq += 1
            except BufferError:
                p.poll(0.01)
            p.poll(0)

    def pump_for(seconds, what, cond):
        deadline = time.monotonic() + seconds
        pump(lambda: cond() or time.monotonic() > deadline)
        if not cond():
            raise RuntimeError(f"timed out: {what}")
    pump_for(60, "first acks", lambda: len(acks) >= 200)
    for k in range(kills):
        leader = _partition(admin, topic)[0]
        node = cluster.nodes[leader - 1]
        n_before = len(acks)
        t_kill = time.monotonic()
        node.kill()
        # acks flowing again (50 after the kill; answers already on their way when the leader
        # died arrive after it too), measured before the restart: node.start() blocks, and
        # nothing polls the producer meanwhile
        pump_for(120, "acks after the kill", lambda: sum(1 for t in acks[n_before:] if t > t_kill) >= 50)
        window = sorted(acks[n_before - 1:] if n_before else acks)
        gaps.append(max(b - a for a, b in zip(window, window[1:])))
        node.start()
        state = {}

        def isr_full():
            state["p"] = _partition(admin, topic)
            return len(state["p"][1]) == 3
        pump_for(120, "the killed node back in the ISR", isr_full)
        log(f"  kill {k + 1}: node {leader}, failover {gaps[-1] * 1000:.0f} ms, now {state['p']}")
        pump_for(30, "acks", lambda n=len(acks): len(acks) >= n + 100)
    p.flush(120)
    return gaps, errors


def bench(kind, args, log):
    workdir = tempfile.mkdtemp(prefix=f"kproto-bench-{kind}-")
    home = os.environ.get("KAFKA_HOME") if kind == "kafka" else None
    extra = dict(kv.split("=", 1) for kv in args.set)
    cluster = Cluster(kind, 3, workdir, use_netns=False, kafka_home=home, log=log, props={**SETTINGS, **extra})
    out = {}
    try:
        t = time.monotonic()
        cluster.start()
        bootstrap = ",".join(n.bootstrap for n in cluster.nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        _create(admin, "rf1", [1], {"min.insync.replicas": "1"})
        _create(admin, "rf3", [1, 2, 3], {"min.insync.replicas": "2"})
        _create(admin, "fo", [1, 2, 3], {"min.insync.replicas": "2"})
        log(f"{kind}: 3 nodes up and topics led by node 1 in {time.monotonic() - t:.0f} s")
        for label, topic, acks, idem in (("RF=1 acks=1", "rf1", "1", False), ("RF=1 acks=all", "rf1", "all", False),
                                         ("RF=3 acks=all", "rf3", "all", True)) if args.seconds else ():
            throughput(bootstrap, topic, acks, idem, 2, args.size)   # warm-up
            rate, p50, p99, errs = throughput(bootstrap, topic, acks, idem, args.seconds, args.size)
            out[label] = (rate, p50, p99)
            log(f"{kind} {label:14s} {rate:9.0f} records/s  ack p50 {p50 * 1000:7.1f} ms  p99 {p99 * 1000:7.1f} ms"
                + (f"  ({errs} errors)" if errs else ""))
        if args.kills:
            gaps, errors = failover(cluster, admin, bootstrap, "fo", args.kills, args.rate, log)
            out["failover"] = gaps
            log(f"{kind} failover over {len(gaps)} leader kills (last ack before -> first ack after): "
                f"p50 {pct(gaps, .5) * 1000:.0f} ms  p99 {pct(gaps, .99) * 1000:.0f} ms  "
                f"max {max(gaps) * 1000:.0f} ms" + (f"  ({len(errors)} send errors)" if errors else ""))
    finally:
        cluster.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=8, help="seconds per throughput figure (0: none)")
    ap.add_argument("--size", type=int, default=100, help="bytes per record value")
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--rate", type=float, default=500, help="records/s of the failover producer")
    ap.add_argument("--kafka", action="store_true", help="also a real Kafka 3.9 cluster (KAFKA_HOME)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker property for every node, e.g. log.flush.interval.messages=1 (fsync before ack)")
    args = ap.parse_args(argv)
    log = lambda m: print(m, flush=True)   # noqa: E731
    log(f"one confluent-kafka producer, {args.size} B values, {args.seconds} s per figure; "
        f"broker settings {SETTINGS} {' '.join(args.set)}")
    results = {"kproto": bench("kproto", args, log)}
    if args.kafka:
        if not os.environ.get("KAFKA_HOME"):
            log("--kafka: KAFKA_HOME is not set; Kafka skipped")
        else:
            results["kafka"] = bench("kafka", args, log)
    log("")
    log(f"{'':16s}" + "".join(f"{k:>34s}" for k in results))
    for label in ("RF=1 acks=1", "RF=1 acks=all", "RF=3 acks=all") if args.seconds else ():
        log(f"{label:16s}" + "".join(f"{r[label][0]:>10.0f} rec/s p50 {r[label][1] * 1000:5.1f} p99 "
                                     f"{r[label][2] * 1000:6.1f} ms" for r in results.values() if label in r))
    if args.kills:
        log(f"{'failover':16s}" + "".join(f"{'':>6s}p50 {pct(r['failover'], .5) * 1000:6.0f} ms p99 "
                                          f"{pct(r['failover'], .99) * 1000:6.0f} ms"
                                          for r in results.values() if r.get("failover")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

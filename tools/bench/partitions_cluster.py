"""Partitions at seed scale on three nodes: a 3-node cluster (combined broker,controller processes
on loopback, tools/chaos/cluster.py), T topics x P partitions of replication factor 3 created
through the admin API, then per node: create time (answered; every partition listed with a leader
and a full ISR), Metadata latency for all topics, idle CPU, RSS, open files and memory maps; one
node killed -9 and restarted (until it listens, and until it is back in every ISR); and a
produce/consume run spread over the first --spread-topics topics (1,000 partitions by default).

    python3 -m tools.bench.partitions_cluster [--topics 100] [--partitions 100] [--idle 20]
                                              [--targets kproto,kafka] [--records 200000]

The kafka target (Apache Kafka 3.9 from KAFKA_HOME, three KRaft combined nodes, KAFKA_HEAP_OPTS
as set, -Xmx512m by default) runs the same steps after kproto. Every process it starts is stopped
at the end. A shared machine's other load shows in every figure: record `uptime` beside them.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

from tools.bench.options import partition_count_arguments, target_arguments, target_names
from tools.bench.partitions import _counts, _metadata_ms, _metadata_wire_ms

QUIET = {"log_level": 0, "error_cb": lambda err: None}


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap, **QUIET})


def _state(admin, replicas: int = 3) -> tuple[int, int, int]:
    """(partitions listed, with a leader, with a full ISR) of user topics; zeros while unreachable."""
    try:
        md = admin.list_topics(timeout=30)
    except Exception:   # noqa: BLE001 - a node restarting
        return 0, 0, 0
    listed = led = full = 0
    for name, t in md.topics.items():
        if name.startswith("__"):
            continue
        for p in t.partitions.values():
            listed += 1
            led += p.leader >= 0
            full += len(p.isrs) >= replicas
    return listed, led, full


def _not_in_isr(admin, node_id: int) -> int:
    """User partitions that have node_id as a replica but not in their ISR (-1 while unreachable)."""
    try:
        md = admin.list_topics(timeout=30)
    except Exception:   # noqa: BLE001
        return -1
    return sum(1 for name, t in md.topics.items() if not name.startswith("__")
               for p in t.partitions.values() if node_id in p.replicas and node_id not in p.isrs)


def _idle_cpu(pids: list[int], seconds: float) -> list[float]:
    """Share of one core each process used over the same ``seconds``."""
    from tools.bench.procstat import cpu_seconds
    c0, t0 = [cpu_seconds(p) for p in pids], time.monotonic()
    time.sleep(seconds)
    dt = time.monotonic() - t0
    return [round((cpu_seconds(p) - c) / dt, 4) for p, c in zip(pids, c0)]


def _uptime() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _throughput(bootstrap: str, topics: list[str], partitions: int, records: int, size: int) -> dict:
    """One confluent-kafka producer (acks=all, linger 5 ms) writing ``records`` values of ``size``
    bytes round-robin over every partition of ``topics``, then one consumer reading them all."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "queue.buffering.max.messages": 200000, "queue.buffering.max.kbytes": 512 * 1024,
                  "message.timeout.ms": 300000, **QUIET})
    payload = b"x" * size
    acked, errors = [0], [0]

    def done(err, _msg):
        if err is None:
            acked[0] += 1
        else:
            errors[0] += 1
    n = len(topics) * partitions
    t0 = time.perf_counter()
    for i in range(records):
        slot = i % n
        while True:
            try:
                p.produce(topics[slot // partitions], payload, partition=slot % partitions, on_delivery=done)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(600)
    produce_s = time.perf_counter() - t0
    out = {"produced": acked[0], "produce_errors": errors[0], "produce_records_s": round(acked[0] / produce_s),
           "produce_mib_s": round(acked[0] * size / produce_s / (1 << 20), 1)}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                  "enable.auto.commit": False, **QUIET})
    # assigned, not subscribed: no group join in the figure
    c.assign([TopicPartition(t, i, OFFSET_BEGINNING) for t in topics for i in range(partitions)])
    got = 0
    t0 = time.perf_counter()
    deadline = time.monotonic() + 600
    while got < acked[0] and time.monotonic() < deadline:
        for m in c.consume(10000, timeout=1.0):
            if m.error() is None:
                got += 1
    consume_s = time.perf_counter() - t0
    c.close()
    out.update({"consumed": got, "consume_records_s": round(got / consume_s),
                "consume_mib_s": round(got * size / consume_s / (1 << 20), 1)})
    return out


def _watch(cluster, folder: str, threshold_ms: float) -> None:
    """Run every kproto node under tools/bench/loopwatch.py: its slow event-loop steps and their
    stacks in folder/n<i>-loopwatch.json (n<i>-<phase>.json: copies at the end of each phase)."""
    os.makedirs(folder, exist_ok=True)
    for node in cluster.nodes:
        def command(node=node, real=node.command):
            cmd = real()
            i = cmd.index(node.launcher)
            report = os.path.abspath(os.path.join(folder, f"{node.name}-loopwatch.json"))
            return cmd[:i] + ["tools.bench.loopwatch", "--out", report, "--threshold-ms", str(threshold_ms),
                              "--"] + cmd[i + 1:]
        node.command = command


def _snapshot(folder: str | None, phase: str) -> None:
    """Copy each node's loopwatch report as it is now (they are cumulative, rewritten every 3 s)."""
    if not folder:
        return
    time.sleep(3.5)
    for name in sorted(os.listdir(folder)):
        if name.endswith("-loopwatch.json"):
            shutil.copy(os.path.join(folder, name), os.path.join(folder, name.replace("loopwatch", phase)))


def run(kind: str, args, log) -> dict:
    from confluent_kafka.admin import NewTopic
    from tools.chaos.cluster import Cluster
    workdir = tempfile.mkdtemp(prefix=f"kproto-bench-rf3-{kind}-")
    home = args.kafka_home if kind == "kafka" else None
    props = dict(kv.split("=", 1) for kv in args.set)
    cluster = Cluster(kind, 3, workdir, use_netns=False, kafka_home=home, log=log, props=props)
    if kind == "kproto" and args.loopwatch:
        _watch(cluster, args.loopwatch, args.loopwatch_ms)
    out: dict = {"target": kind, "topics": args.topics, "partitions_per_topic": args.partitions,
                 "load_start": _uptime()}
    try:
        t0 = time.monotonic()
        cluster.start()
        out["start_empty_s"] = round(time.monotonic() - t0, 2)
        pids = [n.proc.pid for n in cluster.nodes]
        log(f"{kind}: 3 nodes listening after {out['start_empty_s']} s, pids {pids}")
        bootstrap = ",".join(n.bootstrap for n in cluster.nodes)
        admin = _admin(bootstrap)
        total = args.topics * args.partitions
        names = [f"seed-{i:03d}" for i in range(args.topics)]
        errors: list[str] = []
        t0 = time.monotonic()
        retried = 0
        for i in range(0, args.topics, args.per_request):
            todo = names[i:i + args.per_request]
            for _try in range(30):
                # retried as Kafka's admin client retries them: a node not registered yet
                # (INVALID_REPLICATION_FACTOR), a controller change (NOT_CONTROLLER), a timeout
                # (the topic may exist then: "already exists" counts as created)
                futures = admin.create_topics([NewTopic(n, num_partitions=args.partitions, replication_factor=3)
                                               for n in todo], operation_timeout=600, request_timeout=600)
                again = []
                for name, fut in futures.items():
                    try:
                        fut.result(timeout=600)
                    except Exception as exc:   # noqa: BLE001 - reported
                        text = str(exc)
                        if "already exists" in text.lower():
                            continue
                        if _try < 29 and any(k in text for k in ("REPLICATION_FACTOR", "NOT_CONTROLLER",
                                                                  "TIMED_OUT", "Timed out")):
                            again.append(name)
                        else:
                            errors.append(f"{name}: {exc}")
                if not again:
                    break
                retried += len(again)
                todo = again
                time.sleep(1)
        out["create_answered_s"] = round(time.monotonic() - t0, 2)
        out["create_retried_topics"] = retried
        log(f"{kind}: CreateTopics answered after {out['create_answered_s']} s ({retried} topics retried, "
            f"{len(errors)} errors {errors[:2]})")
        state = (0, 0, 0)
        total -= 0 if not errors else args.partitions * len(errors)   # (reported) never created
        deadline = time.monotonic() + args.wait   # (from the last answer)
        while time.monotonic() < deadline:
            state = _state(admin)
            if state[0] >= total and state[1] >= total and not out.get("create_all_led_s"):
                out["create_all_led_s"] = round(time.monotonic() - t0, 2)
            if state[2] >= total:
                break
            time.sleep(1)
        out["create_full_isr_s"] = round(time.monotonic() - t0, 2)
        out["create_errors"] = errors[:5]
        out["after_create"] = dict(zip(("listed", "led", "full_isr"), state))
        log(f"{kind}: {state} listed/led/full ISR after {out['create_full_isr_s']} s")
        nodes = cluster.nodes
        out["metadata_all_topics_ms"] = [round(_metadata_ms(_admin(n.bootstrap)), 1) for n in nodes]
        out["metadata_all_topics_wire_ms"] = [round(_metadata_wire_ms(n.bootstrap), 1) for n in nodes]
        out["settling_cpu_core"] = _idle_cpu(pids, args.settle)
        _snapshot(args.loopwatch if kind == "kproto" else None, "created")
        out["idle_cpu_core"] = _idle_cpu(pids, args.idle)
        out["load_idle"] = _uptime()
        out["per_node"] = [_counts(p) for p in pids]
        log(f"{kind}: idle {out['idle_cpu_core']} per node, {out['per_node']}")

        if not args.no_restart:
            victim = nodes[-1]
            vid = victim.index + 1
            others = _admin(",".join(n.bootstrap for n in nodes[:-1]))
            _snapshot(args.loopwatch if kind == "kproto" else None, "idle")
            victim.kill()
            t0 = time.monotonic()
            victim.start(timeout=args.wait)
            out["restart_listening_s"] = round(time.monotonic() - t0, 2)
            log(f"{kind}: node {vid} listening again after {out['restart_listening_s']} s, pid {victim.proc.pid}")
            missing = -1
            first_seen = None
            deadline = time.monotonic() + args.wait
            while time.monotonic() < deadline:
                missing = _not_in_isr(others, vid)
                if missing > 0 and first_seen is None:
                    first_seen = missing
                if missing == 0 and (first_seen is not None or time.monotonic() - t0 > 30):
                    break
                time.sleep(1)
            out["restart_back_in_every_isr_s"] = round(time.monotonic() - t0, 2)
            out["restart_out_of_isr_seen"] = first_seen
            out["restart_not_in_isr_at_end"] = missing
            out["load_restart"] = _uptime()
            pids[-1] = victim.proc.pid
            out["restarted_node"] = _counts(victim.proc.pid)
            log(f"{kind}: node {vid} listening after {out['restart_listening_s']} s, back in every ISR "
                f"after {out['restart_back_in_every_isr_s']} s ({first_seen} partitions seen without it)")
            out["idle_cpu_after_restart"] = _idle_cpu(pids, args.idle)
            _snapshot(args.loopwatch if kind == "kproto" else None, "restarted")

        if args.records:
            spread = names[:args.spread_topics]
            out["spread_partitions"] = len(spread) * args.partitions
            out["throughput"] = _throughput(bootstrap, spread, args.partitions, args.records, args.size)
            out["load_throughput"] = _uptime()
            log(f"{kind}: {out['throughput']}")
        return out
    finally:
        cluster.close()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.partitions_cluster", description=__doc__.split("\n\n")[0])
    partition_count_arguments(ap)
    ap.add_argument("--wait", type=float, default=900.0, help="longest wait for a state (s)")
    ap.add_argument("--records", type=int, default=200000, help="records of the produce/consume run (0: none)")
    ap.add_argument("--size", type=int, default=1024, help="bytes per record value")
    ap.add_argument("--spread-topics", type=int, default=10, help="topics the produce/consume run writes to")
    target_arguments(ap)
    ap.add_argument("--keep", action="store_true", help="keep the data folders")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker property for every node")
    ap.add_argument("--loopwatch", metavar="DIR", help="run the kproto nodes under tools/bench/loopwatch.py: "
                    "slow event-loop steps and their stacks per node and phase (DIR/n<i>-<phase>.json)")
    ap.add_argument("--loopwatch-ms", type=float, default=50.0, help="with --loopwatch: the slow step threshold")
    args = ap.parse_args(argv)
    os.environ.setdefault("KAFKA_HEAP_OPTS", "-Xmx512m")
    log = lambda m: print(m, flush=True)   # noqa: E731
    for kind in target_names(args.targets):
        if kind == "kafka" and not args.kafka_home:
            log("kafka: KAFKA_HOME is not set; skipped")
            continue
        print(json.dumps(run(kind, args, log), indent=2), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

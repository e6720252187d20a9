"""The broker's ceiling with Kafka's own Java load generators
(kafka-producer-perf-test.sh, kafka-consumer-perf-test.sh: far cheaper per
record than a Python client), kproto beside Apache Kafka in the same run.

For each layout (one node; a 3-node cluster with RF=3, min.insync.replicas=2),
each broker and each record size x acks: one producer-perf run into a fresh
topic, then one consumer-perf run reading it back. Figures: records/s and
MiB/s, and the broker CPU s per GiB (user+system CPU of every broker process
of the layout from /proc, over the run, per GiB of record values).

    KAFKA_HOME=~/.cache/kproto-ref/kafka KAFKA_HEAP_OPTS=-Xmx512m \\
        python -m tools.bench ceiling --targets kproto,kafka --nodes 1,3

The load generator runs on the same machine as the brokers: on a small
machine the figures are bounded by the cores the broker gets, not by the
broker alone; CPU s per GiB is the per-core cost that carries over."""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tools.bench import perftools, procstat
from tools.chaos.cluster import Cluster, cluster_props

GiB = 1 << 30


def _create(bootstrap: str, topic: str, partitions: int, rf: int) -> dict[int, int]:
    """Create the topic and wait for its leaders: {broker id: partitions it leads}."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 180
    while True:
        try:
            for f in admin.create_topics([NewTopic(topic, partitions, rf)], operation_timeout=60).values():
                f.result(120)
            break
        except KafkaException as exc:
            # a cluster just started: its brokers may not all be registered yet
            if exc.args[0].code() != KafkaError.INVALID_REPLICATION_FACTOR or time.monotonic() > deadline:
                raise
            time.sleep(1)
    # every partition has a leader the client can see before the load starts
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions \
                and all(p.leader >= 0 for p in md.partitions.values()):
            leaders: dict[int, int] = {}
            for p in md.partitions.values():
                leaders[p.leader] = leaders.get(p.leader, 0) + 1
            return leaders
        time.sleep(0.2)
    raise RuntimeError(f"{topic}: partitions without a leader after 60 s")


def _cpu(cluster: Cluster) -> float:
    return sum(_node_cpu(cluster))


def _node_cpu(cluster: Cluster) -> list[float]:
    return [procstat.cpu_seconds(n.proc.pid) for n in cluster.nodes]


def run_layout(kind: str, nodes: int, args, log) -> dict:
    """Figures for one broker kind and node count: {(case, figure): value}."""
    workdir = tempfile.mkdtemp(prefix=f"kproto-ceiling-{kind}{nodes}-")
    rf = min(nodes, 3)
    home = args.kafka_home   # the perf tools' distribution (and Kafka's brokers)
    cluster = Cluster(kind, nodes, workdir, use_netns=False, kafka_home=home if kind == "kafka" else None,
                      log=lambda _m: None,
                      props=cluster_props(rf))
    out: dict = {}
    try:
        cluster.start()
        bootstrap = ",".join(n.bootstrap for n in cluster.nodes)
        for size in args.sizes:
            count = args.records_100 if size <= 100 else args.records_1k
            for acks in args.acks:
                case = f"{size} B, acks={acks}"
                topic = f"ceiling-s{size}-a{acks}-{time.monotonic_ns()}"
                leaders = _create(bootstrap, topic, args.partitions, rf)
                nodes0, t0 = _node_cpu(cluster), time.perf_counter()
                prod = perftools.producer_perf(home, bootstrap, topic, count, size, acks)
                per_node = [b - a for a, b in zip(nodes0, _node_cpu(cluster))]
                cpu = sum(per_node)
                wall = time.perf_counter() - t0
                gib = count * size / GiB
                out[(case, "produce records/s")] = prod["records/s"]
                out[(case, "produce MiB/s")] = prod["MiB/s"]
                out[(case, "produce CPU s per GiB")] = cpu / gib
                out[(case, "produce broker cores busy")] = cpu / wall
                log(f"{kind} x{nodes} {case}: produce {prod['records/s']:,.0f} records/s "
                    f"{prod['MiB/s']:.1f} MiB/s, {cpu / gib:.2f} CPU s/GiB"
                    + (f" (per node {' / '.join(f'{c / gib:.1f}' for c in per_node)}; partitions led by broker "
                       f"{', '.join(f'{b}: {n}' for b, n in sorted(leaders.items()))})" if nodes > 1 else ""))
                if args.consume:
                    cpu0, t0 = _cpu(cluster), time.perf_counter()
                    cons = perftools.consumer_perf(home, bootstrap, topic, count, size)
                    cpu = _cpu(cluster) - cpu0
                    out[(case, "consume records/s")] = cons["records/s"]
                    out[(case, "consume MiB/s")] = cons["MiB/s"]
                    out[(case, "consume CPU s per GiB")] = cpu / gib
                    log(f"{kind} x{nodes} {case}: consume {cons['records/s']:,.0f} records/s "
                        f"{cons['MiB/s']:.1f} MiB/s, {cpu / gib:.2f} CPU s/GiB")
    finally:
        cluster.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return out


def _fmt(v: float) -> str:
    if v >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}" if v < 10 else f"{v:.1f}"


def table(results: dict, targets: list[str], layouts: list[int], markdown: bool) -> str:
    """One row per layout, case and figure; the kproto / Kafka ratio when both ran."""
    both = "kproto" in targets and "kafka" in targets
    head = ["layout", "case", "figure"] + targets + (["kproto / Kafka"] if both else [])
    rows = []
    for nodes in layouts:
        layout = "1 node" if nodes == 1 else f"{nodes} nodes, RF={min(nodes, 3)}"
        keys: list = []
        for t in targets:
            for k in results.get((t, nodes), {}):
                if k not in keys:
                    keys.append(k)
        for case, figure in keys:
            vals = [results.get((t, nodes), {}).get((case, figure)) for t in targets]
            row = [layout, case, figure] + ["-" if v is None else _fmt(statistics.median(v)) for v in vals]
            if both:
                a, b = vals[targets.index("kproto")], vals[targets.index("kafka")]
                row.append(f"{statistics.median(a) / statistics.median(b):.2f}x" if a and b else "-")
            rows.append(row)
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(r, widths)) for r in [head] + rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench ceiling", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--targets", default="kproto,kafka", help="kproto and/or kafka (default kproto,kafka)")
    ap.add_argument("--nodes", default="1,3", help="layouts: node counts, comma-separated (default 1,3)")
    ap.add_argument("--sizes", default="100,1024", help="record sizes in bytes (default 100,1024)")
    ap.add_argument("--acks", default="1,all", help="producer acks (default 1,all)")
    ap.add_argument("--partitions", type=int, default=6, help="partitions per topic (default 6)")
    ap.add_argument("--records-100", type=int, default=2_000_000, help="records per run at 100 B or less")
    ap.add_argument("--records-1k", type=int, default=400_000, help="records per run above 100 B")
    ap.add_argument("--reps", type=int, default=1, help="repetitions (medians reported; default 1)")
    ap.add_argument("--no-consume", dest="consume", action="store_false", help="produce only")
    ap.add_argument("--kafka-home", default=os.environ.get("KAFKA_HOME"),
                    help="an Apache Kafka distribution: its perf tools drive both brokers (default $KAFKA_HOME)")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    args = ap.parse_args(argv)
    if not args.kafka_home:
        raise SystemExit("the perf tools come from a Kafka distribution: set KAFKA_HOME or --kafka-home")
    os.environ.setdefault("KAFKA_HEAP_OPTS", "-Xmx512m")
    args.sizes = [int(x) for x in args.sizes.split(",")]
    args.acks = [a.strip() for a in args.acks.split(",")]
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    layouts = [int(x) for x in args.nodes.split(",")]
    log = lambda m: print(m, flush=True)   # noqa: E731
    results: dict = {}
    for _rep in range(args.reps):
        for nodes in layouts:
            for t in targets:   # one after the other, never side by side
                try:
                    figs = run_layout(t, nodes, args, log)
                except Exception as exc:   # the other layouts and brokers still run
                    log(f"{t} x{nodes}: failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
                    continue
                for k, v in figs.items():
                    results.setdefault((t, nodes), {}).setdefault(k, []).append(v)
    print()
    print(table(results, targets, layouts, args.markdown))
    return 0

"""a node-group on one machine: Java producer (and consumer) throughput of 1 vs N broker processes

`kproto cluster --nodes N` starts N broker processes of one node-group on this machine (one
cluster, `broker.rack` the machine). This starts that cluster for each N, creates one topic whose
partitions (RF 1, so no replication traffic) Kafka's placement spreads over the processes, and
drives it with Kafka's own kafka-producer-perf-test.sh and kafka-consumer-perf-test.sh from
KAFKA_HOME (Java: far cheaper per record than a Python client, so the brokers are what is
measured). Reported per run: records/s and MiB/s, the brokers' CPU share each and their CPU
seconds per GiB (what must stay flat for processes to scale), and the load average (a shared
machine's other work shows there). Layouts alternate over --reps.

  KAFKA_HOME=... python -m tools.bench node_group --processes 1,2 --partitions 6 --size 1024 --records 500000 --reps 2
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

from broker.launch.cluster_tool import free_base_port
from tools.bench.options import layout_arguments, layout_rows, write_rows


def _serve_pids(cluster_pid: int) -> list[int]:
    """The `kproto serve` children of a `kproto cluster` process."""
    with open(f"/proc/{cluster_pid}/task/{cluster_pid}/children") as f:
        kids = [int(x) for x in f.read().split()]
    out = []
    for pid in kids:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"serve" in f.read().split(b"\0"):
                out.append(pid)
    return out


def run_layout(home: str, n: int, partitions: int, records: int, size: int, acks: str) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    from tools.bench import perftools, procstat
    from tools.cluster_client import wait_until
    base_dir = tempfile.mkdtemp(prefix=f"kproto-node-group-{n}-")
    base = free_base_port(n)
    log = open(os.path.join(base_dir, "cluster.out"), "w")
    cluster = subprocess.Popen([sys.executable, "-m", "broker.launch.cli", "cluster", "--nodes", str(n),
                                "--dir", os.path.join(base_dir, "c"), "--base-port", str(base),
                                "--set", "schema.registry.listeners=off"],
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        bootstrap = ",".join(f"127.0.0.1:{base + i}" for i in range(n))
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == n, 120, f"{n} brokers unfenced")
        topic = "node-group"
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
        wait_until(lambda: all(p.leader >= 0 for p in admin.list_topics(topic, timeout=5).topics[topic]
                               .partitions.values()), 60, "leaders")
        leaders = sorted({p.leader for p in admin.list_topics(topic, timeout=5).topics[topic].partitions.values()})
        pids = _serve_pids(cluster.pid)
        res = {"processes": n, "records": records, "size": size, "acks": acks, "partitions": partitions,
               "leaders": leaders}
        for phase, go in (("produce", lambda: perftools.producer_perf(home, bootstrap, topic, records, size, acks)),
                          ("consume", lambda: perftools.consumer_perf(home, bootstrap, topic, records, size))):
            cpu0 = [procstat.cpu_seconds(p) for p in pids]
            t0 = time.monotonic()
            r = go()
            wall = time.monotonic() - t0
            cpu = [procstat.cpu_seconds(p) - c for p, c in zip(pids, cpu0)]
            res[f"{phase} records/s"] = r["records/s"]
            res[f"{phase} MiB/s"] = r["MiB/s"]
            if phase == "produce":
                res["produce ack p99 ms"] = r["ack p99 ms"]
            res[f"{phase} broker cpu % each"] = [round(100 * c / wall, 1) for c in cpu]
            res[f"{phase} broker cpu s per GiB"] = sum(cpu) / (records * size / (1 << 30))
        res["load avg"] = os.getloadavg()[0]
        return res
    finally:
        if cluster.poll() is None:
            cluster.send_signal(signal.SIGINT)   # the tool stops its nodes on Ctrl-C
            try:
                cluster.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(cluster.pid, signal.SIGKILL)
        log.close()
        subprocess.run(["rm", "-rf", base_dir], check=False)


def main(argv=None) -> int:
    doc = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(prog="python -m tools.bench node_group", description=doc[0] + ".\n\n" + doc[1],
                                 epilog=doc[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    layout_arguments(ap, records=500_000, partitions_help="partitions of the topic")
    ap.add_argument("--kafka-home", default=os.environ.get("KAFKA_HOME"))
    args = ap.parse_args(argv)
    if not args.kafka_home:
        ap.error("KAFKA_HOME (or --kafka-home) must name a Kafka installation: its perf tools drive the load")
    print(f"{'processes':>9} {'rep':>3} {'produce rec/s':>14} {'MiB/s':>7} {'p99 ms':>7} {'cpu % each':>14} "
          f"{'cpu s/GiB':>9} {'consume rec/s':>14} {'MiB/s':>7} {'cpu s/GiB':>9} {'load':>5}", flush=True)

    def show(r: dict) -> None:
        print(f"{r['processes']:>9} {r['rep']:>3} {r['produce records/s']:>14,.0f} {r['produce MiB/s']:>7.1f} "
              f"{r['produce ack p99 ms']:>7.0f} {str(r['produce broker cpu % each']):>14} "
              f"{r['produce broker cpu s per GiB']:>9.2f} {r['consume records/s']:>14,.0f} "
              f"{r['consume MiB/s']:>7.1f} {r['consume broker cpu s per GiB']:>9.2f} {r['load avg']:>5.1f}",
              flush=True)

    rows = layout_rows(args, lambda n: run_layout(args.kafka_home, n, args.partitions, args.records, args.size,
                                                  args.acks), show)
    if args.json:
        write_rows(args.json, args, rows)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

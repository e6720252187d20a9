"""What the web console costs on a large cluster: page load times and broker CPU on a 3-node
kproto cluster (replication factor 1, so each node holds a third of the files: this machine's
20,000 open files cap one process below 10,000 partitions) with --topics x --partitions
partitions (default 100 x 100 = 10,000), the console on node 1.

    python -m tools.bench console_cost [--topics 100] [--partitions 100] [--reps 5] [--window 30]

  page load   GET of each console page (urllib on loopback, the whole body read): median and max
              of --reps, ms, with its size
  CPU         broker CPU over --window seconds, % of one core: nobody on the console; the console
              used once (its sampler thread running); a viewer reloading the overview and a group
              page every 5 s (an open tab with auto-refresh)
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from tools.cluster_client import wait_until
from tools.quorum_cluster import QuorumCluster


def _get(url: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        body = r.read()
        assert r.status == 200, (url, r.status)
    return (time.perf_counter() - t0) * 1000, len(body)


def _cli(broker, *args, stdin: bytes = b"") -> bytes:
    return subprocess.run([sys.executable, "-m", "broker.launch.cli", *args, "-b", broker.bootstrap_all],
                          input=stdin, check=True, stdout=subprocess.PIPE, timeout=600).stdout


def _brokers(broker) -> int:
    import json
    return len(json.loads(_cli(broker, "cluster", "info", "--format", "json"))["brokers"])


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process from /proc/PID/stat: threads that exited count too (the
    console's request threads end after each page; schedstat of live threads would miss them)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_window(pid: int, seconds: float, during=None) -> float:
    start, t0 = cpu_seconds(pid), time.monotonic()
    next_view = t0
    while time.monotonic() - t0 < seconds:
        if during is not None and time.monotonic() >= next_view:
            during()
            next_view += 5.0
        time.sleep(0.2)
    return 100.0 * (cpu_seconds(pid) - start) / (time.monotonic() - t0)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench console_cost", description=__doc__.split("\n")[0])
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--window", type=float, default=30.0)
    args = ap.parse_args(argv)
    total = args.topics * args.partitions
    with QuorumCluster(3, base_dir=tempfile.mkdtemp(prefix="kproto-console-cost-"),
                       settings={"kproto.metrics.listener": "http://127.0.0.1:0",
                                 "auto.create.topics.enable": "false"}) as c:
        b = c.nodes[1]
        b.bootstrap_all = c.bootstrap
        wait_until(lambda: _brokers(b) == 3, 60, "3 brokers")
        t0 = time.monotonic()
        names = [f"t-{i:04d}" for i in range(args.topics)]
        for i in range(0, len(names), 20):
            _cli(b, "topic", "create", *names[i:i + 20], "-p", str(args.partitions), "-r", "1", "--if-not-exists")
        print(f"created {args.topics} topics x {args.partitions} partitions = {total} in "
              f"{time.monotonic() - t0:.1f} s", flush=True)
        _cli(b, "produce", names[0], stdin=b"".join(b"record %d\n" % i for i in range(2000)))
        _cli(b, "consume", names[0], "--from-beginning", "-n", "1000", "-g", "bench-group")
        base = b.metrics_url.rsplit("/", 1)[0] + "/console"
        idle = _cpu_window(b.proc.pid, args.window)
        pages = [("overview", ""), ("topics", "/topics"), ("topics filtered", "/topics?q=t-005"),
                 (f"topic ({args.partitions} partitions)", f"/topics/{names[0]}"),
                 ("messages", f"/topics/{names[0]}/messages?partition=0&offset=0"),
                 ("groups", "/groups"), ("group", "/groups/bench-group")]
        print(f"{'page':<28} {'median ms':>10} {'max ms':>8} {'KiB':>7}")
        for name, path in pages:
            times, size = [], 0
            for _ in range(args.reps):
                ms, size = _get(base + path)
                times.append(ms)
            print(f"{name:<28} {statistics.median(times):>10.1f} {max(times):>8.1f} {size / 1024:>7.1f}", flush=True)
        used = _cpu_window(b.proc.pid, args.window)
        viewing = _cpu_window(b.proc.pid, args.window,
                              during=lambda: (_get(base), _get(base + "/groups/bench-group")))
        print(f"node 1 CPU, % of one core over {args.window:.0f} s: no console {idle:.1f}, console used once "
              f"(sampler running) {used:.1f}, overview + group page reloaded every 5 s {viewing:.1f}")


if __name__ == "__main__":
    main()

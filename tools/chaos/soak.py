"""python -m tools.chaos.soak --minutes 60: a soak of a 3-node kproto cluster

A steady mixed load with no faults for a fixed time on one replicated KRaft
cluster (tools/chaos/cluster.py, loopback, replication factor 3,
min.insync.replicas 2), with the chaos suite's clients recording a history:

  - an idempotent acks=all producer writing unique values to soak-queue
  - 5 consumers in group soak-readers, committing after every batch
  - one more member of soak-readers (a process, tools/chaos/member.py) that
    leaves the group and joins again every --churn seconds: a rebalance each time
  - a transactional copier (consume-transform-produce, 10% aborted on purpose)
    fed by a second producer, and a read_committed reader of its output

Every --sample seconds each node's RSS, open file descriptors, CPU share and event-loop
lag are recorded (tools/chaos/resources.py). At the end every partition is read
to its end and the history goes through the chaos checkers (every acknowledged
record read, order per partition, no committed transaction's record missing,
no aborted one visible), the node logs are searched for ERROR lines, and each
resource series is judged flat or growing (resources.py says what flat means;
runs under 10 minutes are shown, not judged).

Writes OUT/history.jsonl, OUT/samples.jsonl, OUT/summary.json and the node
logs under OUT/nodes; exits 0 only with 0 anomalies, a completed run, no
ERROR lines and every series flat.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

from . import report
from .cluster import Cluster, _free_port
from .history import HistoryWriter
from .resources import MIN_JUDGED_S, Sampler, error_lines, judge, tenth_medians
from .runner import check_history, log
from .workloads import ROOT, ConsumerLoop, Copier, ProducerLoop, create_topics, final_read

GROUP = "soak-readers"




class Rejoiner:
    """One member of ``group`` (a tools/chaos/member.py process) that joins,
    stays ``every`` seconds, leaves (SIGTERM: a clean LeaveGroup), stays out
    ``every`` seconds, and joins again: a rebalance of the group each time."""

    def __init__(self, h: HistoryWriter, hist_path: str, bootstrap: str, topic: str, group: str,
                 every: float, stop: threading.Event, log_dir: str):
        self.h, self.path, self.bootstrap, self.topic, self.group = h, hist_path, bootstrap, topic, group
        self.every, self.stop, self.log_dir = every, stop, log_dir
        self.proc: subprocess.Popen | None = None
        self.n = 0
        self.joins = self.leaves = 0
        self.thread = threading.Thread(target=self.run, name="rejoiner", daemon=True)

    def _join(self) -> None:
        name = f"rejoin{self.n}"
        self.n += 1
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        with open(os.path.join(self.log_dir, f"{name}.log"), "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tools.chaos.member", "--bootstrap", self.bootstrap, "--topic", self.topic,
                 "--group", self.group, "--history", self.path, "--proc", name],
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        self.name = name
        self.h.write(f="member-start", type="info", proc=name, group=self.group)
        self.joins += 1

    def _leave(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            self.h.write(f="crash", type="info", proc=self.name, group=self.group)
        self.leaves += 1

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self._join()
                if self.stop.wait(self.every):
                    break
                self._leave()
                self.stop.wait(self.every)
        finally:
            self._leave()


def main(argv=None) -> int:
    doc = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(prog="python -m tools.chaos.soak", description=doc[0] + "\n\n" + doc[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60, help="minutes of load (default 60)")
    ap.add_argument("--seconds", type=float, help="seconds of load (overrides --minutes)")
    ap.add_argument("--out", help="output directory (default soak-run-<time>)")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--consumers", type=int, default=5, help="steady members of group soak-readers")
    ap.add_argument("--rate", type=float, default=100, help="sends per second of the idempotent producer")
    ap.add_argument("--txn-rate", type=float, default=20, help="sends per second into the copier's input")
    ap.add_argument("--churn", type=float, default=60,
                    help="seconds between a member's leave and its join again (default 60)")
    ap.add_argument("--sample", type=float, default=10, help="seconds between resource samples")
    ap.add_argument("--progress", type=float, default=60, help="seconds between progress lines")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tracemalloc", type=float, default=0, metavar="SECONDS",
                    help="run nodes under tools.memtrace: tracing starts once the load runs, and a heap "
                         "snapshot of each node goes into OUT/memtrace every SECONDS after (default 0: off; "
                         "tracing slows the nodes)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker property for every node (repeatable)")
    args = ap.parse_args(argv)
    duration = args.seconds if args.seconds is not None else args.minutes * 60
    out = os.path.abspath(args.out or f"soak-run-{int(time.time())}")
    os.makedirs(out, exist_ok=True)
    hist_path = os.path.join(out, "history.jsonl")
    for stale in (hist_path, os.path.join(out, "samples.jsonl")):
        if os.path.exists(stale):
            os.unlink(stale)
    shutil.rmtree(os.path.join(out, "nodes"), ignore_errors=True)

    cluster = Cluster("kproto", 3, os.path.join(out, "nodes"), use_netns=False, log=log,
                      props=dict(kv.split("=", 1) for kv in args.set))
    for node in cluster.nodes:
        # each node's own metrics listener: the event-loop delay histogram
        port = _free_port()
        node.extra["kproto.metrics.listener"] = f"http://127.0.0.1:{port}"
        node.metrics_url = f"http://127.0.0.1:{port}/metrics"
        if args.tracemalloc:
            node.launcher = "tools.memtrace"
            node.env["KPROTO_MEMTRACE_DIR"] = os.path.join(out, "memtrace", node.name)
    log(f"soak: 3-node kproto cluster, {duration:.0f} s, producer {args.rate}/s, {args.consumers} consumers "
        f"+ 1 member rejoining every {args.churn:.0f} s, copier fed {args.txn_rate}/s, output {out}")
    h = HistoryWriter(hist_path)
    stop_produce, stop_consume = threading.Event(), threading.Event()
    samples_f = open(os.path.join(out, "samples.jsonl"), "w")
    completed = False
    threads: list[tuple[str, threading.Thread]] = []
    rejoiner = None
    sampler = None
    t0 = time.monotonic()
    old_term = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        cluster.start()
        bootstrap = ",".join(n.bootstrap for n in cluster.nodes)
        log(f"cluster up: {bootstrap}")
        P = args.partitions
        queue, src, dst, cgroup = "soak-queue", "soak-copier-in", "soak-copier-out", "soak-copier"
        create_topics(bootstrap, {queue: P, src: P, dst: P}, 3)
        h.write(f="run", type="start", proc="runner", kind="kproto", nodes=3, mode="loopback", nemesis=[],
                workloads=["soak"], seed=args.seed, time=duration)
        prod = ProducerLoop(h, bootstrap, "p0", queue, P, args.rate, stop_produce)
        pin = ProducerLoop(h, bootstrap, "pin", src, P, args.txn_rate, stop_produce)
        threads += [("produce", prod.thread), ("produce", pin.thread)]
        for i in range(args.consumers):
            c = ConsumerLoop(h, bootstrap, f"c{i}", [queue], P, stop_consume, mode="subscribe", group=GROUP)
            threads.append(("consume", c.thread))
        cp = Copier(h, bootstrap, "copier", src, dst, cgroup, stop_consume, random.Random(args.seed))
        rc = ConsumerLoop(h, bootstrap, "c-out-rc", [dst], P, stop_consume, isolation="read_committed")
        threads += [("consume", cp.thread), ("consume", rc.thread)]
        rejoiner = Rejoiner(h, hist_path, bootstrap, queue, GROUP, args.churn, stop_consume, out)
        threads.append(("consume", rejoiner.thread))
        for _, t in threads:
            t.start()
        t0 = time.monotonic()
        sampler = Sampler(cluster.nodes, t0)
        end = t0 + duration
        next_sample, next_progress = t0, t0 + args.progress
        next_snap = t0 if args.tracemalloc else float("inf")   # (the first signal starts tracing)
        while True:
            now = time.monotonic()
            if now >= next_snap:
                for n in cluster.nodes:
                    if n.alive():
                        os.kill(n.proc.pid, signal.SIGUSR1)
                next_snap += args.tracemalloc
            if now >= next_sample:
                for s in sampler.sample():
                    samples_f.write(json.dumps(s) + "\n")
                samples_f.flush()
                next_sample += args.sample
            if now >= next_progress or now >= end:
                c = h.counts
                last = {s["node"]: s for s in sampler.samples[-len(cluster.nodes):]}
                res = "  ".join(f"{n}: {s['rss_mib'] or 0:.0f} MiB {s['fds'] or 0} fds "
                                f"lag {s['loop_mean_ms'] if s['loop_mean_ms'] is not None else '-'} ms "
                                f"cpu {s['cpu_pct'] if s['cpu_pct'] is not None else '-'}%"
                                for n, s in sorted(last.items()))
                log(f"[{now - t0:6.0f}s] acks {c.get('send:ok', 0):>7}  send errors "
                    f"{c.get('send:info', 0) + c.get('send:fail', 0):>4}  polls {c.get('poll:ok', 0):>6}  "
                    f"txns {c.get('txn:ok', 0):>5}  rejoins {rejoiner.joins:>3}  {res}  load {os.getloadavg()[0]:.1f}")
                next_progress += args.progress
            if now >= end:
                break
            if any(not n.alive() for n in cluster.nodes):
                raise RuntimeError("a node exited: " + ", ".join(n.name for n in cluster.nodes if not n.alive()))
            time.sleep(max(0.0, min(next_sample, next_progress, next_snap, end) - time.monotonic()))
        log("load done: producers flush, consumers catch up")
        stop_produce.set()
        for role, t in threads:
            if role == "produce":
                t.join(90)
        time.sleep(3)
        stop_consume.set()
        for _, t in threads:
            t.join(60)
        stuck = [t.name for _, t in threads if t.is_alive()]
        if stuck:
            log(f"clients still running after their deadline: {', '.join(stuck)}")
        log("final read of every partition")
        res = final_read(h, bootstrap, {queue: (P, "read_uncommitted"), src: (P, "read_uncommitted"),
                                        dst: (P, "read_committed")},
                         {GROUP: [(queue, p) for p in range(P)], cgroup: [(src, p) for p in range(P)]})
        final_ok = res.pop("complete")
        h.write(f="final", type="ok", proc="final",
                copier={"input": src, "output": dst, "group": cgroup, "suffix": Copier.SUFFIX}, **res)
        completed = final_ok and not stuck
    except KeyboardInterrupt:
        log("interrupted")
    except Exception as e:
        log(f"soak failed: {type(e).__name__}: {e}")
    finally:
        stop_produce.set()
        stop_consume.set()
        if rejoiner is not None and rejoiner.thread.is_alive():
            rejoiner.thread.join(40)   # its member process leaves, not orphaned
        h.write(f="run", type="stop", proc="runner", completed=completed)
        h.close()
        samples_f.close()
        cluster.close()
        signal.signal(signal.SIGTERM, old_term)
    return summarize(out, hist_path, cluster, sampler, duration, rejoiner)


def summarize(out: str, hist_path: str, cluster: Cluster, sampler: Sampler | None, duration: float,
              rejoiner: Rejoiner | None) -> int:
    ops, result = check_history(hist_path)
    errors = {n.name: error_lines(n.log_path) for n in cluster.nodes}
    n_err = sum(len(v) for v in errors.values())
    # judged on the time the samples cover (an interrupted run covers less than it planned)
    covered = max((s["t"] for s in sampler.samples), default=0.0) if sampler else 0.0
    rows, all_flat = judge(sampler.samples if sampler else [], covered)
    log("")
    log(f"resources (flat: the last tenth's median <= the second tenth's x (1+rel) + abs; "
        f"judged on runs of {MIN_JUDGED_S // 60} min or more)")
    log(f"  {'node':<4} {'series':<13} {'samples':>7} {'first':>8} {'2nd tenth':>9} {'last tenth':>10} "
        f"{'max':>8}  verdict")
    for r in rows:
        def f(v):
            return f"{v:.1f}" if isinstance(v, (int, float)) else "-"
        log(f"  {r['node']:<4} {r['series']:<13} {r['samples']:>7} {f(r['first']):>8} "
            f"{f(r.get('second tenth')):>9} {f(r.get('last tenth')):>10} {f(r['max']):>8}  {r['verdict']}")
    loads = [s["load"] for s in (sampler.samples if sampler else []) if s.get("node") == "n0" and "load" in s]
    tenths = tenth_medians(loads)
    if tenths:
        # (other work on the machine moves loop lag and CPU share: the load average says how much)
        log(f"  machine load average (median): second tenth {tenths[0]:.1f}, last tenth {tenths[1]:.1f}")
    log(f"ERROR lines in the node logs: {n_err}")
    for name, lines in errors.items():
        for line in lines[:5]:
            log(f"  {name}: {line[:300]}")
    k = len(result["anomalies"])
    rebalances = rejoiner.joins + rejoiner.leaves if rejoiner else 0
    with open(os.path.join(out, "summary.json"), "w") as fh:
        json.dump({"duration s": duration, "anomalies": result["by_kind"], "completed": result["completed"],
                   "error lines": {n: len(v) for n, v in errors.items()}, "resources": rows,
                   "member joins+leaves": rebalances, "flat": all_flat}, fh, indent=1)
    log(f"soak: {report.operations(ops)} operations, {rebalances} member joins+leaves, {k} anomalies, "
        f"{n_err} error lines, resources {'flat' if all_flat else 'GROWING'}, "
        f"completed {'yes' if result['completed'] else 'no'}")
    return 0 if k == 0 and result["completed"] and n_err == 0 and all_flat else 1


if __name__ == "__main__":
    sys.exit(main())

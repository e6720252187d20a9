"""Targeted fault scenarios on a replicated 3-node kproto cluster (or a real
Kafka 3.9 cluster with --kafka): unlike the random nemesis of `run`, each
fault here hits the *leader* of partition 0 (or every node in turn), at a
moment chosen so the interesting path is taken, and the run checks what a
user sees.

  kill-leader      kill -9 of the leader, restart once a new leader acks
  pause-leader     SIGSTOP of the leader for longer than the broker session
                   timeout (it is fenced and loses leadership while it
                   still thinks it leads), then SIGCONT
  isolate-leader   the leader's link down (network namespaces): it hears
                   nobody and nobody hears it, then the link is healed
  restart-isolated kill -9 of the leader, restarted behind a cut link (it
                   cannot register with the controllers) for longer than the
                   broker session, then the link is healed: it must register,
                   catch up and rejoin every ISR
  rolling-restart  SIGTERM of every node in turn, each restarted and back
                   in the ISR of every partition before the next one

The workload: idempotent acks=all producers at full speed (ProducerLoop with
no rate limit, at most 200 sends in flight each), writing unique values
round-robin to the partitions of a topic with replication factor 3 and
min.insync.replicas=2, and a consumer in a group that commits after each
batch. After the faults: the group must catch up (its committed offsets
reach the end of every partition), every partition is read from the start,
and the chaos checkers (tools/chaos/checker.py: lost writes, duplicates,
reordering, non-monotonic offsets, ...) judge the history. Then every node
is stopped and the replicas' log files are compared record by record: an
old leader that kept a divergent (unacknowledged) tail would differ here.

    python3 -m tools.chaos.scenarios pause-leader --repeat 10 --out /tmp/pause
    python3 -m tools.chaos.scenarios kill-leader --repeat 100 --time-limit 600

Exit status 0 only when the run completed with no anomaly.
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from . import checker, report
from .cluster import Cluster
from .history import HistoryWriter, read_history
from .workloads import QUIET, ConsumerLoop, ProducerLoop, create_topics, final_read

SCENARIOS = ("kill-leader", "pause-leader", "isolate-leader", "restart-isolated", "rolling-restart")
NETNS = ("isolate-leader", "restart-isolated")   # need a link of their own to cut
# fast fencing: a paused or cut-off node is fenced within 2 s (Kafka's
# defaults are 9 s / 2 s; the keys are Kafka's)
FAST = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "300",
        "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
        "replica.fetch.backoff.ms": "100"}
TOPIC = "faults"
GROUP = "faults-readers"


class Abort(Exception):
    pass


def _wait(pred, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:   # noqa: BLE001  (a node may be down meanwhile)
            last = e
        time.sleep(interval)
    raise Abort(f"timed out after {timeout:.0f}s waiting for {what}" + (f" (last error: {last})" if last else ""))


class Scenario:
    KINDS = SCENARIOS   # (tools/chaos/powerloss.py adds its own)

    def __init__(self, kind: str, workdir: str, *, kafka_home: str | None = None, partitions: int = 3,
                 producers: int = 1, hold: float = 5.0, settings: dict | None = None, log=print):
        if kind not in self.KINDS:
            raise ValueError(f"unknown scenario {kind!r} (known: {', '.join(self.KINDS)})")
        self.kind, self.workdir, self.partitions, self.hold, self.log = kind, workdir, partitions, hold, log
        os.makedirs(workdir, exist_ok=True)
        self.hist_path = os.path.join(workdir, "history.jsonl")
        if os.path.exists(self.hist_path):
            os.unlink(self.hist_path)
        shutil.rmtree(os.path.join(workdir, "nodes"), ignore_errors=True)
        self.cluster = Cluster("kafka" if kafka_home else "kproto", 3, os.path.join(workdir, "nodes"),
                               use_netns=(kind in NETNS), kafka_home=kafka_home, log=log,
                               props={**FAST, **(settings or {})})
        for n in self.cluster.nodes:
            n.log_level = "INFO"   # a follower's truncation of a divergent tail is logged at INFO
        if kind in NETNS and self.cluster.net is None:
            self.cluster.close()
            raise Abort(f"{kind} needs network namespaces (root with iproute2)")
        self.h = HistoryWriter(self.hist_path)
        self.producers = producers
        self.stop_produce, self.stop_consume = threading.Event(), threading.Event()
        self.faults: list[dict] = []   # {node, start, end, partitions led}
        self.bootstrap = ",".join(n.bootstrap for n in self.cluster.nodes)
        self.admin = None
        self.divergent: list[str] = []
        self.truncated = 0             # records of a stopped/cut-off leader's tail it no longer has
        self.group_missing: list[str] = []

    # ---------------------------------------------------------------- cluster views
    def partitions_info(self):
        md = self.admin.list_topics(TOPIC, timeout=5)
        t = md.topics[TOPIC]
        if t.error is not None:
            raise RuntimeError(str(t.error))
        return {p.id: (p.leader, list(p.isrs)) for p in t.partitions.values()}

    def node_of(self, broker_id: int):
        return self.cluster.nodes[broker_id - 1]   # node.id = index + 1

    def full_isr(self, timeout: float = 90) -> None:
        _wait(lambda: (lambda info: len(info) == self.partitions and
                       all(len(isr) == 3 and leader >= 1 for leader, isr in info.values()))(self.partitions_info()),
              timeout, "every partition led with an ISR of 3")

    def acks(self) -> int:
        return self.h.counts.get("send:ok", 0)

    def progress(self, n: int, timeout: float, what: str) -> None:
        target = self.acks() + n
        _wait(lambda: self.acks() >= target, timeout, f"{n} more acks {what} ({self.acks()} acked)", 0.05)

    # ---------------------------------------------------------------- faults
    def nemesis(self, kind: str, node, detail: str, start: bool) -> None:
        self.h.write(f="nemesis", type="start" if start else "stop", proc="nemesis", kind=kind,
                     node=node.name, detail=detail)

    def fault_leader(self, i: int) -> None:
        info = self.partitions_info()
        leader = info[0][0]
        led = [p for p, (ld, _isr) in info.items() if ld == leader]
        node = self.node_of(leader)
        rec = {"node": leader, "partitions": led, "start": time.time()}
        snapshot = None
        if self.kind == "kill-leader":
            node.kill()
            self.nemesis("kill", node, "kill -9", True)
            self.progress(200, 60, "after the kill")
            rec["end"] = time.time()
            node.start()
            self.nemesis("kill", node, "restarted", False)
        elif self.kind == "pause-leader":
            node.pause()
            self.nemesis("pause", node, "SIGSTOP", True)
            time.sleep(0.3)   # (what it appended last is on its disk now)
            snapshot = self.node_logs(node)
            # longer than broker.session.timeout.ms: fenced, a new leader elected from the ISR.
            # (librdkafka keeps the batches it sent to the stopped leader in flight until that
            # node answers or message.timeout.ms passes, against Kafka 3.9 as well: so the
            # partition's acks resume only after the SIGCONT, and are not waited for here)
            time.sleep(max(0.0, self.hold - 0.3))
            node.resume()
            rec["end"] = time.time()
            self.nemesis("pause", node, "SIGCONT", False)
        elif self.kind == "isolate-leader":
            detail = self.cluster.net.isolate(node.index)
            self.nemesis("partition", node, detail, True)
            time.sleep(self.hold)
            snapshot = self.node_logs(node)
            self.cluster.net.heal(node.index)
            rec["end"] = time.time()
            self.nemesis("partition", node, "healed", False)
        elif self.kind == "restart-isolated":
            node.kill()
            self.nemesis("kill", node, "kill -9", True)
            detail = self.cluster.net.isolate(node.index)
            self.nemesis("partition", node, detail, True)
            node.start(wait=False)   # its registration cannot reach a controller
            self.nemesis("kill", node, "restarted behind the cut link", False)
            self.progress(200, 60, "with the old leader killed and cut off")
            time.sleep(self.hold)   # longer than its old session: it is fenced, not re-registered
            self.cluster.net.heal(node.index)
            t0 = time.monotonic()
            rec["end"] = time.time()
            self.nemesis("partition", node, "healed", False)
            node.wait_listening(60)   # (Kafka's broker listens only once unfenced, kproto's at once)
            # back in Metadata once registered and caught up (Metadata lists unfenced brokers)
            _wait(lambda: leader in self.admin.list_topics(timeout=5).brokers, 60,
                  f"node {leader} registered again after the link was healed")
            rec["registered_s"] = time.monotonic() - t0
        self.faults.append(rec)
        self.full_isr()
        if snapshot is not None:
            self.truncated += self.divergent_tail(snapshot)
        back = f", listed again {rec['registered_s']:.2f}s after the heal" if "registered_s" in rec else ""
        self.log(f"fault {i + 1}: {self.kind} of node {leader} (led partitions {led}){back}; "
                 f"{self.acks()} acked so far, ISR full again")

    def rolling_restart(self) -> None:
        for node in self.cluster.nodes:
            info = self.partitions_info()
            led = [p for p, (ld, _isr) in info.items() if ld == node.index + 1]
            rec = {"node": node.index + 1, "partitions": led, "start": time.time()}
            node.stop()   # SIGTERM, then kill after 20 s
            self.nemesis("restart", node, "SIGTERM", True)
            self.progress(200, 60, f"with {node.name} stopped")
            node.start()
            rec["end"] = time.time()
            self.nemesis("restart", node, "started", False)
            self.faults.append(rec)
            self.full_isr()
            self.log(f"restarted {node.name} (led {led}); {self.acks()} acked so far, ISR full again")

    # ---------------------------------------------------------------- replica logs
    def node_logs(self, node) -> dict[int, list[tuple[int, bytes]]]:
        """Partition -> [(offset, value)] as the node's log files hold them."""
        from tools.replication_cluster import _values
        out = {}
        for p in range(self.partitions):
            recs = []
            for seg in sorted(glob.glob(os.path.join(node.data_dir, f"{TOPIC}-{p}", "*.log"))):
                with open(seg, "rb") as f:
                    recs += _values(f.read())
            out[p] = recs
        return out

    def divergent_tail(self, snapshot) -> int:
        """How many records of the snapshot (a faulted leader's log) are not in
        the current leaders' logs at the same offsets: its unacknowledged tail."""
        n = 0
        info = self.partitions_info()
        for p, recs in snapshot.items():
            now = dict(self.node_logs(self.node_of(info[p][0]))[p])
            n += sum(1 for off, v in recs if off in now and now[off] != v)
        return n

    def truncations(self) -> list[str]:
        """The truncations of a divergent tail the nodes logged (kproto: broker/replication/manager.py)."""
        out = []
        for n in self.cluster.nodes:
            try:
                with open(n.log_path, errors="replace") as f:
                    out += [f"{n.name}: {line.strip()[-120:]}" for line in f
                            if "truncating" in line and f"{TOPIC}-" in line]
            except FileNotFoundError:
                pass
        return out

    def compare_replicas(self) -> list[str]:
        logs = {n.name: self.node_logs(n) for n in self.cluster.nodes}
        problems = []
        for p in range(self.partitions):
            ref_name, ref = max(((name, dict(lg[p])) for name, lg in logs.items()), key=lambda x: len(x[1]))
            for name, lg in logs.items():
                mine = dict(lg[p])
                diff = [o for o, v in mine.items() if ref.get(o, v) != v]
                top = max(mine, default=-1)
                holes = [o for o in ref if o < top and o not in mine]
                if diff or holes:
                    problems.append(f"{TOPIC}/{p}: {name} differs from {ref_name} at offsets "
                                    f"{(diff + holes)[:5]} ({len(diff)} different, {len(holes)} missing)")
        return problems

    def watch(self) -> None:
        """Leaders and ISRs as the cluster reports them, once a second, into the history
        (and the log when they change): where a failover stalls, this says why."""
        last = None
        while not self.stop_consume.wait(1.0):
            try:
                admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})
                info = {p: v for p, v in sorted(admin.list_topics(TOPIC, timeout=3).topics[TOPIC]
                                                .partitions.items())}
                state = {p: (v.leader, sorted(v.isrs)) for p, v in info.items()}
            except Exception as e:   # noqa: BLE001
                state = {"error": str(e)[:80]}
            if state != last:
                self.h.write(f="note", type="info", proc="watch", msg=f"leaders/ISR {state}")
                self.log(f"  [watch {time.strftime('%H:%M:%S')}] acks {self.acks()} leaders/ISR {state}")
                last = state

    # ---------------------------------------------------------------- the run
    def group_caught_up(self) -> bool:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP, "enable.auto.commit": False, **QUIET})
        try:
            tps = [TopicPartition(TOPIC, p) for p in range(self.partitions)]
            committed = {tp.partition: tp.offset for tp in c.committed(tps, timeout=10)}
            ends = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
                    for p in range(self.partitions)}
            return all(committed[p] >= ends[p] for p in ends)
        finally:
            c.close()

    def run(self, repeat: int = 1, time_limit: float = 600) -> dict:
        t_end = time.monotonic() + time_limit
        completed = False
        threads = []
        try:
            self.cluster.start()
            self.log(f"cluster up ({self.cluster.mode}): {self.bootstrap}")
            self.admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})
            create_topics(self.bootstrap, {TOPIC: self.partitions}, 3)
            self.full_isr()
            self.h.write(f="run", type="start", proc="runner", kind=self.cluster.kind, scenario=self.kind,
                         repeat=repeat)
            for i in range(self.producers):
                threads.append(("p", ProducerLoop(self.h, self.bootstrap, f"p{i}", TOPIC, self.partitions,
                                                  1e9, self.stop_produce).thread))
            threads.append(("c", ConsumerLoop(self.h, self.bootstrap, "c-group", [TOPIC], self.partitions,
                                              self.stop_consume, mode="subscribe", group=GROUP).thread))
            for _, t in threads:
                t.start()
            threading.Thread(target=self.watch, daemon=True).start()
            self.progress(500, 60, "before the first fault")
            if self.kind == "rolling-restart":
                for _ in range(repeat):
                    self.rolling_restart()
                    if time.monotonic() > t_end:
                        break
            else:
                for i in range(repeat):
                    self.fault_leader(i)
                    self.progress(300, 60, "after the ISR is full again")
                    if time.monotonic() > t_end:
                        self.log(f"time limit: stopping after {i + 1} faults")
                        break
            self.stop_produce.set()
            for role, t in threads:
                if role == "p":
                    t.join(90)
            self.log(f"producers stopped, {self.acks()} acked; waiting for the group to catch up")
            _wait(self.group_caught_up, 90, "the consumer group to commit the end of every partition", 0.5)
            self.stop_consume.set()
            for _, t in threads:
                t.join(60)
            self.log("final read of every partition")
            res = final_read(self.h, self.bootstrap, {TOPIC: (self.partitions, "read_uncommitted")},
                             {GROUP: [(TOPIC, p) for p in range(self.partitions)]})
            ok = res.pop("complete")
            self.h.write(f="final", type="ok", proc="final", copier=None, **res)
            self.log("stopping the nodes, comparing their logs")
            for n in self.cluster.nodes:   # clean stop: the log files are complete
                n.stop()
            self.divergent = self.compare_replicas()
            completed = ok and not any(t.is_alive() for _, t in threads)
        except Abort as e:
            self.log(f"run aborted: {e}")
        finally:
            self.stop_produce.set()
            self.stop_consume.set()
            self.h.write(f="run", type="stop", proc="runner", completed=completed)
            self.h.close()
            self.cluster.close()
        return self.verdict()

    def verdict(self) -> dict:
        ops = read_history(self.hist_path)
        result = checker.check(ops)
        ix = result["index"]
        group_read = {v for v, places in ix.reads.items() if any(op.get("proc") == "c-group" for _k, _o, op in places)}
        self.group_missing = sorted(set(ix.acked) - group_read)
        gaps = failover_gaps(ops, self.faults)
        return {"result": result, "ops": ops, "acked": len(ix.acked), "faults": len(self.faults),
                "registered": [f["registered_s"] for f in self.faults if "registered_s" in f],
                "anomalies": result["anomalies"], "completed": result["completed"],
                "divergent": self.divergent, "group_missing": self.group_missing,
                "truncated": self.truncated, "truncations": self.truncations(), "gaps": gaps,
                "valid": result["valid"] and result["completed"] and not self.divergent and not self.group_missing}


def failover_gaps(ops: list[dict], faults: list[dict], window: float = 60.0) -> list[float]:
    """Per fault: the longest stretch without an ack on a partition the faulted
    node led, from the last ack before the fault to the first ack after the
    outage (the largest gap between consecutive acks from the fault's start
    until `window` seconds later or the next fault)."""
    acks = defaultdict(list)
    for o in ops:
        if o.get("f") == "send" and o.get("type") == "ok":
            acks[o["partition"]].append(o["ts"])
    gaps = []
    for k, f in enumerate(faults):
        until = min(f["start"] + window, faults[k + 1]["start"] if k + 1 < len(faults) else float("inf"))
        worst = None
        for p in f["partitions"]:
            ts = sorted(acks.get(p, []))
            before = [t for t in ts if t <= f["start"]]
            inside = [t for t in ts if f["start"] < t <= until]
            if before and inside:
                seq = [before[-1]] + inside
                g = max(b - a for a, b in zip(seq, seq[1:]))
                worst = g if worst is None else max(worst, g)
        if worst is not None:
            gaps.append(worst)
    return gaps


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def describe(v: dict) -> str:
    lines = [report.summary(v["result"])]
    if v["anomalies"]:
        lines.append(report.describe_anomalies(v["result"]))
    g = v["gaps"]
    lines.append(f"failover (last ack before the fault -> first ack after, partitions it led): "
                 f"p50 {pct(g, .5):.2f}s p99 {pct(g, .99):.2f}s max {max(g, default=float('nan')):.2f}s "
                 f"over {len(g)} faults")
    if v.get("registered"):
        r = v["registered"]
        lines.append(f"restarted node listed again after the heal: p50 {pct(r, .5):.2f}s max {max(r):.2f}s "
                     f"over {len(r)} faults")
    lines.append(f"records of a faulted leader's log (read while it was down) replaced since: {v['truncated']}")
    lines.append(f"divergent tails truncated by returning replicas: {len(v['truncations'])}")
    lines += [f"  {t}" for t in v["truncations"][:5]]
    lines.append(f"replica logs identical after the run: {'yes' if not v['divergent'] else 'NO'}")
    lines += [f"  {d}" for d in v["divergent"][:10]]
    lines.append(f"consumer group read every acknowledged value: "
                 f"{'yes' if not v['group_missing'] else 'NO, missing ' + str(v['group_missing'][:5])}")
    lines.append(f"{report.operations(v['ops'])} operations, {v['acked']} acknowledged, {v['faults']} faults, "
                 f"{len(v['anomalies']) + len(v['divergent']) + (1 if v['group_missing'] else 0)} anomalies")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.chaos.scenarios", description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", choices=SCENARIOS)
    ap.add_argument("--repeat", type=int, default=1, help="faults (rolling restart: rounds over all nodes)")
    ap.add_argument("--hold", type=float, default=5.0, help="seconds a node stays paused or cut off")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--producers", type=int, default=1)
    ap.add_argument("--time-limit", type=float, default=600, help="no new fault after this many seconds")
    ap.add_argument("--out", help="directory for history.jsonl and node logs (default: a temporary one)")
    ap.add_argument("--kafka", action="store_true", help="real Kafka 3.9 nodes from KAFKA_HOME")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix=f"kproto-{args.scenario}-")
    home = os.environ.get("KAFKA_HOME") if args.kafka else None
    if args.kafka and not home:
        print("--kafka needs KAFKA_HOME", file=sys.stderr)
        return 2
    s = Scenario(args.scenario, out, kafka_home=home, partitions=args.partitions, producers=args.producers,
                 hold=args.hold, settings=dict(kv.split("=", 1) for kv in args.set),
                 log=lambda m: print(m, flush=True))
    v = s.run(args.repeat, args.time_limit)
    print(describe(v))
    print(f"history: {s.hist_path}")
    return 0 if v["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())

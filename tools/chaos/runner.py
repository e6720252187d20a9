"""One chaos run: start the cluster, the workloads and the nemesis; after
``--time`` seconds heal everything, let the clients finish, read every
partition to its end, then check the history and write the report.

Every run is bounded: the phases after the timed one have deadlines, and a
watchdog ends a run that overstays by more than ``GRACE_S``."""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import threading
import time

from tools.cluster_client import finalize_feature

from . import checker, report
from .cluster import Cluster
from .history import HistoryWriter, read_history
from .nemesis import Nemesis, schedule, usable_kinds
from .workloads import (
    ConsumerLoop, Copier, GroupChurn, KafkaPythonConsumerLoop, ProducerLoop, create_topics, final_read,
)

GRACE_S = 240


def log(msg: str) -> None:
    print(msg, flush=True)


def run(args) -> int:
    out = os.path.abspath(args.out or f"chaos-run-{int(time.time())}")
    os.makedirs(out, exist_ok=True)
    hist_path = os.path.join(out, "history.jsonl")
    # a fresh run: no history, node data or member logs of an earlier one
    if os.path.exists(hist_path):
        os.unlink(hist_path)
    shutil.rmtree(os.path.join(out, "nodes"), ignore_errors=True)
    wanted = [k for k in args.nemesis.split(",") if k] if args.nemesis else []
    workloads = [w for w in args.workload.split(",") if w]
    env = {}
    if args.fault:
        env["KPROTO_TEST_FAULT"] = args.fault
    kind = "kafka" if args.kafka else "kproto"
    from .lazyfs import fuse_available
    lazy_ok, lazy_why = fuse_available()
    lazyfs = "power" in wanted and lazy_ok
    if "power" in wanted and not lazy_ok:
        log(f"nemesis power: no FUSE here ({lazy_why})")
    # (the disk nemesis's tmpfs and LazyFS would both sit on the data dir: power wins)
    disk_mb = 64 if "disk" in wanted and os.geteuid() == 0 and not lazyfs else 0
    log(f"chaos: {kind} x{args.nodes}, nemesis {','.join(wanted) or 'none'}, workloads {','.join(workloads)}, "
        f"{args.time}s, seed {args.seed}, output {out}")
    cluster = Cluster(kind, args.nodes, os.path.join(out, "nodes"), use_netns=not args.loopback,
                      disk_mb=disk_mb, lazyfs=lazyfs, env=env, kafka_home=os.environ.get("KAFKA_HOME"), log=log,
                      props=dict(kv.split("=", 1) for kv in getattr(args, "set", None) or []))
    if cluster.replicated:
        log(f"one {args.nodes}-node KRaft cluster, replication factor {min(args.nodes, 3)}, "
            "min.insync.replicas 2")
    h = HistoryWriter(hist_path)
    stops = {"produce": threading.Event(), "consume": threading.Event()}
    rng = random.Random(args.seed)
    threads: list[tuple[str, threading.Thread]] = []
    finals: list[tuple] = []
    completed = False
    deadline_hit = threading.Event()

    def watchdog():
        if not stops["consume"].wait(args.time + GRACE_S + 120):
            deadline_hit.set()
            log("watchdog: the run overstayed its bound; stopping")
            stops["produce"].set()
            stops["consume"].set()
    threading.Thread(target=watchdog, daemon=True).start()
    old_term = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    nem = None
    try:
        cluster.start()
        log(f"cluster up ({cluster.mode}): " + ", ".join(n.bootstrap for n in cluster.nodes))
        kinds = usable_kinds(cluster, wanted, log)
        events = schedule(args.seed, kinds, args.nodes, args.time)
        h.write(f="run", type="start", proc="runner", kind=kind, nodes=args.nodes, mode=cluster.mode,
                nemesis=kinds, workloads=workloads, seed=args.seed, time=args.time, fault=args.fault)
        for ti, target in enumerate(cluster.targets()):
            bootstrap = ",".join(n.bootstrap for n in target)
            rf = min(len(target), 3)
            pre = f"t{ti}"
            P = args.partitions
            topics = {f"{pre}-queue": P}
            if "copier" in workloads:
                topics.update({f"{pre}-copier-in": P, f"{pre}-copier-out": P})
            if getattr(args, "transaction_version", 0):
                # transactions v2 (KIP-890 part 2) finalized before the first transaction
                finalize_feature(bootstrap, "transaction.version", args.transaction_version, 60)
                log(f"transaction.version {args.transaction_version} finalized on {bootstrap}")
            create_topics(bootstrap, topics, rf)
            final_topics = {}
            groups = {}
            if "queue" in workloads or "groups" in workloads:
                q = f"{pre}-queue"
                for i in range(args.producers):
                    pl = ProducerLoop(h, bootstrap, f"{pre}p{i}", q, P, args.rate, stops["produce"])
                    threads.append(("produce", pl.thread))
                final_topics[q] = (P, "read_uncommitted")
            if "queue" in workloads:
                c1 = ConsumerLoop(h, bootstrap, f"{pre}c-assign", [q], P, stops["consume"])
                c2 = ConsumerLoop(h, bootstrap, f"{pre}c-sub", [q], P, stops["consume"], mode="subscribe",
                                  group=f"{pre}-readers")
                c3 = KafkaPythonConsumerLoop(h, bootstrap, f"{pre}c-kpy", q, P, stops["consume"])
                threads += [("consume", c1.thread), ("consume", c2.thread), ("consume", c3.thread)]
                groups[f"{pre}-readers"] = [(q, p) for p in range(P)]
            if "copier" in workloads:
                src, dst, g = f"{pre}-copier-in", f"{pre}-copier-out", f"{pre}-copier"
                pl = ProducerLoop(h, bootstrap, f"{pre}pin", src, P, args.rate, stops["produce"])
                cp = Copier(h, bootstrap, f"{pre}copier", src, dst, g, stops["consume"],
                            random.Random(rng.random()))
                rc = ConsumerLoop(h, bootstrap, f"{pre}c-out-rc", [dst], P, stops["consume"],
                                  isolation="read_committed")
                ru = ConsumerLoop(h, bootstrap, f"{pre}c-out-ru", [dst], P, stops["consume"])
                threads += [("produce", pl.thread), ("consume", cp.thread), ("consume", rc.thread),
                            ("consume", ru.thread)]
                final_topics[src] = (P, "read_uncommitted")
                final_topics[dst] = (P, "read_committed")
                groups[g] = [(src, p) for p in range(P)]
            if "groups" in workloads:
                g = f"{pre}-members"
                churn = GroupChurn(h, hist_path, bootstrap, pre, q, g, stops["consume"],
                                   random.Random(rng.random()), log_dir=out)
                threads.append(("consume", churn.thread))
                groups[g] = [(q, p) for p in range(P)]
            finals.append((bootstrap, final_topics, groups,
                           {"input": src, "output": dst, "group": f"{pre}-copier", "suffix": Copier.SUFFIX}
                           if "copier" in workloads else None))
        for _, t in threads:
            t.start()
        t0 = time.monotonic()
        nem = Nemesis(cluster, h, events, args.time, log)
        nem.start(t0)
        log(f"{len(events)} faults planned over {args.time}s ({', '.join(kinds) or 'none'})")
        end = t0 + args.time
        while time.monotonic() < end and not deadline_hit.is_set():
            time.sleep(min(args.progress, max(0.0, end - time.monotonic())))
            c = h.counts
            log(f"[{time.monotonic() - t0:6.0f}s] ops {h.count:>8}  acks {c.get('send:ok', 0):>7}  "
                f"send errors {c.get('send:info', 0) + c.get('send:fail', 0):>5}  "
                f"txns {c.get('txn:ok', 0):>5}  faults {len(nem.done):>4}  {nem.active}")
        log("healing: every node up, every link restored")
        nem.heal_all()
        stops["produce"].set()
        for role, t in threads:
            if role == "produce":
                t.join(90)
        time.sleep(2)       # let consumers and the copier catch up
        stops["consume"].set()
        for role, t in threads:
            t.join(60)
        stuck = [t.name for _, t in threads if t.is_alive()]
        if stuck:
            log(f"clients still running after their deadline: {', '.join(stuck)}")
        log("final read of every partition")
        final_ok = True
        for bootstrap, topics, groups, copier in finals:
            res = final_read(h, bootstrap, topics, groups)
            final_ok &= res.pop("complete")
            h.write(f="final", type="ok", proc="final", copier=copier, **res)
        completed = final_ok and not stuck and not deadline_hit.is_set()
    except KeyboardInterrupt:
        log("interrupted")
    except Exception as e:
        log(f"run failed: {type(e).__name__}: {e}")
    finally:
        stops["produce"].set()
        stops["consume"].set()
        if nem is not None:
            nem.stop.set()
        h.write(f="run", type="stop", proc="runner", completed=completed)
        h.close()
        cluster.close()
        signal.signal(signal.SIGTERM, old_term)
    return check_and_report(hist_path, out, plot=not args.no_plot)


def check_history(hist_path: str) -> tuple[list, dict]:
    """A history file's operations and the checkers' verdict on them (summary and anomalies printed)."""
    ops = read_history(hist_path)
    result = checker.check(ops)
    log("")
    log(report.summary(result))
    if result["anomalies"]:
        log("")
        log(report.describe_anomalies(result))
    return ops, result


def check_and_report(hist_path: str, out: str | None = None, plot: bool = True) -> int:
    ops, result = check_history(hist_path)
    out = out or os.path.dirname(os.path.abspath(hist_path))
    if plot:
        png = report.plot(result, os.path.join(out, "plot.png"), title=os.path.basename(out))
        log(f"  plot: {png}" if png else "  plot: skipped (matplotlib not installed)")
    with open(os.path.join(out, "anomalies.json"), "w") as f:
        json.dump({"by_kind": result["by_kind"], "anomalies": result["anomalies"][:1000]}, f, indent=1)
    faults = sum(1 for o in ops if o.get("f") == "nemesis" and o.get("type") == "start")
    k = len(result["anomalies"])
    log(f"{report.operations(ops)} operations, {faults} faults, {k} anomalies")
    return 0 if k == 0 and result["completed"] else 1

"""past one core: produce and consume throughput of 1 and N kproto processes

kproto is one trio thread per broker process; a machine with more cores
runs more broker processes (docs/architecture.md, "Using many cores"). This
measures that layout on the machine at hand: for each process count N, N
independent single-node brokers each get 1/N of the partitions, and N client
processes (one per broker, each its own producer and consumer) drive them at
the same time. Reported: aggregate records/s and MiB/s from the first
client's start to the last one's end, each broker's CPU share and the
brokers' CPU seconds per GiB (written plus read: what must stay flat for
processes to scale), for
N = 1 and N = 2 (or --processes), alternating over --reps.

  python -m tools.bench scaling --processes 1,2 --partitions 6 --size 1024 --records 200000 --reps 2
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time

from tools.bench.options import layout_arguments, layout_rows, write_rows

_CTX = mp.get_context("spawn")


def client(bootstrap: str, topic: str, partitions: int, records: int, size: int, acks: str, start_at: float,
           out) -> None:
    """Produce ``records`` then read them back, from ``start_at`` (wall clock)."""
    try:
        from tools.bench import workloads
        delay = start_at - time.time()
        if delay > 0:
            time.sleep(delay)
        t0 = time.time()
        p = workloads.produce(bootstrap, topic, records, size, acks)
        t1 = time.time()
        c = workloads.consume_assigned(bootstrap, topic, partitions, records + 1, size)
        t2 = time.time()
        out.put({"produce": (t0, t1, p["records/s"]), "consume": (t1, t2, c["records/s"]), "records": records})
    except Exception as exc:
        out.put({"fatal": f"{type(exc).__name__}: {exc}"})


def run_layout(n: int, partitions: int, records: int, size: int, acks: str) -> dict:
    from tools.bench import procstat
    from tools.bench.targets import KprotoTarget
    brokers = [KprotoTarget(tempfile.mkdtemp(prefix=f"kproto-scaling-{n}-{i}-")) for i in range(n)]
    try:
        for b in brokers:
            b.start()
        share = partitions // n
        for i, b in enumerate(brokers):
            b.create_topics({f"scale-{i}": share})
        out = _CTX.Queue()
        start_at = time.time() + 4.0   # every client imported and connected-ish
        procs = [_CTX.Process(target=client, daemon=True,
                              args=(b.bootstrap, f"scale-{i}", share, records // n, size, acks, start_at, out))
                 for i, b in enumerate(brokers)]
        cpu0 = [procstat.cpu_seconds(b.pid) for b in brokers]
        for p in procs:
            p.start()
        results = [out.get(timeout=600) for _ in procs]
        cpu = [procstat.cpu_seconds(b.pid) - c for b, c in zip(brokers, cpu0)]
        for p in procs:
            p.join(10)
        fatal = [r["fatal"] for r in results if "fatal" in r]
        if fatal:
            raise RuntimeError(fatal[0])
        total = sum(r["records"] for r in results)
        res = {"processes": n, "records": total, "size": size, "load avg": os.getloadavg()[0]}
        for phase in ("produce", "consume"):
            begin = min(r[phase][0] for r in results)
            end = max(r[phase][1] for r in results)
            res[f"{phase} records/s"] = total / (end - begin)
            res[f"{phase} MiB/s"] = total * size / (end - begin) / (1 << 20)
        wall = max(r["consume"][1] for r in results) - min(r["produce"][0] for r in results)
        res["broker cpu % each"] = [round(100 * c / wall, 1) for c in cpu]
        # written once and read once: the cost per byte should not change with the process count
        res["broker cpu s per GiB"] = sum(cpu) / (2 * total * size / (1 << 30))
        return res
    finally:
        for b in brokers:
            b.stop()
            b.cleanup()


def main(argv=None) -> int:
    doc = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(prog="python -m tools.bench scaling", description=doc[0] + ".\n\n" + doc[1],
                                 epilog=doc[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    layout_arguments(ap, records=200_000, partitions_help="partitions in all, split evenly")
    args = ap.parse_args(argv)
    print(f"{'processes':>9} {'rep':>3} {'produce rec/s':>14} {'MiB/s':>7} {'consume rec/s':>14} {'MiB/s':>7} "
          f"{'broker cpu % each':>20} {'cpu s/GiB':>9} {'load':>5}", flush=True)

    def show(r: dict) -> None:
        print(f"{r['processes']:>9} {r['rep']:>3} {r['produce records/s']:>14,.0f} {r['produce MiB/s']:>7.1f} "
              f"{r['consume records/s']:>14,.0f} {r['consume MiB/s']:>7.1f} "
              f"{str(r['broker cpu % each']):>20} {r['broker cpu s per GiB']:>9.2f} {r['load avg']:>5.1f}", flush=True)

    rows = layout_rows(args, lambda n: run_layout(n, args.partitions, args.records, args.size, args.acks), show)
    if args.json:
        write_rows(args.json, args, rows)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

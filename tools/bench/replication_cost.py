"""replication cost: CPU per acks=all Produce request on the replication path, builds side by side

    python -m tools.bench replication_cost --trees /tmp/old-build,. --requests 1000 --reps 5

For each build (a source tree: its broker, kproto and tools), in a child
process of its own: three brokers and a controller node in one process
(tools/replication_cluster.py; the brokers talk over real sockets, so every
record goes leader -> followers by Fetch), one topic of 2 partitions led by
broker 2 with RF=3 and min.insync.replicas=2, and one client sending
``--requests`` Produce requests one after the other, acks=all, each of 2
partitions x 15 records of 1 KiB (the 16 KiB batches the Java perf producer
sends). Each answer needs both followers' fetches: the leader's Produce, two
follower fetch rounds (request, long poll, answer, append) and the high
watermark's move, all in this one process.

Reported per build: the process CPU time (all four nodes and the client) per
Produce request, and the same net of the idle CPU (the nodes' periodic checks,
measured for 3 s before, times the wall time of the requests), in
microseconds; medians over the repetitions, the builds taking turns in each
repetition so that a change of the machine's load falls on every build alike.
CPU time moves far less with the machine's load than throughput does, which is
what makes two builds comparable on a shared machine. ``--profile F`` writes a
cProfile (thread CPU clock) of the first build's first repetition to F.

This is the per-request cost of docs/performance.md's 3-node acks=all row of
the ceiling bench (`python -m tools.bench ceiling`), without the Java client,
the JVM and the leader placement that spread that bench's figures."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REQUESTS = 1000
RECORDS, SIZE = 15, 1024


def child(requests: int, profile: str | None) -> dict:
    """Run in the build's own process (its tree first on sys.path)."""
    import cProfile

    import trio

    from broker.controller.controller import TopicSpec
    from kproto import records as rec
    from kproto.messages.produce_request import ProduceRequest
    from tools.replication_cluster import run_with_cluster

    out: dict = {}

    async def body(cluster, client):
        c = cluster.brokers[cluster.controller].controller
        c.create_topic(TopicSpec("rc", -1, -1, {"min.insync.replicas": "2"},
                                 assignments=[(0, [2, 3, 1]), (1, [2, 3, 1])]))
        await cluster.wait_for(lambda: all(cluster.brokers[2].partitions.get("rc", i) is not None
                                           and ("rc", i) in cluster.brokers[2].replication.leaders for i in (0, 1)),
                               what="the leader's partitions")
        value = b"x" * SIZE

        def request():
            return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[
                ProduceRequest.TopicProduceData(name="rc", partition_data=[
                    ProduceRequest.PartitionProduceData(index=i, records=rec.build_batch([(None, value)] * RECORDS))
                    for i in (0, 1)])])
        conn = client.conn(2)

        async def send(req):
            resp = await conn.request(req, 9)
            codes = [p.error_code for t in resp.responses for p in t.partition_responses]
            if any(codes):
                raise RuntimeError(f"produce failed: {codes}")
        for _ in range(50):   # (warm-up: sessions incremental, handlers imported)
            await send(request())
        reqs = [request() for _ in range(requests)]
        c0, w0 = time.process_time(), time.perf_counter()
        await trio.sleep(3)
        idle = (time.process_time() - c0) / (time.perf_counter() - w0)   # cores busy doing nothing asked
        prof = cProfile.Profile(time.thread_time) if profile else None
        c0, w0 = time.process_time(), time.perf_counter()
        if prof:
            prof.enable()
        for req in reqs:
            await send(req)
        if prof:
            prof.disable()
            prof.dump_stats(profile)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        out.update(cpu_us=cpu / requests * 1e6, net_us=(cpu - idle * wall) / requests * 1e6,
                   wall_us=wall / requests * 1e6)
    run_with_cluster(body, 4, {"replica.lag.time.max.ms": "10000"}, controller=4, timeout=600)
    return out


def _run_child(tree: str, requests: int, profile: str | None) -> dict:
    env = dict(os.environ, PYTHONPATH=tree)
    # this file run in the build's tree (which may not have it): as a path, not a module of that
    # tree, and without its own folder on sys.path (tools/bench/profile.py would hide cProfile's)
    argv = ["--child", "--requests", str(requests)] + (["--profile", profile] if profile else [])
    cmd = [sys.executable, "-c", "import runpy, sys; sys.argv = sys.argv[1:]; "
           "runpy.run_path(sys.argv[0], run_name='__main__')", os.path.abspath(__file__), *argv]
    proc = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{tree}: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench replication_cost", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--trees", default=".", help="source trees of the builds, comma-separated (default .)")
    ap.add_argument("--requests", type=int, default=REQUESTS, help=f"Produce requests per run (default {REQUESTS})")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    ap.add_argument("--profile", help="write a cProfile of the first build's first run to this file")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.requests, args.profile)))
        return 0
    trees = [os.path.abspath(t) for t in args.trees.split(",") if t]
    runs: dict = {t: [] for t in trees}
    for rep in range(args.reps):
        for i, tree in enumerate(trees):
            r = _run_child(tree, args.requests, args.profile if rep == 0 and i == 0 else None)
            runs[tree].append(r)
            print(f"rep {rep + 1} {tree}: {r['cpu_us']:.0f} us CPU per request, {r['net_us']:.0f} net of idle, "
                  f"{r['wall_us']:.0f} us wall", flush=True)
    print()
    first = trees[0]
    for tree in trees:
        net = statistics.median(r["net_us"] for r in runs[tree])
        ratio = statistics.median(a["net_us"] / b["net_us"] for a, b in zip(runs[tree], runs[first]))
        print(f"{tree}: median {statistics.median(r['cpu_us'] for r in runs[tree]):.0f} us CPU per request, "
              f"{net:.0f} net of idle ({ratio:.3f}x {os.path.basename(first) or first}, median of the "
              f"per-repetition ratios)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

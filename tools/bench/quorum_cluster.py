"""Metadata quorum figures for a 3-node kproto cluster of real `kproto serve` processes (combined
broker,controller, Kafka's default quorum timeouts), measured as tools/bench/kafka_quorum.py
measures a real Kafka 3.9 cluster, so the two print side by side:

- CreateTopics round trip (p50/p99) through the brokers (a new Admin client per create);
- kill -9 of the active controller -> the next CreateTopics that succeeds, over --kills kills
  (the killed node is restarted and rejoins before the next kill).

    python3 -m tools.bench.quorum_cluster --creates 100 --kills 20

Data in a temporary directory, ephemeral ports; every process it starts is stopped at the end.
"""
from __future__ import annotations

import argparse
import sys
import time

from tools.bench.kafka_quorum import create, pct


def _leader(cluster, nodes):
    from tests.test_quorum_cluster import leader_of
    return leader_of(cluster, nodes)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--creates", type=int, default=100)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--log-level", default="WARNING")
    ap.add_argument("--dynamic", action="store_true",
                    help="a dynamic quorum (KIP-853): bootstrap servers, formatted --initial-controllers")
    args = ap.parse_args(argv)
    from confluent_kafka.admin import AdminClient

    from tools.dynamic_quorum import DynamicQuorum
    from tools.quorum_cluster import QuorumCluster
    c = (DynamicQuorum if args.dynamic else QuorumCluster)(args.nodes, log_level=args.log_level)
    everyone = list(c.nodes)
    try:
        if args.dynamic:
            c.format_dynamic("initial")
        else:
            c.format()
        c.start()
        t0 = time.monotonic()
        while True:
            try:
                create(AdminClient, c.bootstrap, "warm-up", 5)
                break
            except Exception as exc:   # noqa: BLE001
                if "already exists" in str(exc):
                    break   # an earlier try committed after its client gave up
                if time.monotonic() - t0 > 60:
                    raise
                time.sleep(0.2)
        lat = []
        for k in range(args.creates):
            t = time.monotonic()
            create(AdminClient, c.bootstrap, f"lat-{k}", 30)
            lat.append((time.monotonic() - t) * 1000)
        if lat:
            print(f"kproto CreateTopics round trip ({args.creates}, {args.nodes} nodes): "
                  f"p50 {pct(lat, 50):.1f} ms, p99 {pct(lat, 99):.1f} ms", flush=True)
        fail = []
        for k in range(args.kills):
            victim = _leader(c, everyone)
            t = time.monotonic()
            c.nodes[victim].kill()
            others = ",".join(f"127.0.0.1:{c.ports[i]}" for i in everyone if i != victim)
            n = 0
            while True:
                n += 1
                try:
                    create(AdminClient, others, f"after-{k}-{n}", 5)
                    break
                except Exception as exc:   # noqa: BLE001
                    if "already exists" in str(exc):
                        break
                    if time.monotonic() - t > 60:
                        raise
            fail.append((time.monotonic() - t) * 1000)
            print(f"kill {k + 1}: controller {victim} -> write after {fail[-1]:.0f} ms", flush=True)
            c.nodes[victim].start()
            t = time.monotonic()
            while True:   # the restarted node takes writes again (forwarded) before the next kill
                try:
                    create(AdminClient, f"127.0.0.1:{c.ports[victim]}", f"rejoined-{k}", 10)
                    break
                except Exception as exc:   # noqa: BLE001
                    if "already exists" in str(exc):
                        break
                    print(f"  rejoin of node {victim}: {exc} after {time.monotonic() - t:.1f} s", flush=True)
                    if time.monotonic() - t > 60:
                        raise
        if fail:
            under = sum(1 for f in fail if f < 3000)
            print(f"kproto leader kill -> next CreateTopics ({len(fail)} kills): p50 {pct(fail, 50):.0f} ms, "
                  f"p90 {pct(fail, 90):.0f} ms, max {max(fail):.0f} ms, {under}/{len(fail)} under 3 s")
    except BaseException:
        for i, n in c.nodes.items():   # what the nodes said, for the post-mortem
            sys.stderr.write(f"=== node {i}\n" + "".join(n.stderr_lines[-40:]))
        raise
    finally:
        c.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

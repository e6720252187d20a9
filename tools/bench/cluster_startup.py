"""Start-up figures of a 3-node kproto cluster of real `kproto serve` processes (combined
broker,controller): the time from the start of the processes until Metadata lists every broker
(every one registered and unfenced), and the time from a kill -9 and immediate restart of one node
until it answers and Metadata lists it again (it waits for its old session to expire: Kafka's
DUPLICATE_BROKER_REGISTRATION), over --runs runs.

    python3 -m tools.bench.cluster_startup --runs 3 [--set broker.session.timeout.ms=3000]
"""
from __future__ import annotations

import argparse
import statistics
import time


def _listed(bootstrap: str) -> set:
    from confluent_kafka.admin import AdminClient
    try:
        md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=2)
        return set(md.brokers)
    except Exception:   # noqa: BLE001 - not up yet
        return set()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--restart", action="store_true", help="also kill -9 and restart node 1 once per run")
    ap.add_argument("--set", action="append", default=[], help="a broker property k=v for every node")
    args = ap.parse_args(argv)
    from tools.quorum_cluster import QuorumCluster
    settings = dict(kv.split("=", 1) for kv in args.set)
    starts, restarts = [], []
    for _ in range(args.runs):
        c = QuorumCluster(3, settings=settings)
        try:
            c.format()
            t0 = time.monotonic()
            c.start()
            while _listed(c.bootstrap) != {1, 2, 3}:
                time.sleep(0.05)
            starts.append(time.monotonic() - t0)
            if args.restart:
                # back: the others stopped listing node 1 (its old registration fenced) and list it
                # again (its new incarnation unfenced), and it answers itself. A node that is never
                # fenced (re-registered over its old session) counts once it answers, listed by all.
                own, other = f"{c.host}:{c.ports[1]}", f"{c.host}:{c.ports[2]}"
                t0 = time.monotonic()
                c.nodes[1].kill()
                c.nodes[1].start()
                gone, session = False, int(settings.get("broker.session.timeout.ms", 9000)) / 1000
                while time.monotonic() - t0 < 120:
                    gone = gone or 1 not in _listed(other)
                    if (gone or time.monotonic() - t0 > 2 * session + 5) and \
                            _listed(own) == {1, 2, 3} and _listed(other) == {1, 2, 3}:
                        break
                    time.sleep(0.05)
                restarts.append((time.monotonic() - t0, gone))
        finally:
            c.cleanup()
    print("start -> all brokers listed: " + " ".join(f"{s:.2f}" for s in starts)
          + f" s (median {statistics.median(starts):.2f})")
    if restarts:
        print("kill -9 + restart -> fenced and listed again: "
              + " ".join(f"{s:.2f}" + ("" if gone else " (never fenced)") for s, gone in restarts)
              + f" s (median {statistics.median(s for s, _g in restarts):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""python -m tools.chaos run ... | check HISTORY  (see docs/chaos.md)"""
from __future__ import annotations

import argparse
import os
import sys

from .runner import check_and_report, run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.chaos", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run workloads against a cluster under faults, then check")
    r.add_argument("--nodes", type=int, default=1)
    r.add_argument("--nemesis", default="kill,pause",
                   help="comma-separated: kill,pause,partition,slow,lossy,disk,power (empty: none)")
    r.add_argument("--workload", default="queue,copier,groups", help="comma-separated: queue,copier,groups")
    r.add_argument("--time", type=float, default=60, help="seconds of faults and load")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--out", help="directory for history.jsonl, plot.png, node logs")
    r.add_argument("--kafka", action="store_true", help="real Kafka nodes from KAFKA_HOME instead of kproto")
    r.add_argument("--loopback", action="store_true", help="no network namespaces")
    r.add_argument("--partitions", type=int, default=4)
    r.add_argument("--producers", type=int, default=2)
    r.add_argument("--rate", type=float, default=100, help="sends per second per producer")
    r.add_argument("--progress", type=float, default=5, help="seconds between progress lines")
    r.add_argument("--fault", help="test-only broker fault (KPROTO_TEST_FAULT), e.g. "
                                   "drop-last-acked-batch-on-restart")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker property for every node, e.g. broker.session.timeout.ms=2000 (repeatable)")
    r.add_argument("--no-plot", action="store_true")
    r.add_argument("--transaction-version", type=int, default=0,
                   help="finalize transaction.version at this level (UpdateFeatures) before the workloads")
    r.add_argument("--rebootstrap", action="store_true",
                   help="keep librdkafka's default metadata.recovery.strategy=rebootstrap (see docs/chaos.md)")
    c = sub.add_parser("check", help="check a history file and print the report")
    c.add_argument("history")
    c.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        if args.rebootstrap:
            os.environ["CHAOS_METADATA_RECOVERY"] = "rebootstrap"   # member processes inherit it
        return run(args)
    return check_and_report(args.history, plot=not args.no_plot)


if __name__ == "__main__":
    sys.exit(main())

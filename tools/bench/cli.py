"""python -m tools.bench {produce,consume,latency,cost,all} [options]

Drives kproto (and Apache Kafka when KAFKA_HOME names a distribution, and the
sink ceiling) with librdkafka clients; prints a results table.

  produce   producers: records/s, MiB/s, produce-ack latency
  consume   produce, then read back with one consumer and a 3-member group
  latency   one record per ms: produce-ack and end-to-end latency
  cost      start to ready, recovery after kill -9, peak RSS
  all       everything above (and Kafka's perf tools when KAFKA_HOME is set)
  profile   py-spy profiles of kproto under the produce and consume loads
"""
from __future__ import annotations

import argparse
import os
import sys

COMMANDS = ("produce", "consume", "latency", "cost", "all", "profile")

_WORKLOADS = {
    "produce": {"produce"},
    "consume": {"produce", "consume"},
    "latency": {"latency"},
    "cost": {"produce", "consume", "cost"},
    "all": {"produce", "consume", "latency", "cost", "perf"},
}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.split("\n\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n")[2])
    ap.add_argument("command", choices=COMMANDS)
    ap.add_argument("--quick", action="store_true",
                    help="smoke mode: kproto only, small counts, one repetition (seconds)")
    ap.add_argument("--targets", help="comma-separated: kproto, sink, kafka "
                    "(default kproto,sink plus kafka when KAFKA_HOME is set; --quick: kproto)")
    ap.add_argument("--reps", type=int, help="repetitions (default 3; --quick 1)")
    ap.add_argument("--records-100", type=int, dest="records_small",
                    help="records per produce run at 100 B (default 1,000,000; --quick 20,000)")
    ap.add_argument("--records-1k", type=int, dest="records_large",
                    help="records per produce run at 1 KiB (default 250,000; --quick 5,000)")
    ap.add_argument("--latency-seconds", type=float, help="length of each latency run (default 10; --quick 1)")
    ap.add_argument("--recovery-mib", type=int, help="log size for the kill -9 recovery (default 1024; --quick 16)")
    ap.add_argument("--kafka-home", default=os.environ.get("KAFKA_HOME"),
                    help="an Apache Kafka distribution (default $KAFKA_HOME)")
    ap.add_argument("--markdown", metavar="PATH", help="write method, machine and table to PATH (docs/performance.md)")
    ap.add_argument("--json", metavar="PATH", help="write every figure of every repetition to PATH")
    ap.add_argument("--from-json", metavar="PATH",
                    help="run nothing: print (and with --markdown write) the results saved in PATH by --json")
    ap.add_argument("--profile-seconds", type=float, default=20.0, help="profile: seconds per load (default 20)")
    ap.add_argument("--profile-out", default="profiles", help="profile: folder for py-spy's output")
    return ap


def plan_from(args):
    from tools.bench.runner import Plan
    quick = args.quick
    if args.targets:
        targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    elif quick:
        targets = ["kproto"]
    else:
        targets = ["kproto"] + (["kafka"] if args.kafka_home else []) + ["sink"]
    small = args.records_small or (20_000 if quick else 1_000_000)
    large = args.records_large or (5_000 if quick else 250_000)
    return Plan(
        workloads=set(_WORKLOADS[args.command]),
        targets=targets,
        reps=args.reps or (1 if quick else 3),
        records={100: small, 1024: large},
        latency_seconds=args.latency_seconds or (1.0 if quick else 10.0),
        recovery_mib=args.recovery_mib or (16 if quick else 1024),
        perf_records=large,
        kafka_home=args.kafka_home if "kafka" in targets or not quick else None,
    )


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.command == "profile":
        from tools.bench import profile
        return profile.run(args.profile_seconds, args.profile_out)
    from tools.bench import report
    from tools.bench.progress import Progress
    from tools.bench.runner import Runner
    if args.from_json:
        results = report.load_json(args.from_json)
    else:
        results = Runner(plan_from(args), Progress()).run()
    print(report.text_table(results), flush=True)
    if args.markdown:
        report.write_markdown(args.markdown, results)
        print(f"wrote {args.markdown}")
    if args.json and not args.from_json:
        report.write_json(args.json, results)
        print(f"wrote {args.json}")
    return 1 if results.errors else 0


if __name__ == "__main__":
    sys.exit(main())

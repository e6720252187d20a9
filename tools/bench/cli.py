"""python -m tools.bench {produce,consume,cost,all,durability} [options]

Drives kproto (and Apache Kafka when KAFKA_HOME names a distribution, and the
sink ceiling) with librdkafka clients; prints a results table.

  produce   producers: records/s, MiB/s, produce-ack latency
  consume   produce, then read back with one consumer and a 3-member group
  cost      start to ready, recovery after kill -9, peak RSS
  all       everything above, one record per ms latency (and Kafka's perf tools
            when KAFKA_HOME is set); fixed-rate tail latency: `python -m tools.bench latency`
  durability  fsync before ack: 1 KiB acks=all producers against kproto and
            kproto-fsync (log.flush.interval.messages=1), a write+fdatasync
            loop next to the data (the device's limit), and the latency of
            acks=1 records beside producers to a flush.messages=1 topic
  profile   py-spy profiles of kproto under the produce and consume loads

Targets: kproto, kproto-fsync, sink, kafka, kafka-fsync (the -fsync ones with
log.flush.interval.messages=1); --broker-set applies to every broker target.
"""
from __future__ import annotations

import argparse
import os
import sys

from tools.bench.options import setting

COMMANDS = ("produce", "consume", "cost", "all", "durability", "profile")

_WORKLOADS = {
    "produce": {"produce"},
    "consume": {"produce", "consume"},
    "latency": {"latency"},
    "cost": {"produce", "consume", "cost"},
    "all": {"produce", "consume", "latency", "cost", "perf"},
    "durability": {"produce", "fsync", "beside"},
}
# what `durability` runs unless told otherwise
_DURABILITY = {"targets": "kproto,kproto-fsync", "sizes": "1024", "acks": "all", "partitions": "1,6"}


def _ints(arg: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in arg.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {arg!r}") from None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.split("\n\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n")[2])
    ap.add_argument("command", choices=COMMANDS)
    ap.add_argument("--quick", action="store_true",
                    help="smoke mode: kproto only, small counts, one repetition (seconds)")
    ap.add_argument("--targets", help="comma-separated: kproto, kproto-fsync, sink, kafka, kafka-fsync, "
                    "kproto@PATH (the broker of another checkout, e.g. an older build) "
                    "(default kproto,sink plus kafka when KAFKA_HOME is set; --quick: kproto; "
                    "durability: kproto,kproto-fsync)")
    ap.add_argument("--broker-set", action="append", type=setting, default=[], metavar="KEY=VALUE",
                    help="a broker setting for every broker target (kproto's --set, a line of Kafka's "
                    "server.properties); repeatable")
    ap.add_argument("--sizes", type=_ints, help="record sizes in bytes, comma-separated (default 100,1024)")
    ap.add_argument("--acks", help="producer acks to run, comma-separated (default 1,all)")
    ap.add_argument("--partitions", type=_ints, help="partition counts, comma-separated (default 1,6)")
    ap.add_argument("--fsync-seconds", type=float, help="length of the write+fdatasync loop (default 3)")
    ap.add_argument("--producers", type=int, default=1,
                    help="producers per produce run, each its own connection, sharing the records (default 1)")
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
    # "start to ready" of a kproto target: with bytecode cached, as `pip install .` leaves it (pip
    # compiles the package) and as a checkout has it after its first start; a machine that sets
    # PYTHONDONTWRITEBYTECODE would otherwise compile every module at every start (tools/bench/startup.py)
    from tools.bench.startup import add_pycache_option
    add_pycache_option(ap)
    return ap


def plan_from(args):
    from tools.bench.runner import Plan
    quick = args.quick
    durability = args.command == "durability"
    if args.targets:
        targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    elif durability:
        targets = _DURABILITY["targets"].split(",")
    elif quick:
        targets = ["kproto"]
    else:
        targets = ["kproto"] + (["kafka"] if args.kafka_home else []) + ["sink"]
    small = args.records_small or (20_000 if quick else 1_000_000)
    large = args.records_large or (5_000 if quick else 250_000)
    shape = {}
    sizes = args.sizes or (_ints(_DURABILITY["sizes"]) if durability else None)
    if sizes:
        shape["sizes"] = sizes
    acks = args.acks or (_DURABILITY["acks"] if durability else None)
    if acks:
        shape["acks"] = tuple(a.strip() for a in acks.split(",") if a.strip())
    partitions = args.partitions or (_ints(_DURABILITY["partitions"]) if durability else None)
    if partitions:
        shape["partitions"] = partitions
    records = {100: small, 1024: large}
    for size in shape.get("sizes", ()):
        records.setdefault(size, max(1, large * 1024 // size))  # as many bytes as the 1 KiB runs
    return Plan(
        workloads=set(_WORKLOADS[args.command]),
        targets=targets,
        reps=args.reps or (1 if quick else 3),
        records=records,
        latency_seconds=args.latency_seconds or (1.0 if quick else 10.0),
        recovery_mib=args.recovery_mib or (16 if quick else 1024),
        perf_records=large,
        kafka_home=args.kafka_home if any(t.startswith("kafka") for t in targets) or not quick else None,
        broker_settings=dict(args.broker_set),
        producers=max(1, args.producers),
        fsync_seconds=args.fsync_seconds or (1.0 if quick else 3.0),
        **shape,
    )


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.command == "profile":
        from tools.bench import profile
        return profile.run(args.profile_seconds, args.profile_out)
    from tools.bench import report
    from tools.bench.progress import Progress
    from tools.bench.runner import Runner
    from tools.bench.startup import use_pycache
    use_pycache(args)
    if args.markdown and args.command == "durability":
        # the generated part of docs/performance.md holds the main benchmark;
        # durability figures go into its hand-written part
        raise SystemExit("durability writes no Markdown: use --json and quote the figures by hand")
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

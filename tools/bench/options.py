"""The command-line options several benches declare alike, declared here once
so that each bench's main() adds only its own options and the shared ones
keep the same names, defaults and help everywhere:

- the topic and partition counts of the partition-count benches
  (partitions.py on one node, partitions_cluster.py on three);
- --targets (and --kafka-home), the brokers a bench compares;
- the layout options of the 1-vs-N-processes comparisons (scaling.py,
  node_group.py);

and what those benches do alike with them: the names in --targets, the
layouts --processes and --reps run, the JSON file of rows --json writes; and
the KEY=VALUE broker settings (`setting`, an argparse type)."""
from __future__ import annotations

import argparse
import json
import os


def setting(arg: str) -> tuple[str, str]:
    """A KEY=VALUE broker setting (--broker-set, --set)."""
    key, sep, value = arg.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {arg!r}")
    return key.strip(), value.strip()


def partition_count_arguments(ap) -> None:
    """How many topics and partitions the partition-count benches create, when
    they measure idle CPU, and whether they time a restart after kill -9."""
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=100, help="partitions per topic")
    ap.add_argument("--per-request", type=int, default=10, help="topics per CreateTopics request")
    ap.add_argument("--idle", type=float, default=20.0, help="seconds over which idle CPU is measured")
    ap.add_argument("--settle", type=float, default=60.0,
                    help="seconds after creation before idle CPU is measured (background fsyncs)")
    ap.add_argument("--no-restart", action="store_true", help="skip the kill -9 and restart")


def target_arguments(ap, default: str = "kproto", kafka_home: bool = True) -> None:
    """--targets, and --kafka-home where the bench takes the Kafka distribution
    as an option as well as from KAFKA_HOME (fanout.py reads KAFKA_HOME only)."""
    ap.add_argument("--targets", default=default, help="comma-separated: kproto, kafka (kafka needs KAFKA_HOME)")
    if kafka_home:
        ap.add_argument("--kafka-home", default=os.environ.get("KAFKA_HOME"))


def target_names(targets: str) -> list[str]:
    """The names in a --targets value ("kproto, kafka" as "kproto,kafka")."""
    return [n.strip() for n in targets.split(",") if n.strip()]


def layout_arguments(ap, records: int, partitions_help: str) -> None:
    """The options of a 1-vs-N-processes comparison (scaling.py, node_group.py)."""
    ap.add_argument("--processes", default="1,2", help="broker process counts (default 1,2)")
    ap.add_argument("--partitions", type=int, default=6, help=f"{partitions_help} (default 6)")
    ap.add_argument("--size", type=int, default=1024, help="record size (default 1024)")
    ap.add_argument("--records", type=int, default=records, help=f"records per run (default {records:,})")
    ap.add_argument("--acks", default="1", help="producer acks (default 1)")
    ap.add_argument("--reps", type=int, default=2, help="repetitions, layouts alternating (default 2)")
    ap.add_argument("--json", metavar="PATH")


def layout_rows(args, run, show) -> list[dict]:
    """Each process count in --processes, --reps times, the layouts alternating:
    the rows ``run(count)`` returns, each shown as it comes (``show(row)``). A
    run that raises is a row with its error, and the other layouts still run."""
    counts = [int(x) for x in args.processes.split(",")]
    rows = []
    for rep in range(args.reps):
        for n in counts:
            try:
                r = run(n) | {"rep": rep}
            except Exception as exc:   # noqa: BLE001 - reported in the row
                r = {"processes": n, "rep": rep, "error": f"{type(exc).__name__}: {exc}"}
                print(f"{n:>9} {rep:>3} error: {r['error']}", flush=True)
            else:
                show(r)
            rows.append(r)
    return rows


def write_rows(path: str, args, rows: list[dict], **extra) -> None:
    """--json's file: the options, the machine's CPU count, what else the
    bench adds (e.g. the load average), then the rows."""
    with open(path, "w") as f:
        json.dump({"args": vars(args), "cpus": os.cpu_count(), **extra, "rows": rows}, f, indent=1)

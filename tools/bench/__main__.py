"""python -m tools.bench <command> [args...]

Broker benchmarks (tools/bench/cli.py): produce, consume, cost, all,
profile; `latency` (tools/bench/latency.py) is the fixed-rate tail-latency workload. Any other name runs tools/bench/<name>.py's main(args), e.g. `codec`
(the protocol codec benchmark) or `sink` (the ceiling endpoint)."""
from __future__ import annotations

import importlib
import signal
import sys

from tools.bench.cli import COMMANDS

MODULE_COMMANDS = ("codec", "sink", "metrics_cost", "latency", "scaling", "create_stall", "fetch_sessions",
                   "schema_registry", "console_cost", "partitions", "object_store", "tiered", "share_groups",
                   "node_group", "fanout", "ceiling", "startup", "share_state",
                   "request_cost", "replication_cost", "produce_requests")


def usage() -> str:
    return f"usage: python -m tools.bench {{{','.join(COMMANDS + MODULE_COMMANDS)}}} [args...]"


def full_help() -> str:
    """The workloads and options (the broker benchmark's help), then the
    commands that are modules of their own."""
    from tools.bench import cli
    extra = []
    for name in MODULE_COMMANDS:
        doc = (importlib.import_module(f"tools.bench.{name}").__doc__ or "").strip().splitlines()
        extra.append(f"  {name:<9} {doc[0] if doc else ''}  (python -m tools.bench {name} --help)")
    return (cli.parser().format_help().rstrip() + "\n\nother commands:\n" + "\n".join(extra))


def _stop_on_sigterm() -> None:
    """SIGTERM (a timeout, pkill) unwinds like Ctrl-C, so the benchmark's
    finally blocks stop the brokers it started (in sessions of their own,
    possibly SIGSTOPped) instead of leaving them running."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, handler)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    _stop_on_sigterm()
    if argv and argv[0] in COMMANDS:
        from tools.bench import cli
        sys.exit(cli.main(argv))
    if argv and argv[0] in ("-h", "--help"):
        print(full_help())
        sys.exit(0)
    if not argv or argv[0] not in MODULE_COMMANDS:
        sys.exit(f"{usage()}\n       python -m tools.bench --help   (the workloads and their options)")
    module = importlib.import_module(f"tools.bench.{argv[0]}")
    module.main(argv[1:])


if __name__ == "__main__":
    main()

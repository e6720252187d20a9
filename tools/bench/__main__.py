"""python -m tools.bench <command> [args...]

Broker benchmarks (tools/bench/cli.py): produce, consume, latency, cost, all,
profile. Any other name runs tools/bench/<name>.py's main(args), e.g. `codec`
(the protocol codec benchmark) or `sink` (the ceiling endpoint)."""
from __future__ import annotations

import importlib
import sys

from tools.bench.cli import COMMANDS

MODULE_COMMANDS = ("codec", "sink", "metrics_cost")


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in COMMANDS:
        from tools.bench import cli
        sys.exit(cli.main(argv))
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in MODULE_COMMANDS:
        sys.exit(f"usage: python -m tools.bench {{{','.join(COMMANDS + MODULE_COMMANDS)}}} [args...]\n"
                 f"       python -m tools.bench all --help")
    module = importlib.import_module(f"tools.bench.{argv[0]}")
    module.main(argv[1:])


if __name__ == "__main__":
    main()

"""python -m tools.bench <name> [args...]: run tools/bench/<name>.py's main(args)."""
from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    names = sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)])
                   if not m.name.startswith("_"))
    if not argv or argv[0] not in names:
        sys.exit(f"usage: python -m tools.bench {{{','.join(names)}}} [args...]")
    module = importlib.import_module(f"tools.bench.{argv[0]}")
    if not hasattr(module, "main"):
        sys.exit(f"tools.bench.{argv[0]} has no main()")
    module.main(argv[1:])


if __name__ == "__main__":
    main()

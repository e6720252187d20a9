"""Start-up cost of a single node: the CPU (its threads' schedstat, in ns) a fresh
`kproto serve` spends until it answers its first ApiVersions, for this
checkout and older builds side by side.

    python -m tools.bench startup --starts 9 --targets kproto,kproto@/tmp/kproto-1122

A build installed the way a user installs it (`pip install` into a virtual
environment, which compiles the package's bytecode; nothing of this checkout
or of this interpreter's site-packages on its path) is a `venv@PATH` target:

    python3 -m venv /tmp/venv-new && /tmp/venv-new/bin/pip install .
    python3 -m venv /tmp/venv-old && /tmp/venv-old/bin/pip install /tmp/kproto-1122
    python -m tools.bench startup --starts 15 --targets venv@/tmp/venv-new,venv@/tmp/venv-old

Each start is a fresh empty data folder; the targets take turns start by
start, so a change of machine load falls on every build alike. CPU time,
unlike wall time, barely moves with the load of other processes on the
machine, so it is the figure to compare; the wall time is printed beside it.
Bytecode: a process that may not write `__pycache__` (PYTHONDONTWRITEBYTECODE,
set on some machines) compiles every module at every start; `--pycache DIR`
(the default, a folder under the temporary directory) lets the first start
write the bytecode there and the others read it, as an installed wheel's
compiled files would. That first start is not counted."""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import tempfile
import time

from tools.bench import apiversions, procstat
from tools.bench.options import setting
from tools.bench.targets import KprotoCheckoutTarget, KprotoTarget, KprotoVenvTarget


def kproto_target(name: str, workdir: str, settings: dict[str, str] | None = None, bench: str = "startup"):
    """``kproto`` (this checkout), ``kproto@PATH`` (another build's broker) or ``venv@PATH``
    (kproto installed in a virtual environment)."""
    if name == "kproto":
        return KprotoTarget(workdir, settings)
    if name.startswith("kproto@"):
        return KprotoCheckoutTarget(workdir, name.split("@", 1)[1], settings)
    if name.startswith("venv@"):
        return KprotoVenvTarget(workdir, name.split("@", 1)[1], settings)
    raise SystemExit(f"{bench}: unknown target {name!r} (kproto, kproto@PATH or venv@PATH)")


@contextlib.contextmanager
def stopped_after(targets, root: str):
    """Every target stopped and their folder removed however the run ends."""
    try:
        yield
    finally:
        for t in targets:
            t.stop()
        shutil.rmtree(root, ignore_errors=True)


def add_pycache_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--pycache", default=os.path.join(tempfile.gettempdir(), "kproto-startup-pycache"),
                    help="PYTHONPYCACHEPREFIX for the brokers ('' leaves the environment alone)")


def use_pycache(args) -> None:
    """The brokers read (and the first start writes) bytecode under --pycache (see the docstring)."""
    if args.pycache:
        os.environ["PYTHONPYCACHEPREFIX"] = args.pycache
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def one_start(target) -> dict:
    """Start fresh, ask ApiVersions once, stop; the figures of that start."""
    began = time.perf_counter()
    target.start(fresh=True)
    try:
        procstat.wait_off_cpu(target.pid)
        at_ready = procstat.cpu_seconds_ns(target.pid)
        apiversions.supported(target.bootstrap)
        wall = time.perf_counter() - began
        procstat.wait_off_cpu(target.pid)   # (its threads' clocks are read up to date off the CPU)
        return {"cpu to ApiVersions s": procstat.cpu_seconds_ns(target.pid), "cpu to ready line s": at_ready,
                "wall to ApiVersions s": wall, "peak RSS MiB": (procstat.peak_rss_bytes(target.pid) or 0) / 2**20}
    finally:
        target.stop()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench startup", description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default="kproto", help="kproto and/or kproto@PATH, comma-separated")
    ap.add_argument("--starts", type=int, default=7, help="counted starts per target (default 7)")
    ap.add_argument("--set", action="append", default=[], type=setting, metavar="KEY=VALUE", dest="settings",
                    help="a broker setting for every target, e.g. kproto.metrics.listener=http://127.0.0.1:0 "
                         "(the listener on, as `kproto serve` has it by default; the bench switches it off)")
    add_pycache_option(ap)
    args = ap.parse_args(argv)
    use_pycache(args)
    names = [t.strip() for t in args.targets.split(",") if t.strip()]
    settings = dict(args.settings)
    root = tempfile.mkdtemp(prefix="kproto-startup-")
    targets = [kproto_target(n, os.path.join(root, str(i)), settings) for i, n in enumerate(names)]
    figures: dict[str, list[dict]] = {t.name: [] for t in targets}
    with stopped_after(targets, root):
        for t in targets:            # warm-up: bytecode written, files in the page cache
            one_start(t)
        for i in range(args.starts):
            for t in targets:
                figures[t.name].append(one_start(t))
            print(f"start {i + 1}/{args.starts}: " + ", ".join(
                f"{t.name} {figures[t.name][-1]['cpu to ApiVersions s']:.2f} s CPU" for t in targets), flush=True)
    load = procstat.load_average()
    keys = list(next(iter(figures.values()))[0])
    print(f"\nmedian (min-max) of {args.starts} starts; load average at the end {load}")
    print("| figure | " + " | ".join(figures) + " |")
    print("| --- |" + " ---: |" * len(figures))
    for k in keys:
        cells = []
        for runs in figures.values():
            vals = [r[k] for r in runs]
            cells.append(f"{statistics.median(vals):.3g} ({min(vals):.3g}-{max(vals):.3g})")
        print(f"| {k} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

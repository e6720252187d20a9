"""Heap tracing for a broker process (issue 26, RSS drift in the soak).

    python -m tools.memtrace serve --set ...        # same arguments as `python -m broker.launch.cli`
    kill -USR1 <pid>                                # the first starts tracing, each later one writes
                                                    # $KPROTO_MEMTRACE_DIR/snap-<pid>-<n>.tm
    kill -USR2 <pid>                                # pymalloc stats and malloc_trim(0) to stderr
    python -m tools.memtrace compare OLD.tm NEW.tm [--top 25] [--frames 6]

The first SIGUSR1 starts ``tracemalloc.start(KPROTO_MEMTRACE_FRAMES or 25)``, each later one dumps a
snapshot (the broker itself has no such hook, so this stays a tool). Tracing from the start would
slow a broker's start several times over on a loaded machine, and a leak shows in what is
allocated later anyway. ``compare`` lists the allocation sites
(by traceback) whose live size grew most between two snapshots, with the count of live blocks.
``python -m tools.chaos.soak --tracemalloc`` starts every node this way.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import tracemalloc

_FILTERS = [tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
            tracemalloc.Filter(False, "<unknown>")]


def _install(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    n = [0]

    def dump(signum, frame):
        if not tracemalloc.is_tracing():
            tracemalloc.start(int(os.environ.get("KPROTO_MEMTRACE_FRAMES", "25")))
            return
        n[0] += 1
        path = os.path.join(out_dir, f"snap-{os.getpid()}-{n[0]}.tm")
        tracemalloc.take_snapshot().dump(path + ".part")
        os.replace(path + ".part", path)   # (readers never see a half-written snapshot)

    signal.signal(signal.SIGUSR1, dump)
    signal.signal(signal.SIGUSR2, lambda signum, frame: trim())


def _rss_anon_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))


def trim() -> None:
    """SIGUSR2: pymalloc's arena statistics to stderr, then glibc's malloc_trim(0), with RssAnon
    before and after: what the trim gives back was free memory the C allocator kept, not a leak."""
    import ctypes
    sys._debugmallocstats()
    before = _rss_anon_kib()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    print(f"memtrace: malloc_trim(0): RssAnon {before} kB -> {_rss_anon_kib()} kB", file=sys.stderr, flush=True)


def compare(old: str, new: str, top: int, frames: int) -> None:
    a = tracemalloc.Snapshot.load(old).filter_traces(_FILTERS)
    b = tracemalloc.Snapshot.load(new).filter_traces(_FILTERS)
    ta = sum(t.size for t in a.traces)
    tb = sum(t.size for t in b.traces)
    print(f"traced: {ta / 2**20:.2f} MiB -> {tb / 2**20:.2f} MiB ({(tb - ta) / 2**10:+.0f} KiB)")
    stats = b.compare_to(a, "traceback")
    for s in stats[:top]:
        print(f"\n{s.size_diff / 1024:+9.1f} KiB  {s.count_diff:+7d} blocks  (now {s.size / 1024:.1f} KiB, "
              f"{s.count} blocks)")
        for line in s.traceback.format(limit=frames, most_recent_first=True):
            print("    " + line)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["compare"]:
        ap = argparse.ArgumentParser(prog="python -m tools.memtrace compare")
        ap.add_argument("old")
        ap.add_argument("new")
        ap.add_argument("--top", type=int, default=25)
        ap.add_argument("--frames", type=int, default=6)
        a = ap.parse_args(argv[1:])
        compare(a.old, a.new, a.top, a.frames)
        return
    _install(os.environ.get("KPROTO_MEMTRACE_DIR", "memtrace"))
    from broker.launch import cli
    cli.main(argv)


if __name__ == "__main__":
    main()

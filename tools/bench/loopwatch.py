"""What blocks a kproto broker's event loop: runs `kproto serve` with a trio
instrument that times every task step (wall clock and the thread's CPU
time: CPU time over the threshold is our own work, wall clock alone is a
blocking system call or the machine's other processes), a watchdog thread that grabs the
trio thread's stack while a step has run longer than the threshold, and
gc.callbacks timing every collection.

  python -m tools.bench.loopwatch --out watch.json [--threshold-ms 5] -- serve --set ...

The report (JSON, rewritten every few seconds and at exit): slow steps per
task name (count, total, max), the stacks seen inside slow steps (most
frequent first; the innermost frames say what blocked), and gc pauses per
generation. `python -m tools.bench latency --loopwatch DIR` runs kproto
under it. A diagnostic, not a production path: the instrument costs a few
microseconds a step."""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
import time
import traceback

from tools.bench.hist import Histogram


class LoopWatch:
    def __init__(self, out: str, threshold_ms: float):
        self.out = out
        self.threshold = threshold_ms / 1000.0
        self.step_started = 0.0      # 0: no step running
        self.step_seq = 0
        self.sampled_seq = -1
        self.task_name = ""
        self.steps = Histogram()     # every step, us
        self.slow: dict[str, list] = {}  # task name -> [count, total ms, max ms], wall clock
        self.slow_cpu: dict[str, list] = {}  # the same by the thread's CPU time
        self.step_cpu = 0.0
        self.cpu_steps: list[dict] = []   # CPU-slow steps with the stack sampled inside them
        # every step over the threshold, in order: when it started (time.monotonic, the same clock
        # as a bench's on this machine, so a bench can pick the steps of one of its phases), its
        # wall and CPU ms, its task and the stack sampled inside it
        self.long_steps: list[dict] = []
        self.sampled_key = ""
        self.born = time.monotonic()
        self.stacks: dict[str, int] = {}
        self.gc_started = 0.0
        self.gc: dict[int, Histogram] = {0: Histogram(), 1: Histogram(), 2: Histogram()}
        self.trio_thread = threading.get_ident()
        self.lock = threading.Lock()
        self.final_gc = None

    # -- trio.abc.Instrument --------------------------------------------------------------------

    def before_task_step(self, task) -> None:
        self.task_name = task.name
        self.step_seq += 1
        self.step_cpu = time.thread_time()
        self.step_started = time.perf_counter()

    def after_task_step(self, task) -> None:
        d = time.perf_counter() - self.step_started
        cpu = time.thread_time() - self.step_cpu
        self.step_started = 0.0
        self.steps.record(int(d * 1e6))
        if cpu >= self.threshold:   # our own work, not a preemption or a blocking system call
            s = self.slow_cpu.setdefault(task.name, [0, 0.0, 0.0])
            s[0] += 1
            s[1] += cpu * 1e3
            s[2] = max(s[2], cpu * 1e3)
            if self.sampled_seq == self.step_seq and len(self.cpu_steps) < 200:
                self.cpu_steps.append({"at s": round(time.monotonic() - self.born, 2), "cpu ms": round(cpu * 1e3, 1),
                                       "stack": self.sampled_key})
        if d >= self.threshold:
            if len(self.long_steps) < 20000:
                self.long_steps.append({"at": round(time.monotonic() - d, 4), "ms": round(d * 1e3, 1),
                                        "cpu ms": round(cpu * 1e3, 1), "task": task.name,
                                        "stack": self.sampled_key if self.sampled_seq == self.step_seq else ""})
            s = self.slow.setdefault(task.name, [0, 0.0, 0.0])
            s[0] += 1
            s[1] += d * 1e3
            s[2] = max(s[2], d * 1e3)

    # -- gc.callbacks ---------------------------------------------------------------------------

    def on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.gc_started = time.perf_counter()
        elif self.gc_started:
            d = time.perf_counter() - self.gc_started
            self.gc[info["generation"]].record(int(d * 1e6))
            self.gc_started = 0.0
            if d >= self.threshold and len(self.long_steps) < 20000:   # (within the step it stopped)
                self.long_steps.append({"at": round(time.monotonic() - d, 4), "ms": round(d * 1e3, 1),
                                        "cpu ms": None, "task": f"gc generation {info['generation']}",
                                        "collected": info.get("collected"), "stack": ""})

    # -- the watchdog ---------------------------------------------------------------------------

    def watchdog(self) -> None:
        while True:
            time.sleep(0.001)
            started, seq = self.step_started, self.step_seq
            if not started or seq == self.sampled_seq:
                continue
            if time.perf_counter() - started >= self.threshold:
                frame = sys._current_frames().get(self.trio_thread)
                if frame is None:
                    continue
                self.sampled_seq = seq
                stack = [f for f in traceback.extract_stack(frame)
                         if "/trio/" not in f.filename and "runpy" not in f.filename
                         and not f.filename.endswith(("loopwatch.py", "cli.py"))][-14:]
                key = f"[{self.task_name}]\n" + "".join(
                    f"  {os.path.relpath(f.filename) if f.filename.startswith(os.getcwd()) else f.filename}"
                    f":{f.lineno} {f.name}\n" for f in stack)
                self.sampled_key = key
                with self.lock:
                    self.stacks[key] = self.stacks.get(key, 0) + 1

    def report(self) -> dict:
        with self.lock:
            stacks = sorted(self.stacks.items(), key=lambda kv: -kv[1])[:25]
        steps = self.steps
        return {
            "threshold ms": self.threshold * 1e3,
            "steps": steps.total,
            "step p99 ms": steps.percentile(99) / 1e3, "step p999 ms": steps.percentile(99.9) / 1e3,
            "step max ms": steps.max / 1e3,
            "slow steps by task": {k: {"count": v[0], "total ms": round(v[1], 1), "max ms": round(v[2], 1)}
                                   for k, v in sorted(self.slow.items(), key=lambda kv: -kv[1][1])},
            "slow steps by task, cpu time": {
                k: {"count": v[0], "total ms": round(v[1], 1), "max ms": round(v[2], 1)}
                for k, v in sorted(self.slow_cpu.items(), key=lambda kv: -kv[1][1])},
            "full collection at exit": self.final_gc,
            "cpu-slow steps": self.cpu_steps,
            "long steps": list(self.long_steps),
            "stacks in slow steps": [{"samples": n, "stack": k} for k, n in stacks],
            "gc": {f"gen{g}": {"count": h.total, "p99 ms": h.percentile(99) / 1e3, "max ms": h.max / 1e3,
                               "total ms": round(sum(highest_mid(i) * n for i, n in h.counts.items()) / 1e3, 1)}
                   for g, h in self.gc.items()},
        }

    def full_collection(self) -> dict:
        """One full collection timed now (it stops the whole process, as the
        collector's own would), with the frozen object count."""
        t = time.perf_counter()
        gc.collect()
        return {"full collection ms": round((time.perf_counter() - t) * 1e3, 2), "tracked objects": len(gc.get_objects()),
                "frozen objects": gc.get_freeze_count()}

    def dump(self) -> None:
        tmp = self.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.report(), f, indent=1)
        os.replace(tmp, self.out)

    def dumper(self) -> None:
        while True:
            time.sleep(3)
            try:
                self.dump()
            except Exception:
                pass


def highest_mid(index: int) -> int:
    from tools.bench.hist import highest
    return highest(index)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--" in argv:
        i = argv.index("--")
        own, rest = argv[:i], argv[i + 1:]
    else:
        own, rest = argv, []
    ap = argparse.ArgumentParser(prog="python -m tools.bench.loopwatch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--threshold-ms", type=float, default=5.0)
    ap.add_argument("--no-freeze", action="store_true", help="serve without gc.freeze() after start-up")
    args = ap.parse_args(own)
    import trio
    watch = LoopWatch(args.out, args.threshold_ms)
    gc.callbacks.append(watch.on_gc)
    real_run = trio.run

    def run(*a, **kw):   # the broker's trio.run, with the instrument
        kw["instruments"] = list(kw.get("instruments", ())) + [watch]
        return real_run(*a, **kw)

    trio.run = run
    threading.Thread(target=watch.watchdog, daemon=True).start()
    threading.Thread(target=watch.dumper, daemon=True).start()
    if args.no_freeze:   # the before of a before/after: kproto serve without gc.freeze()
        gc.freeze = lambda: None

    def final():
        watch.final_gc = watch.full_collection()
        watch.dump()
    from broker.launch import cli
    sys.argv = ["kproto"] + rest
    try:
        cli.main()
    finally:
        final()


if __name__ == "__main__":
    main()

"""Where a kproto broker spends its time under load: py-spy samples the
broker process while the benchmark's producer or consumer drives it, and the
samples are summed per function (self time: the function was on top of the
stack; total: anywhere on it).

    pip install py-spy      # a profiling aid, not a project dependency
    python -m tools.bench profile [--profile-seconds 20] [--profile-out profiles]

Writes <out>/<load>.raw (collapsed stacks, for flamegraph tools) and
<out>/<load>.txt (the summary it also prints)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter

from tools.bench import procstat, workloads
from tools.bench.targets import KprotoTarget

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def _short(path: str) -> str:
    if path.startswith(_ROOT):
        return path[len(_ROOT):]
    m = re.search(r"(?:site-packages|lib/python3\.\d+)/(.+)$", path)
    return m.group(1) if m else path


# py-spy counts a thread inside a system call as active, so trio's epoll wait
# shows up; it is waiting, not work, and is left out of the shares
_WAITING = ("EpollIOManager.get_events", "EpollIOManager._epoll_wait")


def summarize(raw_path: str, top: int = 20) -> tuple[int, int, list, list]:
    """(working samples, waiting samples, [(self share, name)], [(total share,
    name)]) from py-spy's raw output; shares are of the working samples."""
    self_counts: Counter = Counter()
    total_counts: Counter = Counter()
    samples = 0
    waiting = 0
    with open(raw_path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            stack, _, count = line.rpartition(" ")
            n = int(count)
            samples += n
            names = []
            for frame in stack.split(";"):
                m = _FRAME.match(frame)
                names.append(f"{_short(m.group('file'))}:{m.group('func')}" if m else frame)
            if names[-1].endswith(_WAITING):
                waiting += n
                continue
            self_counts[names[-1]] += n
            for name in set(names):
                total_counts[name] += n
    samples -= waiting
    if not samples:
        return 0, waiting, [], []
    return (samples, waiting,
            [(c / samples, k) for k, c in self_counts.most_common(top)],
            [(c / samples, k) for k, c in total_counts.most_common(top + 10)])


def _load(kind: str, bootstrap: str, stop: threading.Event, errors: list) -> None:
    try:
        while not stop.is_set():
            if kind == "produce 1 KiB":
                workloads.produce(bootstrap, "profile-s1024-p1", 100_000, 1024, "1")
            elif kind == "produce 100 B":
                workloads.produce(bootstrap, "profile-s100-p6", 300_000, 100, "1")
            else:
                workloads.consume_assigned(bootstrap, "profile-s1024-p1", 1, 100_001, 1024)
    except Exception as exc:
        errors.append(exc)


def page_cache_write_cost(folder: str, total: int = 512 << 20, chunk: int = 256 << 10) -> float:
    """CPU seconds per GiB that plain os.write() calls into a file in `folder`
    cost this thread: the floor under any broker's produce path here."""
    import resource
    path = os.path.join(folder, "write-cost.tmp")
    buf = b"\x5a" * chunk
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        r0 = resource.getrusage(resource.RUSAGE_THREAD)
        for _ in range(total // chunk):
            os.write(fd, buf)
        r1 = resource.getrusage(resource.RUSAGE_THREAD)
    finally:
        os.close(fd)
        os.unlink(path)
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    return cpu / (total / (1 << 30))


LOADS = ("produce 1 KiB", "produce 100 B", "consume 1 KiB")


def run(seconds: float, outdir: str) -> int:
    spy = shutil.which("py-spy")
    if spy is None:
        print("py-spy is not installed: pip install py-spy (a profiling aid, not a project dependency)")
        return 2
    os.makedirs(outdir, exist_ok=True)
    target = KprotoTarget(tempfile.mkdtemp(prefix="kproto-profile-"))
    target.start()
    reports = []
    write_cost = page_cache_write_cost(target.workdir)
    print(f"this machine: write() into the page cache costs {write_cost:.2f} CPU s per GiB "
          f"(256 KiB writes, one thread)\n", flush=True)
    try:
        target.create_topics({"profile-s1024-p1": 1, "profile-s100-p6": 6})
        # data for the consume load
        workloads.produce(target.bootstrap, "profile-s1024-p1", 100_000, 1024, "1")
        for kind in LOADS:
            slug = kind.replace(" ", "-").lower()
            raw = os.path.join(outdir, f"{slug}.raw")
            stop, errors = threading.Event(), []
            loader = threading.Thread(target=_load, args=(kind, target.bootstrap, stop, errors), daemon=True)
            loader.start()
            time.sleep(1.0)  # past the load's warm-up
            cpu0, wall0 = procstat.cpu_seconds(target.pid), time.perf_counter()
            subprocess.run([spy, "record", "--pid", str(target.pid), "--duration", str(int(seconds)),
                            "--rate", "200", "--nonblocking", "--format", "raw", "-o", raw],
                           check=True, capture_output=True)
            cores = (procstat.cpu_seconds(target.pid) - cpu0) / (time.perf_counter() - wall0)
            stop.set()
            loader.join()
            if errors:
                raise errors[0]
            samples, waiting, by_self, by_total = summarize(raw)
            lines = [f"== {kind}: {samples} working samples (+{waiting} waiting in epoll) at 200 Hz "
                     f"over {seconds:g} s; broker CPU {cores:.2f} cores by /proc ==", "self %  function"]
            lines += [f"{share * 100:5.1f}  {name}" for share, name in by_self]
            lines += ["total %  function"]
            lines += [f"{share * 100:6.1f}  {name}" for share, name in by_total]
            text = "\n".join(lines)
            with open(os.path.join(outdir, f"{slug}.txt"), "w") as f:
                f.write(text + "\n")
            reports.append(text)
            print(text + "\n", flush=True)
    finally:
        target.stop()
        target.cleanup()
    return 0

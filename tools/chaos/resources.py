"""What a long run watches on each broker process: resident memory, open
file descriptors and CPU share (from /proc), event-loop lag and the heap in
use as the allocators count it (from the node's /metrics: Python's live
blocks, glibc's bytes in use and kept free), sampled at an interval with the
machine's load average, and the rule that says whether a series stayed flat.

Event-loop lag is the scheduling delay of the broker's 10 ms timer
(``kproto_event_loop_delay_seconds``, a cumulative histogram): each sample is
the mean and p99 of the delays observed since the previous scrape, so a
sample describes its own window, not the whole run.

"Flat" (``flat()``): the median of the last tenth of a series is at most the
median of its second tenth times (1 + rel) plus abs. The first tenth is
start-up and warm-up (caches, connections, the first segments), so it is
not the baseline; a leak shows as a last tenth above the second.
"""
from __future__ import annotations

import os
import re
import statistics
import time
import urllib.request

from tools.bench.procstat import cpu_seconds

# what each series may grow by between the second and the last tenth of a run
TOLERANCE = {
    "rss_mib": (0.10, 4.0),          # +10% and 4 MiB (allocator noise)
    "fds": (0.10, 4.0),              # +10% and 4 descriptors (a connection coming and going)
    "loop_mean_ms": (0.50, 2.0),     # +50% and 2 ms: scheduling on a shared machine is noisy
    "cpu_pct": (0.25, 2.0),          # +25% and 2 points of a core: the same load must not cost more
    # what the heap has in use (broker/metrics/memory.py): a leak grows these; memory the allocator
    # keeps free for reuse grows only RSS (and malloc_free_mib, shown but not judged)
    "py_blocks": (0.10, 5000),
    "malloc_used_mib": (0.10, 2.0),
}
# below this, a run is too short to tell a leak from warm-up: flatness is shown, not judged
MIN_JUDGED_S = 600

_BUCKET = re.compile(r'^kproto_event_loop_delay_seconds_bucket\{le="([^"]+)"\} (\S+)$')


def rss_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def rss_parts_mib(pid: int) -> tuple[float | None, float | None]:
    """(RssAnon, RssFile): heap and anonymous maps apart from mapped files (index pages, libraries)."""
    anon = file = None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = int(line.split()[1]) / 1024
                elif line.startswith("RssFile:"):
                    file = int(line.split()[1]) / 1024
    except OSError:
        pass
    return anon, file


def open_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


# the heap gauges of a node's /metrics (broker/metrics/memory.py), as sample keys
_HEAP = {"kproto_python_allocated_blocks": "py_blocks", "kproto_malloc_in_use_bytes": "malloc_used_mib",
         "kproto_malloc_free_bytes": "malloc_free_mib"}


def scrape_metrics(url: str, timeout: float = 5.0) -> dict | None:
    """The event-loop delay histogram of one node: {"buckets": [(le_s, cumulative)], "count", "sum_s"},
    and its heap gauges under "heap" (sample key -> value; bytes as MiB)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            text = r.read().decode()
    except OSError:
        return None
    buckets, count, total, heap = [], None, None, {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in _HEAP:
            key = _HEAP[name]
            heap[key] = round(float(value) / 2**20, 2) if key.endswith("_mib") else int(float(value))
            continue
        m = _BUCKET.match(line)
        if m:
            le = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
            buckets.append((le, float(m.group(2))))
        elif line.startswith("kproto_event_loop_delay_seconds_count "):
            count = float(line.split()[1])
        elif line.startswith("kproto_event_loop_delay_seconds_sum "):
            total = float(line.split()[1])
    if count is None or total is None:
        return None
    return {"buckets": buckets, "count": count, "sum_s": total, "heap": heap}


def window_delay(prev: dict | None, cur: dict | None) -> tuple[float | None, float | None]:
    """(mean ms, p99 ms) of the delays observed between two scrapes; p99 is
    the upper bound of its histogram bucket."""
    if prev is None or cur is None:
        return None, None
    n = cur["count"] - prev["count"]
    if n <= 0:
        return None, None
    mean = (cur["sum_s"] - prev["sum_s"]) / n * 1000
    before = dict(prev["buckets"])
    want = 0.99 * n
    p99 = None
    for le, cum in cur["buckets"]:
        if cum - before.get(le, 0.0) >= want:
            p99 = le * 1000 if le != float("inf") else None
            break
    return mean, p99


class Sampler:
    """Samples every node of a run; ``nodes`` are tools/chaos/cluster.py nodes
    with ``proc`` (the broker process) and ``metrics_url``."""

    def __init__(self, nodes, t0: float):
        self.nodes = nodes
        self.t0 = t0
        self.samples: list[dict] = []
        self._hist: dict[str, dict | None] = {}
        self._cpu: dict[str, tuple[float, float]] = {}   # node -> (monotonic time, CPU seconds)

    def sample(self) -> list[dict]:
        now = time.monotonic() - self.t0
        out = []
        for node in self.nodes:
            pid = node.proc.pid if node.proc is not None else None
            cur = scrape_metrics(node.metrics_url) if getattr(node, "metrics_url", None) else None
            mean, p99 = window_delay(self._hist.get(node.name), cur)
            if cur is not None:
                self._hist[node.name] = cur
            cpu_pct = None
            try:
                cpu = cpu_seconds(pid) if pid is not None else None
            except OSError:
                cpu = None
            if cpu is not None:
                prev = self._cpu.get(node.name)
                if prev is not None and now > prev[0]:
                    cpu_pct = round(100 * (cpu - prev[1]) / (now - prev[0]), 1)
                self._cpu[node.name] = (now, cpu)
            anon, file = rss_parts_mib(pid) if pid is not None else (None, None)
            s = {"t": round(now, 1), "node": node.name,
                 "rss_mib": None if pid is None else rss_mib(pid),
                 "rss_anon_mib": anon, "rss_file_mib": file,
                 "fds": None if pid is None else open_fds(pid),
                 "loop_mean_ms": None if mean is None else round(mean, 3),
                 "loop_p99_ms": p99, "cpu_pct": cpu_pct,
                 **{k: (cur or {}).get("heap", {}).get(k) for k in _HEAP.values()},
                 "load": round(os.getloadavg()[0], 2)}
            out.append(s)
        self.samples += out
        return out


def tenth_medians(values: list[float]) -> tuple[float, float] | None:
    """Medians of the second and the last tenth of a series (at least one value each)."""
    n = len(values)
    if n < 10:
        return None
    k = n // 10
    return statistics.median(values[k:2 * k]), statistics.median(values[n - k:])


def flat(values: list[float], rel: float, abs_: float) -> tuple[bool, float, float] | None:
    """(flat?, second-tenth median, last-tenth median), or None with fewer than 10 values."""
    m = tenth_medians(values)
    if m is None:
        return None
    second, last = m
    return last <= second * (1 + rel) + abs_, second, last


def judge(samples: list[dict], duration_s: float) -> tuple[list[dict], bool]:
    """Per node and series: its medians and verdict. Returns (rows, all flat); a
    run shorter than MIN_JUDGED_S is not judged (all flat = True)."""
    rows = []
    judged = duration_s >= MIN_JUDGED_S
    ok = True
    for node in sorted({s["node"] for s in samples}):
        mine = [s for s in samples if s["node"] == node]
        for key, (rel, abs_) in TOLERANCE.items():
            vals = [s[key] for s in mine if s.get(key) is not None]
            v = flat(vals, rel, abs_)
            row = {"node": node, "series": key, "samples": len(vals),
                   "first": vals[0] if vals else None, "max": max(vals) if vals else None}
            if v is None:
                row["verdict"] = "too few samples"
                ok &= not judged
            else:
                row["second tenth"], row["last tenth"] = v[1], v[2]
                row["verdict"] = ("flat" if v[0] else "GROWING") if judged else (
                    "flat (not judged: short run)" if v[0] else "growing (not judged: short run)")
                ok &= v[0] or not judged
            rows.append(row)
    return rows, ok


def error_lines(log_path: str) -> list[str]:
    """The ERROR (and CRITICAL) lines and tracebacks of a node's log."""
    out = []
    try:
        with open(log_path, errors="replace") as f:
            for line in f:
                if "level=error" in line or "level=critical" in line or line.startswith("Traceback"):
                    out.append(line.rstrip())
    except OSError:
        pass
    return out

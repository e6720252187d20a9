"""The physical limit of fsync before ack: one process appending 1 KiB to a
file and fdatasync-ing after each write, in a loop, in a given folder (the
broker's data folder, so the same file system and device). A broker that
fsyncs once per produced batch cannot acknowledge faster than this; group
commit beats it by covering many batches with one fsync."""
from __future__ import annotations

import os
import time

from tools.bench.stats import percentile


def write_fdatasync_loop(folder: str, size: int = 1024, seconds: float = 3.0,
                         max_iterations: int = 100_000) -> dict:
    path = os.path.join(folder, "fsync-loop.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    data = b"\x5a" * size
    times: list[float] = []
    try:
        deadline = time.perf_counter() + seconds
        started = time.perf_counter()
        now = started
        while now < deadline and len(times) < max_iterations:
            os.write(fd, data)
            os.fdatasync(fd)
            after = time.perf_counter()
            times.append(after - now)
            now = after
        elapsed = now - started
    finally:
        os.close(fd)
        os.unlink(path)
    times.sort()
    n = len(times)
    return {
        "fsyncs/s": n / elapsed,
        "MiB/s": n * size / elapsed / (1 << 20),
        "p50 ms": percentile(times, 50) * 1e3,
        "p99 ms": percentile(times, 99) * 1e3,
    }

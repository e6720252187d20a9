"""A process's CPU time and memory from /proc (Linux)."""
from __future__ import annotations

import os
import time

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of the process so far."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    # the command name may hold spaces: fields start after its closing ')'
    fields = stat[stat.rindex(")") + 2:].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / _TICK


def cpu_seconds_ns(pid: int) -> float:
    """The CPU time of the process's threads so far from their schedstat (nanoseconds, where
    /proc/<pid>/stat counts 10 ms ticks): for spans of a few ms, such as a start-up. Up to date
    for a thread that is off the CPU (see wait_off_cpu); a thread that ended is not counted."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return cpu_seconds(pid)
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass   # (a thread that ended meanwhile)
    return total / 1e9


def written_bytes(pid: int) -> int | None:
    """wchar of /proc/<pid>/io: the bytes the process passed to write calls and
    sendfile (socket sends by send/sendto are not counted). For a broker serving
    consumers that is mostly the record bytes it sent by sendfile. None when
    /proc does not say (another user's process, not Linux)."""
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def status_kib(pid: int, key: str) -> int | None:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


def peak_rss_bytes(pid: int) -> int | None:
    """VmHWM: the largest resident set the process has had."""
    kib = status_kib(pid, "VmHWM")
    return None if kib is None else kib * 1024


def load_average() -> str:
    """The machine's 1, 5 and 15 minute load averages, as /proc/loadavg gives them."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def running_threads(pid: int) -> int:
    """How many of the process's threads are running or runnable (state R) now."""
    n = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue     # the thread ended
        if stat[stat.rindex(")") + 2] == "R":
            n += 1
    return n


def wait_off_cpu(pid: int, limit_s: float = 0.05) -> bool:
    """Wait, up to limit_s, until no thread of the process is running; whether it got there.

    Another process's CPU clock (and a thread's schedstat) is brought up to date only when
    the scheduler accounts its thread: at a tick or when the thread leaves the CPU. Read while
    the thread runs, it lacks everything since then (the clock moves in steps of 1-4 ms: a
    busy loop read from outside showed 8 values in 2,000 reads). A CPU span that ends while
    the broker is still busy after its answer misses that work, by an amount that depends
    on how soon the reader got the answer, i.e. on the machine's load."""
    end = time.monotonic() + limit_s
    while running_threads(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.00005)     # (a busy poll would take the core the broker may be waiting for)
    return True

"""The process limits partitions spend: open files (``ulimit -n``) and memory
maps (``vm.max_map_count``).

A hosted partition holds two memory maps (its active segment's ``.index`` and
``.timeindex``, mapped without descriptors: mapping.py), as in Kafka. Its
``.log`` holds a descriptor only while it is among the recently used ones
(open_files.py keeps them to half of what ``ulimit -n`` leaves after a
reserve), so descriptors bound no partition count. Maps do: running out
halfway through creating partitions would leave metadata naming logs the
broker cannot open, and a node that cannot start again. So the room a request
needs is checked before the controller commits to it (room_for()), a start-up
that finds more partitions than the limit allows says which limit to raise,
and an EMFILE or failed mmap is explained with its setting (explain_exhausted).

``KPROTO_TEST_MAX_MAP_COUNT`` stands in for ``vm.max_map_count`` (tests: the
real one is machine-wide and needs root to lower).
"""
from __future__ import annotations

import errno
import os
import resource
import time

from broker.storage import mapping

MAPS_PER_PARTITION = 2
# what stays free for everything else: client and replica connections, files
# opened for a moment (checkpoints, flushes, snapshots), the interpreter's own maps
FILES_RESERVE_FRACTION = 0.1
FILES_RESERVE_MIN = 64
MAPS_RESERVE = 1024

OPEN_FILES_SETTING = "ulimit -n (LimitNOFILE= under systemd)"
MAX_MAP_COUNT_SETTING = "sysctl vm.max_map_count"


class ResourceLimitError(OSError):
    """Not enough of a process limit for the partitions asked for; the message
    names the limit and the setting that raises it."""


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft open-files limit to the hard one, as the JVM does for Kafka
    (-XX:+MaxFDLimit, on by default): more connections and more recently used
    segment files open at once. Returns (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return soft, target
        except (ValueError, OSError):
            pass
    return soft, soft


def open_files_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 30


def open_files() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def max_map_count() -> int | None:
    override = os.environ.get("KPROTO_TEST_MAX_MAP_COUNT")
    if override:
        return int(override)
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None  # not Linux: no such limit to check


def memory_maps() -> int:
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


# (count read from /proc/self/maps, mapping.made then, monotonic time of the read)
_maps_read: tuple[int, int, float] | None = None
MAPS_READ_MAX_AGE_S = 5.0


def memory_maps_bound() -> int:
    """An upper bound on the maps in use, without reading /proc/self/maps every time (its
    listing costs ~15 ms at 20,000 maps, and CreateTopics asks once per topic): the last count
    plus every mapping made since, read again when older than a few seconds."""
    global _maps_read
    now = time.monotonic()
    if _maps_read is None or now - _maps_read[2] > MAPS_READ_MAX_AGE_S:
        _maps_read = (memory_maps(), mapping.made, now)
    count, made, _t = _maps_read
    return count + (mapping.made - made)


def files_reserve(limit: int) -> int:
    return max(FILES_RESERVE_MIN, int(limit * FILES_RESERVE_FRACTION))


def flush_files_budget() -> int:
    """Descriptors one flush round may open (half the reserve)."""
    return max(8, files_reserve(open_files_limit()) // 2)


def room_for(partitions: int) -> str | None:
    """None if this process can host ``partitions`` more partitions, else why
    not: the limit, what is in use, and the setting to raise."""
    if partitions <= 0:
        return None
    maps_limit = max_map_count()
    if maps_limit is not None:
        need = partitions * MAPS_PER_PARTITION
        maps = memory_maps_bound()
        if need > maps_limit - MAPS_RESERVE - maps:
            maps = memory_maps()   # refused on a true count only
        free = maps_limit - MAPS_RESERVE - maps
        if need > free:
            return (f"{partitions} more partition(s) need {need} memory maps on this broker but only "
                    f"{max(free, 0)} are free: {maps} of the limit of {maps_limit} are in use "
                    f"({MAPS_RESERVE} kept for the process); raise {MAX_MAP_COUNT_SETTING}")
    return None


def check_room(partitions: int) -> None:
    """Raise ResourceLimitError unless ``partitions`` more partitions fit."""
    why = room_for(partitions)
    if why is not None:
        raise ResourceLimitError(errno.EMFILE, why)


def explain_exhausted(exc: OSError) -> str | None:
    """The limit behind an OSError (EMFILE, ENFILE, ENOMEM from mmap), named with
    its setting; None for any other error."""
    if isinstance(exc, ResourceLimitError):
        return exc.strerror
    if exc.errno == errno.EMFILE:
        return (f"too many open files (the limit is {open_files_limit()}): raise {OPEN_FILES_SETTING}")
    if exc.errno == errno.ENFILE:
        return "the system's table of open files is full: raise sysctl fs.file-max"
    if exc.errno == errno.ENOMEM and "mmap" in str(exc):
        return (f"out of memory maps ({memory_maps()} in use, vm.max_map_count is {max_map_count()}): "
                f"raise {MAX_MAP_COUNT_SETTING}")
    return None

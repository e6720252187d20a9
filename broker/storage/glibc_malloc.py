"""glibc's allocator through ctypes: ``mallinfo2`` (what its heap holds) and
``malloc_trim`` (give its free pages back). None where the C library is not
glibc (musl, macOS), or too old for mallinfo2 (before 2.33).

In the bottom room with the other limits of the process (limits.py: open
files, memory maps), so that both the /metrics gauges (broker/metrics/memory.py)
and the serving process's heap trim (broker/launch/heap_trim.py) can use it,
the trim without loading the metrics package and prometheus_client."""
from __future__ import annotations

import ctypes


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]


def _bind(name: str, restype, argtypes):
    try:
        fn = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


_MALLINFO2 = _bind("mallinfo2", MallInfo2, [])
malloc_trim = _bind("malloc_trim", ctypes.c_int, [ctypes.c_size_t])


def mallinfo2() -> MallInfo2 | None:
    return None if _MALLINFO2 is None else _MALLINFO2()

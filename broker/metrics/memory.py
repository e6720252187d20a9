"""The process's heap as its two allocators see it, for /metrics.

RSS alone cannot tell memory in use from free memory an allocator keeps for
reuse: a long soak's slow RssAnon growth (issue 26, docs/chaos.md) was either.
These gauges split it: Python's count of live blocks (pymalloc and the
larger objects it hands to malloc), and glibc's own account of its heap
(``mallinfo2``: bytes in use, bytes free but kept). A leak grows the blocks or
the bytes in use; allocator retention grows only the kept free bytes and RSS.
"""
from __future__ import annotations

import ctypes
import sys

from broker.metrics.families import gauge


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]


def _mallinfo2():
    """glibc's mallinfo2 (2.33 and later), or None where there is none (musl, macOS)."""
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    fn.argtypes = []
    return fn


_MALLINFO2 = _mallinfo2()


def mallinfo2() -> _MallInfo2 | None:
    return None if _MALLINFO2 is None else _MALLINFO2()


def heap_metrics():
    yield gauge("kproto_python_allocated_blocks",
                "Memory blocks the Python interpreter has allocated and not freed (sys.getallocatedblocks)",
                sys.getallocatedblocks())
    mi = mallinfo2()
    if mi is None:
        return
    yield gauge("kproto_malloc_in_use_bytes",
                "Bytes of glibc's heap in use: allocated chunks and mmapped blocks (mallinfo2 uordblks + hblkhd)",
                mi.uordblks + mi.hblkhd)
    yield gauge("kproto_malloc_free_bytes",
                "Bytes of glibc's heap free but kept by the allocator for reuse (mallinfo2 fordblks)",
                mi.fordblks)

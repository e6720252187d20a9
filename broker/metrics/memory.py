"""The process's heap as its two allocators see it, for /metrics.

RSS alone cannot tell memory in use from free memory an allocator keeps for
reuse: a long soak's slow RssAnon growth (issue 26, docs/chaos.md) was either.
These gauges split it: Python's count of live blocks (pymalloc and the
larger objects it hands to malloc), and glibc's own account of its heap
(``mallinfo2``: bytes in use, bytes free but kept). A leak grows the blocks or
the bytes in use; allocator retention grows only the kept free bytes and RSS.
"""
from __future__ import annotations

import sys

from broker.storage.glibc_malloc import mallinfo2
from broker.metrics.families import gauge


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

"""Giving glibc's kept free memory back, for a `kproto serve` process.

glibc keeps freed memory in its heap for reuse. Which memory it can give
back on its own depends on where it is: only the free top of the heap is
returned (above a trim threshold that rises, with glibc's dynamic mmap
threshold, each time a large block is freed), so free space below a
long-lived small object stays. A broker frees large blocks all the time
(produce frames, a follower's fetch answers), and in a soak the followers
kept 4-5 MiB an hour more free memory while the bytes in use stayed flat
(docs/chaos.md): RSS that only grows. ``malloc_trim(0)`` returns every
free page of the heap, not only its top (glibc 2.8 and later).

Once a minute, when the heap keeps more than TRIM_ABOVE_BYTES free (an idle
broker keeps 2.5-3.7 MiB), the serving process trims. glibc still counts
the pages it gave back as free, so past that a broker trims every minute:
0.8 ms with 8 MiB free in holes, 12.6 ms with 147 MiB (docs/chaos.md), one
step of the event loop a minute; pages given back are faulted in again only
when used. Pinning the mmap threshold instead (``mallopt(M_MMAP_THRESHOLD)``)
stopped the growth too, but every large frame then cost fresh pages: the
broker's CPU per GiB produced with librdkafka's 1 MB batches went from 0.97
to 1.64 s.

Only the serving process trims: an embedded broker lives in someone else's
process, whose allocator is theirs to tune.
"""
from __future__ import annotations

import logging
import os
import time

import trio

from broker.storage.glibc_malloc import malloc_trim, mallinfo2

log = logging.getLogger(__name__)

TRIM_EVERY_S = 60.0
TRIM_ABOVE_BYTES = 4 << 20


def trim_heap() -> float | None:
    """Return the heap's free pages now; the seconds it took, or None without glibc."""
    if malloc_trim is None:
        return None
    started = time.perf_counter()
    malloc_trim(0)
    return time.perf_counter() - started


async def trim_heap_periodically(every_s: float = TRIM_EVERY_S, above: int = TRIM_ABOVE_BYTES) -> None:
    if malloc_trim is None or mallinfo2() is None:
        return   # not glibc (musl, macOS): nothing to ask
    if os.environ.get("KPROTO_TEST_HEAP_TRIM"):   # "EVERY_S,ABOVE_BYTES": a test trims sooner
        every, limit = os.environ["KPROTO_TEST_HEAP_TRIM"].split(",")
        every_s, above = float(every), int(limit)
    while True:
        await trio.sleep(every_s)
        free = mallinfo2().fordblks
        if free > above:
            took = trim_heap()
            log.debug("heap trimmed: %.1f MiB were free, %.2f ms", free / 2**20, took * 1000)

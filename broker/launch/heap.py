"""glibc malloc settings for a `kproto serve` process.

glibc serves a request of 128 KiB or more with its own mmap, and frees it
with munmap, unless the "dynamic mmap threshold" has moved: each time such
a block is freed, the threshold rises to its size (up to 32 MiB) and the
heap's trim threshold to twice that. A broker frees large blocks all the
time (a follower's 1 MiB receive buffer, a large produce frame), so after
the first ones every frame below the raised threshold comes from the main
heap, where the small long-lived objects allocated between them leave holes
the heap can neither reuse for the next large frame nor give back. In a soak
(docs/chaos.md) that kept 4-5 MiB an hour of free memory on the followers,
RSS growing while the bytes in use stayed flat; with the threshold fixed at
glibc's own starting value the kept memory and RssAnon stayed flat.

Only the serving process is changed: an embedded broker lives in someone
else's process, whose allocator is theirs to tune. A MALLOC_MMAP_THRESHOLD_
in the environment (glibc's own tunable) is left to win.
"""
from __future__ import annotations

import ctypes
import os

M_MMAP_THRESHOLD = -3            # mallopt's parameter number (malloc.h)
MMAP_THRESHOLD = 128 * 1024      # glibc's DEFAULT_MMAP_THRESHOLD_MIN, its starting value


def fix_mmap_threshold() -> bool:
    """Pin glibc's mmap threshold at its starting value; setting it turns the
    dynamic adjustment (of it and of the trim threshold) off. False where
    there is no glibc (musl, macOS) or the environment already sets it."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "GLIBC_TUNABLES" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.restype = ctypes.c_int
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1

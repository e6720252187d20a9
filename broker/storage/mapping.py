"""Memory maps of index files that hold no file descriptor.

Kafka maps its ``.index`` and ``.timeindex`` files and closes their channels:
a mapping keeps the file's pages reachable without an open descriptor. The
standard library's ``mmap.mmap`` keeps a duplicate of the descriptor for as
long as the mapping lives (before Python 3.13 and its ``trackfd=False``
there is no way around it), so a broker with thousands of partitions would
hold two descriptors per partition for its indexes alone, and run out of
``ulimit -n`` long before memory. This module maps through libc directly:
``Mapping`` is a buffer (``struct.pack_into`` / ``unpack_from`` work on it)
over a ``mmap(2)`` whose descriptor is closed as soon as the map exists.

Every mapping is advised MADV_RANDOM: an index is read by binary search and written
one entry at a time, and without the advice a fault reads ahead up to the device's
``read_ahead_kb`` (8 MiB on the test machine's virtio disk). In a freshly
preallocated, sparse index that means zero-filling thousands of page-cache pages
for one entry, and dropping them again when the index is trimmed: ~4 ms per first
touch of an index here, 56% of a restart after kill -9 at 10,000 partitions, where
each recovered segment writes its first time-index entry (docs/performance.md,
"Index faults read ahead"). With the advice a fault maps one page (~0.02 ms).

Every mapping still counts against ``vm.max_map_count`` (one per mapped
index); the broker checks that budget before it creates partitions.

Not thread-safe, and never used after close(): the buffer points at memory
that munmap() takes away.
"""
from __future__ import annotations

import ctypes
import mmap
import os

_libc = ctypes.CDLL(None, use_errno=True)
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                  ctypes.c_long)
_munmap = _libc.munmap
_munmap.restype = ctypes.c_int
_munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_msync = _libc.msync
_msync.restype = ctypes.c_int
_msync.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_MS_SYNC = 4  # Linux
_madvise = _libc.madvise
_madvise.restype = ctypes.c_int
_madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_MADV_RANDOM = getattr(mmap, "MADV_RANDOM", 1)
_MAP_FAILED = ctypes.c_void_p(-1).value


# mappings made so far by this process (never lowered: an upper bound on those added since a count
# of /proc/self/maps, limits.py)
made = 0


class Mapping:
    """``length`` bytes of the file at ``path`` mapped shared (writable or
    read-only); the file itself is not kept open. ``view`` is a memoryview of
    the bytes, valid until close()."""

    __slots__ = ("path", "length", "writable", "_addr", "view")

    def __init__(self, path: str, length: int, writable: bool):
        if length <= 0:
            raise ValueError("a mapping needs at least one byte")
        self.path = path
        self.length = length
        self.writable = writable
        fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
        try:
            prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
            addr = _mmap(None, length, prot, mmap.MAP_SHARED, fd, 0)
        finally:
            os.close(fd)
        if addr is None or addr == _MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, f"mmap of {path}: {os.strerror(err)}", path)
        self._addr = addr
        # (advice only: a kernel that refuses it maps as before)
        _madvise(addr, length, _MADV_RANDOM)
        global made
        made += 1
        buf = (ctypes.c_char * length).from_address(addr)
        view = memoryview(buf).cast("B")
        self.view = view if writable else view.toreadonly()

    def __len__(self) -> int:
        return self.length

    @property
    def closed(self) -> bool:
        return self._addr is None

    def flush(self) -> None:
        """msync: the mapped pages written back to the file."""
        if self._addr is not None and self.writable:
            if _msync(self._addr, self.length, _MS_SYNC) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"msync of {self.path}: {os.strerror(err)}", self.path)

    def close(self) -> None:
        if self._addr is None:
            return
        addr, self._addr = self._addr, None
        self.view.release()
        _munmap(addr, self.length)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

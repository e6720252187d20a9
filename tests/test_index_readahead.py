"""An index entry costs one page of memory, not a read-ahead window: index mappings are advised
MADV_RANDOM (broker/storage/mapping.py). Without the advice the first entry written into a new
segment's preallocated, sparse index made the kernel zero-fill up to the device's read_ahead_kb
of page cache (8 MiB, ~4 ms, on a virtio disk) and drop it again when the index was trimmed:
most of a restart after kill -9 at 10,000 partitions (docs/performance.md, "Index faults read
ahead")."""
from __future__ import annotations

import ctypes
import mmap
import os
import uuid

from kproto.records import build_batch
from broker.storage import PartitionLog

T0 = 1795350497742
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)


def _cached_pages(path: str) -> int:
    """How many of the file's pages are in the page cache (mincore on a mapping no one touches)."""
    length = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    finally:
        os.close(fd)
    assert addr not in (None, ctypes.c_void_p(-1).value)
    try:
        pages = (length + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vec = ctypes.create_string_buffer(pages)
        assert _libc.mincore(addr, length, vec) == 0, ctypes.get_errno()
        return sum(b & 1 for b in vec.raw)
    finally:
        _libc.munmap(addr, length)


def test_the_first_index_entries_of_a_new_segment_cost_a_page_each(tmp_path):
    log = PartitionLog.open(str(tmp_path / "t-0"), None, topic_id=uuid.uuid4(), sync=False)
    try:
        # enough batches for an entry in both indexes (one per index.interval.bytes, 4 KiB)
        for i in range(40):
            log.append(bytearray(build_batch([(None, b"v" * 400, [], T0 + i)])), 0, now_ms=T0 + i)
        seg = log._segments[-1]
        for index in (seg.offset_index, seg.time_index):
            assert index.entries >= 1, index.path
            assert os.path.getsize(index.path) >= 1 << 20   # preallocated (segment.index.bytes)
            # the page the entries are in (and a neighbour the kernel may map with it), not the
            # read-ahead window: 32 pages at read_ahead_kb=128, 2,048 at 8,192
            assert _cached_pages(index.path) <= 4, index.path
    finally:
        log.close()

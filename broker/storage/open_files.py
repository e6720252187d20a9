"""Open ``.log`` files of segments, as few as the work needs.

A broker with ten thousand partitions must not hold ten thousand descriptors
while most of them sit idle (``ulimit -n`` is often 1024). Every segment opens
its ``.log`` on first use and registers it here; the process keeps at most
``capacity`` of them open, least recently used first to go (an idle
partition's file is reopened, one open(2), when it is written or read again).

Going is not closing: an evicted ``SegmentFile`` only loses the segment's
reference, and closes once nothing else holds it. A fetch response that
carries a region of the file for sendfile (``FileRegion.owner``) keeps its
descriptor valid until the bytes are sent, so a descriptor number is never
reused under a response in flight. close() (a log closed, a segment deleted)
still closes at once, as before.

One table per process: descriptors are a process resource.
"""
from __future__ import annotations

import errno
import os
from collections import OrderedDict

from .limits import files_reserve, open_files_limit


class SegmentFile:
    """An open ``.log`` (read-write, appending); closed when dropped."""

    __slots__ = ("fd", "name")
    live = 0   # open SegmentFiles in the process: the table's and those only responses hold

    def __init__(self, path: str, create: bool = False):
        self.fd = -1
        self.name = path
        flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
        self.fd = os.open(path, flags, 0o644)
        SegmentFile.live += 1

    @classmethod
    def closed_file(cls, path: str) -> "SegmentFile":
        f = cls.__new__(cls)
        f.fd = -1
        f.name = path
        return f

    def fileno(self) -> int:
        if self.fd < 0:
            raise ValueError("I/O operation on closed file")
        return self.fd

    @property
    def closed(self) -> bool:
        return self.fd < 0

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            SegmentFile.live -= 1
            os.close(fd)

    def __del__(self):
        try:
            self.close()
        except (OSError, AttributeError, TypeError):
            # OSError: already closed; the others at interpreter exit, when this module's globals
            # (SegmentFile, os) may already be gone and the process's descriptors close anyway
            pass


class OpenFiles:
    """The open segment files of the process, bounded, least recently used out."""

    def __init__(self, capacity: int | None = None):
        self._capacity = capacity
        self._open: OrderedDict = OrderedDict()   # segment -> None, oldest use first
        self.evictions = 0

    @property
    def capacity(self) -> int:
        if self._capacity is None:
            # a third of what the limit leaves after the reserve: as many again for
            # files only responses in flight hold (may_pin), the rest and the
            # reserve for connections and flushes
            limit = open_files_limit()
            self._capacity = max(16, (limit - files_reserve(limit)) // 3)
        return self._capacity

    @capacity.setter
    def capacity(self, value: int | None) -> None:
        self._capacity = value

    def __len__(self) -> int:
        return len(self._open)

    def may_pin(self) -> bool:
        """Whether a response may hold one more file open until it is sent: files
        held only by responses stay within another ``capacity`` (a fetch of
        thousands of cold partitions gets copies of their bytes instead)."""
        return SegmentFile.live <= 2 * self.capacity

    def touch(self, segment) -> None:
        self._open.move_to_end(segment)

    def open(self, segment, path: str, create: bool = False) -> SegmentFile:
        """Open ``path`` for ``segment`` (making room first)."""
        while len(self._open) >= self.capacity:
            self._evict_oldest()
        try:
            f = SegmentFile(path, create)
        except OSError as exc:
            # other descriptors (connections) took the room: give back half and retry once
            if exc.errno not in (errno.EMFILE, errno.ENFILE) or not self.make_room():
                raise
            f = SegmentFile(path, create)
        self._open[segment] = None
        return f

    def make_room(self) -> bool:
        """(Out of descriptors: other ones, connections, took the room.) Give back half the
        table; False if it holds none."""
        if not self._open:
            return False
        for _ in range(max(1, len(self._open) // 2)):
            self._evict_oldest()
        return True

    def forget(self, segment) -> None:
        self._open.pop(segment, None)

    def _evict_oldest(self) -> None:
        segment, _ = self._open.popitem(last=False)
        segment.drop_file()
        self.evictions += 1


FILES = OpenFiles()

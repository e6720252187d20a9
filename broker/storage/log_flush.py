"""When a PartitionLog's (broker/storage/log.py) data reaches the disk: flush() up to an offset,
rolled segments (flush_rolled), `flush.messages` / `flush.ms` (maybe_flush), and the group-commit
path the broker's flusher (broker/storage/flusher.py) drives from another thread:
flush_targets() -> FlushTargets.sync() -> flushed()."""
from __future__ import annotations

import logging
import os
import time

from . import checkpoints as cp
from .files import TXN_INDEX_SUFFIX, segment_path

# the log's lines keep the logger name they had before the split
log = logging.getLogger("broker.storage.log")


def _now_ms() -> int:
    return int(time.time() * 1000)


class FlushTargets:
    """The files one flush of a log fsyncs (PartitionLog.flush_targets()):
    descriptors opened on the log's thread, so that the thread doing the
    fsyncs makes no other system call (each one it returns from has to win
    the GIL back from the busy server thread)."""
    __slots__ = ("upto", "generation", "dir", "parent", "fds")

    def __init__(self, upto: int, generation: int, dir: str | None, parent: str | None = None):
        self.upto = upto
        self.generation = generation
        self.dir = dir  # the partition directory, when it gained a segment
        self.parent = parent  # the log dir, while its entry for a new partition directory is not fsynced
        self.fds: list[int] = []

    def open(self, path: str) -> None:
        try:
            self.fds.append(os.open(path, os.O_RDONLY))
        except FileNotFoundError:
            pass  # (an index a segment does not have)

    def sync(self, close: bool = True) -> None:
        """fdatasync every file (any thread; the directory is fsynced), then
        close the descriptors unless told not to (close() them later).
        A directory renamed for deletion meanwhile is skipped."""
        try:
            # (fdatasync for the indexes too, as msync of their mappings does)
            for fd in self.fds:
                os.fdatasync(fd)
            cp.fsync_paths(d for d in (self.dir, self.parent) if d is not None)
        finally:
            if close:
                self.close()

    def close(self) -> None:
        fds, self.fds = self.fds, []
        for fd in fds:
            os.close(fd)


class LogFlushMixin:
    def flush(self, upto: int | None = None) -> None:
        """fsync the data and indexes of [recovery point, ``upto``) (default: all)
        and move the recovery point there."""
        self._check_open()
        upto = self._leo if upto is None else min(upto, self._leo)
        if upto > self._recovery_point or self._dir_dirty or self._parent_dirty:
            start = max(0, self._floor_segment_index(self._recovery_point))
            for seg in self._segments[start:]:
                if seg.base_offset >= upto:
                    break
                seg.flush()
            if self._dir_dirty:
                cp.fsync_dir(self.dir)
                self._dir_dirty = False
            if self._parent_dirty:
                cp.fsync_dir(os.path.dirname(self.dir))
                self._parent_dirty = False
            self._recovery_point = max(self._recovery_point, upto)
        self._last_flush_ms = _now_ms()
        if self._pending_flush_upto is not None and self._pending_flush_upto <= self._recovery_point:
            self._pending_flush_upto = None

    def flush_rolled(self) -> bool:
        """fsync segments rolled since the last flush (Kafka does this right after
        a roll, in the background); True if anything was flushed."""
        if self._pending_flush_upto is None or self._closed:
            return False
        if self.on_flush_due is not None:
            self.on_flush_due(self, self._pending_flush_upto)
        else:
            self.flush(self._pending_flush_upto)
        return True

    def maybe_flush(self, now_ms: int | None = None) -> bool:
        """Flush if ``flush.ms`` has passed since the last flush."""
        now_ms = _now_ms() if now_ms is None else now_ms
        if not self._closed and now_ms - self._last_flush_ms >= self.config.flush_ms:
            if self.on_flush_due is not None:
                self.on_flush_due(self, None)
            else:
                self.flush()
            return True
        return False

    def flush_targets(self, upto: int | None = None) -> "FlushTargets | None":
        """What flush(``upto``) would fsync, for another thread: descriptors
        of the segment files and their indexes of its own (a segment may roll,
        close or be deleted while the fsync runs), the directory if it gained
        a segment. None when nothing needs flushing. Run
        ``FlushTargets.sync()`` anywhere, then pass the targets to flushed()."""
        if self._closed:
            return None
        upto = self._leo if upto is None else min(upto, self._leo)
        if upto <= self._recovery_point and not self._dir_dirty and not self._parent_dirty:
            return None
        targets = FlushTargets(upto, self._truncations, self.dir if self._dir_dirty else None,
                               os.path.dirname(self.dir) if self._parent_dirty else None)
        try:
            start = max(0, self._floor_segment_index(self._recovery_point))
            for seg in self._segments[start:]:
                if seg.base_offset >= upto:
                    break
                targets.fds.append(os.dup(seg.fd))
                targets.open(seg.offset_index.path)
                targets.open(seg.time_index.path)
                targets.open(segment_path(self.dir, seg.base_offset, TXN_INDEX_SUFFIX))
        except BaseException:
            targets.close()
            raise
        self._dir_dirty = False
        self._parent_dirty = False
        return targets

    def flushed(self, targets: "FlushTargets", ok: bool = True) -> None:
        """The fsyncs of ``targets`` are done (``ok``) or failed: move the
        recovery point, never past what they covered."""
        if not ok:
            if targets.dir is not None:
                self._dir_dirty = True
            if targets.parent is not None:
                self._parent_dirty = True
            return
        if self._closed or targets.generation != self._truncations:
            return
        self._recovery_point = max(self._recovery_point, min(targets.upto, self._leo))
        self._last_flush_ms = _now_ms()
        if self._pending_flush_upto is not None and self._pending_flush_upto <= self._recovery_point:
            self._pending_flush_upto = None

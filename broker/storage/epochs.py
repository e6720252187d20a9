"""The leader epoch cache of one partition and its ``leader-epoch-checkpoint``.

Kafka's LeaderEpochFileCache: an ordered list of (epoch, start offset),
updated when a batch of a new epoch is appended, trimmed when the log start
moves up or the log is truncated, and answering OffsetForLeaderEpoch.
"""
from __future__ import annotations

import os
import threading

from .checkpoints import read_epoch_checkpoint, write_epoch_checkpoint

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, path: str, entries: list[tuple[int, int]] | None = None,
                 sync: bool = True):
        self.path = path
        self._sync = sync
        # set by the log manager of a running broker: fsync(paths) done later by a worker thread
        # (Kafka 3.9 flushes the checkpoint asynchronously too, KAFKA-15046), so a leadership
        # change over many partitions does not stall the event loop on two fsyncs per partition
        self.fsync_later = None
        # set while the log holds no batch: the entries could be lost without harm (a leader
        # assigns its epoch again at start-up), so the file is rewritten in place
        self.in_place = False
        # set by the log manager of a running broker: write_later(key, job) hands a new epoch's
        # checkpoint write to the checkpoint writer's thread (False: no writer yet, write here).
        # A leadership change over thousands of partitions wrote one file per partition on the
        # event loop (~0.25 ms each: a second per 4,000). Only assign() defers: it adds the
        # latest epoch at the log end, and a crash before the write loses nothing the log cannot
        # give back (recovery assigns the epochs of the batches past the recovery point, and the
        # recovery-point checkpoint goes through the same writer after this job). Truncations
        # are written here and now (docs/chaos.md: a truncation must not come back).
        self.write_later = None
        self._pending = False          # a deferred write not done yet
        self._pending_in_place = True  # ... and every change since the last write allowed in place
        self._lock = threading.Lock()  # one writer of the file at a time (the loop or the thread)
        self.deferred_writes = 0       # writes handed to write_later (tests count them)
        self._entries: list[tuple[int, int]] = list(entries or [])

    @classmethod
    def load(cls, path: str, sync: bool = True) -> "LeaderEpochCache":
        return cls(path, read_epoch_checkpoint(path), sync)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1][0] if self._entries else None

    @property
    def earliest_entry(self) -> tuple[int, int] | None:
        return self._entries[0] if self._entries else None

    def write(self) -> None:
        with self._lock:   # (waits for a deferred write in flight: this one lands last)
            self._pending, self._pending_in_place = False, True
            if self._sync and self.fsync_later is not None:
                write_epoch_checkpoint(self.path, self._entries, False, self.in_place)
                self.fsync_later((self.path, os.path.dirname(self.path)))
            else:
                write_epoch_checkpoint(self.path, self._entries, self._sync, self.in_place)

    def _write_soon(self) -> None:
        """assign()'s write: by the checkpoint writer's thread where there is one, coalesced."""
        self._pending_in_place = self._pending_in_place and self.in_place
        if self.write_later is None:
            self.write()
            return
        self._pending = True
        if self.write_later("epochs:" + self.path, self._write_pending):
            self.deferred_writes += 1
        else:
            self.write()

    def _write_pending(self) -> None:
        """The deferred write (a worker thread): the entries as they are now, unless a write
        made on the event loop meanwhile already has them; a log deleted meanwhile needs none."""
        with self._lock:
            if not self._pending:
                return
            self._pending = False
            entries, in_place = list(self._entries), self._pending_in_place
            self._pending_in_place = True
            try:
                write_epoch_checkpoint(self.path, entries, self._sync, in_place)
            except FileNotFoundError:
                if os.path.isdir(os.path.dirname(self.path)):
                    raise
                # (the log was renamed for deletion or removed meanwhile: nothing to keep)

    @property
    def write_pending(self) -> bool:
        return self._pending

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid epoch entry ({epoch}, {start_offset})")
        if self._entries:
            last_epoch, last_start = self._entries[-1]
            if epoch == last_epoch and start_offset >= last_start:
                return False
        # keep epochs and start offsets both increasing
        while self._entries and (self._entries[-1][0] >= epoch or self._entries[-1][1] >= start_offset):
            self._entries.pop()
        self._entries.append((epoch, start_offset))
        self._write_soon()
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= requested, its end offset)."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._entries[-1][0] == requested_epoch:
            return requested_epoch, log_end_offset
        higher = next((i for i, (e, _) in enumerate(self._entries) if e > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            # older than anything we know: the data is gone; point at the first
            # epoch we still have
            return requested_epoch, self._entries[0][1]
        return self._entries[higher - 1][0], self._entries[higher][1]

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the record at ``offset`` was written in; None if unknown."""
        previous = None
        for epoch, start in self._entries:
            if start == offset:
                return epoch
            if start > offset:
                return previous
            previous = epoch
        return previous

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop epochs wholly before it."""
        removed = None
        while self._entries and self._entries[0][1] <= start_offset:
            removed = self._entries.pop(0)
        if removed is not None:
            self._entries.insert(0, (removed[0], start_offset))
            self.write()

    def truncate_from_end(self, end_offset: int) -> None:
        """The log now ends at ``end_offset``: drop epochs starting at or after it."""
        if end_offset >= 0 and self._entries and self._entries[-1][1] >= end_offset:
            while self._entries and self._entries[-1][1] >= end_offset:
                self._entries.pop()
            self.write()

    def clear(self) -> None:
        self._entries.clear()
        self.write()

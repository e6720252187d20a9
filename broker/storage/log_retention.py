"""Deleting data from a PartitionLog (broker/storage/log.py), as Kafka's UnifiedLog does:
retention by time, size and log start offset (`retention.ms`, `retention.bytes`,
DeleteRecords), segments replaced by the cleaner, and the `.deleted` files removed after
`file.delete.delay.ms`."""
from __future__ import annotations

import logging
import os
import time

from . import checkpoints as cp
from . import chores
from .errors import KafkaStorageError, OffsetOutOfRange
from .files import (
    DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX,
    segment_path,
)
from .segment import LogSegment
from .snapshots import snapshot_path

# the log's lines keep the logger name they had before the split
log = logging.getLogger("broker.storage.log")


def _now_ms() -> int:
    return int(time.time() * 1000)


class TierLimits:
    """What local retention of a tiered log obeys (set by broker/tiered/): the offset below which
    segments are copied to remote storage, and local.retention.ms/bytes (-2 already resolved to
    retention.ms/bytes). ``held_back`` counts the segments that retention wanted gone but that
    were not copied yet (a warning and a metric say so)."""
    __slots__ = ("copied_end", "retention_ms", "retention_bytes", "held_back")

    def __init__(self, copied_end: int = 0, retention_ms: int = -1, retention_bytes: int = -1):
        self.copied_end = copied_end
        self.retention_ms = retention_ms
        self.retention_bytes = retention_bytes
        self.held_back = 0


class LogRetentionMixin:
    def apply_retention(self, now_ms: int | None = None, high_watermark: int | None = None) -> int:
        """Kafka's deleteOldSegments: segments below the log start offset, then
        by ``retention.bytes``, then by ``retention.ms`` (the latter two only
        with cleanup.policy delete). Only segments wholly below the high
        watermark go; the active one too (after a roll) when it qualifies.
        Returns the number of segments deleted."""
        self._check_open()
        now_ms = _now_ms() if now_ms is None else now_ms
        hw = self._leo if high_watermark is None else high_watermark
        deleted = self._delete_start_offset_breached(hw, now_ms)
        tier = self.tier
        if tier is None and self.config.remote_storage_enable == "true":
            # tiered, and the remote log manager has not said what is copied yet: keep everything
            tier = TierLimits(0, self.config.retention_ms, self.config.retention_bytes)
        if tier is not None:
            # a tiered log: local retention, and only segments already copied (Kafka's
            # UnifiedLog.deleteOldSegments with remote storage enabled)
            if self.config.delete_enabled:
                copied = min(hw, tier.copied_end)
                deleted += self._delete_size_breached(copied, now_ms, tier.retention_bytes)
                deleted += self._delete_time_breached(copied, now_ms, tier.retention_ms)
                # what is still past local retention is there only because it is not copied
                wanted = self._count_breached(now_ms, tier.retention_bytes, tier.retention_ms)
                if wanted and wanted != tier.held_back:
                    log.warning("%s-%d: %d segment(s) past local retention kept: not copied to remote "
                                "storage yet", self.topic, self.partition, wanted)
                tier.held_back = wanted
            self.purge_deleted(now_ms)
            return deleted
        if self.config.delete_enabled:
            deleted += self._delete_size_breached(hw, now_ms)
            deleted += self._delete_time_breached(hw, now_ms)
        self.purge_deleted(now_ms)
        return deleted

    def _delete_start_offset_breached(self, hw: int, now_ms: int) -> int:
        start = self._log_start
        return self._delete_old_segments(
            lambda seg, nxt: nxt is not None and nxt.base_offset <= start, hw, now_ms,
            "log start offset breach")

    def _count_breached(self, now_ms: int, retention_bytes: int, retention_ms: int) -> int:
        """Closed segments that local retention would delete (by size or time)."""
        diff = self.size - retention_bytes if retention_bytes >= 0 else -1
        count = 0
        for seg in self._segments[:-1]:
            if diff - seg.size >= 0:
                diff -= seg.size
            elif not (retention_ms >= 0 and now_ms - seg.largest_timestamp() > retention_ms):
                break
            count += 1
        return count

    def _delete_size_breached(self, hw: int, now_ms: int, retention: int | None = None) -> int:
        retention = self.config.retention_bytes if retention is None else retention
        size = self.size
        if retention < 0 or size < retention:
            return 0
        diff = size - retention

        def predicate(seg, nxt):
            nonlocal diff
            if diff - seg.size >= 0:
                diff -= seg.size
                return True
            return False
        return self._delete_old_segments(predicate, hw, now_ms, "retention.bytes breach")

    def _delete_time_breached(self, hw: int, now_ms: int, retention: int | None = None) -> int:
        retention = self.config.retention_ms if retention is None else retention
        if retention < 0:
            return 0
        return self._delete_old_segments(
            lambda seg, nxt: now_ms - seg.largest_timestamp() > retention, hw, now_ms,
            "retention.ms breach")

    def _delete_old_segments(self, predicate, hw: int, now_ms: int, reason: str) -> int:
        deletable = []
        segments = self._segments
        for i, seg in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            upper = nxt.base_offset if nxt is not None else self._leo
            if hw >= upper and predicate(seg, nxt) and not (nxt is None and seg.size == 0):
                deletable.append(seg)
            else:
                break
        if not deletable:
            return 0
        count = len(deletable)
        if count == len(segments):
            # a log always has a segment: start the next one before deleting all
            new = self.roll(now_ms=now_ms)
            if new is deletable[-1]:
                deletable.pop()
        log.info("%s-%d: deleting segments %s due to %s", self.topic, self.partition,
                 [s.base_offset for s in deletable], reason)
        self._delete_segments(deletable, now_ms)
        # a tiered log's local retention moves only its local start: the epochs of the offsets now
        # only remote stay in the leader epoch cache, the lineage remote segments are checked
        # against (Kafka's maybeIncrementLocalLogStartOffset leaves the cache alone too)
        local_only = self._tiered() and reason != "log start offset breach"
        self._increment_log_start(self._segments[0].base_offset, keep_epochs=local_only)
        return count

    def _tiered(self) -> bool:
        return self.tier is not None or self.config.remote_storage_enable == "true"

    def _delete_segments(self, deletable: list[LogSegment], now_ms: int) -> None:
        due = now_ms + self.config.file_delete_delay_ms
        for seg in deletable:
            self._remove_segment(seg)
            seg.mark_deleted()
            extra = []
            snap = snapshot_path(self.dir, seg.base_offset)
            if os.path.exists(snap):
                os.rename(snap, snap + DELETED_SUFFIX)
                extra.append(snap + DELETED_SUFFIX)
            self._pending_deletes.append((due, seg, extra))
            chores.note()

    def replace_segments(self, base_offset: int, old: list[LogSegment], now_ms: int | None = None,
                         sync: bool = True) -> LogSegment:
        """Put the segment whose files wait as ``<base_offset>.*.swap`` (the log
        cleaner's output) in place of ``old``, as Kafka's replaceSegments does:
        the old segments go through the usual ``.deleted`` delay (a fetch
        holding one of their files still completes), then the ``.swap`` files
        lose their suffix. A crash in between is completed at the next open."""
        self._check_open()
        now_ms = _now_ms() if now_ms is None else now_ms
        if any(seg.deleted or seg not in self._segments for seg in old):
            raise KafkaStorageError(f"{self.topic}-{self.partition}: segments to replace are gone")
        if old and old[-1] is self._segments[-1]:
            raise KafkaStorageError(f"{self.topic}-{self.partition}: the active segment is never replaced")
        due = now_ms + self.config.file_delete_delay_ms
        for seg in old:
            self._remove_segment(seg)
            seg.mark_deleted()
            extra = []
            snap = snapshot_path(self.dir, seg.base_offset)
            # (the snapshot at the new segment's base stays, as in Kafka)
            if seg.base_offset != base_offset and os.path.exists(snap):
                os.rename(snap, snap + DELETED_SUFFIX)
                extra.append(snap + DELETED_SUFFIX)
            self._pending_deletes.append((due, seg, extra))
            chores.note()
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            path = segment_path(self.dir, base_offset, suffix)
            if os.path.exists(path + SWAP_SUFFIX):
                os.replace(path + SWAP_SUFFIX, path)
        if sync:
            cp.fsync_dir(self.dir)
        new = LogSegment.load(self.dir, base_offset, self.config, now_ms)
        self._add_segment(new)
        return new

    def purge_deleted(self, now_ms: int | None = None, force: bool = False) -> int:
        """Remove ``.deleted`` files whose ``file.delete.delay.ms`` has passed."""
        now_ms = _now_ms() if now_ms is None else now_ms
        keep, gone = [], 0
        for entry in self._pending_deletes:
            due, seg, extra = entry
            if force or due <= now_ms:
                seg.delete_files()
                for path in extra:
                    try:
                        os.unlink(path)
                    except FileNotFoundError:
                        pass
                gone += 1
            else:
                keep.append(entry)
        self._pending_deletes = keep
        return gone

    def _increment_log_start(self, new_start: int, keep_epochs: bool = False) -> None:
        if new_start > self._log_start:
            self._log_start = new_start
            log.info("%s-%d: incremented log start offset to %d", self.topic, self.partition, new_start)
            if not keep_epochs:
                self.epochs.truncate_from_start(new_start)
            if self.on_log_start_offset_change is not None:
                self.on_log_start_offset_change(new_start)

    def delete_records_before(self, offset: int, high_watermark: int | None = None,
                              now_ms: int | None = None) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (-1: the high
        watermark) and drop the segments wholly below it. Returns the new log
        start offset (the low watermark)."""
        self._check_open()
        now_ms = _now_ms() if now_ms is None else now_ms
        hw = self._leo if high_watermark is None else high_watermark
        if offset == -1:
            offset = hw
        if offset < 0:
            raise OffsetOutOfRange(f"cannot delete records before negative offset {offset}",
                                   self._log_start, self._leo)
        if offset > hw:
            raise OffsetOutOfRange(
                f"cannot increment the log start offset to {offset} of partition "
                f"{self.topic}-{self.partition} since it is larger than the high watermark {hw}",
                self._log_start, self._leo)
        self.deleted_below = max(self.deleted_below, offset)
        self._increment_log_start(offset)
        self._delete_start_offset_breached(hw, now_ms)
        return self._log_start

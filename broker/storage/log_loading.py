"""How PartitionLog.open (broker/storage/log.py) finds a partition's state on disk, as Kafka's
LogLoader does: leftover files of interrupted deletes and cleans, segments and their indexes
(rebuilt when corrupt), recovery of what follows the recovery point after an unclean shutdown
(batches checked, the torn tail truncated), producer snapshots kept in step with the log."""
from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable

from kproto.records import BatchHeader

from .files import (
    CLEANED_SUFFIX, DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX,
    offset_from_name,
)
from .index import CorruptIndexError
from .segment import LogSegment
from .snapshots import list_snapshots, snapshot_path
from .swaps import recover_interrupted_swaps

# the log's lines keep the logger name they had before the split
log = logging.getLogger("broker.storage.log")

ProgressCallback = Callable[[int, int], None]


class LogLoadingMixin:
    def _test_drop_last_batch(self, now_ms: int) -> None:
        """A deliberately broken broker for the chaos suite's own test
        (KPROTO_TEST_FAULT=drop-last-acked-batch-on-restart): every reopened
        user partition loses its last batch, acknowledged or not. Never set
        outside tests; the fault-injection checkers must report the loss."""
        if self.topic.startswith("__") or self._leo <= self._log_start:
            return
        last = None
        for header in self.iter_batches(self._segments[-1].base_offset):
            last = header
        if last is not None and not last.is_control:
            log.warning("KPROTO_TEST_FAULT: dropping the last batch of %s-%d at offset %d",
                        self.topic, self.partition, last.base_offset)
            self.truncate_to(last.base_offset, now_ms)

    @staticmethod
    def _prepare_files(dir: str) -> list[int]:
        """Remove leftovers of interrupted work; return the segment base offsets."""
        # a compaction's segment swap a crash interrupted is completed first
        recover_interrupted_swaps(dir)
        names = os.listdir(dir)
        logs = set()
        for name in names:
            path = os.path.join(dir, name)
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
                os.unlink(path)
            elif name.endswith(LOG_SUFFIX) and name[:-len(LOG_SUFFIX)].isdigit():
                logs.add(offset_from_name(name))
        for name in names:
            # an index without its .log is an orphan (Kafka deletes it too)
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                if name.endswith(suffix) and name[:-len(suffix)].isdigit():
                    if offset_from_name(name) not in logs:
                        log.warning("deleting orphaned index file %s", os.path.join(dir, name))
                        os.unlink(os.path.join(dir, name))
        return sorted(logs)

    def _load(self, clean: bool, recovery_point: int, log_start_checkpoint: int,
              progress: ProgressCallback | None, now_ms: int) -> None:
        if not self._segments:
            fresh = self._parent_dirty
            self._add_segment(LogSegment.create(self.dir, log_start_checkpoint, self.config, now_ms, fresh=fresh))
            self._dir_dirty = True
            if fresh:
                # a directory just made holds nothing to check, recover or clean up, and its one
                # segment's indexes were activated by create(): a new partition costs its file
                # creations only
                self._leo = self._log_start = self._recovery_point = log_start_checkpoint
                self._no_snapshots = True
                return
        segments = self._segments
        broken = set()
        for seg in segments:
            if seg.indexes_missing():
                broken.add(seg.base_offset)
                continue
            try:
                seg.offset_index.sanity_check(os.path.getsize(seg.offset_index.path))
                seg.time_index.sanity_check(os.path.getsize(seg.time_index.path))
            except CorruptIndexError as exc:
                log.warning("%s; rebuilding the indexes", exc)
                broken.add(seg.base_offset)
        if clean:
            to_scan = [s for s in segments if s.base_offset in broken]
            last = segments[-1]
            if last.base_offset not in broken and not last.tail_is_sane():
                log.warning("%s: log tail does not match its index after a clean shutdown; recovering",
                            last.log_path)
                to_scan.append(last)
        else:
            start = max(0, bisect.bisect_right(self._bases, recovery_point) - 1)
            to_scan = segments[start:]
            to_scan += [s for s in segments[:start] if s.base_offset in broken]
            to_scan.sort(key=lambda s: s.base_offset)
        if getattr(self, "_epochs_lost", False):
            to_scan = list(segments)   # (every batch's leader epoch, for the rebuilt cache)
        self._recover_segments(to_scan, progress, unclean=not clean)

        last = self._segments[-1]
        last.activate()
        self._leo = last.read_next_offset()
        # a log with no batch rewrites its epoch checkpoint in place (see assign_epoch): an idle
        # partition's restart costs no rename
        self.epochs.in_place = all(seg.size == 0 for seg in self._segments)
        self.epochs.truncate_from_end(self._leo)
        self._log_start = max(log_start_checkpoint, self._segments[0].base_offset)
        self.deleted_below = log_start_checkpoint
        if self._log_start > self._leo:
            # everything the log held is below its start: begin anew there
            log.warning("%s: log start offset %d beyond log end %d; deleting all segments",
                        self.dir, self._log_start, self._leo)
            for seg in list(self._segments):
                self._remove_segment(seg)
                seg.delete_files()
            self._add_segment(LogSegment.create(self.dir, self._log_start, self.config, now_ms))
            self._leo = self._log_start
            self.epochs.clear()
        if self.config.remote_storage_enable != "true":
            # (a tiered log keeps the epochs of its remote offsets: broker/tiered/ trims them)
            self.epochs.truncate_from_start(self._log_start)
        self.epochs.in_place = False
        self._recovery_point = self._leo if clean else min(recovery_point, self._leo)
        self._clean_snapshots()

    def _recover_segments(self, to_scan: list[LogSegment], progress: ProgressCallback | None,
                          unclean: bool) -> None:
        total = sum(s.size for s in to_scan)
        done = 0
        if progress is not None:
            progress(0, total)
        epochs = self.epochs

        def on_batch(header: BatchHeader) -> None:
            epoch = header.partition_leader_epoch
            latest = epochs.latest_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                epochs.assign(epoch, header.base_offset)

        for seg in to_scan:
            if seg not in self._segments:
                continue
            log.info("recovering segment %s (%d bytes)", seg.log_path, seg.size)
            seg_size = seg.size
            report = None if progress is None else (lambda p, d=done: progress(d + p, total))
            truncated = seg.recover(on_batch, report)
            done += seg_size
            if truncated and unclean:
                later = [s for s in self._segments if s.base_offset > seg.base_offset]
                if later:
                    log.warning("corruption in segment %s; deleting %d later segments",
                                seg.log_path, len(later))
                for s in later:
                    self._remove_segment(s)
                    s.delete_files()
                    done += s.size
                break
        if progress is not None and to_scan:
            progress(total, total)

    def _clean_snapshots(self) -> None:
        """Kafka's removeStraySnapshots, plus snapshots past the log end go."""
        bases = set(self._bases)
        max_base = self._bases[-1]
        stray = None
        for offset in list_snapshots(self.dir):
            if offset > self._leo:
                os.unlink(snapshot_path(self.dir, offset))
                continue
            if offset not in bases:
                if stray is not None:
                    os.unlink(snapshot_path(self.dir, stray))
                stray = offset
        if stray is not None and stray < max_base:
            os.unlink(snapshot_path(self.dir, stray))
        remaining = list_snapshots(self.dir)
        self._last_snap_offset = remaining[-1] if remaining else 0

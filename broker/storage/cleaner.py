"""The log cleaner: compaction of ``cleanup.policy=compact`` logs, as Kafka's
LogCleaner / LogCleanerManager schedule it.

A compacted log is a clean section (already compacted) followed by a dirty
one. The cleanable part of the dirty section ends at the first uncleanable
offset: the active segment's base, the last stable offset, or the first
segment still within ``min.compaction.lag.ms``, rounded down to a segment
base. A log is picked when its dirty ratio (cleanable bytes over clean plus
cleanable bytes) exceeds ``min.cleanable.dirty.ratio``, or when
``max.compaction.lag.ms`` forces it; the dirtiest goes first. The round ends
by recording the next dirty offset in ``cleaner-offset-checkpoint``.

What one round does to a log is broker/storage/compaction.py; how a crash in
the middle of a round is undone at the next start is broker/storage/swaps.py.

The broker is one trio thread, so a round is a generator that does a bounded
slice of work per call (LogCleaner.step with a time budget); between slices
the log may change: a round whose segments were deleted meanwhile (retention,
truncation, topic deletion) is abandoned and its ``.cleaned`` files removed.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from . import checkpoints as cp
from .compaction import (  # noqa: F401  (CLEANER_DEFAULTS: the broker settings the log manager reads)
    CLEANER_DEFAULTS,
    CleanerSettings,
    CleanerStats,
    CleaningAborted,
    CleaningRound,
    log_to_clean,
    wall_clock_ms,
)

log = logging.getLogger(__name__)


class LogCleaner:
    """The cleaner of one log directory: picks the dirtiest compacted log,
    cleans it a slice at a time, keeps ``cleaner-offset-checkpoint``."""

    def __init__(self, checkpoint_path: str, settings: Mapping, sync: bool = True):
        self.checkpoint_path = checkpoint_path
        self.settings = CleanerSettings.from_settings(settings)
        self.sync = sync
        self._round: CleaningRound | None = None
        self._round_tp: tuple[str, int] | None = None
        self._next_check_ms = 0
        # logs whose cleaning failed: left alone until they are deleted (Kafka's uncleanable partitions)
        self.uncleanable: set[tuple[str, int]] = set()
        self.checkpoints: dict[tuple[str, int], int] = {}
        try:
            self.checkpoints = cp.read_offsets_checkpoint(checkpoint_path)
        except cp.CorruptCheckpointError as exc:
            log.warning("ignoring %s: %s", checkpoint_path, exc)
        self.last_stats: CleanerStats | None = None

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    @property
    def busy(self) -> bool:
        return self._round is not None

    def _write_checkpoint(self, logs: Mapping) -> None:
        self.checkpoints = {tp: o for tp, o in self.checkpoints.items() if tp in logs}
        cp.write_offsets_checkpoint(self.checkpoint_path, self.checkpoints, self.sync)

    def forget(self, tp: tuple[str, int], logs: Mapping | None = None) -> None:
        """A log went away (deleted): stop cleaning it, drop its checkpoint."""
        if self._round_tp == tp:
            self._abandon()
        self.uncleanable.discard(tp)
        if tp in self.checkpoints:
            del self.checkpoints[tp]
            if logs is not None:
                self._write_checkpoint(logs)

    def _abandon(self) -> None:
        if self._round is not None:
            self._round.abort()
        self._round = None
        self._round_tp = None

    def close(self) -> None:
        self._abandon()

    def _choose(self, logs: Mapping, now_ms: int, stable_offset_for: Callable) -> None:
        best = None
        for tp, plog in logs.items():
            if plog.closed or not plog.config.compact_enabled or tp in self.uncleanable:
                continue
            try:
                to_clean = log_to_clean(plog, self.checkpoints.get(tp), now_ms, stable_offset_for(*tp))
            except Exception:
                log.exception("cannot compute the cleanable range of %s-%d", *tp)
                continue
            if to_clean.reset_checkpoint:
                self.checkpoints[tp] = to_clean.first_dirty_offset
            if to_clean.total_bytes == 0 or not to_clean.should_clean(plog.config.min_cleanable_dirty_ratio):
                continue
            if best is None or to_clean.cleanable_ratio > best[1].cleanable_ratio:
                best = (tp, to_clean, plog)
        if best is not None:
            tp, to_clean, plog = best
            self._round = CleaningRound(plog, to_clean, now_ms, self.settings, self.sync)
            self._round_tp = tp

    def due(self, now_ms: int) -> bool:
        """Whether step() has anything to do now (a round under way, or time to look for one)."""
        return self.enabled and (self._round is not None or now_ms >= self._next_check_ms)

    def step(self, logs: Mapping, now_ms: int | None = None, budget_s: float = 0.05,
             stable_offset_for: Callable[[str, int], int | None] | None = None) -> bool:
        """Do up to ``budget_s`` of cleaning; True when a round is still under way.

        ``logs`` maps (topic, partition) to PartitionLog; ``stable_offset_for``
        gives a partition's last stable offset (none: its log end)."""
        if not self.enabled:
            return False
        now_ms = wall_clock_ms() if now_ms is None else now_ms
        deadline = time.monotonic() + budget_s
        stable_offset_for = stable_offset_for or (lambda topic, partition: None)
        while time.monotonic() < deadline:
            if self._round is None:
                if now_ms < self._next_check_ms:
                    return False
                self._choose(logs, now_ms, stable_offset_for)
                if self._round is None:
                    # Kafka's cleaner thread backs off only when it found nothing to clean
                    self._next_check_ms = now_ms + self.settings.backoff_ms
                    return False
            rnd, tp = self._round, self._round_tp
            if logs.get(tp) is not rnd.plog:
                self._abandon()
                continue
            try:
                finished = rnd.run(deadline)
            except CleaningAborted as exc:
                log.info("cleaning of %s-%d abandoned: %s", tp[0], tp[1], exc)
                self._round = self._round_tp = None
                continue
            except Exception:
                log.exception("cleaning %s-%d failed; the partition is marked uncleanable", *tp)
                self.uncleanable.add(tp)
                self._round = self._round_tp = None
                continue
            if not finished:
                return True
            self._round = self._round_tp = None
            self.last_stats = rnd.stats
            self.checkpoints[tp] = rnd.end_offset
            self._write_checkpoint(logs)
            _log_stats(rnd)
        return self._round is not None


def _log_stats(rnd: CleaningRound) -> None:
    s = rnd.stats
    elapsed = max((s.ended or time.monotonic()) - s.started, 1e-9)
    mapping = max((s.map_done or s.started) - s.started, 0.0)
    reduction = 100.0 * (1 - s.bytes_written / s.bytes_read) if s.bytes_read else 0.0
    fewer = 100.0 * (1 - s.messages_written / s.messages_read) if s.messages_read else 0.0
    log.info("cleaned log %s (dirty section = [%d, %d)): %.1f MB processed in %.1f s (offset map %.1f s); "
             "%.1f MB, %d messages -> %.1f MB, %d messages in %d segment(s): %.1f%% size reduction "
             "(%.1f%% fewer messages)",
             rnd.name, rnd.to_clean.first_dirty_offset, rnd.end_offset, s.bytes_read / 2**20, elapsed, mapping,
             s.bytes_read / 2**20, s.messages_read, s.bytes_written / 2**20, s.messages_written, s.groups,
             reduction, fewer)

"""LogManager: every partition log in one log directory.

At open it locks the directory (``.lock``), notes and removes the
clean-shutdown marker (so a crash while loading counts as unclean), and opens
each ``<topic>-<partition>`` directory, recovering from the checkpointed
recovery points when the previous run did not shut down cleanly. periodic()
does Kafka's background chores (checkpoints, retention, flushing rolled
segments, removing deleted files); close() flushes everything, writes the
checkpoints and the ``.kafka_cleanshutdown`` marker.
"""
from __future__ import annotations

import errno
import fcntl
import functools
import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping

from . import checkpoints as cp
from . import chores
from .cleaner import CLEANER_DEFAULTS, LogCleaner
from .errors import InconsistentTopicId, LogDirLocked, LogDirOffline
from .limits import check_room
from .open_files import FILES
from .files import (
    CLEAN_SHUTDOWN_FILE, CLEANER_OFFSET_CHECKPOINT, DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX,
    LOCK_FILE, LOG_START_OFFSET_CHECKPOINT, LOG_SUFFIX, META_PROPERTIES, METADATA_TOPIC,
    RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT, STRAY_DIR_SUFFIX, offset_from_name,
    parse_partition_dir, partition_dir_name,
)
from .log import PartitionLog, SnapshotProvider

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1

BROKER_DEFAULTS = {
    "log.flush.offset.checkpoint.interval.ms": 60000,
    "log.flush.start.offset.checkpoint.interval.ms": 60000,
    "log.retention.check.interval.ms": 300000,
    "log.flush.scheduler.interval.ms": LONG_MAX,
    "log.segment.delete.delay.ms": 60000,
    **CLEANER_DEFAULTS,
}
# work the cleaner may do per periodic() call (the broker also runs it from
# a task of its own with small slices)
CLEANER_SLICE_S = 0.05
# the longest periodic() goes without a look at every log's chores (a safety net: logs note theirs)
CHORES_WALK_MAX_MS = 30_000


def _now_ms() -> int:
    return int(time.time() * 1000)


class LogManager:
    """The partition logs of one log directory. Use LogManager.open()."""

    def __init__(self, log_dir: str, config_for: Callable[[str], Mapping] | None,
                 broker_config: Mapping | None, sync: bool):
        self.log_dir = log_dir
        self.config_for = config_for or (lambda topic: {})
        settings = dict(BROKER_DEFAULTS)
        for key, value in (broker_config or {}).items():
            if key in settings and value is not None:
                default = BROKER_DEFAULTS[key]
                if isinstance(default, bool):
                    settings[key] = value.strip().lower() == "true" if isinstance(value, str) else bool(value)
                elif isinstance(default, float):
                    settings[key] = float(value)
                else:
                    settings[key] = int(value)
        self.settings = settings
        self.sync = sync
        # (topic, partition) -> high watermark; retention never passes it
        self.high_watermark_for: Callable[[str, int], int | None] | None = None
        self.snapshot_provider_for: Callable[[str, int], SnapshotProvider | None] | None = None
        # (topic, partition) -> last stable offset; the cleaner never passes it
        # (without it: the high watermark)
        self.last_stable_offset_for: Callable[[str, int], int | None] | None = None
        self.cleaner: LogCleaner | None = None
        # where due flushes go instead of an fsync in the caller's thread
        self._on_flush_due: Callable[[PartitionLog, int | None], None] | None = None
        # failed log dirs (broker/storage/dir_failure.py, set by the broker): no new log in them
        self.offline: dict | set = {}
        self.had_clean_shutdown = False
        self.new_directory = False
        self.previous_broker_epoch: int | None = None
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._deleting: list[tuple[int, PartitionLog]] = []
        self._lock_fd: int | None = None
        self._last_recovery_checkpoint = 0
        self._last_start_checkpoint = 0
        self._last_retention = 0
        self._last_flush_check = 0
        self._chores_seen = -1          # chores.queued at the last walk (periodic)
        self._chores_waiting = False    # a log still had a chore after it
        self._last_chores_walk = 0
        self._deferred_fsyncs: list[tuple[str, ...]] = []   # (paths) waiting for the checkpoint writer
        self._closed = False

    # ================================================================ opening

    @classmethod
    def open(cls, log_dir: str, config_for: Callable[[str], Mapping] | None = None, *,
             broker_config: Mapping | None = None,
             progress: Callable[[int, int], None] | None = None,
             snapshot_provider_for: Callable[[str, int], SnapshotProvider | None] | None = None,
             sync: bool = True, now_ms: int | None = None) -> "LogManager":
        """Lock ``log_dir`` and load every partition in it.

        ``config_for(topic)`` gives a topic's config keys (dict). ``progress``
        gets (bytes scanned, bytes to scan) over all partitions needing
        recovery. ``sync=False`` skips checkpoint fsyncs (tests).
        """
        now_ms = _now_ms() if now_ms is None else now_ms
        mgr = cls(log_dir, config_for, broker_config, sync)
        mgr.snapshot_provider_for = snapshot_provider_for
        # no broker loaded it before (every load writes the checkpoints; a
        # formatted directory has only meta.properties): nothing shut down
        mgr.new_directory = not any(os.path.exists(os.path.join(log_dir, name))
                                    for name in (RECOVERY_POINT_CHECKPOINT, CLEAN_SHUTDOWN_FILE))
        os.makedirs(log_dir, exist_ok=True)
        mgr._lock()
        try:
            mgr._load(progress, now_ms)
        except BaseException:
            for plog in mgr._logs.values():
                plog.close()
            mgr._unlock()
            raise
        mgr._last_recovery_checkpoint = mgr._last_start_checkpoint = now_ms
        mgr._last_retention = mgr._last_flush_check = now_ms
        return mgr

    def _lock(self) -> None:
        fd = os.open(os.path.join(self.log_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LogDirLocked(f"{self.log_dir} is in use by another process") from None
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            try:
                os.unlink(os.path.join(self.log_dir, LOCK_FILE))
            except FileNotFoundError:
                pass
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _path(self, name: str) -> str:
        return os.path.join(self.log_dir, name)

    def _read_checkpoint(self, name: str) -> dict[tuple[str, int], int]:
        try:
            return cp.read_offsets_checkpoint(self._path(name))
        except cp.CorruptCheckpointError as exc:
            log.warning("ignoring %s: %s", name, exc)
            return {}

    def _load(self, progress, now_ms: int) -> None:
        marker = self._path(CLEAN_SHUTDOWN_FILE)
        self.previous_broker_epoch = cp.read_clean_shutdown(marker)
        self.had_clean_shutdown = self.previous_broker_epoch is not None
        if self.had_clean_shutdown:
            # a crash while loading must count as unclean next time (KAFKA-10471)
            os.unlink(marker)
            if self.sync:
                cp.fsync_dir(self.log_dir)
        for name in (CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                     RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT):
            cp.touch(self._path(name))
        self.cleaner = LogCleaner(self._path(CLEANER_OFFSET_CHECKPOINT), self.settings, self.sync)
        recovery_points = self._read_checkpoint(RECOVERY_POINT_CHECKPOINT)
        log_starts = self._read_checkpoint(LOG_START_OFFSET_CHECKPOINT)

        found = []
        for name in sorted(os.listdir(self.log_dir)):
            path = self._path(name)
            if not os.path.isdir(path):
                continue
            if name.endswith(DELETE_DIR_SUFFIX):
                log.info("removing %s left by an unfinished topic deletion", path)
                shutil.rmtree(path, ignore_errors=True)
                continue
            if name.endswith((FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)):
                continue
            tp = parse_partition_dir(name)
            if tp is None:
                continue
            found.append((tp, path))

        # more partitions than the process may open: say which limit, not the first EMFILE
        check_room(len(found))
        # bytes each partition's recovery will scan, for one overall progress figure
        to_scan = {}
        if not self.had_clean_shutdown:
            for tp, path in found:
                to_scan[tp] = self._bytes_to_recover(path, recovery_points.get(tp, 0))
        total = sum(to_scan.values())
        done = 0
        if progress is not None and total:
            progress(0, total)
        for tp, path in found:
            report = None
            if progress is not None and total:
                base = done
                report = lambda d, t, base=base: progress(min(base + d, total), total)
            # the leader-epoch checkpoints that loading and the first leadership rewrite
            # (an empty log's (0, 0) entry, dropped at its end and assigned again) are
            # fsynced later, off the start-up path: four fsyncs per partition made a
            # restart with 10,000 partitions take minutes (Kafka 3.9 flushes them
            # asynchronously too, KAFKA-15046); the metadata log's stay synchronous
            later = self._fsync_later if self.sync and tp[0] != METADATA_TOPIC else None
            plog = PartitionLog.open(
                path, self.config_for(tp[0]), self.had_clean_shutdown,
                recovery_point=recovery_points.get(tp, 0), log_start_offset=log_starts.get(tp, 0),
                progress=report, now_ms=now_ms, sync=self.sync,
                snapshot_provider=self._provider(tp), fsync_later=later)
            if later is not None:
                plog.epochs.write_later = self._write_later
            done += to_scan.get(tp, 0)
            self._logs[tp] = plog
        if progress is not None and total:
            progress(total, total)
        if self.new_directory:
            log.info("log directory %s is new: no logs to load", self.log_dir)
        elif self.had_clean_shutdown:
            log.info("loaded %d partition logs from %s after a clean shutdown (no recovery needed)",
                     len(self._logs), self.log_dir)
        else:
            log.info("loaded %d partition logs from %s after an unclean shutdown: recovered %d partitions "
                     "(%d bytes checked)", len(self._logs), self.log_dir, len(to_scan), total)

    @staticmethod
    def _bytes_to_recover(path: str, recovery_point: int) -> int:
        """Size of the segments from the one holding the recovery point onward."""
        bases = sorted(offset_from_name(n) for n in os.listdir(path)
                       if n.endswith(LOG_SUFFIX) and n[:-len(LOG_SUFFIX)].isdigit())
        start = 0
        for i, b in enumerate(bases):
            if b <= recovery_point:
                start = i
        return sum(os.path.getsize(os.path.join(path, f"{b:020d}{LOG_SUFFIX}")) for b in bases[start:])

    def _provider(self, tp: tuple[str, int]) -> SnapshotProvider | None:
        if self.snapshot_provider_for is None:
            return None
        return self.snapshot_provider_for(*tp)

    # ================================================================ access

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    @property
    def logs(self) -> dict[tuple[str, int], PartitionLog]:
        return dict(self._logs)

    def partitions(self, topic: str) -> list[PartitionLog]:
        return [plog for (t, _), plog in sorted(self._logs.items()) if t == topic]

    def make_partition_dir(self, topic: str, partition: int) -> bool:
        """Make a new partition's directory here, first of its log (Kafka's
        LogManager.createLogDirectory, which LogDirs tries dir after dir); True if it was
        not there. Raises OSError naming the path (inodes exhausted, EACCES...)."""
        path = self._path(partition_dir_name(topic, partition))
        created = not os.path.isdir(path)
        os.makedirs(path, exist_ok=True)
        return created

    def get_or_create(self, topic: str, partition: int, topic_id, config: Mapping | None = None,
                      now_ms: int | None = None, created: bool | None = None,
                      is_new: bool = True) -> PartitionLog:
        """The log of a partition, created (empty) if missing. A given ``config``
        also replaces the config of an existing log.

        Raises InconsistentTopicId if the existing directory belongs to another id.
        (``is_new`` is LogDirs': with one dir, an offline dir refuses every log already.)
        """
        plog = self._logs.get((topic, partition))
        if plog is not None:
            if topic_id is not None and plog.topic_id is not None and plog.topic_id != cp.as_uuid(topic_id):
                raise InconsistentTopicId(
                    f"{topic}-{partition} has topic id {cp.uuid_to_str(plog.topic_id)}, "
                    f"not {cp.uuid_to_str(cp.as_uuid(topic_id))}")
            if topic_id is not None and plog.topic_id is None:
                plog.assign_topic_id(topic_id, self.sync)
            if config is not None:
                plog.update_config(config)
            return plog
        if self.log_dir in self.offline:
            raise LogDirOffline(f"cannot create the log of {topic}-{partition}: "
                                 f"log directory {self.log_dir} is offline")
        path = self._path(partition_dir_name(topic, partition))
        later = self._fsync_later if self.sync and getattr(self, "_checkpoint_writer", None) else None
        existed = os.path.isdir(path)
        for attempt in (1, 2):
            try:
                plog = PartitionLog.open(path, config if config is not None else self.config_for(topic),
                                         True, topic_id=topic_id, now_ms=now_ms, sync=self.sync,
                                         snapshot_provider=self._provider((topic, partition)), fsync_later=later,
                                         created=created)
                break
            except OSError as exc:
                # out of descriptors (connections took them) at any of the log's files, not only
                # its .log: the table of open files gives back half and the log is made again
                if attempt == 1 and exc.errno in (errno.EMFILE, errno.ENFILE) and FILES.make_room():
                    if not existed:
                        shutil.rmtree(path, ignore_errors=True)
                    continue
                if not exc.filename:
                    # (os.write's errors name no file): the failed directory is this one, not the
                    # first of log.dirs, which dir_failure.py would blame for a failure without a path
                    exc.filename = path
                raise
        try:
            if later is not None:
                later((self.log_dir,))
                plog.epochs.write_later = self._write_later
            elif self.sync:
                cp.fsync_dir(self.log_dir)
        except OSError as exc:
            if not exc.filename:
                exc.filename = path
            raise
        plog.on_flush_due = self._on_flush_due
        self._logs[(topic, partition)] = plog
        return plog

    def take_offline(self, log_dir: str) -> list[tuple[str, int]]:
        """The partitions of ``log_dir`` (this directory) after it failed, which this manager
        forgets (Kafka's LogManager.handleLogDirFailure): no retention, flush or checkpoint of
        them touches the failed disk again. The metadata log stays (its failure halts the broker).
        Their files are left open (closed with the objects): a fetch or an fsync in flight may
        still hold one, and closing it under them would turn a storage error into a crash."""
        if os.path.abspath(log_dir) != self.log_dir:
            return []
        gone = [tp for tp in self._logs if tp[0] != METADATA_TOPIC]
        for tp in gone:
            self._logs.pop(tp)
            if self.cleaner is not None:
                self.cleaner.forget(tp, self._logs)
        return gone

    def set_flush_scheduler(self, on_flush_due: Callable[[PartitionLog, int | None], None] | None) -> None:
        """Hand the due flushes of every log (``flush.messages``, ``flush.ms``,
        rolled segments) to ``on_flush_due(log, upto)`` (the broker's flusher,
        which fsyncs in a worker thread), for open logs and those created later."""
        self._on_flush_due = on_flush_due
        for plog in self._logs.values():
            plog.on_flush_due = on_flush_due

    def update_topic_config(self, topic: str, config: Mapping) -> None:
        for plog in self.partitions(topic):
            plog.update_config(config)

    # ============================================================== deletion

    def delete(self, topic: str, now_ms: int | None = None) -> int:
        """Delete every partition of ``topic``; returns how many there were."""
        parts = [p for (t, p) in self._logs if t == topic]
        for p in parts:
            self.delete_partition(topic, p, now_ms)
        return len(parts)

    def delete_partition(self, topic: str, partition: int, now_ms: int | None = None) -> bool:
        """Rename the directory to ``*-delete`` now; remove it after
        ``log.segment.delete.delay.ms`` (periodic() does, or close())."""
        now_ms = _now_ms() if now_ms is None else now_ms
        plog = self._logs.pop((topic, partition), None)
        if plog is None:
            return False
        if self.cleaner is not None:
            self.cleaner.forget((topic, partition), self._logs)
        plog.rename_for_deletion()
        self._deleting.append((now_ms + self.settings["log.segment.delete.delay.ms"], plog))
        return True

    def _finish_deletions(self, now_ms: int, force: bool = False) -> None:
        keep = []
        for due, plog in self._deleting:
            if force or due <= now_ms:
                plog.destroy()
            else:
                keep.append((due, plog))
        self._deleting = keep

    # =========================================================== checkpoints

    def _checkpointed(self):
        # Kafka's checkpoints leave out the metadata log (raft manages it)
        return ((tp, plog) for tp, plog in self._logs.items() if tp[0] != METADATA_TOPIC)

    def checkpoint_recovery_points(self) -> None:
        cp.write_offsets_checkpoint(self._path(RECOVERY_POINT_CHECKPOINT), self._recovery_points(), self.sync)

    def checkpoint_log_start_offsets(self) -> None:
        cp.write_offsets_checkpoint(self._path(LOG_START_OFFSET_CHECKPOINT), self._log_start_offsets(), self.sync)

    def _recovery_points(self) -> dict:
        return {tp: plog.recovery_point for tp, plog in self._checkpointed()}

    def _log_start_offsets(self) -> dict:
        # only logs whose start moved inside their first segment (DeleteRecords), and every tiered
        # log, as Kafka's (the start DeleteRecords moved it to may be at or below its first local
        # segment: left out, it would come back as 0 and the deleted remote records with it)
        return {tp: plog.checkpoint_log_start for tp, plog in self._checkpointed()
                if plog.checkpoint_log_start != plog.segments[0].base_offset
                or plog.config.remote_storage_enable == "true"}

    def set_checkpoint_writer(self, submit: Callable[..., None] | None, with_dir: bool = False) -> None:
        """Hand the periodic checkpoint writes to ``submit(key, job)`` (the
        broker's CheckpointWriter, a worker thread); None: write them here.
        ``with_dir``: submit(key, job, log_dir), so a failed dir's later jobs are skipped."""
        if submit is not None and with_dir:
            submit = functools.partial(submit, log_dir=self.log_dir)
        self._checkpoint_writer = submit
        deferred, self._deferred_fsyncs = self._deferred_fsyncs, []
        if deferred:
            if submit is None:
                self._fsync_deferred(deferred)
            else:
                submit("fsync:loaded", lambda: self._fsync_deferred(deferred))

    @staticmethod
    def _fsync_deferred(deferred: list) -> None:
        for paths in deferred:
            cp.fsync_paths(paths)

    def _fsync_later(self, paths: tuple[str, ...]) -> None:
        """The fsyncs that finish creating a partition (its small files, its
        directory, the log dir's entry for it), done by the checkpoint writer's
        thread: five fsyncs per partition on the event loop made creating a
        topic of 50 partitions stall every connection for about half a second.
        Nothing acknowledged depends on them before the data itself is flushed
        (Kafka's durability is replication plus the flush policy; the first
        flush of a new partition fsyncs the log dir's entry for it itself), and
        the writer runs them within milliseconds, in order."""
        submit = getattr(self, "_checkpoint_writer", None)
        if submit is None:
            # (loading, before the broker's writer runs: handed to it when it is set,
            # done at close() if it never is)
            self._deferred_fsyncs.append(paths)
        else:
            submit("fsync:" + "|".join(paths), lambda: cp.fsync_paths(paths))

    def _write_later(self, key: str, job: Callable[[], None]) -> bool:
        """A partition's new leader epoch checkpoint, written by the checkpoint writer's thread
        (broker/storage/epochs.py says why that is safe); False while there is no writer."""
        submit = getattr(self, "_checkpoint_writer", None)
        if submit is None:
            return False
        submit(key, job)
        return True

    def _periodic_checkpoint(self, name: str, offsets: dict) -> None:
        path, sync = self._path(name), self.sync
        submit = getattr(self, "_checkpoint_writer", None)
        if submit is None:
            cp.write_offsets_checkpoint(path, offsets, sync)
            return
        # its own temporary file: a synchronous checkpoint (a log dir move,
        # close) never shares one with a write in flight; an older snapshot
        # landing last is safe (recovery starts earlier, scans more)
        submit(path, lambda: cp.atomic_write(path, cp.format_offsets(offsets), sync, tmp=path + ".bg.tmp"))

    def checkpoint(self) -> None:
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()

    def write_high_watermarks(self, high_watermarks: Mapping[tuple[str, int], int]) -> None:
        """``replication-offset-checkpoint`` (the replica manager owns the values)."""
        cp.write_offsets_checkpoint(self._path(REPLICATION_OFFSET_CHECKPOINT), high_watermarks, self.sync)

    def read_high_watermarks(self) -> dict[tuple[str, int], int]:
        return self._read_checkpoint(REPLICATION_OFFSET_CHECKPOINT)

    def ensure_meta_properties(self, node_id: int, cluster_id: str) -> dict[str, str]:
        """Read ``meta.properties``, or write it for a fresh directory.
        Raises ValueError when it names another node or cluster."""
        path = self._path(META_PROPERTIES)
        props = cp.read_meta_properties(path)
        if props is None:
            props = cp.meta_properties(node_id, cluster_id)
            cp.write_meta_properties(path, props, self.sync)
            return props
        if props.get("node.id") != str(node_id):
            raise ValueError(f"{path} belongs to node {props.get('node.id')}, not {node_id}")
        if props.get("cluster.id") != cluster_id:
            raise ValueError(f"{path} belongs to cluster {props.get('cluster.id')}, not {cluster_id}")
        return props

    # ============================================================= chores

    def periodic(self, now_ms: int | None = None, clean_budget_s: float = CLEANER_SLICE_S) -> None:
        """Run whatever background work is due; call every second or so.
        ``clean_budget_s=0``: no compaction here (the broker runs the cleaner
        in small slices of its own)."""
        now_ms = _now_ms() if now_ms is None else now_ms
        s = self.settings
        # a walk over every log only when a chore was queued since the last one, or one is still
        # waiting (a deleted segment's delay), and every half minute regardless
        if (chores.queued != self._chores_seen or self._chores_waiting
                or now_ms - self._last_chores_walk >= CHORES_WALK_MAX_MS):
            self._chores_seen = chores.queued
            self._last_chores_walk = now_ms
            waiting = False
            for plog in list(self._logs.values()):
                if plog.has_chores:   # (most of thousands of logs have none: one look each)
                    plog.flush_rolled()
                    plog.purge_deleted(now_ms)
                    waiting = waiting or plog.has_chores
            self._chores_waiting = waiting
        if now_ms - self._last_flush_check >= s["log.flush.scheduler.interval.ms"]:
            self._last_flush_check = now_ms
            for plog in list(self._logs.values()):
                plog.maybe_flush(now_ms)
        if now_ms - self._last_retention >= s["log.retention.check.interval.ms"]:
            self._last_retention = now_ms
            self.apply_retention(now_ms)
        if now_ms - self._last_recovery_checkpoint >= s["log.flush.offset.checkpoint.interval.ms"]:
            self._last_recovery_checkpoint = now_ms
            self._periodic_checkpoint(RECOVERY_POINT_CHECKPOINT, self._recovery_points())
        if now_ms - self._last_start_checkpoint >= s["log.flush.start.offset.checkpoint.interval.ms"]:
            self._last_start_checkpoint = now_ms
            self._periodic_checkpoint(LOG_START_OFFSET_CHECKPOINT, self._log_start_offsets())
        self._finish_deletions(now_ms)
        if clean_budget_s > 0:
            self.clean(now_ms, clean_budget_s)

    # ============================================================ compaction

    def _stable_offset(self, topic: str, partition: int) -> int | None:
        if self.last_stable_offset_for is not None:
            return self.last_stable_offset_for(topic, partition)
        if self.high_watermark_for is not None:
            return self.high_watermark_for(topic, partition)
        return None

    def clean(self, now_ms: int | None = None, budget_s: float = CLEANER_SLICE_S) -> bool:
        """Up to ``budget_s`` of log compaction (``log.cleaner.enable``); True
        while a cleaning round is under way (call again soon)."""
        if self.cleaner is None or self._closed:
            return False
        now_ms = _now_ms() if now_ms is None else now_ms
        if not self.cleaner.due(now_ms):
            return False   # (no round under way, next look later: no map of every log to build)
        logs = {tp: plog for tp, plog in self._logs.items() if tp[0] != METADATA_TOPIC}
        return self.cleaner.step(logs, now_ms, budget_s, self._stable_offset)

    @property
    def cleaner_busy(self) -> bool:
        return self.cleaner is not None and self.cleaner.busy

    def apply_retention(self, now_ms: int | None = None) -> int:
        now_ms = _now_ms() if now_ms is None else now_ms
        deleted = 0
        for (topic, partition), plog in list(self._logs.items()):
            if topic == METADATA_TOPIC:
                continue  # only snapshots may shorten the metadata log
            hw = self.high_watermark_for(topic, partition) if self.high_watermark_for else None
            deleted += plog.apply_retention(now_ms, hw)
        return deleted

    def release(self) -> None:
        """Close a failed directory at shutdown: its lock is released, nothing is written there
        (Kafka shuts down its live log dirs only; the next start recovers this one's logs)."""
        if self._closed:
            return
        if self.cleaner is not None:
            self.cleaner.close()
        try:
            self._unlock()
        except OSError:
            pass
        self._closed = True

    def close(self, broker_epoch: int = -1) -> None:
        """Flush and close every log, write the checkpoints and the clean-shutdown marker."""
        if self._closed:
            return
        if self.cleaner is not None:
            self.cleaner.close()
        for plog in self._logs.values():
            plog.close()
        deferred, self._deferred_fsyncs = self._deferred_fsyncs, []
        self._fsync_deferred(deferred)
        self.checkpoint()
        self._finish_deletions(0, force=True)
        cp.write_clean_shutdown(self._path(CLEAN_SHUTDOWN_FILE), broker_epoch)
        self._unlock()
        self._closed = True


"""Several log directories (JBOD, `log.dirs=/a,/b`): one LogManager per
directory behind the LogManager interface the broker uses.

New partitions go to the directory holding the fewest partitions (ties: the
first in `log.dirs`), as Kafka's LogManager.nextLogDirs; the metadata log
stays in the first directory (Kafka's default `metadata.log.dir`). Each
directory has its own lock, checkpoints, clean-shutdown marker and
`meta.properties` (same cluster and node id, its own `directory.id`).

move() is AlterReplicaLogDirs: the partition's log is closed, copied into the
destination as `<topic>-<partition>.<uuid>-future`, renamed into place, the
source renamed to `-delete` and removed, and the copy opened in its place.
It runs synchronously (Kafka copies in a background thread while the replica
keeps serving, then swaps); a crash midway leaves either a `-future` copy
(removed at the next start) or two complete identical copies (the one in the
earlier directory of `log.dirs` is kept).
"""
from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Mapping

from . import checkpoints as cp
from .files import (
    DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, META_PROPERTIES, METADATA_TOPIC, delete_dir_name, parse_partition_dir,
)
from .errors import KafkaStorageError, LogDirOffline
from .log import PartitionLog
from .logmanager import LogManager

log = logging.getLogger(__name__)


def open_log_dirs(dirs: list[str], config_for=None, **kwargs):
    """A LogManager for one directory, a LogDirs for several."""
    dirs = [os.path.abspath(d) for d in dirs]
    if len(dirs) == 1:
        return LogManager.open(dirs[0], config_for, **kwargs)
    return LogDirs.open(dirs, config_for, **kwargs)


def existing_meta_properties(dirs: list[str]) -> dict[str, str]:
    """meta.properties of the first directory that has one ({} if none)."""
    for d in dirs:
        props = cp.read_meta_properties(os.path.join(os.path.abspath(d), META_PROPERTIES))
        if props:
            return props
    return {}


def managers(logs) -> list[tuple[str, LogManager]]:
    """(directory, its LogManager) for a LogManager or a LogDirs."""
    if isinstance(logs, LogDirs):
        return list(logs.managers.items())
    return [(logs.log_dir, logs)]


def future_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"


def _copy_dir(src: str, dest: str, sync: bool) -> None:
    shutil.copytree(src, dest)
    if sync:
        for name in os.listdir(dest):
            fd = os.open(os.path.join(dest, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        cp.fsync_dir(dest)


class LogDirs:
    """The LogManagers of several log directories, in `log.dirs` order."""

    def __init__(self, managers_by_dir: dict[str, LogManager]):
        self.managers = managers_by_dir
        self.log_dir = next(iter(managers_by_dir))
        self._high_watermark_for = None
        self._last_stable_offset_for = None
        # AlterReplicaLogDirs for a partition not hosted yet: where it goes once created
        # (Kafka's LogManager.maybeUpdatePreferredLogDir)
        self.preferred: dict[tuple[str, int], str] = {}
        # failed log dirs (broker/storage/dir_failure.py): new partitions go elsewhere, as
        # Kafka's nextLogDirs picks among the online dirs only
        self.offline: dict | set = {}
        # callable(OSError): a directory where a partition's directory could not be made has
        # failed (the broker's LogDirFailures.report, which adds it to ``offline``)
        self.on_dir_failure = None

    @classmethod
    def open(cls, dirs: list[str], config_for=None, *, progress=None, **kwargs) -> "LogDirs":
        for d in dirs:
            os.makedirs(d, exist_ok=True)
        _finish_interrupted_moves(dirs)
        opened: dict[str, LogManager] = {}
        try:
            for d in dirs:
                opened[d] = LogManager.open(d, config_for, progress=progress, **kwargs)
        except BaseException:
            for mgr in opened.values():
                mgr.close()
            raise
        return cls(opened)

    # -- hooks the broker sets (passed on to every directory) --------------------------------

    @property
    def high_watermark_for(self):
        return self._high_watermark_for

    @high_watermark_for.setter
    def high_watermark_for(self, fn) -> None:
        self._high_watermark_for = fn
        for mgr in self.managers.values():
            mgr.high_watermark_for = fn

    @property
    def last_stable_offset_for(self):
        return self._last_stable_offset_for

    @last_stable_offset_for.setter
    def last_stable_offset_for(self, fn) -> None:
        self._last_stable_offset_for = fn
        for mgr in self.managers.values():
            mgr.last_stable_offset_for = fn

    def set_flush_scheduler(self, on_flush_due) -> None:
        for mgr in self.managers.values():
            mgr.set_flush_scheduler(on_flush_due)

    def set_checkpoint_writer(self, submit, with_dir: bool = False) -> None:
        for mgr in self.managers.values():
            mgr.set_checkpoint_writer(submit, with_dir)

    @property
    def had_clean_shutdown(self) -> bool:
        return all(m.had_clean_shutdown for m in self.managers.values())

    @property
    def sync(self) -> bool:
        return self.managers[self.log_dir].sync

    @property
    def settings(self) -> dict:
        return self.managers[self.log_dir].settings

    # -- access -----------------------------------------------------------------------------

    def manager_of(self, topic: str, partition: int) -> LogManager | None:
        for mgr in self.managers.values():
            if mgr.get(topic, partition) is not None:
                return mgr
        return None

    def dir_of(self, topic: str, partition: int) -> str | None:
        mgr = self.manager_of(topic, partition)
        return mgr.log_dir if mgr else None

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        mgr = self.manager_of(topic, partition)
        return mgr.get(topic, partition) if mgr else None

    @property
    def logs(self) -> dict[tuple[str, int], PartitionLog]:
        out = {}
        for mgr in self.managers.values():
            out.update(mgr.logs)
        return out

    def partitions(self, topic: str) -> list[PartitionLog]:
        return sorted((p for m in self.managers.values() for p in m.partitions(topic)), key=lambda p: p.partition)

    def next_dirs(self) -> list[str]:
        """Where a new partition may go, best first: the online directories, those with fewer
        partitions first (ties: log.dirs order), as Kafka's LogManager.nextLogDirs."""
        def load(d: str) -> int:
            return sum(1 for tp in self.managers[d].logs if tp[0] != METADATA_TOPIC)
        return sorted((d for d in self.managers if d not in self.offline), key=load)

    def get_or_create(self, topic: str, partition: int, topic_id, config: Mapping | None = None,
                      now_ms: int | None = None, is_new: bool = True) -> PartitionLog:
        """The partition's log, made in the best online dir if no dir holds it. ``is_new`` False:
        a replica this broker should already have (its log may be in a failed dir): not made while
        any dir is offline, as Kafka's LogManager.getOrCreateLog, which would otherwise serve an
        empty log in another dir in place of the data the offline one holds."""
        mgr = self.manager_of(topic, partition)
        if mgr is not None:
            return mgr.get_or_create(topic, partition, topic_id, config, now_ms)
        if not is_new and self.offline:
            offline = list(self.offline)
            raise LogDirOffline(f"Can not create log for {topic}-{partition} because log directories "
                                f"{','.join(offline)} are offline",
                                path=os.path.join(offline[0], f"{topic}-{partition}"))
        where = self.preferred.pop((topic, partition), None)
        if where in self.managers and where not in self.offline:
            tried = [where]
        else:
            tried = [self.log_dir] if topic == METADATA_TOPIC else self.next_dirs()
        failure = None
        for d in tried:
            if d in self.offline:
                continue
            # Kafka's getOrCreateLog: the first directory where the partition's directory can
            # be made wins; one where it cannot fails (offline) and the next is tried
            try:
                created = self.managers[d].make_partition_dir(topic, partition)
            except OSError as exc:
                if self.on_dir_failure is None:
                    raise
                self.on_dir_failure(exc)
                failure = exc
                continue
            return self.managers[d].get_or_create(topic, partition, topic_id, config, now_ms, created=created)
        if failure is not None:
            raise KafkaStorageError(f"no log directory available for {topic}-{partition}: tried "
                                    + ", ".join(tried), path=failure.filename) from failure
        raise LogDirOffline(f"cannot create the log of {topic}-{partition}: "
                             f"every log directory is offline")

    def take_offline(self, log_dir: str) -> list[tuple[str, int]]:
        """The partitions of a failed directory, forgotten (LogManager.take_offline)."""
        mgr = self.managers.get(os.path.abspath(log_dir))
        return mgr.take_offline(log_dir) if mgr is not None else []

    def _online(self) -> list[LogManager]:
        """The managers of the directories that have not failed: a failed one's checkpoints and
        clean-shutdown marker are not written again (Kafka drops it from its checkpoints)."""
        return [m for d, m in self.managers.items() if d not in self.offline]

    def update_topic_config(self, topic: str, config: Mapping) -> None:
        for mgr in self.managers.values():
            mgr.update_topic_config(topic, config)

    # -- deletion ---------------------------------------------------------------------------

    def delete(self, topic: str, now_ms: int | None = None) -> int:
        return sum(mgr.delete(topic, now_ms) for mgr in self.managers.values())

    def delete_partition(self, topic: str, partition: int, now_ms: int | None = None) -> bool:
        mgr = self.manager_of(topic, partition)
        return mgr.delete_partition(topic, partition, now_ms) if mgr else False

    # -- checkpoints and chores ---------------------------------------------------------------

    def checkpoint(self) -> None:
        for mgr in self._online():
            mgr.checkpoint()

    def checkpoint_recovery_points(self) -> None:
        for mgr in self._online():
            mgr.checkpoint_recovery_points()

    def checkpoint_log_start_offsets(self) -> None:
        for mgr in self._online():
            mgr.checkpoint_log_start_offsets()

    def write_high_watermarks(self, high_watermarks: Mapping[tuple[str, int], int]) -> None:
        for mgr in self._online():
            mgr.write_high_watermarks({tp: hw for tp, hw in high_watermarks.items() if mgr.get(*tp) is not None})

    def read_high_watermarks(self) -> dict[tuple[str, int], int]:
        out = {}
        for mgr in self.managers.values():
            out.update(mgr.read_high_watermarks())
        return out

    def ensure_meta_properties(self, node_id: int, cluster_id: str) -> dict[str, str]:
        """Every directory's meta.properties (each with its own directory.id); the first's is returned."""
        first = None
        for mgr in self.managers.values():
            props = mgr.ensure_meta_properties(node_id, cluster_id)
            first = first or props
        return first

    def periodic(self, now_ms: int | None = None, **kw) -> None:
        for mgr in self._online():
            mgr.periodic(now_ms, **kw)

    def clean(self, now_ms: int | None = None, budget_s: float = 0.05) -> bool:
        busy = False
        share = budget_s / len(self.managers)
        for mgr in self.managers.values():
            busy = mgr.clean(now_ms, share) or busy
        return busy

    @property
    def cleaner_busy(self) -> bool:
        return any(m.cleaner_busy for m in self.managers.values())

    def apply_retention(self, now_ms: int | None = None) -> int:
        return sum(m.apply_retention(now_ms) for m in self._online())

    def close(self, broker_epoch: int = -1) -> None:
        for d, mgr in self.managers.items():
            if d in self.offline:
                mgr.release()   # no clean-shutdown marker: its logs recover at the next start
            else:
                mgr.close(broker_epoch)

    # -- AlterReplicaLogDirs ------------------------------------------------------------------

    def move(self, topic: str, partition: int, dest_dir: str) -> PartitionLog:
        """Move a partition's log into dest_dir (one of the log dirs); returns the log now in use
        (the same one when it is there already). The caller swaps it into the partition."""
        src = self.manager_of(topic, partition)
        dest = self.managers[dest_dir]
        if src is None:
            raise KeyError((topic, partition))
        old = src.get(topic, partition)
        if src is dest:
            return old
        sync = src.sync
        tp = (topic, partition)
        recovery_point, log_start = old.recovery_point, old.log_start_offset
        old.close()
        future = os.path.join(dest.log_dir, future_dir_name(topic, partition))
        final = os.path.join(dest.log_dir, os.path.basename(os.path.normpath(old.dir)))
        _copy_dir(old.dir, future, sync)
        os.rename(future, final)
        if sync:
            cp.fsync_dir(dest.log_dir)
        # the source copy goes the way of a deleted partition
        src._logs.pop(tp, None)
        if src.cleaner is not None:
            src.cleaner.forget(tp, src._logs)
        # renamed first, so a crash while removing it leaves no partial copy under its name
        doomed = os.path.join(src.log_dir, delete_dir_name(topic, partition))
        os.rename(old.dir, doomed)
        if sync:
            cp.fsync_dir(src.log_dir)
        shutil.rmtree(doomed, ignore_errors=True)
        new = PartitionLog.open(final, old.config, True, topic_id=old.topic_id, recovery_point=recovery_point,
                                log_start_offset=log_start, sync=sync, snapshot_provider=dest._provider(tp))
        new.on_flush_due = dest._on_flush_due
        dest._logs[tp] = new
        src.checkpoint()
        dest.checkpoint()
        log.info("moved %s-%d from %s to %s", topic, partition, src.log_dir, dest.log_dir)
        return new


def _finish_interrupted_moves(dirs: list[str]) -> None:
    """Before the directories open: drop the -future copies of moves a crash interrupted, and
    of a partition found complete in two directories keep the one in the earlier directory."""
    seen: dict[tuple[str, int], str] = {}
    for d in dirs:
        for name in sorted(os.listdir(d)):
            path = os.path.join(d, name)
            if not os.path.isdir(path) or name.endswith(DELETE_DIR_SUFFIX):
                continue
            if name.endswith(FUTURE_DIR_SUFFIX):
                log.warning("removing %s left by an interrupted log directory move", path)
                shutil.rmtree(path, ignore_errors=True)
                continue
            tp = parse_partition_dir(name)
            if tp is None:
                continue
            if tp in seen:
                log.warning("%s-%d is in both %s and %s (an interrupted move): keeping the first",
                            tp[0], tp[1], seen[tp], d)
                shutil.rmtree(path, ignore_errors=True)
                continue
            seen[tp] = d

"""A log directory whose disk refuses a write (full, read-only, I/O error).

Kafka's LogDirFailureChannel: the directory is marked offline, its
partitions answer KAFKA_STORAGE_ERROR, and when every log directory of the
broker has failed the broker halts (``Exit.halt``, no clean shutdown: a clean
shutdown would write checkpoints and snapshots to the same failed disk).
In a cluster that is what moves leadership to replicas on healthy disks; on
restart, recovery truncates whatever partial batch the failed write left.
kproto does the same: a write failure anywhere (an append, a roll, a
checkpoint, a follower's fetch, making a new partition's log) is reported here; the failed
directory's partitions then go offline (take_offline_when_failed); once every log dir has
failed, one error line names the directory and the cause and the process
exits with status 1.
"""
from __future__ import annotations

import errno
import logging
import os
import sys

import trio

log = logging.getLogger("kproto.storage")

# errors of the disk, not of the request: ENOSPC full, EDQUOT quota, EROFS
# remounted read-only after an error, EIO the device
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})


def disk_error(exc: BaseException | None, any_os_error: bool = False) -> BaseException | None:
    """The storage failure behind ``exc`` (itself, its cause or its context), if any; with
    ``any_os_error`` every OSError is one (making a log: see LogDirFailures.report)."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and (any_os_error or exc.errno in DISK_ERRNOS):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def _path_of(exc: BaseException) -> str | None:
    """The failed file: an OSError's filename, or a KafkaStorageError's path
    (os.write errors carry none) anywhere in the chain."""
    seen = 0
    while exc is not None and seen < 8:
        name = getattr(exc, "filename", None) or getattr(exc, "path", None)
        if isinstance(name, str) and name:
            return os.path.abspath(name)
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


class LogDirFailures:
    def __init__(self, log_dirs: list[str], metadata_dir: str | None = None):
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        # KRaft: a broker whose metadata log dir failed halts even with other dirs online
        # (Kafka's ReplicaManager: "Shutdown broker because the metadata log dir ... has failed")
        self.metadata_dir = os.path.abspath(metadata_dir) if metadata_dir else None
        self.halt_reason: str | None = None
        self.failed: dict[str, str] = {}      # log dir -> why
        self._all_failed = trio.Event()
        # set at each newly failed dir (the heartbeat reports it at once, KIP-858); the
        # waiter replaces it
        self.changed = trio.Event()
        # newly failed dirs whose partitions are still to be taken offline (take_offline_when_failed)
        self._to_take_offline: list[str] = []
        self._taking = trio.Event()

    def report(self, exc: BaseException, any_os_error: bool = False) -> bool:
        """Record the failure behind ``exc`` if it is one of the disk; True if it was.

        ``any_os_error``: every OSError counts (EMFILE, EACCES, ENOSPC...), as for Kafka's
        LogManager.getOrCreateLog, where any IOException making a log takes its directory
        offline: a log that cannot be made would otherwise leave its partition unserved
        until a restart, with clients retrying it forever."""
        cause = disk_error(exc, any_os_error)
        if cause is None:
            return False
        path = _path_of(exc) or ""
        dirs = [d for d in self.log_dirs if path == d or path.startswith(d + os.sep)]
        # a path outside every log dir (the metadata log's own dir) fails the first one,
        # where the metadata lives unless metadata.log.dir says otherwise
        failed = dirs[0] if dirs else self.log_dirs[0]
        reason = getattr(cause, "strerror", None) or str(cause)
        if failed not in self.failed:
            self.failed[failed] = reason
            # the file that failed, when known: a background write (a checkpoint) fails a dir
            # with no other word of what was being written
            log.error("log directory %s failed: %s%s", failed, reason, f" (at {path})" if path else "")
            self.changed.set()
            self._to_take_offline.append(failed)
            self._taking.set()
            if len(self.failed) == len(self.log_dirs):
                self._all_failed.set()
        md = self.metadata_dir
        if md is not None and (path == md or path.startswith(md + os.sep)) and self.halt_reason is None:
            # (only a failure known to be there: one without a path is not the metadata log's)
            self.halt_reason = f"the metadata log dir {md} has failed ({reason})"
            self._all_failed.set()
        return True

    def halt(self, reason: str) -> None:
        """Halt the broker now, saying why (halt_when_all_failed does it)."""
        if self.halt_reason is None:
            self.halt_reason = reason
        self._all_failed.set()

    async def take_offline_when_failed(self, take_offline, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Run for the broker's lifetime: hand each newly failed dir to ``take_offline(dirs)``
        (Kafka's ReplicaManager.handleLogDirFailure: its partitions go offline). After the
        report, not in it: a report comes from the middle of an append, a fetch, a reconcile."""
        task_status.started()
        while True:
            await self._taking.wait()
            self._taking = trio.Event()
            dirs, self._to_take_offline = self._to_take_offline, []
            take_offline(dirs)

    async def halt_when_all_failed(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await self._all_failed.wait()
        # one more turn of the event loop: the answers already built go out
        await trio.sleep(0.05)
        dirs = ", ".join(f"{d} ({why})" for d, why in self.failed.items())
        line = f"kproto: shutting down: every log directory has failed: {dirs}"
        if self.halt_reason is not None and len(self.failed) < len(self.log_dirs):
            line = f"kproto: shutting down: {self.halt_reason}"
        log.error(line)
        for handler in logging.getLogger().handlers:
            handler.flush()
        print(line, file=sys.stderr, flush=True)
        os._exit(1)

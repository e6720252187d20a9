"""The periodic checkpoint files (recovery points, log start offsets), written
by a worker thread instead of the event loop.

Each is a small file replaced atomically with two fsyncs (the file, then its
directory): 8 ms typical and 36 ms at worst on the shared 2-core test machine,
during which no connection was served when it ran on the trio thread
(docs/performance.md, "What blocks the event loop"). The log manager takes
the snapshot of the offsets on the trio thread (consistent, no locks) and
hands over only the write. Writes of one file are coalesced (a newer
snapshot replaces a pending older one) and done one at a time, in order.
A write still pending at shutdown does not matter: closing the logs writes
every checkpoint synchronously after this task has stopped.

A job may name its log dir. Once one of a dir's jobs fails with a disk error,
the dir's later jobs in the same batch are skipped: Kafka marks the dir offline
and writes nothing more to it, and each further write to a failing disk may
block for seconds. Failures are reported on the trio thread after the batch.
"""
from __future__ import annotations

import logging
from typing import Callable

import trio

from broker.storage.dir_failure import disk_error

log = logging.getLogger("kproto.checkpoints")


class CheckpointWriter:
    def __init__(self):
        self._pending: dict[str, tuple[Callable[[], None], str | None]] = {}   # key -> (job, log dir)
        self._kick = trio.Event()
        self.writes = 0   # completed writes (tests)
        self._busy = False
        self.on_disk_error = None   # callable(exc): the broker's LogDirFailures.report

    def submit(self, key: str, job: Callable[[], None], log_dir: str | None = None) -> None:
        """Write soon (``job`` runs in a worker thread). Called on the trio
        thread; a pending job with the same key is replaced. ``log_dir``: the
        dir the job writes to (skipped once the dir failed in the same batch)."""
        self._pending[key] = (job, log_dir)
        self._kick.set()

    @property
    def idle(self) -> bool:
        """Nothing pending and nothing being written."""
        return not self._pending and not self._busy

    def drain(self) -> None:
        """Run what is still pending here and now (shutdown: the deferred
        fsyncs of new partitions are done before the clean-shutdown marker)."""
        pending, self._pending = self._pending, {}
        for key, (job, _) in pending.items():
            try:
                job()
            except Exception:
                log.exception("writing checkpoint %s failed", key)

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            if not self._pending:
                await self._kick.wait()
            self._kick = trio.Event()
            # everything pending goes to the thread in one hop, in submission order: creating a
            # topic of 50 partitions submits ~100 jobs, and a hop each (a thread woken, named
            # and handed back per job) cost more of the broker's CPU than the jobs' own work
            batch, self._pending = self._pending, {}
            self._busy = True
            try:
                ran, failures = await trio.to_thread.run_sync(_run_jobs, batch)
            finally:
                self._busy = False
            self.writes += ran - len(failures)
            for key, exc in failures:
                if self.on_disk_error is None or not self.on_disk_error(exc):
                    log.error("writing checkpoint %s failed", key, exc_info=exc)


def _run_jobs(batch: dict) -> tuple[int, list[tuple[str, BaseException]]]:
    """Run the jobs one after the other (in the worker thread): how many ran, and the failed
    ones' keys and errors, reported back on the trio thread in submission order. A dir's jobs
    after one that failed with a disk error are skipped (neither run nor reported: the dir
    goes offline)."""
    failures = []
    failed_dirs = set()
    ran = 0
    for key, (job, log_dir) in batch.items():
        if log_dir is not None and log_dir in failed_dirs:
            continue
        ran += 1
        try:
            job()
        except Exception as exc:
            failures.append((key, exc))
            if log_dir is not None and disk_error(exc) is not None:
                failed_dirs.add(log_dir)
    return ran, failures

"""The periodic checkpoint files are written by a worker thread, not on the
event loop (broker/storage/checkpoint_writer.py): the log manager only snapshots the
offsets and submits the write; a newer snapshot replaces a pending one."""
from __future__ import annotations

import os
import threading
import time
import uuid

import trio

from broker.storage.checkpoint_writer import CheckpointWriter
from broker.storage.logmanager import LogManager

from tests.test_storage import T0, multi_batch

RP = "recovery-point-offset-checkpoint"


def _later(n: int = 1) -> int:
    """A periodic() time past every interval: from the wall clock, not from T0, since the log
    manager starts its intervals at the wall clock's now (T0 + 10**9 fell behind it on 2026-12-04
    and the recovery-point checkpoint was no longer due)."""
    return int(time.time() * 1000) + n * 10**9


def test_periodic_checkpoints_go_to_the_writer_thread(tmp_path):
    d = str(tmp_path / "logs")
    mgr = LogManager.open(d, broker_config={"log.flush.offset.checkpoint.interval.ms": 0}, sync=True)
    log = mgr.get_or_create("t", 0, uuid.uuid4())
    for i in range(3):
        log.append(multi_batch([T0 + i]), 0, now_ms=T0)
    log.flush()
    path = os.path.join(d, RP)
    def current():
        return open(path, "rb").read() if os.path.exists(path) else None

    before = current()
    assert before is None or b"t 0 3" not in before
    writer = CheckpointWriter()
    threads = []
    real = writer.submit

    def submit(key, job):
        def traced():
            threads.append(threading.current_thread() is not threading.main_thread())
            job()
        real(key, traced)

    mgr.set_checkpoint_writer(submit)
    mgr.periodic(now_ms=_later())
    mgr.periodic(now_ms=_later(2))     # coalesced with the pending one
    assert current() == before               # nothing written inline

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            with trio.fail_after(10):
                while writer.writes < 2:    # recovery points and log start offsets
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert threads and all(threads)          # in a worker thread
    assert writer.writes == 2                # the second periodic() replaced the pending writes
    assert b"t 0 3\n" in open(path, "rb").read()
    assert not [n for n in os.listdir(d) if n.endswith(".tmp")]
    mgr.close()
    assert b"t 0 3\n" in open(path, "rb").read()


def test_without_a_writer_periodic_writes_inline(tmp_path):
    d = str(tmp_path / "logs")
    mgr = LogManager.open(d, broker_config={"log.flush.offset.checkpoint.interval.ms": 0}, sync=False)
    log = mgr.get_or_create("t", 0, uuid.uuid4())
    log.append(multi_batch([T0]), 0, now_ms=T0)
    log.flush()
    mgr.periodic(now_ms=_later())
    assert b"t 0 1\n" in open(os.path.join(d, RP), "rb").read()
    mgr.close()


def _run_in_threads(jobs, done, seconds: float = 4.0) -> None:
    """Each job in a thread of its own (as the writer's worker would), until done() (bounded)."""
    for job in jobs:
        threading.Thread(target=job).start()
    for _ in range(int(seconds / 0.02)):
        if done():
            return
        threading.Event().wait(0.02)


def test_creating_a_partition_leaves_its_fsyncs_to_the_writer(tmp_path, monkeypatch):
    """Five fsyncs per new partition on the event loop stalled every connection
    for ~1 s when a 50-partition topic was created; with a writer they run on
    its thread, and cover the files, the partition directory and the log dir."""
    d = str(tmp_path / "logs")
    mgr = LogManager.open(d, broker_config={}, sync=True)
    jobs = []
    mgr.set_checkpoint_writer(lambda key, job: jobs.append(job))
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    log = mgr.get_or_create("t", 0, uuid.uuid4())
    log.assign_epoch(3)
    assert synced == []                      # nothing on the caller's thread
    part = os.path.join(d, "t-0")
    expected = {os.path.join(part, "partition.metadata"), part, d, os.path.join(part, "leader-epoch-checkpoint")}
    _run_in_threads(jobs, lambda: set(synced) >= expected)
    assert set(synced) >= expected
    assert open(os.path.join(part, "leader-epoch-checkpoint")).read().split("\n")[2] == "3 0"


def test_shutdown_drains_pending_writes():
    writer = CheckpointWriter()
    done = []
    writer.submit("a", lambda: done.append("a"))
    writer.submit("b", lambda: done.append("b"))
    writer.drain()
    assert done == ["a", "b"]
    writer.drain()
    assert done == ["a", "b"]


def test_new_leader_epochs_are_written_by_the_writer_coalesced(tmp_path, monkeypatch):
    """A leadership change over thousands of partitions wrote one leader-epoch-checkpoint per
    partition on the event loop (~0.25 ms each). Now assign_epoch hands the write to the writer,
    one pending write per file however many epochs came meanwhile; a truncation is still written
    at once, and the pending write then leaves it alone."""
    import broker.storage.epochs as epochs_module
    d = str(tmp_path / "logs")
    mgr = LogManager.open(d, broker_config={}, sync=True)
    jobs: dict = {}
    mgr.set_checkpoint_writer(lambda key, job: jobs.__setitem__(key, job))   # (coalesced by key)
    logs = [mgr.get_or_create("t", i, uuid.uuid4()) for i in range(50)]
    written = []
    real = epochs_module.write_epoch_checkpoint
    monkeypatch.setattr(epochs_module, "write_epoch_checkpoint",
                        # (recorded once written: a reader that sees 50 paths finds 50 whole files)
                        lambda path, *a, **kw: (real(path, *a, **kw), written.append(path))[0])
    for log in logs:
        log.assign_epoch(3)
        log.assign_epoch(4)                  # (a second election before the write)
    assert written == []                     # nothing written on the caller's thread
    epoch_jobs = [job for key, job in jobs.items() if key.startswith("epochs:")]
    assert len(epoch_jobs) == 50             # one per partition
    first = logs[0]
    first.append(multi_batch([T0]), 4, now_ms=T0)
    first.assign_epoch(5)                    # (pending still)
    first.truncate_to(1)                     # drops epoch 5: written at once, not deferred
    assert written == [first.epochs.path]
    _run_in_threads(epoch_jobs, lambda: len(written) >= 50)
    assert len(written) == 50                # the truncated one's pending write was dropped
    for i, log in enumerate(logs):
        lines = open(os.path.join(d, f"t-{i}", "leader-epoch-checkpoint")).read().split("\n")
        assert lines[:3] == ["0", "1", "4 0"]   # Kafka's format: version, count, "epoch offset"
    mgr.close()


def test_a_failed_dir_s_later_jobs_in_the_batch_are_skipped(tmp_path):
    """Issue 26: a batch's jobs after one that failed with EIO for dir A are not run for dir A
    (Kafka marks the dir offline and stops writing to it: each write to a failing disk may block
    for seconds), dir B's still are, and the failure reaches the loop (the broker's
    LogDirFailures.report) after the batch."""
    import errno
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    ran, reported = [], []
    on_loop = threading.current_thread()

    def failing():
        ran.append("a1")
        raise OSError(errno.EIO, "Input/output error", os.path.join(a, RP))

    writer = CheckpointWriter()
    writer.on_disk_error = lambda exc: (reported.append((exc, threading.current_thread() is on_loop)), True)[1]
    writer.submit("a1", failing, a)
    writer.submit("a2", lambda: ran.append("a2"), a)
    writer.submit("b1", lambda: ran.append("b1"), b)
    writer.submit("a3", lambda: ran.append("a3"), a)
    writer.submit("b2", lambda: ran.append("b2"), b)

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            with trio.fail_after(10):
                while not writer.idle or not reported:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert ran == ["a1", "b1", "b2"]          # dir B's jobs ran; dir A's after the failure did not
    assert [(exc.errno, on) for exc, on in reported] == [(errno.EIO, True)]   # reported on the loop
    assert writer.writes == 2

"""broker/storage/dir_failure.py with several log dirs (KIP-858): a failed dir is recorded and
announced (the heartbeat reports it at once), the broker halts only once every dir failed, or
when the failed one holds the metadata log (Kafka's ReplicaManager.handleLogDirFailure: "Shutdown
broker because the metadata log dir ... has failed"). Pure: no processes."""
from __future__ import annotations

import errno
import os

from broker.storage.dir_failure import LogDirFailures


def _enospc(path: str) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


def test_a_data_dir_failure_is_announced_and_the_broker_goes_on(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    f = LogDirFailures([a, b], metadata_dir=a)
    assert not f.changed.is_set()
    assert f.report(_enospc(os.path.join(b, "t-0", "00000000000000000000.log")))
    assert f.failed == {b: "No space left on device"} and f.changed.is_set()
    assert not f._all_failed.is_set() and f.halt_reason is None
    assert not f.report(ValueError("not the disk's"))
    # the same dir again: nothing new
    f.changed = type(f.changed)()
    assert f.report(_enospc(os.path.join(b, "t-1", "00000000000000000000.log")))
    assert not f.changed.is_set()


def test_the_metadata_log_dir_failing_halts_the_broker(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    f = LogDirFailures([a, b], metadata_dir=a)
    f.report(_enospc(os.path.join(a, "__cluster_metadata-0", "00000000000000000000.log")))
    assert f._all_failed.is_set()
    assert f.halt_reason == f"the metadata log dir {a} has failed (No space left on device)"


def test_a_failure_without_a_path_does_not_halt_for_the_metadata_dir(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    f = LogDirFailures([a, b], metadata_dir=a)
    f.report(OSError(errno.EIO, "Input/output error"))     # os.write errors carry no file name
    assert f.failed == {a: "Input/output error"} and not f._all_failed.is_set()


def test_an_offline_dir_the_controller_never_heard_of_shuts_the_broker_down(tmp_path):
    from broker.storage.dir_assignments import OfflineDirReports
    reports = OfflineDirReports(timeout_s=30)
    reports.noticed(["d1"], now=100)
    reports.noticed(["d1", "d2"], now=110)     # d1 stays noticed at 100
    assert reports.overdue(129) == []
    assert reports.overdue(130) == ["d1"]
    reports.answered(["d1"])                   # a heartbeat naming it was answered without error
    assert reports.overdue(135) == [] and reports.overdue(140) == ["d2"]
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    f = LogDirFailures([a, b], metadata_dir=a)
    f.report(_enospc(os.path.join(b, "t-0", "00000000000000000000.log")))
    f.halt("couldn't communicate offline log dir X with controllers within log.dir.failure.timeout.ms")
    assert f._all_failed.is_set() and f.halt_reason.startswith("couldn't communicate offline log dir X")


def test_making_a_log_fails_its_dir_whatever_the_os_error(tmp_path):
    # Kafka's LogManager.getOrCreateLog: any IOException making a log takes its dir offline
    # (a partition left without a log would otherwise answer NOT_LEADER_OR_FOLLOWER until a restart)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    f = LogDirFailures([a, b], metadata_dir=a)
    emfile = OSError(errno.EMFILE, os.strerror(errno.EMFILE), os.path.join(b, "t-0", "00000000000000000000.log"))
    assert not f.report(emfile) and f.failed == {}       # elsewhere (an append) it is not the disk's
    assert f.report(emfile, any_os_error=True)
    assert f.failed == {b: "Too many open files"} and f.halt_reason is None


def test_a_checkpoint_write_the_disk_refuses_fails_the_dir_that_holds_it(tmp_path, monkeypatch):
    # os.write and os.fsync errors carry no file name: the checkpoint writes add it, or a
    # background write's failure (a new leader epoch's checkpoint, by the writer's thread)
    # would fail the first log dir, whichever dir the file is in
    from broker.storage import checkpoints
    a, b = tmp_path / "a", tmp_path / "b"
    (b / "t-0").mkdir(parents=True)
    a.mkdir()
    path = str(b / "t-0" / "leader-epoch-checkpoint")

    def refuse(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(checkpoints.os, "write", refuse)
    for write in (checkpoints.write_in_place, checkpoints.atomic_write):
        f = LogDirFailures([str(a), str(b)], metadata_dir=str(a))
        try:
            write(path, b"0\n1\n0 0\n", False)
        except OSError as exc:
            assert f.report(exc)
        assert f.failed == {str(b): "No space left on device"}, write


def test_an_fsync_the_disk_refuses_fails_the_dir_that_holds_the_file(tmp_path, monkeypatch):
    # the deferred fsyncs of a new partition's files and directory (the checkpoint writer's
    # thread) carry the name the same way
    from broker.storage import checkpoints
    a, b = tmp_path / "a", tmp_path / "b"
    (b / "t-0").mkdir(parents=True)
    a.mkdir()
    (b / "t-0" / "partition.metadata").write_bytes(b"version: 0\n")

    def refuse(fd):
        raise OSError(errno.EIO, os.strerror(errno.EIO))
    monkeypatch.setattr(checkpoints.os, "fsync", refuse)
    for sync in (lambda: checkpoints.fsync_paths([str(b / "t-0" / "partition.metadata")]),
                 lambda: checkpoints.fsync_dir(str(b / "t-0"))):
        f = LogDirFailures([str(a), str(b)], metadata_dir=str(a))
        try:
            sync()
        except OSError as exc:
            assert f.report(exc)
        assert f.failed == {str(b): os.strerror(errno.EIO)}

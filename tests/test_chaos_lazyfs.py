"""The power-loss file system (tools/chaos/lazyfs.py) on a real FUSE mount:
what was fsynced survives a power loss, what was not is gone (file data,
and directory entries whose directory was not fsynced), an orderly unmount
keeps everything, and a torn write leaves a prefix of itself. Skipped (not
passed) without /dev/fuse, root or libfuse3."""
from __future__ import annotations

import mmap
import os

import pytest

from tools.chaos.lazyfs import LazyMount, fuse_available

ok, why = fuse_available()
pytestmark = pytest.mark.skipif(not ok, reason=f"no FUSE here: {why}")


@pytest.fixture
def disk(tmp_path):
    m = LazyMount(str(tmp_path / "disk"), str(tmp_path / "mnt"), seed=1)
    m.start()
    try:
        yield m
    finally:
        if m.proc is not None:
            m.stop()


def _write(path, data, *, sync=False, mode="wb"):
    with open(path, mode) as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _reboot(m):
    """Power loss, then the disk mounted again: what a restarted node would find."""
    loss = m.power_loss()
    m.start()
    return loss


def test_a_write_without_fsync_is_gone_after_the_loss_and_one_with_fsync_stays(disk):
    mnt = disk.mountpoint
    _write(f"{mnt}/durable", b"A" * 10000, sync=True)
    _fsync_dir(mnt)
    _write(f"{mnt}/durable", b"B" * 300, mode="ab")            # appended, never synced
    _write(f"{mnt}/lost", b"never synced")                      # new file, never synced
    assert os.path.getsize(f"{mnt}/durable") == 10300           # (the page cache has it all)
    loss = _reboot(disk)
    assert sorted(os.listdir(mnt)) == ["durable"]
    with open(f"{mnt}/durable", "rb") as f:
        assert f.read() == b"A" * 10000
    assert loss["bytes_lost"] >= 300 and loss["entries_undone"] == 1


def test_an_overwrite_of_synced_bytes_is_undone_and_fdatasync_keeps_data(disk):
    mnt = disk.mountpoint
    _write(f"{mnt}/f", b"0123456789" * 1000, sync=True)
    _fsync_dir(mnt)
    with open(f"{mnt}/f", "r+b") as f:
        f.seek(5000)
        f.write(b"X" * 5000)           # overwrites the synced tail, and grows the file
        f.write(b"Y" * 100)
    with open(f"{mnt}/g", "wb") as f:
        f.write(b"kept by fdatasync")
        f.flush()
        os.fdatasync(f.fileno())
    _fsync_dir(mnt)
    _reboot(disk)
    with open(f"{mnt}/f", "rb") as f:
        assert f.read() == b"0123456789" * 1000
    with open(f"{mnt}/g", "rb") as f:
        assert f.read() == b"kept by fdatasync"


def test_a_new_file_fsynced_but_not_its_directory_is_gone(disk):
    mnt = disk.mountpoint
    _write(f"{mnt}/orphan", b"data synced, entry not", sync=True)
    _reboot(disk)
    assert os.listdir(mnt) == []


def test_rename_without_a_directory_fsync_is_undone_with_one_it_stays(disk):
    mnt = disk.mountpoint
    _write(f"{mnt}/cp", b"old contents", sync=True)
    _fsync_dir(mnt)
    # the checkpoint idiom: write a .tmp, fsync it, rename over the old file
    _write(f"{mnt}/cp.tmp", b"new contents", sync=True)
    os.replace(f"{mnt}/cp.tmp", f"{mnt}/cp")
    _reboot(disk)
    with open(f"{mnt}/cp", "rb") as f:
        assert f.read() == b"old contents"                     # the rename was undone
    assert sorted(os.listdir(mnt)) == ["cp"]                   # (and the .tmp never existed)
    _write(f"{mnt}/cp.tmp", b"new contents", sync=True)
    os.replace(f"{mnt}/cp.tmp", f"{mnt}/cp")
    _fsync_dir(mnt)
    _reboot(disk)
    with open(f"{mnt}/cp", "rb") as f:
        assert f.read() == b"new contents"
    assert sorted(os.listdir(mnt)) == ["cp"]


def test_unlink_and_mkdir_without_a_directory_fsync_are_undone(disk):
    mnt = disk.mountpoint
    _write(f"{mnt}/keep", b"k", sync=True)
    _fsync_dir(mnt)
    os.unlink(f"{mnt}/keep")
    os.mkdir(f"{mnt}/d")
    _write(f"{mnt}/d/x", b"x", sync=True)
    _fsync_dir(f"{mnt}/d")                                      # d's entry in mnt is still volatile
    _reboot(disk)
    assert sorted(os.listdir(mnt)) == ["keep"]


def test_an_orderly_unmount_keeps_everything(disk):
    mnt = disk.mountpoint
    _write(f"{mnt}/f", b"unsynced but cleanly unmounted")
    disk.stop()
    disk.start()
    with open(f"{mnt}/f", "rb") as f:
        assert f.read() == b"unsynced but cleanly unmounted"


def test_a_shared_mapping_written_without_msync_is_lost(disk):
    # the broker's offset indexes are preallocated and written through mmap
    mnt = disk.mountpoint
    for name, sync in (("synced.index", True), ("lost.index", False)):
        fd = os.open(f"{mnt}/{name}", os.O_RDWR | os.O_CREAT)
        os.ftruncate(fd, 4096)
        os.fsync(fd)
        mm = mmap.mmap(fd, 4096)
        mm[0:8] = b"INDEXED!"
        if sync:
            mm.flush()
            os.fsync(fd)
        mm.close()
        os.close(fd)
    _fsync_dir(mnt)
    _reboot(disk)
    with open(f"{mnt}/synced.index", "rb") as f:
        assert f.read(8) == b"INDEXED!"
    with open(f"{mnt}/lost.index", "rb") as f:
        assert f.read(8) == b"\0" * 8


def test_a_torn_write_leaves_a_prefix_of_itself(tmp_path):
    m = LazyMount(str(tmp_path / "disk"), str(tmp_path / "mnt"), tear=True, seed=3)
    m.start()
    mnt = m.mountpoint
    try:
        torn = 0
        for i in range(8):
            _write(f"{mnt}/f{i}", b"S" * 1000, sync=True)
        _fsync_dir(mnt)
        for i in range(8):
            _write(f"{mnt}/f{i}", b"a" * 500, mode="ab")
            _write(f"{mnt}/f{i}", b"b" * 4000, mode="ab")      # the last write: maybe torn
        loss = _reboot(m)
        for i in range(8):
            with open(f"{mnt}/f{i}", "rb") as f:
                data = f.read()
            if data == b"S" * 1000:
                continue                                        # all unsynced data dropped
            torn += 1
            assert data.startswith(b"S" * 1000 + b"a" * 500), data[:1600]
            assert 1500 <= len(data) < 5500 and data[1500:] == b"b" * (len(data) - 1500)
        assert torn == loss["files_torn"] and 0 < torn < 8, loss   # (seeded: both kinds occur)
    finally:
        m.stop()

"""A FUSE file system that forgets what was never fsynced: the power-loss
nemesis's disk (docs/chaos.md, "Power loss").

kill -9 keeps the page cache, so a killed process's unsynced writes still
reach the disk; a power cut or a kernel crash drops them. This file system is
a pass-through over a real directory (the *backing* directory) that keeps,
for each file written since its last fsync/fdatasync, what is needed to undo
those writes, and for each directory-entry operation (create, mkdir, unlink,
rmdir, rename) since the last fsync of the directory that holds the new entry,
what is needed to undo it. Unmounted cleanly, everything stays (an orderly
shutdown writes the page cache out). Unmounted after ``power_loss()`` was
asked for, it undoes all of that in the backing directory before it exits:
the directory then holds only what a disk would hold after the cut.

The model, as LazyFS (Jepsen's FUSE file system) has it:

* file data: what was written since the file's last fsync or fdatasync is
  lost; with ``tear``, for each such file at random, either all of it is
  lost, or everything up to its last write survives and that last write is
  cut at a random byte (a write torn by the cut);
* a new, renamed or removed directory entry survives only once the
  directory holding it (for a rename: the target's directory) was fsynced
  after the operation; otherwise the operation is undone (a removed file
  comes back, a renamed one returns to its old name, a created one vanishes
  with what it held). Like a journalling file system, a rename is undone or
  kept whole, never half.

The backing directory is the page cache (reads see every write); the undo
data lives in this process's memory, so the file system process must live
as long as the mount (``LazyMount`` runs it as a child process and asks for
the loss over a marker file read once the mount is gone).

Run alone: ``python3 -m tools.chaos.lazyfs BACKING MOUNTPOINT [--tear] [--seed N]``
(root, /dev/fuse, libfuse3: the ``fuse3`` package; binding: mfusepy).
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import uuid

PAGE = 4096


def _parent(path: str) -> str:
    return os.path.dirname(path.rstrip("/")) or "/"


class FileUndo:
    """How to bring one file back to its state at its last fsync: its size
    then, the old contents of the pages overwritten since (page -> bytes),
    and its last write (offset, length, size before, old bytes under it)."""

    def __init__(self, fd: int, size: int, path: str):
        self.fd = fd                      # our own descriptor: follows renames and unlinks
        self.path = path                  # (its name when first written: for the report)
        self.dirty = 0                    # bytes written since the last fsync
        self.durable_size = size
        self.saved: dict[int, bytes] = {}
        self.last: tuple[int, int, int, bytes] | None = None
        self.writes = 0

    def save_range(self, start: int, end: int) -> None:
        """Keep the synced contents of [start, end) before they change."""
        end = min(end, self.durable_size)
        if start >= end:
            return
        for page in range(start // PAGE, (end - 1) // PAGE + 1):
            if page not in self.saved:
                self.saved[page] = os.pread(self.fd, PAGE, page * PAGE)

    def clean(self) -> bool:
        return not self.saved and self.writes == 0 and os.fstat(self.fd).st_size == self.durable_size

    def drop(self) -> None:
        """Power loss: back to the last fsync."""
        for page, old in self.saved.items():
            os.pwrite(self.fd, old, page * PAGE)
        os.ftruncate(self.fd, self.durable_size)

    def tear(self, rng: random.Random) -> int:
        """Power loss mid-write: all but the last write survive, that one up
        to a random byte. Returns how many of its bytes survived."""
        off, length, size_before, old = self.last
        keep = rng.randrange(0, length) if length else 0
        cut = off + keep
        if cut < off + len(old):          # overwritten bytes past the cut get their old value
            os.pwrite(self.fd, old[keep:], cut)
        if off + length > size_before:    # the write grew the file: it ends at the cut now
            os.ftruncate(self.fd, max(size_before, cut))
        return keep


class EntryUndo:
    """One directory-entry operation not yet made durable by a fsync of
    ``dir`` (the directory of the new, or removed, entry)."""

    def __init__(self, kind: str, dir: str, path: str, old: str | None = None,
                 trash: str | None = None):
        self.kind, self.dir, self.path, self.old, self.trash = kind, dir, path, old, trash


class LazyFS:
    """The FUSE operations (mfusepy's high-level API): paths are relative to
    the mount ("/a/b"), every call acts on the same path under ``root``."""

    use_ns = True

    def __init__(self, root: str, trash: str):
        self.root = os.path.realpath(root)
        self.trash = trash
        os.makedirs(trash, exist_ok=True)
        self._mutex = threading.RLock()     # (libfuse calls from several threads)
        self.files: dict[int, FileUndo] = {}     # backing inode -> undo
        self.entries: list[EntryUndo] = []
        self.stats = {"writes": 0, "fsyncs": 0, "dir_fsyncs": 0, "entry_ops": 0}

    def _full(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _undo_of(self, fh: int, path: str) -> FileUndo:
        st = os.fstat(fh)
        u = self.files.get(st.st_ino)
        if u is None:
            u = self.files[st.st_ino] = FileUndo(os.dup(fh), st.st_size, path)
        return u

    def _to_trash(self, full: str) -> str:
        dest = os.path.join(self.trash, uuid.uuid4().hex)
        os.rename(full, dest)
        return dest

    # ------------------------------------------------------------ reading
    def getattr(self, path, fh=None):
        st = os.fstat(fh) if fh is not None else os.lstat(self._full(path))
        out = {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size",
                                           "st_ino", "st_blocks")}
        out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return out

    def access(self, path, amode):
        if not os.access(self._full(path), amode):
            raise OSError(errno.EACCES, "access")
        return 0

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._full(path))

    def readlink(self, path):
        return os.readlink(self._full(path))

    def statfs(self, path):
        sv = os.statvfs(self._full(path))
        return {k: getattr(sv, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                            "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

    def open(self, path, flags):
        full = self._full(path)
        # read-write always (a page written through a read-only mapping's file handle
        # still goes through us); O_APPEND offsets come from the kernel
        fl = (flags & ~(os.O_WRONLY | os.O_RDONLY | os.O_APPEND | os.O_TRUNC)) | os.O_RDWR
        fd = os.open(full, fl)
        if flags & os.O_TRUNC:
            self.truncate(path, 0, fd)
        return fd

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def release(self, path, fh):
        os.close(fh)
        return 0

    def flush(self, path, fh):
        return 0

    def opendir(self, path):
        return 0

    def releasedir(self, path, fh):
        return 0

    # ------------------------------------------------------------ file data
    def write(self, path, data, offset, fh):
        with self._mutex:
            u = self._undo_of(fh, path)
            size = os.fstat(fh).st_size
            u.save_range(offset, offset + len(data))
            u.last = (offset, len(data), size, os.pread(fh, max(0, min(len(data), size - offset)), offset))
            u.writes += 1
            u.dirty += len(data)
            self.stats["writes"] += 1
            return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        with self._mutex:
            own = fh is None
            if own:
                fh = os.open(self._full(path), os.O_RDWR)
            try:
                u = self._undo_of(fh, path)
                u.save_range(length, u.durable_size)
                u.last = None    # (a truncation is not a write to tear)
                u.writes += 1
                os.ftruncate(fh, length)
            finally:
                if own:
                    os.close(fh)
        return 0

    def fsync(self, path, datasync, fh):
        with self._mutex:
            self.stats["fsyncs"] += 1
            st = os.fstat(fh)
            u = self.files.pop(st.st_ino, None)
            if u is not None:            # all of it is on the disk now: nothing to undo
                os.close(u.fd)
        return 0

    # ------------------------------------------------------------ directory entries
    def create(self, path, mode, fi=None):
        with self._mutex:
            full = self._full(path)
            existed = os.path.lexists(full)
            fd = os.open(full, os.O_RDWR | os.O_CREAT, mode)
            if existed:
                if (fi or 0) & os.O_TRUNC:
                    self.truncate(path, 0, fd)
            else:
                self._entry(EntryUndo("create", _parent(path), path))
                self._undo_of(fd, path)
            return fd

    def mkdir(self, path, mode):
        with self._mutex:
            os.mkdir(self._full(path), mode)
            self._entry(EntryUndo("create", _parent(path), path))
        return 0

    def unlink(self, path):
        with self._mutex:
            trash = self._to_trash(self._full(path))
            self._entry(EntryUndo("remove", _parent(path), path, trash=trash))
        return 0

    rmdir = unlink

    def rename(self, old, new):
        with self._mutex:
            fnew = self._full(new)
            replaced = self._to_trash(fnew) if os.path.lexists(fnew) else None
            os.rename(self._full(old), fnew)
            self._entry(EntryUndo("rename", _parent(new), new, old=old, trash=replaced))
        return 0

    def chmod(self, path, mode):
        os.chmod(self._full(path), mode)
        return 0

    def chown(self, path, uid, gid):
        os.chown(self._full(path), uid, gid)
        return 0

    def utimens(self, path, times=None):
        os.utime(self._full(path), ns=times) if times else os.utime(self._full(path))
        return 0

    def fsyncdir(self, path, datasync, fh):
        with self._mutex:
            self.stats["dir_fsyncs"] += 1
            keep = []
            for e in self.entries:
                if e.dir == path:
                    if e.trash:          # the removal or replacement is durable: gone for good
                        _remove(e.trash)
                else:
                    keep.append(e)
            self.entries = keep
        return 0

    def _entry(self, e: EntryUndo) -> None:
        self.stats["entry_ops"] += 1
        self.entries.append(e)

    # ------------------------------------------------------------ the cut
    def lose_power(self, tear: bool, rng: random.Random) -> dict:
        """Undo everything not fsynced, in the backing directory."""
        with self._mutex:
            # bytes_lost: of the bytes written since the files' last fsyncs, those gone
            # (a torn write keeps some); by_file: the biggest losses, by first-written name
            out = {"files_dropped": 0, "files_torn": 0, "bytes_lost": 0, "entries_undone": 0}
            by_file = []
            for u in self.files.values():
                if tear and u.last is not None and rng.random() < 0.5:
                    lost = u.last[1] - u.tear(rng)
                    out["files_torn"] += 1
                else:
                    u.drop()
                    lost = u.dirty
                    out["files_dropped"] += 1
                out["bytes_lost"] += lost
                if lost:
                    by_file.append((lost, u.path))
                os.close(u.fd)
            out["by_file"] = [f"{p} {n}" for n, p in sorted(by_file, reverse=True)[:8]]
            self.files.clear()
            for e in reversed(self.entries):
                try:
                    if e.kind == "create":
                        _remove(self._full(e.path))
                    elif e.kind == "remove":
                        os.rename(e.trash, self._full(e.path))
                    elif e.kind == "rename":
                        os.rename(self._full(e.path), self._full(e.old))
                        if e.trash:
                            os.rename(e.trash, self._full(e.path))
                    out["entries_undone"] += 1
                    if len(out.setdefault("entries", [])) < 8:
                        out["entries"].append(f"{e.kind} {e.path}")
                except OSError:
                    pass   # a later durable operation moved it on: that one stands
            self.entries.clear()
            return out

    def settle(self) -> None:
        """Clean unmount: everything stays, the removed entries go for good."""
        with self._mutex:
            for u in self.files.values():
                os.close(u.fd)
            self.files.clear()
            for e in self.entries:
                if e.trash:
                    _remove(e.trash)
            self.entries.clear()


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)


def fuse_available() -> tuple[bool, str]:
    """Can a LazyFS be mounted here (what the tests skip on, saying why)?"""
    if not os.path.exists("/dev/fuse"):
        return False, "no /dev/fuse"
    if os.geteuid() != 0:
        return False, "mounting FUSE file systems here needs root"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as e:
        return False, f"mfusepy/libfuse3 unavailable: {e}"
    return True, ""


class LazyMount:
    """One LazyFS mount, run as a child process: ``start()``, ``power_loss()``
    (nothing may have the mount open: kill its users first), ``stop()``."""

    def __init__(self, backing: str, mountpoint: str, *, tear: bool = False, seed: int = 0,
                 log_path: str | None = None):
        self.backing, self.mountpoint, self.tear, self.seed = backing, mountpoint, tear, seed
        self.marker = backing.rstrip("/") + ".lazyfs-loss"
        self.log_path = log_path or backing.rstrip("/") + ".lazyfs.log"
        self.proc: subprocess.Popen | None = None
        self.losses: list[dict] = []
        self.boots = 0

    def start(self, timeout: float = 20.0) -> None:
        os.makedirs(self.backing, exist_ok=True)
        os.makedirs(self.mountpoint, exist_ok=True)
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tools.chaos.lazyfs", self.backing, self.mountpoint,
             "--seed", str(self.seed + self.boots), *(["--tear"] if self.tear else [])],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        self.boots += 1
        deadline = time.monotonic() + timeout
        while not os.path.ismount(self.mountpoint):
            if self.proc.poll() is not None:
                raise RuntimeError(f"lazyfs exited with {self.proc.returncode} before mounting "
                                   f"{self.mountpoint}; see {self.log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"lazyfs did not mount {self.mountpoint} in {timeout}s; see {self.log_path}")
            time.sleep(0.05)

    def _unmount(self, timeout: float = 30.0) -> None:
        if self.proc is None:
            return
        for args in (["umount", self.mountpoint], ["umount", "-l", self.mountpoint]):
            if subprocess.run(args, capture_output=True).returncode == 0:
                break
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"lazyfs on {self.mountpoint} did not exit after its unmount")
        finally:
            self.proc = None

    def power_loss(self) -> dict:
        """The cut: unmount, undoing every unsynced write and directory
        entry in the backing directory. Returns what was undone."""
        with open(self.marker, "w") as f:
            f.write("loss")
        self._unmount()
        with open(self.log_path) as f:
            lines = [ln for ln in f if ln.startswith("lazyfs-loss ")]
        loss = json.loads(lines[-1].split(" ", 1)[1]) if lines else {}
        self.losses.append(loss)
        return loss

    def stop(self) -> None:
        """Orderly unmount: everything written stays."""
        if os.path.exists(self.marker):
            os.unlink(self.marker)
        self._unmount()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m tools.chaos.lazyfs", description=__doc__.split("\n\n")[0])
    ap.add_argument("backing")
    ap.add_argument("mountpoint")
    ap.add_argument("--tear", action="store_true", help="cut the last unsynced write of some files at a random byte")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import mfusepy
    backing = os.path.realpath(args.backing)
    marker = backing + ".lazyfs-loss"
    if os.path.exists(marker):
        os.unlink(marker)
    fs = LazyFS(backing, backing + ".lazyfs-trash")
    # hard_remove: unlink an open file at once (else libfuse renames it to
    # .fuse_hidden*, a rename the broker never asked for)
    mfusepy.FUSE(fs, args.mountpoint, foreground=True, hard_remove=True, fsname="lazyfs")
    if os.path.exists(marker):
        loss = fs.lose_power(args.tear, random.Random(args.seed))
        os.unlink(marker)
        print("lazyfs-loss " + json.dumps({**loss, **fs.stats}), flush=True)
    else:
        fs.settle()
        print("lazyfs-clean " + json.dumps(fs.stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

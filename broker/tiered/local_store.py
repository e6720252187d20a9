"""The local-directory object store: tiered storage's embedded default, on plain files.

An object is the file <root>/<key>. A put writes a temporary file under <root>/.kproto-tmp
(the same file system, so the rename is atomic), fsyncs it, renames it into place and fsyncs the
folder: a reader or a crash sees the old object, the new one or none, never half of one. Temporary
files left by a crash are removed when the store opens. Blocking calls run in trio's worker
threads; nothing here needs a network library.
"""
from __future__ import annotations

import errno
import os
import uuid

import trio

from broker.config.types import StartupError
from broker.tiered.store_types import ObjectNotFound, ObjectStoreError, check_key, check_prefix

TMP_DIR = ".kproto-tmp"
_COPY_CHUNK = 1024 * 1024
# file operations of one store at once, in threads of its own (a slow disk must not take every
# worker thread trio lends the rest of the broker)
MAX_THREADS = 8


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_prefix(src: int, dst: int, length: int) -> int:
    """Copy `length` bytes from the start of fd `src` to fd `dst` in bounded chunks (in the kernel
    where it can); returns the bytes copied (fewer when `src` is shorter)."""
    done = 0
    in_kernel = hasattr(os, "copy_file_range")
    while done < length:
        want = min(_COPY_CHUNK * 8, length - done)
        if in_kernel:
            try:
                n = os.copy_file_range(src, dst, want, done, done)
            except OSError as e:
                if e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                in_kernel = False
                continue
        else:
            chunk = os.pread(src, min(want, _COPY_CHUNK), done)
            n = len(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.pwrite(dst, view, done + n - len(view)):]
        if n == 0:
            break
        done += n
    return done


class LocalStore:
    """Objects as files below one directory (created when missing)."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.name = "file://" + self.root
        self._limiter: trio.CapacityLimiter | None = None
        self._tmp = os.path.join(self.root, TMP_DIR)
        try:
            os.makedirs(self._tmp, exist_ok=True)
            for leftover in os.listdir(self._tmp):   # a put interrupted by a crash
                os.unlink(os.path.join(self._tmp, leftover))
        except OSError as e:
            raise StartupError(f"Cannot use {self.root} as the remote storage directory: "
                               f"{e.strerror or e}") from None

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *check_key(key).split("/"))

    async def _run(self, fn, *args):
        try:
            if self._limiter is None:
                self._limiter = trio.CapacityLimiter(MAX_THREADS)
            return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=True, limiter=self._limiter)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:   # no such object
            raise ObjectNotFound(f"{self.name}: {e.filename or e}") from e
        except OSError as e:
            raise ObjectStoreError(f"{self.name}: {e}") from e

    def _commit(self, key: str, fill) -> None:
        """Write a temporary file with `fill(fd)`, then move it to the key's path."""
        final = self._path(key)
        tmp = os.path.join(self._tmp, uuid.uuid4().hex)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                fill(fd)
                os.fsync(fd)
            finally:
                os.close(fd)
            folder = os.path.dirname(final)
            os.makedirs(folder, exist_ok=True)
            os.replace(tmp, final)
            _fsync_dir(folder)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    async def put(self, key: str, data: bytes) -> None:
        def fill(fd):
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        await self._run(self._commit, key, fill)

    async def put_file(self, key: str, path: str, length: int | None = None) -> None:
        def fill(fd):
            try:
                src = os.open(path, os.O_RDONLY)
            except OSError as e:   # the file to upload, not the object, is missing
                raise ObjectStoreError(f"cannot read {path} to upload: {e.strerror}") from e
            try:
                want = os.fstat(src).st_size if length is None else length
                copied = _copy_prefix(src, fd, want)
            finally:
                os.close(src)
            if copied != want:
                raise OSError(errno.EIO, f"{path} has {copied} bytes, fewer than the {want} to upload")
        await self._run(self._commit, key, fill)

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        if start < 0 or (end is not None and end < start):
            raise ValueError(f"invalid byte range [{start}, {end})")

        def read():
            with open(self._path(key), "rb") as f:
                f.seek(start)
                return f.read() if end is None else f.read(end - start)
        return await self._run(read)

    async def size(self, key: str) -> int:
        return await self._run(lambda: os.stat(self._path(key)).st_size)

    async def delete(self, keys: list[str]) -> None:
        paths = [self._path(k) for k in keys]

        def remove():
            folders = set()
            for p in paths:
                try:
                    os.unlink(p)
                    folders.add(os.path.dirname(p))
                except FileNotFoundError:
                    pass
            for folder in folders:
                _fsync_dir(folder)
        await self._run(remove)

    async def list(self, prefix: str) -> list[str]:
        prefix = check_prefix(prefix)
        top = os.path.join(self.root, *prefix.split("/")) if prefix else self.root

        def walk():
            found = []
            for dirpath, dirnames, filenames in os.walk(top):
                if dirpath == self.root and TMP_DIR in dirnames:
                    dirnames.remove(TMP_DIR)
                rel = os.path.relpath(dirpath, self.root)
                base = "" if rel == "." else rel.replace(os.sep, "/") + "/"
                found += [base + f for f in filenames]
            return sorted(found)
        return await self._run(walk)

    async def aclose(self) -> None:
        pass


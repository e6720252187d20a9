"""A local-directory object store behind the ObjectStore interface, until the tiered-store
branch's `object_store.py` lands (then this file goes). Objects are files under `root`."""
from __future__ import annotations

import os
from typing import Mapping

import trio


class ObjectStoreError(Exception):
    """A retriable failure of the store."""


class ObjectNotFound(ObjectStoreError):
    pass


class LocalStore:
    name = "local"

    def __init__(self, root: str):
        self.root = os.path.abspath(root)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/"))

    async def put(self, key: str, data: bytes) -> None:
        path = self._path(key)

        def write():
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path + ".tmp", "wb") as f:
                    f.write(data)
                os.replace(path + ".tmp", path)
            except OSError as exc:
                raise ObjectStoreError(f"put {key}: {exc}") from exc
        await trio.to_thread.run_sync(write)

    async def put_file(self, key: str, path: str, length: int | None = None) -> None:
        with open(path, "rb") as f:
            data = f.read() if length is None else f.read(length)
        await self.put(key, data)

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        path = self._path(key)

        def read():
            try:
                with open(path, "rb") as f:
                    f.seek(start)
                    return f.read() if end is None else f.read(max(0, end - start))
            except FileNotFoundError:
                raise ObjectNotFound(key) from None
            except OSError as exc:
                raise ObjectStoreError(f"get {key}: {exc}") from exc
        return await trio.to_thread.run_sync(read)

    async def size(self, key: str) -> int:
        try:
            return os.path.getsize(self._path(key))
        except FileNotFoundError:
            raise ObjectNotFound(key) from None

    async def delete(self, keys: list[str]) -> None:
        for key in keys:
            try:
                os.unlink(self._path(key))
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise ObjectStoreError(f"delete {key}: {exc}") from exc

    async def list(self, prefix: str) -> list[str]:
        if os.path.exists(self.root) and not os.path.isdir(self.root):
            raise ObjectStoreError(f"list {prefix}: {self.root} is not a directory")
        out = []
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if name.endswith(".tmp"):
                    continue
                key = os.path.relpath(os.path.join(dirpath, name), self.root).replace(os.sep, "/")
                if key.startswith(prefix):
                    out.append(key)
        return sorted(out)

    async def aclose(self) -> None:
        pass


def open_store(broker_config: Mapping[str, str]) -> LocalStore:
    root = broker_config.get("rsm.config.dir")
    if not root:
        first = (broker_config.get("log.dirs") or broker_config.get("log.dir") or ".").split(",")[0].strip()
        root = os.path.join(os.path.dirname(os.path.abspath(first)), "remote-storage")
    return LocalStore(root)

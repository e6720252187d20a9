"""The object-store interface of tiered storage: its errors, the `ObjectStore` protocol, key rules
and the `rsm.config.` settings, shared by the stores (local_store.py, cloud_store.py) and
object_store.py, which chooses one (and re-exports these names: import them from there).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from broker.config.types import StartupError

DEFAULT_PREFIX = "rsm.config."


class ObjectStoreError(Exception):
    """Any failure talking to the store (unreachable, timed out, denied, disk full): retriable."""


class ObjectNotFound(ObjectStoreError):
    """The key names no object."""


@runtime_checkable
class ObjectStore(Protocol):
    """An object store seen from trio: every method is async and runs its blocking work off the
    event loop; a cancelled call returns at once (the abandoned work finishes in its thread)."""

    name: str   # "file:///var/kproto/remote" or "s3://bucket/prefix": for logs and metrics

    async def put(self, key: str, data: bytes) -> None:
        """Write the whole object atomically: a reader sees the old object, the new one or none."""

    async def put_file(self, key: str, path: str, length: int | None = None) -> None:
        """Upload the first `length` bytes (all when None) of a local file, streaming (multipart
        when large): a 1 GiB segment is never held in memory."""

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes [start, end) of the object, fewer when it ends before `end`."""

    async def size(self, key: str) -> int:
        """The object's length in bytes."""

    async def delete(self, keys: list[str]) -> None:
        """Delete the objects; missing keys are not an error."""

    async def list(self, prefix: str) -> list[str]:
        """Every key under `prefix` (a '/'-separated path prefix), sorted."""

    async def aclose(self) -> None:
        """Release the store's resources."""


def check_key(key: str) -> str:
    """A key is a relative '/'-separated path without empty, '.' or '..' parts (it must not
    leave the store's root); anything else is the caller's bug."""
    parts = key.split("/")
    if not key or any(p in ("", ".", "..") for p in parts) or "\\" in key or "\0" in key:
        raise ValueError(f"invalid object key {key!r}")
    return key


def check_prefix(prefix: str) -> str:
    """A list prefix: '' (everything) or a key, with or without a trailing '/'."""
    stripped = prefix.rstrip("/")
    return "" if not stripped else check_key(stripped)


# -- configuration -------------------------------------------------------------------------------

STORE_KINDS = ("local", "s3", "gs", "azure")

# rsm.config.<key> -> default (None: no default). The cloud keys are read by cloud_store.py.
STORE_KEYS: dict[str, str | None] = {
    "store": "local",
    # local
    "dir": None,                           # default: remote-storage beside the first log dir
    # s3 / gs / azure
    "bucket": None,                        # the S3/GCS bucket or the Azure container
    "prefix": "",                          # a folder inside the bucket
    "account": None,                       # azure: the storage account (else AZURE_STORAGE_ACCOUNT_NAME)
    "endpoint": None,                      # S3-compatible servers: MinIO, Ceph, moto
    "region": None,
    "path.style": None,                    # true: http://host/bucket/key; false: http://bucket.host/key
                                           # (default: true with an endpoint, false for AWS)
    "access.key.id": None,                 # else the standard AWS chain
    "secret.access.key": None,
    "session.token": None,
    "allow.http": "false",                 # a plain-http endpoint
    "connect.timeout.ms": "5000",
    "request.timeout.ms": "30000",         # one HTTP request, a multipart part included
    "retries": "3",                        # the client's own retries of a failed request
    "retry.timeout.ms": "30000",           # ... and the time they may take in all
    "multipart.part.size.bytes": str(8 * 1024 * 1024),
    "multipart.concurrency": "4",
}


class StoreSettings:
    """The `rsm.config.` keys of one broker config, checked: `get(key)` is the raw string (or
    the default), `int_(key)`/`bool_(key)` parse it, and any failure names the full key."""

    def __init__(self, prefix: str, values: Mapping[str, str], log_dirs: list[str]):
        self.prefix = prefix
        self.values = dict(values)
        self.log_dirs = log_dirs
        for key in self.values:
            if key not in STORE_KEYS:
                raise StartupError(f"Unknown tiered storage setting {prefix}{key} (known: "
                                   + ", ".join(prefix + k for k in STORE_KEYS) + ")")

    def full(self, key: str) -> str:
        return self.prefix + key

    def get(self, key: str) -> str | None:
        value = self.values.get(key)
        return STORE_KEYS[key] if value is None or value.strip() == "" else value.strip()

    def require(self, key: str, why: str) -> str:
        value = self.get(key)
        if value is None:
            raise StartupError(f"{self.full(key)} must be set {why}")
        return value

    def int_(self, key: str, minimum: int = 0) -> int:
        raw = self.get(key)
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise StartupError(f"Invalid value {raw} for configuration {self.full(key)}: "
                               "not a number") from None
        if value < minimum:
            raise StartupError(f"Invalid value {raw} for configuration {self.full(key)}: "
                               f"must be at least {minimum}")
        return value

    def bool_(self, key: str) -> bool:
        raw = (self.get(key) or "").lower()
        if raw not in ("true", "false"):
            raise StartupError(f"Invalid value {self.get(key)} for configuration {self.full(key)}: "
                               "expected true or false")
        return raw == "true"


"""Cloud object stores for tiered storage: S3 and S3-compatible servers, GCS, Azure, via obstore.

obstore (Python bindings of the Rust object_store crate) speaks the HTTP APIs, signs requests,
retries with backoff, uploads large objects in parts and finds credentials (for S3: explicit keys,
the AWS_* environment, web identity, container and instance metadata; `~/.aws` profiles through
boto3 when it is installed). Its blocking calls run in trio's worker threads; every failure comes
out as ObjectStoreError (ObjectNotFound for a missing key), bounded by the configured connect and
request timeouts and retry budget.
"""
from __future__ import annotations

import os
from datetime import timedelta

import trio

from broker.config.types import StartupError
from broker.tiered.store_types import (
    ObjectNotFound, ObjectStoreError, StoreSettings, check_key, check_prefix)

# bounded reads of a file being uploaded in parts (each part buffered by obstore)
_READ_CHUNK = 1024 * 1024
# requests of one store in flight at once (threads of its own: copies of many partitions must not
# take every worker thread trio lends the rest of the broker)
MAX_THREADS = 16


def _first_line(e: BaseException) -> str:
    """obstore's messages go on with a multi-line debug dump: the first line says it."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _ms(settings: StoreSettings, key: str, minimum: int = 1) -> timedelta:
    return timedelta(milliseconds=settings.int_(key, minimum))


def _client_options(settings: StoreSettings) -> dict:
    return {
        "connect_timeout": _ms(settings, "connect.timeout.ms"),
        "timeout": _ms(settings, "request.timeout.ms"),
        "allow_http": settings.bool_("allow.http"),
    }


def _retry_config(settings: StoreSettings) -> dict:
    return {
        "max_retries": settings.int_("retries", 0),
        "retry_timeout": _ms(settings, "retry.timeout.ms"),
        "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=5),
                    "base": 2},
    }


def _aws_profile_provider():
    """boto3's credential chain (profiles in ~/.aws) when boto3 is installed and finds credentials."""
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return None          # obstore reads the environment itself
    files = [os.environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"),
             os.environ.get("AWS_CONFIG_FILE", "~/.aws/config")]
    if not os.environ.get("AWS_PROFILE") and not any(os.path.exists(os.path.expanduser(f)) for f in files):
        return None          # instance or container metadata: obstore asks for them itself
    try:
        import boto3
        from obstore.auth.boto3 import Boto3CredentialProvider
        return Boto3CredentialProvider(boto3.Session())
    except Exception:        # no boto3, or the profile has no credentials: obstore's own chain
        return None


def open_cloud_store(kind: str, settings: StoreSettings) -> "CloudStore":
    """An S3 (`s3`), GCS (`gs`) or Azure (`azure`) store from the `rsm.config.` settings."""
    from obstore.store import AzureStore, GCSStore, S3Store

    bucket = settings.require("bucket", f"when {settings.full('store')}={kind}")
    prefix = settings.get("prefix").strip("/")
    if prefix:
        try:
            check_prefix(prefix)
        except ValueError:
            raise StartupError(f"Invalid value {prefix} for configuration {settings.full('prefix')}: "
                               "not a '/'-separated path") from None
    endpoint = settings.get("endpoint")
    allow_http = settings.bool_("allow.http")
    if endpoint is not None and endpoint.lower().startswith("http://") and not allow_http:
        raise StartupError(f"{settings.full('endpoint')}={endpoint} is plain http: set "
                           f"{settings.full('allow.http')}=true to allow it")
    common = {"prefix": prefix or None, "client_options": _client_options(settings),
              "retry_config": _retry_config(settings)}
    try:
        if kind == "s3":
            config: dict = {}
            if endpoint is not None:
                config["endpoint"] = endpoint
            region = settings.get("region")
            if region is not None:
                config["region"] = region
            path_style = settings.get("path.style")
            # S3-compatible servers (an endpoint) are addressed by path unless told otherwise
            config["virtual_hosted_style_request"] = (
                endpoint is None if path_style is None else not settings.bool_("path.style"))
            key_id, secret = settings.get("access.key.id"), settings.get("secret.access.key")
            provider = None
            if (key_id is None) != (secret is None):
                missing = "secret.access.key" if secret is None else "access.key.id"
                raise StartupError(f"{settings.full(missing)} must be set with "
                                   f"{settings.full('access.key.id' if secret is None else 'secret.access.key')}")
            if key_id is not None:
                config["access_key_id"], config["secret_access_key"] = key_id, secret
                if settings.get("session.token") is not None:
                    config["session_token"] = settings.get("session.token")
            else:
                provider = _aws_profile_provider()
            store = S3Store(bucket, config=config, credential_provider=provider, **common)
        elif kind == "gs":
            store = GCSStore(bucket, **common)
        else:
            account = settings.get("account") or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
            if not account:
                raise StartupError(f"{settings.full('account')} (or AZURE_STORAGE_ACCOUNT_NAME) must be "
                                   f"set when {settings.full('store')}=azure")
            store = AzureStore(bucket, config={"account_name": account}, **common)
    except StartupError:
        raise
    except Exception as e:   # obstore's refusal of a setting (bad region, endpoint, ...)
        raise StartupError(f"Cannot configure the {kind} store from the {settings.prefix}* "
                           f"settings: {_first_line(e)}") from None
    name = f"{kind}://{bucket}" + (f"/{prefix}" if prefix else "")
    return CloudStore(store, name, part_size=settings.int_("multipart.part.size.bytes", 5 * 1024 * 1024),
                      concurrency=settings.int_("multipart.concurrency", 1))


class CloudStore:
    """An obstore store behind the ObjectStore interface."""

    def __init__(self, store, name: str, *, part_size: int, concurrency: int):
        self._store = store
        self.name = name
        self.part_size = part_size
        self.concurrency = concurrency
        self._limiter: trio.CapacityLimiter | None = None

    async def _run(self, key: str, fn, *args, reading: bool = True, **kwargs):
        """Run one blocking obstore call; `reading`: a 404 means no such key (else: no bucket)."""
        try:
            if self._limiter is None:
                self._limiter = trio.CapacityLimiter(MAX_THREADS)
            return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs), abandon_on_cancel=True,
                                                 limiter=self._limiter)
        except FileNotFoundError as e:
            if reading:
                raise ObjectNotFound(f"{self.name}: no object {key}") from e
            raise ObjectStoreError(f"{self.name}: {key}: {_first_line(e)}") from e
        except (ValueError, TypeError) as e:
            if type(e).__module__.startswith("obstore"):
                raise ObjectStoreError(f"{self.name}: {key}: {_first_line(e)}") from e
            raise
        except Exception as e:   # obstore's errors: unreachable, timed out, denied, ...
            raise ObjectStoreError(f"{self.name}: {key}: {_first_line(e)}") from e

    async def put(self, key: str, data: bytes) -> None:
        import obstore
        await self._run(check_key(key), obstore.put, self._store, key, data, use_multipart=False,
                        reading=False)

    async def put_file(self, key: str, path: str, length: int | None = None) -> None:
        import obstore
        check_key(key)

        def upload():
            with open(path, "rb") as f:
                want = os.fstat(f.fileno()).st_size if length is None else length
                if want <= self.part_size:
                    data = f.read(want)
                    if len(data) != want:
                        raise ObjectStoreError(f"{path} has {len(data)} bytes, fewer than the {want} to upload")
                    obstore.put(self._store, key, data, use_multipart=False)
                    return

                def chunks():
                    left = want
                    while left:
                        chunk = f.read(min(_READ_CHUNK, left))
                        if not chunk:
                            raise ObjectStoreError(f"{path} ends {left} bytes before the {want} to upload")
                        left -= len(chunk)
                        yield chunk
                obstore.put(self._store, key, chunks(), use_multipart=True, chunk_size=self.part_size,
                            max_concurrency=self.concurrency)
        try:
            await self._run(key, upload, reading=False)   # (the local file's errors come out too)
        except ObjectStoreError as e:
            if isinstance(e.__cause__, ObjectStoreError):  # the file was short: say so, unwrapped
                raise e.__cause__ from None
            raise

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        import obstore
        check_key(key)
        if start < 0 or (end is not None and end < start):
            raise ValueError(f"invalid byte range [{start}, {end})")
        if end == start:
            return b""
        if start == 0 and end is None:
            fetch = lambda: obstore.get(self._store, key).bytes()
        elif end is None:
            fetch = lambda: obstore.get(self._store, key, options={"range": {"offset": start}}).bytes()
        else:
            fetch = lambda: obstore.get_range(self._store, key, start=start, end=end)
        try:
            return bytes(await self._run(key, fetch))
        except ObjectNotFound:
            raise
        except ObjectStoreError:
            # the server refuses a range starting at or past the end: answer b"" there, as the
            # local store does (a second request, only on this error path)
            if start > 0 and await self.size(key) <= start:
                return b""
            raise

    async def size(self, key: str) -> int:
        import obstore
        meta = await self._run(check_key(key), obstore.head, self._store, key)
        return meta["size"]

    async def delete(self, keys: list[str]) -> None:
        import obstore
        for key in keys:
            check_key(key)
        if keys:
            # a missing key is no error to S3's DeleteObjects
            await self._run(keys[0], obstore.delete, self._store, list(keys), reading=False)

    async def list(self, prefix: str) -> list[str]:
        import obstore
        prefix = check_prefix(prefix)

        def collect():
            return sorted(meta["path"] for batch in obstore.list(self._store, prefix or None)
                          for meta in batch)
        return await self._run(prefix or "/", collect, reading=False)

    async def aclose(self) -> None:
        self._store = None

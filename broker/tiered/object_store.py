"""Where tiered storage's remote data goes: the object-store interface and the broker's choice of store.

The remote log manager (the rest of broker/tiered/) talks to an `ObjectStore`: keys are
'/'-separated paths below the store's root, values are whole objects written at once. Two kinds:
a directory on the local file system (broker/tiered/local_store.py, the default, so that
`remote.log.storage.system.enable=true` works with nothing else) and S3 or any S3-compatible
server, GCS or Azure through obstore (broker/tiered/cloud_store.py).

`open_store` reads the settings Kafka hands to its storage plugin: the broker keys under
`remote.log.storage.manager.impl.prefix` (`rsm.config.` by default). An unknown or bad key there
is a StartupError naming it, as a plugin's configure() refusal stops Kafka at start-up.
"""
from __future__ import annotations

import os
from typing import Mapping

from broker.config.types import StartupError
from broker.tiered.cloud_store import open_cloud_store
from broker.tiered.local_store import LocalStore
from broker.tiered.store_types import (  # noqa: F401  (the interface's names, re-exported)
    DEFAULT_PREFIX, STORE_KEYS, STORE_KINDS, ObjectNotFound, ObjectStore, ObjectStoreError,
    StoreSettings, check_key, check_prefix)

def _lookup(config, key: str):
    """A key of a plain mapping or of a BrokerConfig (whose get() refuses unknown names)."""
    return config[key] if key in config else None


def _log_dirs(config) -> list[str]:
    dirs = getattr(config, "log_dirs", None)
    if dirs is None:
        dirs = _lookup(config, "log.dirs") or _lookup(config, "log.dir") or []
    if isinstance(dirs, str):
        dirs = dirs.split(",")
    return [d.strip() for d in dirs if d and d.strip()]


def store_settings(broker_config) -> StoreSettings:
    """The storage plugin's settings: the broker keys under the configured prefix, unprefixed."""
    prefix = _lookup(broker_config, "remote.log.storage.manager.impl.prefix") or DEFAULT_PREFIX
    keys = (broker_config.static_configs if hasattr(broker_config, "static_configs")
            else broker_config)
    values = {k[len(prefix):]: str(_lookup(broker_config, k)) for k in keys if k.startswith(prefix)}
    return StoreSettings(prefix, values, _log_dirs(broker_config))


def open_store(broker_config: Mapping[str, str]) -> ObjectStore:
    """The object store the broker config chooses (`rsm.config.store`, default `local`).

    Accepts a plain mapping of broker keys or a BrokerConfig. Raises StartupError with one line
    naming the bad key."""
    settings = store_settings(broker_config)
    kind = settings.get("store").lower()
    if kind == "local":
        path = settings.get("dir")
        if path is None:
            if not settings.log_dirs:
                raise StartupError(f"{settings.full('dir')} must be set when the broker has no log.dirs")
            path = os.path.join(os.path.dirname(os.path.abspath(settings.log_dirs[0])), "remote-storage")
        return LocalStore(path)
    if kind in ("s3", "gs", "azure"):
        return open_cloud_store(kind, settings)
    raise StartupError(f"Invalid value {settings.get('store')} for configuration "
                       f"{settings.full('store')}: expected one of {', '.join(STORE_KINDS)}")

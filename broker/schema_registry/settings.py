"""The registry's settings, read from the broker's config (kproto's own keys,
named as Confluent's registry names them where it has one):

  schema.registry.listeners            http://HOST:PORT or https://HOST:PORT (default: off)
  schema.registry.compatibility.level  the default level (Confluent's schema.compatibility.level, BACKWARD)
  schema.registry.topic                the topic (Confluent's kafkastore.topic, _schemas)
  schema.registry.authentication       none (default) or basic (SCRAM users of the cluster)
  schema.registry.group.id             the writer election's group (Confluent's schema.registry.group.id)
  schema.registry.compatibility.check.timeout.ms
                                       one compatibility check's time budget (kproto's own; Confluent has none)
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import urlsplit

from broker.schema_registry.budget import DEFAULT_MS as CHECK_TIMEOUT_MS
from broker.schema_registry.compatibility import LEVELS

PREFIX = "schema.registry."
LISTENERS = "schema.registry.listeners"
KNOWN = {LISTENERS} | {PREFIX + k for k in ("compatibility.level", "topic", "topic.replication.factor",
                                            "authentication", "group.id", "session.timeout.ms",
                                            "compatibility.check.timeout.ms")}
log = logging.getLogger("kproto.schema_registry")


class SettingError(ValueError):
    pass


@dataclass
class Settings:
    scheme: str
    host: str
    port: int
    level: str = "BACKWARD"
    topic: str = "_schemas"
    authentication: str = "none"
    group_id: str = "schema-registry"
    check_timeout_ms: int = CHECK_TIMEOUT_MS

    @property
    def bind(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def _get(config, key: str, default: str) -> str:
    value = config.static_configs.get(key)
    return default if value in (None, "") else str(value).strip()


def read(config) -> Settings | None:
    """None when the registry is off; SettingError naming the mistake."""
    for key in config.static_configs:
        if key.startswith(PREFIX) and key not in KNOWN:   # (a typo would otherwise pass unnoticed)
            log.warning("The configuration '%s' was supplied but isn't a known config.", key)
    value = _get(config, LISTENERS, "off")
    if value.lower() in ("off", "none", "false"):
        return None
    first = value.split(",")[0].strip()
    parts = urlsplit(first)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None:
        raise SettingError(f"Invalid value {value} for configuration {LISTENERS}: expected http://HOST:PORT, "
                           "https://HOST:PORT or off")
    level = _get(config, PREFIX + "compatibility.level", "BACKWARD").upper()
    if level not in LEVELS:
        raise SettingError(f"Invalid value {level} for configuration {PREFIX}compatibility.level: one of "
                           f"{', '.join(LEVELS)}")
    auth = _get(config, PREFIX + "authentication", "none").lower()
    if auth not in ("none", "basic"):
        raise SettingError(f"Invalid value {auth} for configuration {PREFIX}authentication: none or basic")
    key = PREFIX + "compatibility.check.timeout.ms"
    timeout = _get(config, key, str(CHECK_TIMEOUT_MS))
    if not timeout.isdigit() or int(timeout) < 1:
        raise SettingError(f"Invalid value {timeout} for configuration {key}: a number of milliseconds, at least 1")
    return Settings(parts.scheme, parts.hostname, parts.port, level, _get(config, PREFIX + "topic", "_schemas"),
                    auth, _get(config, PREFIX + "group.id", "schema-registry"), int(timeout))

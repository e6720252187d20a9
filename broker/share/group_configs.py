"""Share-group configs (Kafka 4.3's GroupConfig share.* keys): per-group overrides set with
IncrementalAlterConfigs on resource type GROUP (32), stored as ConfigRecords in the metadata log
like topic configs, defaulting to the broker's group.share.* values. Pure: validation and lookup.
"""
from __future__ import annotations

import re

from broker.config.alter import incremental_without_lists
from broker.config.types import ConfigError

GROUP_RESOURCE = 32

# share.* key -> the broker config that gives its default (and its bounds, checked below)
DEFAULTS = {
    "share.auto.offset.reset": None,                                     # "latest"
    "share.isolation.level": None,                                       # "read_uncommitted"
    "share.record.lock.duration.ms": "group.share.record.lock.duration.ms",
    "share.delivery.count.limit": "group.share.delivery.count.limit",
    "share.session.timeout.ms": "group.share.session.timeout.ms",
    "share.heartbeat.interval.ms": "group.share.heartbeat.interval.ms",
    # Kafka 4.3 (KIP-1263): the least time between two target assignments of the group
    "share.assignment.interval.ms": "group.share.assignment.interval.ms",
}
# the broker defaults of keys kproto's config does not list (Kafka 4.3's, in INTERNAL_BROKER_CONFIGS)
BROKER_DEFAULTS = {"share.assignment.interval.ms": 1000}
_BOUNDS = {
    "share.record.lock.duration.ms": ("group.share.min.record.lock.duration.ms", 15000,
                                      "group.share.max.record.lock.duration.ms", 60000),
    "share.delivery.count.limit": (None, 2, None, 10),
    "share.session.timeout.ms": ("group.share.min.session.timeout.ms", 45000,
                                 "group.share.max.session.timeout.ms", 60000),
    "share.heartbeat.interval.ms": ("group.share.min.heartbeat.interval.ms", 5000,
                                    "group.share.max.heartbeat.interval.ms", 15000),
    "share.assignment.interval.ms": ("group.share.min.assignment.interval.ms", 0,
                                     "group.share.max.assignment.interval.ms", 15000),
}
_BY_DURATION = re.compile(r"^by_duration:P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?$")


def broker_int(config, key: str, default: int) -> int:
    """A broker config's int value (its default when unset or unknown)."""
    try:
        value = config.get(key)
    except KeyError:
        return default
    return default if value is None else int(value)


# IncrementalAlterConfigs on these overrides (no key is a LIST)
incremental = incremental_without_lists


def validate(overrides: dict, broker_int) -> None:
    """Raise ConfigError (INVALID_CONFIG) for an unknown key or a bad value; broker_int(key, default)
    reads the broker's bounds."""
    for name, value in overrides.items():
        if name not in DEFAULTS:
            raise ConfigError(f"Unknown group config name: {name}")
        if name == "share.auto.offset.reset":
            if value not in ("latest", "earliest") and not _BY_DURATION.match(value or ""):
                raise ConfigError(f"Invalid value {value} for configuration {name}: "
                                  "String must be one of (case insensitive): LATEST, EARLIEST, BY_DURATION")
            continue
        if name == "share.isolation.level":
            if value not in ("read_committed", "read_uncommitted"):
                raise ConfigError(f"Invalid value {value} for configuration {name}: "
                                  "String must be one of: read_committed, read_uncommitted")
            continue
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT") from None
        lo_key, lo, hi_key, hi = _BOUNDS[name]
        lo = broker_int(lo_key, lo) if lo_key else lo
        hi = broker_int(hi_key, hi) if hi_key else hi
        if number < lo:
            raise ConfigError(f"{name} must be greater than or equal to {lo_key or lo}")
        if number > hi:
            raise ConfigError(f"{name} must be less than or equal to {hi_key or hi}")


def by_duration_ms(value: str) -> int:
    """The milliseconds of a by_duration:PnDTnHnMnS reset."""
    m = re.match(r"^by_duration:P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", value)
    d, h, mi, s = (float(x) if x else 0.0 for x in m.groups())
    return int(((d * 24 + h) * 60 + mi) * 60_000 + s * 1000)

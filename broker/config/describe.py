"""DescribeConfigs answers for BROKER and TOPIC resources, computed as Kafka 3.9 computes them.

Source and synonyms follow Kafka's ConfigHelper: the synonyms of a config are looked up layer by
layer (dynamic per-broker, dynamic cluster default, static, Kafka default), and everything before
the first synonym carrying the config's own name is dropped. That is why a topic's `retention.ms`
shows DEFAULT_CONFIG with no synonyms while `log.retention.hours` is set in the broker's file: its
broker synonym is `log.retention.ms`, and nothing sets that one.

Order: Kafka lists configs in the iteration order of the Scala mutable.HashMap it builds them in.
That order is a pure function of the names (String.hashCode, table size from the entry count), so
`kafka_map_order` reproduces it exactly instead of sorting.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from broker.config.broker_config import BrokerConfig
from broker.config.catalog import BROKER_CONFIGS, TOPIC_CONFIGS, broker_config_type, broker_synonyms
from broker.config.topic_config import validate_topic_config
from broker.config.types import ConfigError, ConfigSource, ConfigType, to_kafka_string
from kproto.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """One source of a config's value, as DescribeConfigs lists synonyms."""
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config as DescribeConfigs answers it."""
    name: str
    value: str | None
    read_only: bool
    source: ConfigSource
    is_sensitive: bool
    synonyms: tuple[ConfigSynonym, ...]
    type: ConfigType
    documentation: str | None = None


# -- Kafka's response order ---------------------------------------------------------------------

def _java_string_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h


def _scala_improved_hash(s: str) -> int:
    """mutable.HashMap's spread hash (h ^ h >>> 16) as a signed 32-bit int."""
    h = _java_string_hash(s)
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


def _scala_table_size(n: int) -> int:
    # starts at 16 and doubles when an insertion would reach 3/4 of the table
    size = 16
    while n >= int(size * 0.75):
        size *= 2
    return size


def kafka_map_order(names: Iterable[str]) -> list[str]:
    """The iteration order of a Scala 2.13 mutable.HashMap holding these keys: by bucket, then by
    hash within a bucket. (The observed broker's 314 configs, the 36 topic configs and a 3-key
    filtered answer all come out in exactly this order.)"""
    names = list(dict.fromkeys(names))
    mask = _scala_table_size(len(names)) - 1

    def key(name: str):
        h = _scala_improved_hash(name)
        return (h & mask, h)
    return sorted(names, key=key)


def _selected(names: Iterable[str], keys: Iterable[str] | None) -> list[str]:
    if keys:
        wanted = set(keys)
        names = [n for n in names if n in wanted]
    return kafka_map_order(names)


# -- synonyms -----------------------------------------------------------------------------------

def _config_synonyms(broker: BrokerConfig, name: str, sensitive: bool) -> list[ConfigSynonym]:
    synonyms = broker_synonyms(name)
    found = [ConfigSynonym(s, None if sensitive else layer[s], source)
             for source, layer in broker.layers() for s in synonyms if s in layer]
    for i, syn in enumerate(found):
        if syn.name == name:
            return found[i:]
    return []


# -- BROKER resources ---------------------------------------------------------------------------

def _raw_value(broker: BrokerConfig, name: str) -> str | None:
    for _, layer in broker.layers():
        if name in layer:
            return layer[name]
    return None


def _broker_entry(broker: BrokerConfig, name: str, include_synonyms: bool, per_broker: bool) -> ConfigEntry:
    type_ = broker_config_type(name)
    sensitive = type_ in (ConfigType.PASSWORD, ConfigType.UNKNOWN)
    if sensitive:
        value = None
    elif not per_broker:
        value = broker.dynamic_default_configs[name]
    elif name in BROKER_CONFIGS:
        value = to_kafka_string(type_, broker.get(name))
    else:
        value = _raw_value(broker, name)
    synonyms = _config_synonyms(broker, name, sensitive)
    if not per_broker:
        synonyms = [s for s in synonyms if s.source is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
    key = BROKER_CONFIGS.get(name)
    return ConfigEntry(
        name=name, value=value, read_only=not (key is not None and key.dynamic),
        source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
        is_sensitive=sensitive, synonyms=tuple(synonyms) if include_synonyms else (), type=type_)


def describe_broker(broker: BrokerConfig, *, include_synonyms: bool = False,
                    keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """DescribeConfigs for this broker's own resource (named by its node id). `keys` None or
    empty means every config."""
    # kproto.* keys are kproto's process settings (as the JVM's options for Kafka), not broker
    # configs a Kafka tool knows: not listed, so DescribeConfigs lists what Kafka's would
    names = [n for n in broker.names() if not n.startswith("kproto.")]
    return [_broker_entry(broker, n, include_synonyms, True) for n in _selected(names, keys)]


def describe_cluster_default(broker: BrokerConfig, *, include_synonyms: bool = False,
                             keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """DescribeConfigs for the BROKER resource "": only the dynamic cluster-wide defaults."""
    return [_broker_entry(broker, n, include_synonyms, False)
            for n in _selected(broker.dynamic_default_configs, keys)]


def describe_broker_resource(broker: BrokerConfig, resource_name: str | None, *,
                             include_synonyms: bool = False,
                             keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """A BROKER resource by name: "" (cluster default) or this broker's id; anything else is
    INVALID_REQUEST with Kafka's message."""
    if not resource_name:
        return describe_cluster_default(broker, include_synonyms=include_synonyms, keys=keys)
    if not (re.fullmatch(r"[+-]?[0-9]+", resource_name) and -(1 << 31) <= int(resource_name) < (1 << 31)):
        raise ConfigError(f"Broker id must be an integer, but it is: {resource_name}", ErrorCode.INVALID_REQUEST)
    if int(resource_name) != broker.get("broker.id"):
        raise ConfigError(f"Unexpected broker id, expected {broker.get('broker.id')} or empty string, "
                          f"but received {resource_name}", ErrorCode.INVALID_REQUEST)
    return describe_broker(broker, include_synonyms=include_synonyms, keys=keys)


# -- TOPIC resources ----------------------------------------------------------------------------

def describe_topic(broker: BrokerConfig, overrides: Mapping[str, str], *, include_synonyms: bool = False,
                   keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """DescribeConfigs for an existing topic with these overrides (its stored topic configs)."""
    overrides = {k: v for k, v in overrides.items() if v is not None}
    values = validate_topic_config(broker, overrides)
    entries = []
    for name in _selected(TOPIC_CONFIGS, keys):
        key = TOPIC_CONFIGS[name]
        value = to_kafka_string(key.type, values[name])
        synonyms = _config_synonyms(broker, key.broker_synonym, False) if key.broker_synonym else []
        if name in overrides:
            synonyms.insert(0, ConfigSynonym(name, value, ConfigSource.TOPIC_CONFIG))
        entries.append(ConfigEntry(
            name=name, value=value, read_only=False,
            source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
            is_sensitive=False, synonyms=tuple(synonyms) if include_synonyms else (), type=key.type))
    return entries


# -- CreateTopics -------------------------------------------------------------------------------

def _converted(value: str, factor: int) -> str:
    # ConfigSynonym.HOURS_TO_MILLISECONDS & co: an int (blank counts as 0) scaled to milliseconds
    if factor == 1:
        return value
    text = value.strip()
    return str((int(text) if text else 0) * factor)


def created_topic_configs(broker: BrokerConfig, creation_configs: Mapping[str, str | None]) -> list[ConfigEntry]:
    """The Configs of a successful CreateTopics (v5+) answer, as Kafka's controller computes them.

    This is not DescribeConfigs' view: each config is the creation value, else the first broker
    synonym set (dynamic per-broker, dynamic default, then static, unit-converted), else the topic
    config's own default; sorted by name, no synonyms. E.g. `retention.ms` shows 604800000 from
    STATIC_BROKER_CONFIG when `log.retention.hours=168` is in the broker's file.
    """
    configs = {k: v for k, v in creation_configs.items() if v is not None}
    layers = [(source, layer) for source, layer in broker.layers() if source is not ConfigSource.DEFAULT_CONFIG]
    entries = []
    for name in sorted(TOPIC_CONFIGS):
        key = TOPIC_CONFIGS[name]
        if name in configs:
            value, source = configs[name], ConfigSource.TOPIC_CONFIG
        else:
            value, source = key.default, ConfigSource.DEFAULT_CONFIG
            found = next(((layer[s], factor, src) for src, layer in layers
                          for s, factor in key.synonyms if s in layer), None)
            if found is not None:
                raw, factor, source = found
                value = _converted(raw, factor)
        entries.append(ConfigEntry(name=name, value=value, read_only=False, source=source,
                                   is_sensitive=False, synonyms=(), type=key.type))
    return entries

"""Topic configs: validation of overrides and the effective values a topic runs with.

A topic's value for each config is its own override if it has one, else what the broker gives
topics (the broker-level synonym, e.g. log.segment.bytes for segment.bytes, through any dynamic or
static setting), else Kafka's default. Validation follows Kafka's controller
(ControllerConfigurationValidator + LogConfig.validate): unknown names first, then every value in
LogConfig's definition order, then the checks across configs; all failures are INVALID_CONFIG.
"""
from __future__ import annotations

from typing import Mapping

from broker.config.broker_config import BrokerConfig
from broker.config.catalog import TOPIC_CONFIGS
from broker.config.types import ConfigError, ConfigSource, invalid_value, parse_value


def validate_topic_config(broker: BrokerConfig, configs: Mapping[str, str | None],
                          existing: Mapping[str, str] | None = None) -> dict[str, object]:
    """Check a topic's complete override set; return every topic config's effective typed value.

    `configs` maps Kafka topic config names to strings; None values are ignored (Kafka's
    controller drops them before validating). `existing` is the topic's current override set, when
    altering, for the checks that look at the change (turning remote storage off).
    """
    overrides = {k: v for k, v in configs.items() if v is not None}
    for name in overrides:
        if name not in TOPIC_CONFIGS:
            raise ConfigError(f"Unknown topic config name: {name}")
    base = broker.log_config_defaults()
    values: dict[str, object] = {}
    for key in TOPIC_CONFIGS.values():
        if key.name in overrides:
            value = parse_value(key.name, key.type, overrides[key.name])
        else:
            value = base[key.name]
        if key.validator is not None:
            key.validator(key.name, value)
        values[key.name] = value
    _check_combinations(broker, values, existing or {})
    return values


def _check_combinations(broker: BrokerConfig, v: dict, existing: Mapping[str, str]) -> None:
    if v["min.compaction.lag.ms"] > v["max.compaction.lag.ms"]:
        raise ConfigError("conflict topic config setting min.compaction.lag.ms "
                          f"({v['min.compaction.lag.ms']}) > max.compaction.lag.ms ({v['max.compaction.lag.ms']})")
    if not v["remote.storage.enable"]:
        was_enabled = existing.get("remote.storage.enable", "false").strip().lower() == "true"
        if was_enabled and not v["remote.log.delete.on.disable"]:
            raise ConfigError(
                "It is invalid to disable remote storage without deleting remote data. If you want to keep "
                "the remote data and turn to read only, please set `remote.storage.enable=true,"
                "remote.log.copy.disable=true`. If you want to disable remote storage and delete all "
                "remote data, please set `remote.storage.enable=false,remote.log.delete.on.disable=true`.")
        return
    if not broker.get_bool("remote.log.storage.system.enable"):
        raise ConfigError("Tiered Storage functionality is disabled in the broker. "
                          "Topic cannot be configured with remote log storage.")
    if "compact" in [p.lower() for p in v["cleanup.policy"]]:
        raise ConfigError("Remote log storage is unsupported for the compacted topics")
    for total, local in (("retention.bytes", "local.retention.bytes"), ("retention.ms", "local.retention.ms")):
        limited = v[total] > -1 if total == "retention.bytes" else v[total] != -1
        if limited and v[local] != -2:
            if v[local] == -1:
                raise invalid_value(local, v[local], f"Value must not be -1 as {total} value is set as {v[total]}.")
            if v[local] > v[total]:
                raise invalid_value(local, v[local],
                                    f"Value must not be more than {total} property value: {v[total]}")
    if v["remote.log.copy.disable"]:
        for total, local in (("retention.bytes", "local.retention.bytes"), ("retention.ms", "local.retention.ms")):
            if v[local] != -2 and v[local] != v[total]:
                raise ConfigError(f"When `remote.log.copy.disable` is set to true, the `{local}` and `{total}` "
                                  "must be set to the identical value because there will be no more logs "
                                  "copied to the remote storage.")


class TopicConfig:
    """The effective configuration of one topic: its overrides over the broker's topic defaults.

    A snapshot: build a new one when the overrides or the broker's dynamic configs change.
    """

    def __init__(self, broker: BrokerConfig, overrides: Mapping[str, str | None] | None = None):
        self.overrides: dict[str, str] = {k: v for k, v in (overrides or {}).items() if v is not None}
        self._values = validate_topic_config(broker, self.overrides)
        self._broker = broker

    def __getitem__(self, name: str):
        return self._values[name]

    def get(self, name: str, default=None):
        return self._values.get(name, default)

    def as_dict(self) -> dict[str, object]:
        """Kafka topic config key -> typed value, for every topic config."""
        return dict(self._values)

    def source_of(self, name: str) -> ConfigSource:
        """TOPIC_CONFIG for an override, else where the broker-level synonym's value comes from."""
        if name in self.overrides:
            return ConfigSource.TOPIC_CONFIG
        for synonym, _ in TOPIC_CONFIGS[name].synonyms:
            if self._broker.get(synonym) is not None:
                return self._broker.source_of(synonym)
        return ConfigSource.DEFAULT_CONFIG

    # the values the log layer reads on every segment roll / retention pass
    segment_bytes = property(lambda self: self._values["segment.bytes"])
    segment_ms = property(lambda self: self._values["segment.ms"])
    segment_jitter_ms = property(lambda self: self._values["segment.jitter.ms"])
    segment_index_bytes = property(lambda self: self._values["segment.index.bytes"])
    index_interval_bytes = property(lambda self: self._values["index.interval.bytes"])
    retention_ms = property(lambda self: self._values["retention.ms"])
    retention_bytes = property(lambda self: self._values["retention.bytes"])
    max_message_bytes = property(lambda self: self._values["max.message.bytes"])
    file_delete_delay_ms = property(lambda self: self._values["file.delete.delay.ms"])
    message_timestamp_type = property(lambda self: self._values["message.timestamp.type"])
    min_insync_replicas = property(lambda self: self._values["min.insync.replicas"])
    compression_type = property(lambda self: self._values["compression.type"])
    preallocate = property(lambda self: self._values["preallocate"])
    cleanup_policy = property(lambda self: list(self._values["cleanup.policy"]))

    @property
    def compact(self) -> bool:
        return "compact" in self._values["cleanup.policy"]

    @property
    def delete(self) -> bool:
        return "delete" in self._values["cleanup.policy"]

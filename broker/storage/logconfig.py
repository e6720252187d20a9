"""The topic-level settings the segment store obeys.

Takes the plain ``{key: value}`` dict of Kafka topic config keys the broker's
config layer hands over (values as str or int) and fills in Kafka's defaults.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, fields
from functools import cached_property

LONG_MAX = 2**63 - 1

# key -> (attribute, default)
_KEYS = {
    "segment.bytes": ("segment_bytes", 1073741824),
    "segment.ms": ("segment_ms", 604800000),
    "segment.jitter.ms": ("segment_jitter_ms", 0),
    "segment.index.bytes": ("segment_index_bytes", 10485760),
    "index.interval.bytes": ("index_interval_bytes", 4096),
    "retention.ms": ("retention_ms", 604800000),
    "retention.bytes": ("retention_bytes", -1),
    "flush.messages": ("flush_messages", LONG_MAX),
    "flush.ms": ("flush_ms", LONG_MAX),
    "file.delete.delay.ms": ("file_delete_delay_ms", 60000),
    "cleanup.policy": ("cleanup_policy", "delete"),
    # the log cleaner's (cleanup.policy=compact)
    "delete.retention.ms": ("delete_retention_ms", 86400000),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", 0),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", LONG_MAX),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", 0.5),
    "max.message.bytes": ("max_message_bytes", 1048588),
    # tiered storage: retention deletes local segments only once they are copied (log_retention.py)
    "remote.storage.enable": ("remote_storage_enable", "false"),
}


@dataclass(frozen=True)
class LogConfig:
    """A log's settings (the topic configs, with the broker's defaults)."""
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    max_message_bytes: int = 1048588
    remote_storage_enable: str = "false"

    @classmethod
    def from_dict(cls, config: "dict | LogConfig | None" = None) -> "LogConfig":
        """Build from topic config keys; unknown keys are ignored."""
        if config is None:
            return cls()
        if isinstance(config, LogConfig):
            return config
        values = {}
        for key, raw in config.items():
            entry = _KEYS.get(key)
            if entry is None or raw is None:
                continue
            attr, default = entry
            if isinstance(default, str):
                values[attr] = str(raw).strip().lower() if isinstance(raw, bool) else raw.strip()
            elif isinstance(default, float):
                values[attr] = float(raw)
            else:
                values[attr] = int(raw)
        return cls(**values)

    def to_dict(self) -> dict:
        by_attr = {attr: key for key, (attr, _) in _KEYS.items()}
        return {by_attr[f.name]: getattr(self, f.name) for f in fields(self)}

    # (cached: the cleaner asks every log every log.cleaner.backoff.ms, 10,000 logs at a time)
    @cached_property
    def delete_enabled(self) -> bool:
        return "delete" in [p.strip() for p in self.cleanup_policy.split(",")]

    @cached_property
    def compact_enabled(self) -> bool:
        return "compact" in [p.strip() for p in self.cleanup_policy.split(",")]

    def random_segment_jitter(self) -> int:
        # Kafka: abs(random int) % min(jitter, segment.ms), 0 when no jitter
        if self.segment_jitter_ms <= 0:
            return 0
        return random.randrange(2**31) % min(self.segment_jitter_ms, self.segment_ms)

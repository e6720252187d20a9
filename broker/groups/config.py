"""The group coordinator's settings, read from the broker config under
Kafka's names."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class GroupConfig:
    min_session_timeout_ms: int = 6000               # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1800000            # group.max.session.timeout.ms
    max_size: int = 2147483647                       # group.max.size
    initial_rebalance_delay_ms: int = 3000           # group.initial.rebalance.delay.ms
    offsets_retention_ms: int = 10080 * 60 * 1000    # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600000  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4096            # offset.metadata.max.bytes
    offsets_topic_partitions: int = 50               # offsets.topic.num.partitions
    offsets_topic_segment_bytes: int = 104857600     # offsets.topic.segment.bytes
    max_batch_bytes: int = 1048588                   # max.message.bytes of __consumer_offsets
    # GroupCoordinator.NewMemberJoinTimeoutMs: a new member that never gets its
    # JoinGroup answer (its client went away) is dropped after this long
    new_member_join_timeout_ms: int = 5 * 60 * 1000

    @classmethod
    def from_broker_config(cls, config) -> "GroupConfig":
        def get(name, default):
            try:
                value = config.get(name)
            except KeyError:
                return default
            return default if value is None else int(value)

        return cls(
            min_session_timeout_ms=get("group.min.session.timeout.ms", cls.min_session_timeout_ms),
            max_session_timeout_ms=get("group.max.session.timeout.ms", cls.max_session_timeout_ms),
            max_size=get("group.max.size", cls.max_size),
            initial_rebalance_delay_ms=get("group.initial.rebalance.delay.ms", cls.initial_rebalance_delay_ms),
            offsets_retention_ms=get("offsets.retention.minutes", 10080) * 60 * 1000,
            offsets_retention_check_interval_ms=get("offsets.retention.check.interval.ms",
                                                    cls.offsets_retention_check_interval_ms),
            offset_metadata_max_bytes=get("offset.metadata.max.bytes", cls.offset_metadata_max_bytes),
            offsets_topic_partitions=get("offsets.topic.num.partitions", cls.offsets_topic_partitions),
            offsets_topic_segment_bytes=get("offsets.topic.segment.bytes", cls.offsets_topic_segment_bytes),
            max_batch_bytes=get("message.max.bytes", cls.max_batch_bytes),
        )

"""The group coordinator's settings, read from the broker config under
Kafka's names, and the assignor names `group.consumer.assignors` accepts."""
from __future__ import annotations

from dataclasses import dataclass, field

UNIFORM = "uniform"
RANGE = "range"

# group.consumer.assignors holds class names; clients name them by these
CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM,
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE,
    UNIFORM: UNIFORM,
    RANGE: RANGE,
}


def assignor_names(configured) -> list[str]:
    """group.consumer.assignors (class names or short names) -> short names,
    in preference order; the first is the default."""
    out = []
    for name in configured or ():
        short = CLASS_NAMES.get(str(name).strip())
        if short is not None and short not in out:
            out.append(short)
    return out or [UNIFORM, RANGE]


@dataclass
class GroupConfig:
    """The group coordinator's settings (group.* and offsets.* keys)."""
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
    # KIP-848 consumer groups (group.consumer.*)
    consumer_protocol_enabled: bool = True           # "consumer" in group.coordinator.rebalance.protocols
    consumer_session_timeout_ms: int = 45000         # group.consumer.session.timeout.ms
    consumer_heartbeat_interval_ms: int = 5000       # group.consumer.heartbeat.interval.ms
    consumer_max_size: int = 2147483647              # group.consumer.max.size
    consumer_assignors: list = field(default_factory=lambda: ["uniform", "range"])  # group.consumer.assignors
    consumer_migration_policy: str = "bidirectional"  # group.consumer.migration.policy

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
            **_consumer_settings(config, get),
        )


def check_consumer_bounds(get) -> None:
    """GroupCoordinatorConfig's start-up checks of group.consumer.*; get(key,
    default) -> int. Raises ConfigError with Kafka's wording."""
    from broker.config.types import ConfigError

    session = get("group.consumer.session.timeout.ms", 45000)
    interval = get("group.consumer.heartbeat.interval.ms", 5000)
    for key, value, lo_key, lo, hi_key, hi in (
            ("group.consumer.session.timeout.ms", session, "group.consumer.min.session.timeout.ms", 45000,
             "group.consumer.max.session.timeout.ms", 60000),
            ("group.consumer.heartbeat.interval.ms", interval, "group.consumer.min.heartbeat.interval.ms", 5000,
             "group.consumer.max.heartbeat.interval.ms", 15000)):
        low, high = get(lo_key, lo), get(hi_key, hi)
        if value < low:
            raise ConfigError(f"requirement failed: {key} must be greater than or equals to {lo_key}")
        if value > high:
            raise ConfigError(f"requirement failed: {key} must be less than or equals to {hi_key}")
    if interval >= session:
        raise ConfigError("requirement failed: group.consumer.heartbeat.interval.ms must be less than "
                          "group.consumer.session.timeout.ms")


def _migration_policy(config) -> str:
    try:
        value = config.get("group.consumer.migration.policy")
    except KeyError:
        return "bidirectional"
    value = str(value or "bidirectional").strip().lower()
    if value not in ("disabled", "upgrade", "downgrade", "bidirectional"):
        from broker.config.types import ConfigError
        raise ConfigError(f"Invalid value {value} for configuration group.consumer.migration.policy: "
                         f"String must be one of (case insensitive): DISABLED, DOWNGRADE, UPGRADE, BIDIRECTIONAL")
    return value


def _consumer_settings(config, get) -> dict:
    """group.consumer.*, checked as Kafka's GroupCoordinatorConfig does: the
    session timeout and heartbeat interval within their min and max."""

    def names(key, default):
        try:
            value = config.get(key)
        except KeyError:
            return default
        return default if value is None else list(value)

    session = get("group.consumer.session.timeout.ms", 45000)
    interval = get("group.consumer.heartbeat.interval.ms", 5000)
    check_consumer_bounds(get)
    # Kafka 3.9's default is "classic" (the consumer protocol was a preview); kproto serves
    # it by default as Kafka 4.0 does, unless the key is set without "consumer"
    source = getattr(config, "source_of", None)
    explicit = source is not None and int(source("group.coordinator.rebalance.protocols")) != 5
    protocols = ([p.strip().lower() for p in names("group.coordinator.rebalance.protocols", [])]
                 if explicit else ["classic", "consumer"])
    return dict(
        consumer_protocol_enabled="consumer" in protocols,
        consumer_session_timeout_ms=session,
        consumer_heartbeat_interval_ms=interval,
        consumer_max_size=get("group.consumer.max.size", 2147483647),
        consumer_assignors=assignor_names(names("group.consumer.assignors", None)),
        consumer_migration_policy=_migration_policy(config),
    )

"""The internal topics Kafka creates on demand, with the partition counts and
configs it gives them (GroupCoordinator.groupMetadataTopicConfigs,
TransactionStateManager.transactionTopicConfigs). One definition for every
path that creates them: Metadata auto-creation, FindCoordinator for groups
and for transactional ids."""
from __future__ import annotations

from broker.metadata.topic_names import INTERNAL_TOPICS

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
SHARE_STATE_TOPIC = "__share_group_state"   # share groups (KIP-932, broker/share/state_store.py)

__all__ = ["INTERNAL_TOPICS", "OFFSETS_TOPIC", "TRANSACTION_STATE_TOPIC", "internal_topic_spec"]


def internal_topic_spec(config, name: str) -> tuple[int, dict[str, str]]:
    """(partitions, topic configs) for the internal topic `name`."""
    if name == OFFSETS_TOPIC:
        return config.get_int("offsets.topic.num.partitions"), {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(config.get_int("offsets.topic.segment.bytes")),
        }
    if name == TRANSACTION_STATE_TOPIC:
        return config.get_int("transaction.state.log.num.partitions"), {
            "cleanup.policy": "compact",
            "min.insync.replicas": str(config.get_int("transaction.state.log.min.isr")),
            "segment.bytes": str(config.get_int("transaction.state.log.segment.bytes")),
            "unclean.leader.election.enable": "false",
        }
    if name == SHARE_STATE_TOPIC:
        # ShareCoordinatorService.shareGroupStateTopicConfigs (Kafka 4.3), from the
        # share.coordinator.state.topic.* keys (Kafka 4.x; not in the 3.9 catalog: Kafka's defaults).
        # `delete`, never compacted: a ShareUpdate holds only what a write changed, so every update
        # since a key's last snapshot is needed; the share coordinator deletes the records below the
        # oldest snapshot still needed itself (prune.interval.ms), so time retention is off
        def get(key, default):
            try:
                value = config.get(key)
            except KeyError:
                return default
            return default if value is None else int(value)
        return get("share.coordinator.state.topic.num.partitions", 50), {
            "cleanup.policy": "delete",
            "compression.type": "producer",
            "segment.bytes": str(get("share.coordinator.state.topic.segment.bytes", 104857600)),
            # Kafka's default is 2; kproto's replication factor for this topic follows
            # offsets.topic.replication.factor unless set (share_state_replication_factor), so the
            # default is capped at it: a cluster whose offsets topic has one replica (the embedded
            # single-node defaults, as Kafka 4.3's server.properties sets both keys to 1) can write
            "min.insync.replicas": str(get("share.coordinator.state.topic.min.isr",
                                           min(2, share_state_replication_factor(config)))),
            "retention.ms": "-1",
        }
    raise ValueError(f"{name} is not an internal topic")


def share_state_replication_factor(config) -> int:
    """share.coordinator.state.topic.replication.factor (Kafka 4.x, not in the 3.9 catalog) when
    set, else what __consumer_offsets gets, so a cluster replicates share state as it does offsets."""
    raw = next((layer.get("share.coordinator.state.topic.replication.factor")
                for _src, layer in config.layers()
                if layer.get("share.coordinator.state.topic.replication.factor")), None)
    return int(raw) if raw else config.get_int("offsets.topic.replication.factor")

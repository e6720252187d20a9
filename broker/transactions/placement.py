"""Which `__transaction_state` partition holds a transactional id: Kafka's
`Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount`."""
from __future__ import annotations

from broker.groups.placement import java_abs, java_string_hashcode
from broker.metadata.internal_topics import TRANSACTION_STATE_TOPIC

__all__ = ["TRANSACTION_STATE_TOPIC", "partition_for"]


def partition_for(transactional_id: str, num_partitions: int) -> int:
    return java_abs(java_string_hashcode(transactional_id)) % num_partitions

"""FindCoordinator's side effect, shared by the group and the transaction
coordinators: the first lookup creates the coordinator's internal topic."""
from __future__ import annotations

import logging

from kproto.errors import ErrorCode, KafkaError

from broker.metadata.internal_topics import internal_topic_spec

log = logging.getLogger("kproto.coordination")


def ensure_internal_topic(broker, topic: str, active: bool, activate_if_created, logger=log) -> int:
    """NONE when the coordinator is active (its topic exists); otherwise
    create the topic and answer COORDINATOR_NOT_AVAILABLE, as Kafka does on
    the first lookup (clients retry)."""
    if active and topic in broker.image.topics:
        return ErrorCode.NONE
    # (active without the topic: a metadata rollback removed it, or its creation was lost with the
    # controller that had applied it ahead of the commit; it is created again)
    if topic not in broker.image.topics:
        try:
            partitions, configs = internal_topic_spec(broker.config, topic)
            broker.controller.ensure_internal_topic(topic, partitions, configs)
        except KafkaError as exc:
            logger.error("cannot create %s: %s", topic, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
    activate_if_created()
    return ErrorCode.COORDINATOR_NOT_AVAILABLE

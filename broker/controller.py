"""The controller role of a single-node cluster: validates topic changes and
turns them into metadata records. Records become state only by being appended
to the metadata log and replayed into the image, so what the broker does after
a restart is what the log says."""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

from kproto.errors import ErrorCode, KafkaError
from kproto.metadata.config_record import ConfigRecord
from kproto.metadata.partition_record import PartitionRecord
from kproto.metadata.remove_topic_record import RemoveTopicRecord
from kproto.metadata.topic_record import TopicRecord

from broker.metadata.image import TOPIC_RESOURCE
from broker.topic_names import collision_key, invalid_reason

log = logging.getLogger("kproto.controller")


@dataclass
class TopicSpec:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str | None] = field(default_factory=dict)
    assignments: list | None = None


@dataclass
class CreatedTopic:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    replication_factor: int
    configs: dict[str, str]


class Controller:
    def __init__(self, node_id: int, metadata_log, image, broker_config, topic_config_validator=None):
        self.node_id = node_id
        self.log = metadata_log
        self.image = image
        self.config = broker_config
        # validates topic config overrides: dict -> None, raises KafkaError(INVALID_CONFIG)
        self.validate_topic_configs = topic_config_validator or (lambda configs: None)

    # -- topics ----------------------------------------------------------------

    def plan_topic(self, spec: TopicSpec) -> tuple[CreatedTopic, list]:
        """Validate a topic creation and return the records that perform it.
        Raises KafkaError with Kafka's error code and message."""
        reason = invalid_reason(spec.name)
        if reason:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
        if spec.name in self.image.topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{spec.name}' already exists.")
        key = collision_key(spec.name)
        for other in self.image.topics:
            if collision_key(other) == key:
                raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                 f"Topic '{spec.name}' collides with existing topic: {other}")
        if spec.assignments:
            n = len(spec.assignments)
            rf = len(spec.assignments[0])
            if spec.num_partitions != -1 or spec.replication_factor != -1:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "Both numPartitions or replicationFactor and replicasAssignments were set. "
                                 "Both cannot be used at the same time.")
        else:
            n = spec.num_partitions
            rf = spec.replication_factor
            if n == -1:
                n = self.config.get_int("num.partitions")
            if rf == -1:
                rf = self.config.get_int("default.replication.factor")
            if n <= 0:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                                 "Number of partitions was set to an invalid non-positive value.")
            if rf <= 0:
                raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 "Replication factor must be larger than 0, or -1 to use the default value.")
        brokers = 1
        if rf > brokers:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Unable to replicate the partition {rf} time(s): The target replication factor "
                             f"of {rf} cannot be reached because only {brokers} broker(s) are registered.")
        configs = {k: v for k, v in spec.configs.items() if v is not None}
        self.validate_topic_configs(configs)
        topic_id = uuid.uuid4()
        records = [TopicRecord(name=spec.name, topic_id=topic_id)]
        for k, v in configs.items():
            records.append(ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=spec.name, name=k, value=v))
        for i in range(n):
            records.append(self._partition_record(topic_id, i))
        return CreatedTopic(spec.name, topic_id, n, rf, configs), records

    def _partition_record(self, topic_id, index: int) -> PartitionRecord:
        return PartitionRecord(partition_id=index, topic_id=topic_id, replicas=[self.node_id],
                               isr=[self.node_id], removing_replicas=[], adding_replicas=[],
                               leader=self.node_id, leader_recovery_state=0, leader_epoch=0,
                               partition_epoch=0, directories=[], eligible_leader_replicas=None,
                               last_known_elr=None)

    def create_topic(self, spec: TopicSpec) -> CreatedTopic:
        created, records = self.plan_topic(spec)
        self.log.append(records)
        log.info("created topic %s with %d partition(s)", created.name, created.num_partitions)
        return created

    async def auto_create_topics(self, names) -> None:
        for name in names:
            if name in self.image.topics:
                continue
            try:
                self.create_topic(TopicSpec(name))
            except KafkaError as exc:
                log.info("auto-creation of %s failed: %s", name, exc)

    def ensure_internal_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        if name not in self.image.topics:
            self.create_topic(TopicSpec(name, partitions, 1, dict(configs)))

    def delete_topic(self, name: str) -> uuid.UUID:
        t = self.image.topics.get(name)
        if t is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        self.log.append([RemoveTopicRecord(topic_id=t.topic_id)])
        log.info("deleted topic %s", name)
        return t.topic_id

    def create_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        t = self.image.topics.get(name)
        if t is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        current = len(t.partitions)
        if count < current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic currently has {current} partitions, which is higher than the requested {count}.")
        if count == current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
        if validate_only:
            return
        self.log.append([self._partition_record(t.topic_id, i) for i in range(current, count)])

    def set_configs(self, resource_type: int, resource_name: str, changes: dict[str, str | None]) -> None:
        """Apply config changes (value None deletes the override)."""
        if not changes:
            return
        self.log.append([ConfigRecord(resource_type=resource_type, resource_name=resource_name,
                                      name=k, value=v) for k, v in changes.items()])

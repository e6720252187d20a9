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

from broker.config import ConfigError
from broker.metadata.image import BROKER_RESOURCE, TOPIC_RESOURCE
from broker.metadata.internal_topics import share_state_replication_factor
from broker.replication import placement
from broker.replication.brokers import brokers_from_image
from broker.controller.log_dirs import new_directories
from broker.replication.reassignment import check_target
from broker.metadata.topic_names import collision_key, invalid_reason

log = logging.getLogger("kproto.controller")

# Kafka's QuorumController.MAX_RECORDS_PER_USER_OP: the most records one CreateTopics or
# CreatePartitions request may write (they go to the metadata log as one batch)
MAX_RECORDS_PER_USER_OP = 10_000
# what Kafka's controller answers a request past it (EventHandlerExceptionInfo: BoundedListTooLong)
EXCESSIVE_BATCH = "Unable to perform excessively large batch operation."


class RequestTooLarge(KafkaError):
    """A request past MAX_RECORDS_PER_USER_OP: fails as a whole, not one topic of it."""

    def __init__(self):
        super().__init__(ErrorCode.POLICY_VIOLATION, EXCESSIVE_BATCH)


@dataclass
class TopicSpec:
    """A topic to create, as CreateTopics asks for it."""
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str | None] = field(default_factory=dict)
    assignments: list | None = None


@dataclass
class CreatedTopic:
    """A topic the controller created: what CreateTopics answers."""
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    replication_factor: int
    configs: dict[str, str]


class Controller:
    def __init__(self, node_id: int, metadata_log, image, broker_config, topic_config_validator=None,
                 local_room_check=None):
        self.node_id = node_id
        self.log = metadata_log
        self.image = image
        self.config = broker_config
        # validates topic config overrides: dict -> None, raises KafkaError(INVALID_CONFIG)
        self.validate_topic_configs = topic_config_validator or (lambda configs: None)
        # whether this node can host n more partitions (open files, memory maps): int -> None,
        # raises KafkaError; checked before a change that places replicas here is committed
        self.check_local_room = local_room_check or (lambda partitions: None)
        # the broker is built after the metadata log is replayed: install the dynamic broker
        # configs it holds before anything reads the broker's config
        self.apply_broker_configs()

    # -- topics ----------------------------------------------------------------

    def plan_topic(self, spec: TopicSpec, local_pending: int = 0, check_room: bool = True,
                   budget: int | None = None) -> tuple[CreatedTopic, list]:
        """Validate a topic creation and return the records that perform it
        (``local_pending``: partitions this node takes on from topics planned
        before it in the same request, counted in the room check).
        Raises KafkaError with Kafka's error code and message, checking in the
        order Kafka's controller does: name, collision, existence, configs,
        then partitions and replicas."""
        reason = invalid_reason(spec.name)
        if reason:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
        if spec.name in self.image.topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{spec.name}' already exists.")
        if "." in spec.name or "_" in spec.name:
            key = collision_key(spec.name)
            for other in self.image.topics:
                if collision_key(other) == key:
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                     f"Topic '{spec.name}' collides with existing topic: {other}")
        null_configs = [k for k, v in spec.configs.items() if v is None]
        if null_configs:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             "Null value not supported for topic configs: " + ",".join(null_configs))
        configs = dict(spec.configs)
        self.validate_topic_configs(configs)
        if spec.assignments:
            replicas = self._manual_assignment(spec)
        else:
            n = spec.num_partitions
            rf = spec.replication_factor
            if rf < -1 or rf == 0:
                raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 "Replication factor must be larger than 0, or -1 to use the default value.")
            if n < -1 or n == 0:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                                 "Number of partitions was set to an invalid non-positive value.")
            if n == -1:
                n = self.config.get_int("num.partitions")
            if rf == -1:
                rf = self.config.get_int("default.replication.factor")
            if budget is not None and 1 + len(configs) + n > budget:
                # past what the request may write (``budget`` records left): refused before
                # placing (a count near 2^31 would not fit in memory); placement's own errors first
                self._place_partitions(1, rf)
                raise RequestTooLarge()
            replicas = self._place_partitions(n, rf)
        if check_room:
            self._check_room(replicas, local_pending)
        topic_id = uuid.uuid4()
        records = [TopicRecord(name=spec.name, topic_id=topic_id)]
        for k, v in configs.items():
            records.append(ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=spec.name, name=k, value=v))
        for i, r in enumerate(replicas):
            records.append(self._partition_record(topic_id, i, r, manual=bool(spec.assignments)))
        return CreatedTopic(spec.name, topic_id, len(replicas), len(replicas[0]), configs), records

    def brokers(self):
        """Registered brokers (broker/replication/brokers.py), for placement and elections."""
        return brokers_from_image(self.image, self.node_id, self.config.get("broker.rack") or None)

    def _registered_brokers(self) -> set[int]:
        return set(self.brokers())

    def _place_partitions(self, n: int, rf: int) -> list[list[int]]:
        """Replicas of n new partitions, spread over brokers and racks as Kafka's StripedReplicaPlacer."""
        return placement.place(self.brokers(), n, rf)

    def _place(self, rf: int) -> list[int]:
        """Replicas for one partition (the single registered broker)."""
        brokers = sorted(self._registered_brokers())
        if rf > len(brokers):
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Unable to replicate the partition {rf} time(s): The target replication factor "
                             f"of {rf} cannot be reached because only {len(brokers)} broker(s) are registered.")
        return brokers[:rf]

    def _manual_assignment(self, spec: TopicSpec) -> list[list[int]]:
        if spec.replication_factor != -1:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                             "but replication factor was not set to -1.")
        if spec.num_partitions != -1:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                             "but numPartitions was not set to -1.")
        parts: dict[int, list[int]] = {}
        rf = None
        for index, broker_ids in spec.assignments:
            if index in parts:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Found multiple manual partition assignments for partition {index}")
            self._check_assignment(broker_ids, rf)
            rf = len(broker_ids)
            parts[index] = list(broker_ids)
        for i in range(len(parts)):
            if i not in parts:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 "partitions should be a consecutive 0-based integer sequence")
        return [parts[i] for i in range(len(parts))]

    def _check_assignment(self, broker_ids, rf: int | None) -> None:
        check_target(list(broker_ids), self._registered_brokers())
        if rf is not None and len(broker_ids) != rf:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes "
                             f"a partition with {len(broker_ids)} replica(s), but this is not consistent with "
                             f"previous partitions, which have {rf} replica(s).")

    def _check_room(self, replicas: list[list[int]], local_pending: int = 0) -> None:
        self.check_local_room(local_pending + sum(1 for r in replicas if self.node_id in r))

    def local_partitions(self, records: list) -> int:
        """Partitions of these records this node holds a replica of."""
        return sum(1 for r in records if isinstance(r, PartitionRecord) and self.node_id in r.replicas)

    def _partition_record(self, topic_id, index: int, replicas: list[int] | None = None,
                          manual: bool = False) -> PartitionRecord:
        replicas = list(replicas or [self.node_id])
        # Kafka's ISR at creation is the replicas on active brokers (registered, unfenced, not in
        # controlled shutdown) and the first of them leads: a fenced replica joins the ISR only
        # once it has fetched, as any follower (ReplicationControlManager.createTopic)
        brokers = brokers_from_image(self.image, self.node_id)
        isr = [b for b in replicas if b in brokers and brokers[b].acceptable_leader]
        if not isr:
            if manual:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All brokers specified in the manual "
                                 f"partition assignment for partition {index} are fenced or in controlled shutdown.")
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition "
                             f"{len(replicas)} time(s): All brokers are currently fenced or in controlled shutdown.")
        return PartitionRecord(partition_id=index, topic_id=topic_id, replicas=replicas,
                               isr=isr, removing_replicas=[], adding_replicas=[],
                               leader=isr[0], leader_recovery_state=0, leader_epoch=0,
                               partition_epoch=0, directories=new_directories(self.image, replicas),
                               eligible_leader_replicas=None,
                               last_known_elr=None)

    def create_topic(self, spec: TopicSpec, validate_only: bool = False) -> CreatedTopic:
        """Create a topic (or, with validate_only, only check that it could be);
        the answer carries a topic id either way, as Kafka's does."""
        created, records = self.plan_topic(spec)
        if validate_only:
            return created
        self.log.append(records)
        log.info("created topic %s with %d partition(s)", created.name, created.num_partitions)
        return created

    def create_topics(self, specs: list[TopicSpec], validate_only: bool = False) -> list:
        """Create several topics as Kafka's controller does one CreateTopics request: each
        validated on its own (a CreatedTopic or the KafkaError, in order), the records of all
        that pass appended as one metadata batch, so the metadata log is written and applied,
        and the hosted partitions reconciled, once per request rather than once per topic.
        Raises KafkaError(POLICY_VIOLATION) when they would be more than
        MAX_RECORDS_PER_USER_OP records, as Kafka's controller (nothing is written)."""
        planned: list = []
        total = 0
        for spec in specs:
            try:
                planned.append(self.plan_topic(spec, check_room=False, budget=MAX_RECORDS_PER_USER_OP - total))
            except RequestTooLarge:
                raise
            except KafkaError as exc:
                planned.append(exc)
                continue
            total += len(planned[-1][1])
        if total > MAX_RECORDS_PER_USER_OP:
            # Kafka's controller fails the whole request, validate_only or not
            raise RequestTooLarge()
        out: list = []
        records: list = []
        local = 0   # partitions of the topics planned so far that this node hosts
        for p in planned:
            if isinstance(p, KafkaError):
                out.append(p)
                continue
            created, recs = p
            try:
                self.check_local_room(local + self.local_partitions(recs))
            except KafkaError as exc:
                out.append(exc)
                continue
            out.append(created)
            records.extend(recs)
            local += self.local_partitions(recs)
        if records and not validate_only:
            try:
                self.log.append(records)
            except KafkaError as exc:   # (NOT_CONTROLLER: a quorum's leadership moved) every topic's
                return [exc if isinstance(c, CreatedTopic) else c for c in out]
            for created in out:
                if isinstance(created, CreatedTopic):
                    log.info("created topic %s with %d partition(s)", created.name, created.num_partitions)
        return out

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
            self.create_topic(TopicSpec(name, partitions, _internal_rf(self.config, name), dict(configs)))

    def delete_topic(self, name: str) -> uuid.UUID:
        t = self.image.topics.get(name)
        if t is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        self.delete_topics([t.topic_id])
        return t.topic_id

    def delete_topics(self, topic_ids) -> None:
        """Remove these topics (with their configs) in one metadata batch."""
        records = []
        for topic_id in topic_ids:
            if topic_id not in self.image.topics_by_id:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")
            records.append(RemoveTopicRecord(topic_id=topic_id))
        if not records:
            return
        names = [self.image.topics_by_id[i].name for i in topic_ids]
        self.log.append(records)
        log.info("deleted topic(s) %s", ", ".join(names))

    def plan_partitions(self, name: str, count: int, assignments: list[list[int]] | None = None) -> list:
        """Validate growing a topic to `count` partitions, as Kafka's controller, with its
        messages; the PartitionRecords that do it."""
        t = self.image.topics.get(name)
        if t is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)   # Kafka sends no message here
        current = len(t.partitions)
        if count == current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
        if count < current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"The topic {name} currently has {current} "
                             f"partition(s); {count} would not be an increase.")
        additional = count - current
        if assignments is not None and len(assignments) != additional:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Attempted to add {additional} additional partition(s), but only "
                             f"{len(assignments)} assignment(s) were specified.")
        rf = len(next(iter(t.partitions.values())).replicas) if t.partitions else 1
        if assignments is not None:
            for broker_ids in assignments:
                self._check_assignment(broker_ids, rf)
            replicas = [list(a) for a in assignments]
        else:
            replicas = self._place_partitions(additional, rf)
        return [self._partition_record(t.topic_id, current + i, r, manual=assignments is not None)
                for i, r in enumerate(replicas)]

    def create_partitions(self, changes: list[tuple[str, int, list | None]], validate_only: bool = False) -> list:
        """One CreatePartitions request, as Kafka's controller: each (name, count, assignments)
        validated on its own (None or the KafkaError, in order), the records of all that pass
        appended as one metadata batch. A topic whose partitions would take the request past
        MAX_RECORDS_PER_USER_OP records, and every topic after it, fails as in Kafka (its
        controller's catch-all: UNKNOWN_SERVER_ERROR, no message); unlike Kafka, none of that
        topic's partitions are created (Kafka keeps those that fitted under the cap)."""
        out: list = []
        records: list = []
        full = False
        local = 0
        for name, count, assignments in changes:
            try:
                recs = self.plan_partitions(name, count, assignments)
                if full or len(records) + len(recs) > MAX_RECORDS_PER_USER_OP:
                    full = True
                    raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, None)
                self.check_local_room(local + self.local_partitions(recs))
            except KafkaError as exc:
                out.append(exc)
                continue
            out.append(None)
            records.extend(recs)
            local += self.local_partitions(recs)
        if records and not validate_only:
            try:
                self.log.append(records)
            except KafkaError as exc:   # (NOT_CONTROLLER: a quorum's leadership moved) every topic's
                return [exc if r is None else r for r in out]
            for (name, count, _), r in zip(changes, out):
                if r is None:
                    log.info("topic %s now has %d partition(s)", name, count)
        return out

    def set_configs(self, resource_type: int, resource_name: str, changes: dict[str, str | None]) -> None:
        """Apply config changes (value None deletes the override)."""
        if not changes:
            return
        self.log.append([ConfigRecord(resource_type=resource_type, resource_name=resource_name,
                                      name=k, value=v) for k, v in changes.items()])

    # -- dynamic broker configs --------------------------------------------------

    def _broker_resource_name(self, per_broker: bool) -> str:
        return str(self.node_id) if per_broker else ""

    def dynamic_broker_configs(self, per_broker: bool) -> dict[str, str]:
        """The stored dynamic configs of this broker (per_broker) or of the cluster default."""
        return dict(self.image.configs.get((BROKER_RESOURCE, self._broker_resource_name(per_broker)), {}))

    def apply_broker_configs(self) -> None:
        """Install the dynamic broker configs the metadata log holds into the broker's config.
        Kafka logs and skips stored dynamic configs it cannot apply; so does this."""
        per_broker, cluster_default = self.dynamic_broker_configs(True), self.dynamic_broker_configs(False)
        if not (per_broker or cluster_default or self.config.dynamic_broker_configs
                or self.config.dynamic_default_configs):
            return
        try:
            self.config.set_dynamic(per_broker=per_broker, cluster_default=cluster_default)
        except ConfigError as exc:
            log.error("stored dynamic broker configs were not applied: %s", exc.message)

    def alter_broker_configs(self, per_broker: bool, new_configs: dict[str, str],
                             validate_only: bool = False) -> None:
        """Replace the dynamic configs of this broker (per_broker) or of the cluster default with
        `new_configs`, persisted as ConfigRecords (resource type BROKER) so a restart replays them.
        Raises KafkaError(INVALID_REQUEST) with Kafka's message when the set cannot be applied."""
        old_broker = dict(self.config.dynamic_broker_configs)
        old_default = dict(self.config.dynamic_default_configs)
        layer = {"per_broker" if per_broker else "cluster_default": dict(new_configs)}
        try:
            self.config.set_dynamic(**layer)   # validates the whole resulting config; unchanged on error
        except ConfigError as exc:
            raise KafkaError(exc.error_code, exc.message) from None
        only_per_broker = [] if per_broker else sorted(k for k in new_configs if _per_broker_only(k))
        if only_per_broker:
            self.config.set_dynamic(per_broker=old_broker, cluster_default=old_default)
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Cannot update these configs at default cluster "
                             "level, broker id must be specified: Set(" + ", ".join(only_per_broker) + ")")
        if validate_only:
            self.config.set_dynamic(per_broker=old_broker, cluster_default=old_default)
            return
        current = self.dynamic_broker_configs(per_broker)
        changes: dict[str, str | None] = {k: None for k in current if k not in new_configs}
        # Kafka writes every named key even when unchanged, so brokers reload it
        changes.update(new_configs)
        try:
            self.set_configs(BROKER_RESOURCE, self._broker_resource_name(per_broker), changes)
        except BaseException:
            self.config.set_dynamic(per_broker=old_broker, cluster_default=old_default)
            raise
        self.apply_broker_configs()

    def stored_broker_configs(self, node_id: int) -> dict[str, str]:
        """The dynamic configs the metadata log holds for broker `node_id`."""
        return dict(self.image.configs.get((BROKER_RESOURCE, str(node_id)), {}))

    def alter_other_broker_configs(self, node_id: int, new_configs: dict[str, str],
                                   validate_only: bool = False) -> None:
        """Replace the dynamic configs of another broker (a request it forwarded to this active
        controller): as Kafka's controller, ConfigRecords only; that broker validated the set
        against its own config before forwarding, and applies it once the records reach it."""
        if validate_only:
            return
        current = self.stored_broker_configs(node_id)
        changes: dict[str, str | None] = {k: None for k in current if k not in new_configs}
        changes.update(new_configs)
        self.set_configs(BROKER_RESOURCE, str(node_id), changes)

    def broker_configs_changed(self, records: list) -> bool:
        """Whether metadata records (an empty list: the image was replaced) touch this broker's
        dynamic configs or the cluster default; they are installed into the running config then."""
        names = ("", str(self.node_id))
        if records and not any(isinstance(r, ConfigRecord) and r.resource_type == BROKER_RESOURCE
                               and r.resource_name in names for r in records):
            return False
        self.apply_broker_configs()
        return True


def _internal_rf(config, name: str) -> int:
    """offsets.topic.replication.factor / transaction.state.log.replication.factor for the internal topics."""
    key = {"__consumer_offsets": "offsets.topic.replication.factor",
           "__transaction_state": "transaction.state.log.replication.factor"}.get(name)
    if name == "__remote_log_metadata":
        # rlmm.config.remote.log.metadata.topic.replication.factor (default 3), at most the brokers
        raw = next((layer.get("rlmm.config.remote.log.metadata.topic.replication.factor")
                    for _src, layer in config.layers()
                    if layer.get("rlmm.config.remote.log.metadata.topic.replication.factor")), None)
        return int(raw) if raw else 3
    if name == "__share_group_state":
        return share_state_replication_factor(config)
    return config.get_int(key) if key else 1


# Dynamic broker configs that only make sense per broker (Kafka's DynamicBrokerConfig.PerBrokerConfigs):
# listener, SSL and SASL settings, alone or with a listener prefix (except the cluster-level ones).
_PER_BROKER_EXACT = {"listeners", "advertised.listeners", "listener.security.protocol.map", "principal.builder.class"}
_CLUSTER_LEVEL_LISTENER_CONFIGS = {"max.connections", "max.connection.creation.rate", "num.network.threads"}


def _per_broker_only(name: str) -> bool:
    if name.startswith("listener.name."):
        base = name.split(".", 3)[3] if name.count(".") >= 3 else ""
        return base not in _CLUSTER_LEVEL_LISTENER_CONFIGS
    return name in _PER_BROKER_EXACT or name.startswith(("ssl.", "sasl."))

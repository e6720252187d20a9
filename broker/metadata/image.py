"""The metadata image: topics, partitions, configs and producer-id blocks as
replayed from the metadata log. Applying a record is the only way it changes,
so replay after a restart rebuilds exactly the state the log describes."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field

TOPIC_RESOURCE = 2
_UNASSIGNED = uuid.UUID(int=0)   # DirectoryId.UNASSIGNED (broker/controller/log_dirs.py)
BROKER_RESOURCE = 4


@dataclass
class PartitionImage:
    """A partition in the metadata image: replicas, ISR, leader and epochs."""
    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int
    partition_epoch: int
    # an ongoing reassignment (KIP-455): replicas being added / removed; both empty otherwise
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)
    # the log dir (directory.id) of each replica, in replica order (KIP-858); UNASSIGNED
    # (uuid 0) until the broker says where it placed it
    directories: list = field(default_factory=list)


@dataclass
class TopicImage:
    """A topic in the metadata image: its id, partitions and configs."""
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionImage] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)
    # bumped by every record that changes one of the topic's partitions, so a reader may keep
    # what it derives from them (Metadata's encoded partition arrays) until the next change
    epoch: int = field(default=0, compare=False)
    # that derived data, each entry tagged with the epochs it was built at (readers' own keys)
    derived: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def internal(self) -> bool:
        return self.name in ("__consumer_offsets", "__transaction_state")


def _directories(dirs, n: int) -> list:
    """A PartitionRecord's Directories, or UNASSIGNED for each replica when it names none
    (records from before metadata.version 3.7-IV2)."""
    dirs = list(dirs or [])
    return dirs if len(dirs) == n else [_UNASSIGNED] * n


class MetadataImage:
    def __init__(self):
        self.topics: dict[str, TopicImage] = {}
        self.topics_by_id: dict[uuid.UUID, TopicImage] = {}
        # configs of resources that are not topics: (type, name) -> {key: value}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        self.next_producer_id = 0
        self.features: dict[str, int] = {}
        self.offset = -1  # offset of the last applied record batch
        # SCRAM credentials: (user, mechanism id) -> (salt, stored key, server key, iterations)
        self.scram: dict[tuple[str, int], tuple[bytes, bytes, bytes, int]] = {}
        self.acls: dict = {}  # ACL id (uuid) -> broker.security.acls.Acl
        # client quotas: frozenset of (entity type, name or None for the default) -> {key: value}
        self.client_quotas: dict[frozenset, dict[str, float]] = {}
        self.delegation_tokens: dict = {}  # token id -> DelegationTokenRecord (the latest for it)
        # registered brokers (a multi-node quorum): broker id -> RegisterBrokerRecord, with .fenced kept current
        self.brokers: dict = {}
        # registered controllers (KIP-919): controller id -> RegisterControllerRecord
        self.controllers: dict = {}
        # bumped by every change to broker registrations (fencing, log dirs): with a topic's
        # epoch, what tells a reader that its derived offline replicas are still current
        self.brokers_epoch = 0
        # records that name a topic, partition or broker the image does not have. Kafka's loader
        # reports each as a fault (an ERROR line, the metadata-apply-error-count metric) and goes
        # on with the next record: on_fault(message) reports it (set by the broker; the image does
        # no I/O), and both survive a reset of the image to a snapshot
        self.apply_errors = 0
        self.on_fault = None

    def apply(self, record) -> None:
        handler = getattr(self, "_apply_" + type(record).__name__, None)
        if handler is not None:
            handler(record)

    def _fault(self, what: str) -> None:
        self.apply_errors += 1
        if self.on_fault is not None:
            self.on_fault(what)

    def _apply_TopicRecord(self, r):
        t = TopicImage(r.name, r.topic_id)
        # a topic's configs may arrive before its TopicRecord (CreateTopics
        # writes them in the same batch, topic first; keep both orders safe)
        t.configs.update(self.configs.pop((TOPIC_RESOURCE, r.name), {}))
        self.topics[r.name] = t
        self.topics_by_id[r.topic_id] = t

    def _apply_PartitionRecord(self, r):
        t = self.topics_by_id.get(r.topic_id)
        if t is None:
            self._fault(f"PartitionRecord for partition {r.partition_id} of unknown topic id {r.topic_id}")
            return
        t.epoch += 1
        t.partitions[r.partition_id] = PartitionImage(
            r.partition_id, list(r.replicas), list(r.isr), r.leader, r.leader_epoch, r.partition_epoch,
            list(r.adding_replicas or []), list(r.removing_replicas or []),
            _directories(r.directories, len(r.replicas)))

    def _apply_PartitionChangeRecord(self, r):
        t = self.topics_by_id.get(r.topic_id)
        p = t.partitions.get(r.partition_id) if t else None
        if p is None:
            self._fault(f"PartitionChangeRecord for unknown partition {r.partition_id} of topic "
                        f"{t.name if t else f'id {r.topic_id} (unknown)'}")
            return
        t.epoch += 1
        if r.leader != -2:
            p.leader = r.leader
            p.leader_epoch += 1
        if r.isr is not None:
            p.isr = list(r.isr)
        if r.replicas is not None:
            # replicas kept keep their dir, new ones are UNASSIGNED (unless the record names them)
            old = dict(zip(p.replicas, p.directories)) if len(p.directories) == len(p.replicas) else {}
            p.replicas = list(r.replicas)
            p.directories = [old.get(b, _UNASSIGNED) for b in p.replicas]
        if r.directories is not None and len(r.directories) == len(p.replicas):
            p.directories = list(r.directories)
        if r.adding_replicas is not None:
            p.adding_replicas = list(r.adding_replicas)
        if r.removing_replicas is not None:
            p.removing_replicas = list(r.removing_replicas)
        p.partition_epoch += 1

    def _apply_RemoveTopicRecord(self, r):
        t = self.topics_by_id.pop(r.topic_id, None)
        if t is None:
            self._fault(f"RemoveTopicRecord for unknown topic id {r.topic_id}")
        else:
            self.topics.pop(t.name, None)

    def _apply_ConfigRecord(self, r):
        if r.resource_type == TOPIC_RESOURCE and r.resource_name in self.topics:
            target = self.topics[r.resource_name].configs
        else:
            target = self.configs.setdefault((r.resource_type, r.resource_name), {})
        if r.value is None:
            target.pop(r.name, None)
        else:
            target[r.name] = r.value

    def _apply_ProducerIdsRecord(self, r):
        self.next_producer_id = max(self.next_producer_id, r.next_producer_id)

    def _apply_FeatureLevelRecord(self, r):
        self.features[r.name] = r.feature_level

    def _apply_UserScramCredentialRecord(self, r):
        self.scram[(r.name, r.mechanism)] = (bytes(r.salt), bytes(r.stored_key), bytes(r.server_key),
                                             r.iterations)

    def _apply_RemoveUserScramCredentialRecord(self, r):
        self.scram.pop((r.name, r.mechanism), None)

    def _apply_AccessControlEntryRecord(self, r):
        from broker.security.acls import Acl
        self.acls[r.id] = Acl.from_record(r)

    def _apply_RemoveAccessControlEntryRecord(self, r):
        self.acls.pop(r.id, None)

    def _apply_ClientQuotaRecord(self, r):
        entity = frozenset((e.entity_type, e.entity_name) for e in r.entity)
        values = self.client_quotas.setdefault(entity, {})
        if r.remove:
            values.pop(r.key, None)
            if not values:
                del self.client_quotas[entity]
        else:
            values[r.key] = r.value

    def _apply_DelegationTokenRecord(self, r):
        self.delegation_tokens[r.token_id] = r

    def _apply_RemoveDelegationTokenRecord(self, r):
        self.delegation_tokens.pop(r.token_id, None)

    def _apply_RegisterBrokerRecord(self, r):
        self.brokers_epoch += 1
        self.brokers[r.broker_id] = r

    def _apply_RegisterControllerRecord(self, r):
        self.controllers[r.controller_id] = r

    def _apply_UnregisterBrokerRecord(self, r):
        self.brokers_epoch += 1
        self.brokers.pop(r.broker_id, None)

    def _apply_FenceBrokerRecord(self, r):
        self.brokers_epoch += 1
        if r.id in self.brokers:
            self.brokers[r.id].fenced = True

    def _apply_UnfenceBrokerRecord(self, r):
        self.brokers_epoch += 1
        if r.id in self.brokers:
            self.brokers[r.id].fenced = False

    def _apply_BrokerRegistrationChangeRecord(self, r):
        self.brokers_epoch += 1
        # Kafka's encoding: fenced 1 fences, -1 unfences, 0 leaves it; in_controlled_shutdown 1 sets it
        b = self.brokers.get(r.broker_id)
        if b is None:
            self._fault(f"BrokerRegistrationChangeRecord for unregistered broker {r.broker_id}")
            return
        if r.fenced == 1:
            b.fenced = True
        elif r.fenced == -1:
            b.fenced = False
        if getattr(r, "in_controlled_shutdown", 0) == 1:
            b.in_controlled_shutdown = True
        if getattr(r, "log_dirs", None):
            # the broker's online log dirs (KIP-858: the failed ones left out); empty: unchanged
            b.log_dirs = list(r.log_dirs)

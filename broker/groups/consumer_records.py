"""The `__consumer_offsets` records of KIP-848 consumer groups, as Kafka's
group coordinator writes them (CoordinatorRecordHelpers): a key is its
record type (3-8) as an int16, then the key struct at version 0; values are
version 0. A consumer group is its
metadata (epoch), its subscribed topics' metadata, each member's metadata,
the target assignment (epoch and per member) and each member's current
assignment; tombstones remove them. Replaying them rebuilds the group, so
it survives a broker restart."""
from __future__ import annotations

import functools
import struct

from broker.groups.consumer_model import ClassicInfo, ConsumerGroup, ConsumerMember

_VERSION = struct.Struct(">h")

GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT = 3, 4, 5, 6, 7, 8
_KINDS = frozenset((GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER,
                    CURRENT_ASSIGNMENT))


@functools.cache
def codecs() -> tuple[dict, dict]:
    """(record type -> key struct, record type -> value struct)."""
    # imported at the first KIP-848 record written or replayed: a single node serving classic groups
    # never loads these twelve codec modules (issue 26)
    from kproto.coordinator.consumer_group_current_member_assignment_key import (
        ConsumerGroupCurrentMemberAssignmentKey,
    )
    from kproto.coordinator.consumer_group_current_member_assignment_value import (
        ConsumerGroupCurrentMemberAssignmentValue,
    )
    from kproto.coordinator.consumer_group_member_metadata_key import ConsumerGroupMemberMetadataKey
    from kproto.coordinator.consumer_group_member_metadata_value import ConsumerGroupMemberMetadataValue
    from kproto.coordinator.consumer_group_metadata_key import ConsumerGroupMetadataKey
    from kproto.coordinator.consumer_group_metadata_value import ConsumerGroupMetadataValue
    from kproto.coordinator.consumer_group_partition_metadata_key import ConsumerGroupPartitionMetadataKey
    from kproto.coordinator.consumer_group_partition_metadata_value import ConsumerGroupPartitionMetadataValue
    from kproto.coordinator.consumer_group_target_assignment_member_key import (
        ConsumerGroupTargetAssignmentMemberKey,
    )
    from kproto.coordinator.consumer_group_target_assignment_member_value import (
        ConsumerGroupTargetAssignmentMemberValue,
    )
    from kproto.coordinator.consumer_group_target_assignment_metadata_key import (
        ConsumerGroupTargetAssignmentMetadataKey,
    )
    from kproto.coordinator.consumer_group_target_assignment_metadata_value import (
        ConsumerGroupTargetAssignmentMetadataValue,
    )
    keys = {
        GROUP_METADATA: ConsumerGroupMetadataKey,
        PARTITION_METADATA: ConsumerGroupPartitionMetadataKey,
        MEMBER_METADATA: ConsumerGroupMemberMetadataKey,
        TARGET_METADATA: ConsumerGroupTargetAssignmentMetadataKey,
        TARGET_MEMBER: ConsumerGroupTargetAssignmentMemberKey,
        CURRENT_ASSIGNMENT: ConsumerGroupCurrentMemberAssignmentKey,
    }
    values = {
        GROUP_METADATA: ConsumerGroupMetadataValue,
        PARTITION_METADATA: ConsumerGroupPartitionMetadataValue,
        MEMBER_METADATA: ConsumerGroupMemberMetadataValue,
        TARGET_METADATA: ConsumerGroupTargetAssignmentMetadataValue,
        TARGET_MEMBER: ConsumerGroupTargetAssignmentMemberValue,
        CURRENT_ASSIGNMENT: ConsumerGroupCurrentMemberAssignmentValue,
    }
    return keys, values


def prefixed(version: int, obj) -> bytes:
    out = bytearray(_VERSION.pack(version))
    obj.encode_into(out, version)
    return bytes(out)


def key_of(cls, group_id: str, member_id: str | None = None) -> bytes:
    """A coordinator key: its record type (the struct's API_KEY) as an int16, then the key at version 0."""
    obj = cls(group_id=group_id) if member_id is None else cls(group_id=group_id, member_id=member_id)
    out = bytearray(_VERSION.pack(cls.API_KEY))
    obj.encode_into(out, 0)
    return bytes(out)


def _key(kind: int, group_id: str, member_id: str | None = None) -> bytes:
    return key_of(codecs()[0][kind], group_id, member_id)


def _value(kind: int):
    return codecs()[1][kind]


def topic_partitions(cls, assignment: dict) -> list:
    return [cls(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(assignment.items(), key=lambda kv: str(kv[0]))
            if ps]


def group_epoch_record(group: ConsumerGroup) -> tuple:
    return _key(GROUP_METADATA, group.group_id), prefixed(0, _value(GROUP_METADATA)(epoch=group.group_epoch))


def partition_metadata_record(group: ConsumerGroup) -> tuple:
    cls = _value(PARTITION_METADATA)
    topics = [cls.TopicMetadata(topic_id=tid, topic_name=name, num_partitions=n, partition_metadata=[])
              for name, (tid, n) in sorted(group.subscription_metadata.items())]
    return (_key(PARTITION_METADATA, group.group_id),
            prefixed(0, cls(topics=topics)))


def member_metadata_record(group_id: str, m: ConsumerMember) -> tuple:
    cls = _value(MEMBER_METADATA)
    value = cls(
        instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
        subscribed_topic_names=list(m.subscribed_topic_names), subscribed_topic_regex=m.subscribed_topic_regex,
        rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor,
        classic_member_metadata=None if m.classic is None else cls.ClassicMemberMetadata(
            session_timeout_ms=m.classic.session_timeout_ms,
            supported_protocols=[cls.ClassicProtocol(name=n, metadata=d) for n, d in m.classic.protocols]))
    return _key(MEMBER_METADATA, group_id, m.member_id), prefixed(0, value)


def target_metadata_record(group: ConsumerGroup) -> tuple:
    return (_key(TARGET_METADATA, group.group_id),
            prefixed(0, _value(TARGET_METADATA)(assignment_epoch=group.assignment_epoch)))


def target_member_record(group_id: str, member_id: str, assignment: dict) -> tuple:
    cls = _value(TARGET_MEMBER)
    return (_key(TARGET_MEMBER, group_id, member_id),
            prefixed(0, cls(topic_partitions=topic_partitions(cls.TopicPartition, assignment))))


def current_assignment_record(group_id: str, m: ConsumerMember) -> tuple:
    cls = _value(CURRENT_ASSIGNMENT)
    value = cls(
        member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=m.state,
        assigned_partitions=topic_partitions(cls.TopicPartitions, m.assigned),
        partitions_pending_revocation=topic_partitions(cls.TopicPartitions, m.pending_revocation))
    return _key(CURRENT_ASSIGNMENT, group_id, m.member_id), prefixed(0, value)


def member_tombstones(group_id: str, member_id: str) -> list:
    """In Kafka's order: current assignment, target assignment, member metadata."""
    return [(_key(CURRENT_ASSIGNMENT, group_id, member_id), None),
            (_key(TARGET_MEMBER, group_id, member_id), None),
            (_key(MEMBER_METADATA, group_id, member_id), None)]


def group_tombstones(group: ConsumerGroup) -> list:
    out = []
    for member_id in group.members:
        out.extend(member_tombstones(group.group_id, member_id))
    out += [(_key(TARGET_METADATA, group.group_id), None),
            (_key(PARTITION_METADATA, group.group_id), None),
            (_key(GROUP_METADATA, group.group_id), None)]
    return out


# ---------------------------------------------------------------- replay

class ConsumerKey:
    __slots__ = ("kind", "group", "member")

    def __init__(self, kind: int, group: str, member: str | None):
        self.kind = kind
        self.group = group
        self.member = member


def decode_key_of(kinds: frozenset, tables, data) -> ConsumerKey | None:
    """The key of a record whose type is in `kinds`, None for another type; `tables()` gives (type ->
    key struct, type -> value struct). (Share groups' records are read with it too:
    broker/groups/share_records.py.)"""
    mv = memoryview(data)
    if len(mv) < 2:
        return None
    kind, = _VERSION.unpack_from(mv, 0)
    if kind not in kinds:
        return None
    k = tables()[0][kind].decode(mv, 0, 2)
    return ConsumerKey(kind, k.group_id, getattr(k, "member_id", None))


def decode_value_of(tables, kind: int, data):
    mv = memoryview(data)
    version, = _VERSION.unpack_from(mv, 0)
    return tables()[1][kind].decode(mv, version, 2)


def decode_key(data) -> ConsumerKey | None:
    return decode_key_of(_KINDS, codecs, data)


def decode_value(kind: int, data):
    return decode_value_of(codecs, kind, data)


def replay_member(table: dict, key: ConsumerKey, value) -> None:
    """A member's record in its table (member id -> value): the last one wins, a tombstone removes."""
    if value is None:
        table.pop(key.member, None)
    else:
        table[key.member] = value


class ConsumerGroupLoad:
    """The last record per key of one consumer group, as replayed."""

    def __init__(self):
        self.epoch: int | None = None
        self.partition_metadata = None
        self.assignment_epoch = 0
        self.members: dict[str, object] = {}
        self.targets: dict[str, object] = {}
        self.current: dict[str, object] = {}

    def apply(self, key: ConsumerKey, value) -> None:
        kind = key.kind
        if kind == GROUP_METADATA:
            self.epoch = None if value is None else value.epoch
        elif kind == PARTITION_METADATA:
            self.partition_metadata = value
        elif kind == TARGET_METADATA:
            self.assignment_epoch = 0 if value is None else value.assignment_epoch
        else:
            replay_member({MEMBER_METADATA: self.members, TARGET_MEMBER: self.targets,
                           CURRENT_ASSIGNMENT: self.current}[kind], key, value)

    def build(self, group_id: str) -> ConsumerGroup | None:
        if self.epoch is None:
            return None
        group = ConsumerGroup(group_id, None)
        group.group_epoch = self.epoch
        group.assignment_epoch = self.assignment_epoch
        if self.partition_metadata is not None:
            group.subscription_metadata = {t.topic_name: (t.topic_id, t.num_partitions)
                                           for t in self.partition_metadata.topics}
        for member_id, v in self.members.items():
            m = ConsumerMember(member_id, v.instance_id, v.rack_id, v.client_id, v.client_host,
                               v.rebalance_timeout_ms, list(v.subscribed_topic_names or []),
                               v.subscribed_topic_regex, v.server_assignor)
            if v.classic_member_metadata is not None:
                m.classic = ClassicInfo(v.classic_member_metadata.session_timeout_ms,
                                        [(p.name, bytes(p.metadata))
                                         for p in v.classic_member_metadata.supported_protocols])
            cur = self.current.get(member_id)
            if cur is not None:
                m.member_epoch = cur.member_epoch
                m.previous_member_epoch = cur.previous_member_epoch
                m.state = cur.state
                m.assigned = {tp.topic_id: set(tp.partitions) for tp in cur.assigned_partitions if tp.partitions}
                m.pending_revocation = {tp.topic_id: set(tp.partitions)
                                        for tp in cur.partitions_pending_revocation if tp.partitions}
            group.members[member_id] = m
        for member_id, v in self.targets.items():
            if member_id in group.members:
                group.target[member_id] = {tp.topic_id: set(tp.partitions) for tp in v.topic_partitions}
        return group

"""The `__consumer_offsets` records of share groups' membership (KIP-932), as Kafka 4.3's group
coordinator writes them (GroupCoordinatorRecordHelpers): record types 10-14, a key being its type as
an int16 then the key struct at version 0, a value its version (0) then the struct. A share group is
its metadata (group epoch and metadata hash, 11), each member's metadata (10), the target assignment
(epoch and, KIP-1263, the tagged time it was computed, 12; per member, 13) and each member's current
assignment (14); tombstones remove them. Type 15 (where its share-partition state is) is
share_metadata.py's.

The membership state machine (broker/share/membership.py) says which records a change makes; this
module encodes them and decodes them on a load (the last record per key wins: `ShareGroupLoad`). The
group state machine's part is ShareRecordsMixin (broker/groups/share_mixins.py): `put_share_records`
appends them to the group's partition and answers once they are replicated, and a partition's
replayed share groups wait in `share_loads` until the share-group shell takes them (it lives a layer
above: the state machine only carries them)."""
from __future__ import annotations

import functools
from dataclasses import dataclass

from broker.groups.consumer_records import (
    ConsumerKey, decode_key_of, decode_value_of, key_of, prefixed, replay_member, topic_partitions,
)

MEMBER_METADATA, GROUP_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT = 10, 11, 12, 13, 14
_KINDS = frozenset((MEMBER_METADATA, GROUP_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT))
# Kafka's MemberState.STABLE: a share member has no revocation step, so it is always this
MEMBER_STABLE = 0


@functools.cache
def codecs() -> tuple[dict, dict]:
    """(record type -> key struct, record type -> value struct)."""
    # imported at the first share-group record written or replayed: a single node without share
    # groups never loads these ten codec modules (issue 26)
    from kproto.coordinator.share_group_current_member_assignment_key import ShareGroupCurrentMemberAssignmentKey
    from kproto.coordinator.share_group_current_member_assignment_value import (
        ShareGroupCurrentMemberAssignmentValue,
    )
    from kproto.coordinator.share_group_member_metadata_key import ShareGroupMemberMetadataKey
    from kproto.coordinator.share_group_member_metadata_value import ShareGroupMemberMetadataValue
    from kproto.coordinator.share_group_metadata_key import ShareGroupMetadataKey
    from kproto.coordinator.share_group_metadata_value import ShareGroupMetadataValue
    from kproto.coordinator.share_group_target_assignment_member_key import ShareGroupTargetAssignmentMemberKey
    from kproto.coordinator.share_group_target_assignment_member_value import (
        ShareGroupTargetAssignmentMemberValue,
    )
    from kproto.coordinator.share_group_target_assignment_metadata_key import (
        ShareGroupTargetAssignmentMetadataKey,
    )
    from kproto.coordinator.share_group_target_assignment_metadata_value import (
        ShareGroupTargetAssignmentMetadataValue,
    )
    keys = {
        MEMBER_METADATA: ShareGroupMemberMetadataKey,
        GROUP_METADATA: ShareGroupMetadataKey,
        TARGET_METADATA: ShareGroupTargetAssignmentMetadataKey,
        TARGET_MEMBER: ShareGroupTargetAssignmentMemberKey,
        CURRENT_ASSIGNMENT: ShareGroupCurrentMemberAssignmentKey,
    }
    values = {
        MEMBER_METADATA: ShareGroupMemberMetadataValue,
        GROUP_METADATA: ShareGroupMetadataValue,
        TARGET_METADATA: ShareGroupTargetAssignmentMetadataValue,
        TARGET_MEMBER: ShareGroupTargetAssignmentMemberValue,
        CURRENT_ASSIGNMENT: ShareGroupCurrentMemberAssignmentValue,
    }
    return keys, values


def _key(kind: int, group_id: str, member_id: str | None = None) -> bytes:
    return key_of(codecs()[0][kind], group_id, member_id)


def _value(kind: int):
    return codecs()[1][kind]


# ---------------------------------------------------------------- writing

def group_epoch_record(group_id: str, epoch: int, metadata_hash: int) -> tuple:
    return (_key(GROUP_METADATA, group_id),
            prefixed(0, _value(GROUP_METADATA)(epoch=epoch, metadata_hash=metadata_hash)))


def member_metadata_record(group_id: str, m) -> tuple:
    """m: a member (member_id, rack_id, client_id, client_host, subscribed)."""
    value = _value(MEMBER_METADATA)(rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
                                    subscribed_topic_names=list(m.subscribed))
    return _key(MEMBER_METADATA, group_id, m.member_id), prefixed(0, value)


def target_metadata_record(group_id: str, assignment_epoch: int, assignment_ms: int | None) -> tuple:
    """assignment_ms None (never computed with a clock) is written as Kafka's default, 0."""
    value = _value(TARGET_METADATA)(assignment_epoch=assignment_epoch, assignment_timestamp=assignment_ms or 0)
    return _key(TARGET_METADATA, group_id), prefixed(0, value)


def target_member_record(group_id: str, member_id: str, assignment: dict) -> tuple:
    cls = _value(TARGET_MEMBER)
    value = cls(topic_partitions=topic_partitions(cls.TopicPartition, assignment))
    return _key(TARGET_MEMBER, group_id, member_id), prefixed(0, value)


def current_assignment_record(group_id: str, m) -> tuple:
    """m: a member (member_id, member_epoch, previous_member_epoch, current: what it was told)."""
    cls = _value(CURRENT_ASSIGNMENT)
    value = cls(
        member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=MEMBER_STABLE,
        assigned_partitions=topic_partitions(cls.TopicPartitions, m.current))
    return _key(CURRENT_ASSIGNMENT, group_id, m.member_id), prefixed(0, value)


def member_tombstones(group_id: str, member_id: str) -> list:
    """In Kafka's order: current assignment, target assignment, member metadata."""
    return [(_key(kind, group_id, member_id), None) for kind in (CURRENT_ASSIGNMENT, TARGET_MEMBER, MEMBER_METADATA)]


def group_tombstones(group_id: str, member_ids) -> list:
    """Every record of the group (Kafka's createGroupTombstoneRecords for a share group)."""
    out = []
    for member_id in member_ids:
        out.extend(member_tombstones(group_id, member_id))
    out += [(_key(TARGET_METADATA, group_id), None), (_key(GROUP_METADATA, group_id), None)]
    return out


# ---------------------------------------------------------------- replay

def decode_key(data) -> ConsumerKey | None:
    """The key (kind, group, member) of a type 10-14 record, None for another type."""
    return decode_key_of(_KINDS, codecs, data)


def decode_value(kind: int, data):
    return decode_value_of(codecs, kind, data)


class ShareGroupLoad:
    """The last record per key of one share group, as replayed (Kafka's replay of records 10-14);
    the share-group shell builds the group from it."""

    def __init__(self):
        self.epoch: int | None = None          # None: no group metadata record (or its tombstone)
        self.metadata_hash = 0
        self.assignment_epoch = 0
        self.assignment_timestamp = 0
        # member id -> its ShareGroupMemberMetadataValue, ...TargetAssignmentMemberValue,
        # ...CurrentMemberAssignmentValue
        self.members: dict[str, object] = {}
        self.targets: dict[str, object] = {}
        self.current: dict[str, object] = {}

    def apply(self, key: ConsumerKey, value) -> None:
        kind = key.kind
        if kind == GROUP_METADATA:
            self.epoch = None if value is None else value.epoch
            self.metadata_hash = 0 if value is None else value.metadata_hash
        elif kind == TARGET_METADATA:
            self.assignment_epoch = 0 if value is None else value.assignment_epoch
            self.assignment_timestamp = 0 if value is None else value.assignment_timestamp
        else:
            replay_member({MEMBER_METADATA: self.members, TARGET_MEMBER: self.targets,
                           CURRENT_ASSIGNMENT: self.current}[kind], key, value)


def partitions_of(topic_partitions_list) -> dict:
    """topic id -> sorted partitions, of a record's TopicPartition(s) list."""
    return {tp.topic_id: sorted(tp.partitions) for tp in topic_partitions_list if tp.partitions}


# ---------------------------------------------------------------- the state machine's answer
# (its part is broker/groups/share_mixins.py)

@dataclass
class ShareRecordsResult:
    """The outcome of writing a share group's membership records."""
    error: int

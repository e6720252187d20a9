"""The `__consumer_offsets` records of share groups' membership (KIP-932), as Kafka 4.3's group
coordinator writes them (GroupCoordinatorRecordHelpers): record types 10-14, a key being its type as
an int16 then the key struct at version 0, a value its version (0) then the struct. A share group is
its metadata (group epoch and metadata hash, 11), each member's metadata (10), the target assignment
(epoch and, KIP-1263, the tagged time it was computed, 12; per member, 13) and each member's current
assignment (14); tombstones remove them. Type 15 (where its share-partition state is) is
share_metadata.py's.

The membership state machine (broker/share/membership.py) says which records a change makes; this
module encodes them, decodes them on a load (the last record per key wins: `ShareGroupLoad`), and is
the group state machine's part: `put_share_records` appends them to the group's partition and answers
once they are replicated, and a partition's replayed share groups wait in `share_loads` until the
share-group shell takes them (it lives a layer above: the state machine only carries them)."""
from __future__ import annotations

from dataclasses import dataclass

from kproto.coordinator.share_group_current_member_assignment_key import ShareGroupCurrentMemberAssignmentKey
from kproto.coordinator.share_group_current_member_assignment_value import (
    ShareGroupCurrentMemberAssignmentValue, TopicPartitions as _CurrentTP,
)
from kproto.coordinator.share_group_member_metadata_key import ShareGroupMemberMetadataKey
from kproto.coordinator.share_group_member_metadata_value import ShareGroupMemberMetadataValue
from kproto.coordinator.share_group_metadata_key import ShareGroupMetadataKey
from kproto.coordinator.share_group_metadata_value import ShareGroupMetadataValue
from kproto.coordinator.share_group_target_assignment_member_key import ShareGroupTargetAssignmentMemberKey
from kproto.coordinator.share_group_target_assignment_member_value import (
    ShareGroupTargetAssignmentMemberValue, TopicPartition as _TargetTP,
)
from kproto.coordinator.share_group_target_assignment_metadata_key import ShareGroupTargetAssignmentMetadataKey
from kproto.coordinator.share_group_target_assignment_metadata_value import (
    ShareGroupTargetAssignmentMetadataValue,
)
from kproto.errors import ErrorCode as E

from broker.groups.consumer_records import (
    ConsumerKey, decode_key_of, decode_value_of, key_of, prefixed, replay_member, topic_partitions,
)

MEMBER_METADATA, GROUP_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT = 10, 11, 12, 13, 14
# Kafka's MemberState.STABLE: a share member has no revocation step, so it is always this
MEMBER_STABLE = 0

_KEYS = {
    MEMBER_METADATA: ShareGroupMemberMetadataKey,
    GROUP_METADATA: ShareGroupMetadataKey,
    TARGET_METADATA: ShareGroupTargetAssignmentMetadataKey,
    TARGET_MEMBER: ShareGroupTargetAssignmentMemberKey,
    CURRENT_ASSIGNMENT: ShareGroupCurrentMemberAssignmentKey,
}
_VALUES = {
    MEMBER_METADATA: ShareGroupMemberMetadataValue,
    GROUP_METADATA: ShareGroupMetadataValue,
    TARGET_METADATA: ShareGroupTargetAssignmentMetadataValue,
    TARGET_MEMBER: ShareGroupTargetAssignmentMemberValue,
    CURRENT_ASSIGNMENT: ShareGroupCurrentMemberAssignmentValue,
}


# ---------------------------------------------------------------- writing

def group_epoch_record(group_id: str, epoch: int, metadata_hash: int) -> tuple:
    return (key_of(ShareGroupMetadataKey, group_id),
            prefixed(0, ShareGroupMetadataValue(epoch=epoch, metadata_hash=metadata_hash)))


def member_metadata_record(group_id: str, m) -> tuple:
    """m: a member (member_id, rack_id, client_id, client_host, subscribed)."""
    value = ShareGroupMemberMetadataValue(rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
                                          subscribed_topic_names=list(m.subscribed))
    return key_of(ShareGroupMemberMetadataKey, group_id, m.member_id), prefixed(0, value)


def target_metadata_record(group_id: str, assignment_epoch: int, assignment_ms: int | None) -> tuple:
    """assignment_ms None (never computed with a clock) is written as Kafka's default, 0."""
    value = ShareGroupTargetAssignmentMetadataValue(assignment_epoch=assignment_epoch,
                                                    assignment_timestamp=assignment_ms or 0)
    return key_of(ShareGroupTargetAssignmentMetadataKey, group_id), prefixed(0, value)


def target_member_record(group_id: str, member_id: str, assignment: dict) -> tuple:
    value = ShareGroupTargetAssignmentMemberValue(topic_partitions=topic_partitions(_TargetTP, assignment))
    return key_of(ShareGroupTargetAssignmentMemberKey, group_id, member_id), prefixed(0, value)


def current_assignment_record(group_id: str, m) -> tuple:
    """m: a member (member_id, member_epoch, previous_member_epoch, current: what it was told)."""
    value = ShareGroupCurrentMemberAssignmentValue(
        member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=MEMBER_STABLE,
        assigned_partitions=topic_partitions(_CurrentTP, m.current))
    return key_of(ShareGroupCurrentMemberAssignmentKey, group_id, m.member_id), prefixed(0, value)


def member_tombstones(group_id: str, member_id: str) -> list:
    """In Kafka's order: current assignment, target assignment, member metadata."""
    return [(key_of(cls, group_id, member_id), None) for cls in
            (ShareGroupCurrentMemberAssignmentKey, ShareGroupTargetAssignmentMemberKey, ShareGroupMemberMetadataKey)]


def group_tombstones(group_id: str, member_ids) -> list:
    """Every record of the group (Kafka's createGroupTombstoneRecords for a share group)."""
    out = []
    for member_id in member_ids:
        out.extend(member_tombstones(group_id, member_id))
    out += [(key_of(ShareGroupTargetAssignmentMetadataKey, group_id), None),
            (key_of(ShareGroupMetadataKey, group_id), None)]
    return out


# ---------------------------------------------------------------- replay

def decode_key(data) -> ConsumerKey | None:
    """The key (kind, group, member) of a type 10-14 record, None for another type."""
    return decode_key_of(_KEYS, data)


def decode_value(kind: int, data):
    return decode_value_of(_VALUES, kind, data)


class ShareGroupLoad:
    """The last record per key of one share group, as replayed (Kafka's replay of records 10-14);
    the share-group shell builds the group from it."""

    def __init__(self):
        self.epoch: int | None = None          # None: no group metadata record (or its tombstone)
        self.metadata_hash = 0
        self.assignment_epoch = 0
        self.assignment_timestamp = 0
        self.members: dict[str, ShareGroupMemberMetadataValue] = {}
        self.targets: dict[str, ShareGroupTargetAssignmentMemberValue] = {}
        self.current: dict[str, ShareGroupCurrentMemberAssignmentValue] = {}

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


# ---------------------------------------------------------------- the state machine's part

@dataclass
class ShareRecordsResult:
    """The outcome of writing a share group's membership records."""
    error: int


class ShareRecordsMixin:
    """GroupStateMachine's share-group membership records. `share_loads`: partition -> {group id:
    ShareGroupLoad}, what replaces the share groups of that partition at the shell, which takes them
    (a load: the groups replayed; a resignation or a new load beginning: none). The latest per
    partition is all that counts, so it holds one entry per partition at most."""

    def put_share_records(self, ticket, now_ms: int, group_id: str, records: list):
        """Append a share group's membership records (broker/share/membership.py made them); NONE once
        they are replicated (the shell turns a failed append into the client's error)."""
        self._begin(now_ms)
        err = self.status_error(group_id, allow_empty=False)
        if err is not None:
            self._respond(ticket, ShareRecordsResult(err))
            return self._end()
        if records:
            self._append(self.partition_for(group_id), list(records))
        self._respond(ticket, ShareRecordsResult(E.NONE))
        return self._end()

    def take_share_loads(self) -> dict:
        loads, self.share_loads = self.share_loads, {}
        return loads

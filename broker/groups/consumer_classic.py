"""Classic-protocol members in a KIP-848 consumer group: Kafka's online
migration (`group.consumer.migration.policy`, default `bidirectional`).

- Upgrade: a ConsumerGroupHeartbeat into a classic "consumer" group with
  members converts it into a consumer group; its members stay, as classic
  members, with their epoch (the generation) and assignment.
- Classic members in a consumer group use JoinGroup/SyncGroup/Heartbeat/
  LeaveGroup as before, but the coordinator assigns: JoinGroup answers at
  once with the member's epoch as generation (the member is never the
  leader), SyncGroup hands out the member's partitions as a
  ConsumerProtocolAssignment, and Heartbeat answers REBALANCE_IN_PROGRESS
  when the member has to move to a new assignment, so it rejoins. The
  owned partitions in its JoinGroup subscription (empty for eager clients,
  which revoke everything before rejoining) confirm revocations.
- Downgrade: when the last consumer-protocol member leaves and only classic
  members remain, the group becomes a classic group again and rebalances.

Kafka's GroupMetadataManager.classicGroupJoinToConsumerGroup,
classicGroupSyncToConsumerGroup, classicGroupHeartbeatToConsumerGroup,
convertToConsumerGroup, convertToClassicGroup.
"""
from __future__ import annotations

import logging
import struct

from typing import TYPE_CHECKING

from kproto.errors import ErrorCode as E

from broker.groups import consumer_records as crec
from broker.groups import records as rec
from broker.groups.consumer_model import (
    MEMBER_UNRELEASED_PARTITIONS, MEMBER_UNREVOKED_PARTITIONS, ClassicInfo, ConsumerGroup,
    ConsumerMember, copy_assignment, reconcile, same_assignment,
)
from broker.groups.model import CONSUMER_PROTOCOL_TYPE, EMPTY, Group, Member
from broker.groups.results import JoinResult, LeaveResult, SyncResult

if TYPE_CHECKING:
    from kproto.messages.consumer_protocol_subscription import ConsumerProtocolSubscription

log = logging.getLogger("kproto.groups")

_VERSION = struct.Struct(">h")


def decode_subscription(metadata: bytes) -> tuple[int, ConsumerProtocolSubscription]:
    # imported here: only a classic member of a consumer group (or a conversion) needs it (issue 26)
    from kproto.messages.consumer_protocol_subscription import ConsumerProtocolSubscription
    version, = _VERSION.unpack_from(metadata, 0)
    # newer versions extend older ones: read what this codec knows
    return version, ConsumerProtocolSubscription.decode(metadata, min(max(version, 0), 3), 2)


def encode_assignment(version: int, partitions: dict) -> bytes:
    """partitions: topic name -> partitions."""
    # imported here: only a classic member of a consumer group (or a conversion) needs it (issue 26)
    from kproto.messages.consumer_protocol_assignment import ConsumerProtocolAssignment
    from kproto.messages.consumer_protocol_assignment import TopicPartition as _AssignedTP
    version = min(max(version, 0), 3)
    value = ConsumerProtocolAssignment(
        assigned_partitions=[_AssignedTP(topic=t, partitions=sorted(ps)) for t, ps in sorted(partitions.items())],
        user_data=None)
    out = bytearray(_VERSION.pack(version))
    value.encode_into(out, version)
    return bytes(out)


def decode_assignment(data: bytes) -> dict:
    """topic name -> set of partitions; empty for no or a bad assignment."""
    if not data or len(data) < 2:
        return {}
    # imported here: only a conversion of a classic group to a consumer group needs it (issue 26)
    from kproto.messages.consumer_protocol_assignment import ConsumerProtocolAssignment
    try:
        version, = _VERSION.unpack_from(data, 0)
        value = ConsumerProtocolAssignment.decode(data, min(max(version, 0), 3), 2)
    except Exception:
        return {}
    return {tp.topic: set(tp.partitions) for tp in value.assigned_partitions}


class ClassicMembersMixin:
    """Mixed into GroupStateMachine next to ConsumerGroupsMixin."""

    def _migration(self, direction: str) -> bool:
        policy = self.config.consumer_migration_policy
        return policy == "bidirectional" or policy == direction

    # ================================================================ upgrade

    def _can_upgrade(self, group: Group) -> bool:
        return (self._migration("upgrade") and group.protocol_type == CONSUMER_PROTOCOL_TYPE
                and len(group.members) <= self.config.consumer_max_size)

    def _upgrade_classic_group(self, group: Group, topics: dict) -> ConsumerGroup:
        """convertToConsumerGroup: the classic members become classic members
        of a consumer group at the generation's epoch, keeping their partitions."""
        converted = ConsumerGroup(group.group_id, self._now)
        converted.offsets, converted.pending_txn = group.offsets, group.pending_txn
        converted.pending_offsets = group.pending_offsets
        ids = {name: tid for name, (tid, _n) in topics.items()}
        epoch = group.generation
        for m in group.members.values():
            # answer what the old group had parked: the members rejoin the new one
            if m.awaiting_join is not None:
                self._respond(m.awaiting_join, JoinResult(E.REBALANCE_IN_PROGRESS, m.member_id))
                m.awaiting_join = None
            if m.awaiting_sync is not None:
                self._respond(m.awaiting_sync, SyncResult(E.REBALANCE_IN_PROGRESS))
                m.awaiting_sync = None
            cm = ConsumerMember(m.member_id, m.instance_id, None, m.client_id, m.client_host, m.rebalance_timeout_ms)
            cm.classic = ClassicInfo(m.session_timeout_ms, list(m.protocols))
            try:
                _v, sub = decode_subscription(m.metadata(group.protocol_name) if group.protocol_name
                                              else m.protocols[0][1])
                cm.subscribed_topic_names = sorted(set(sub.topics))
                cm.rack_id = getattr(sub, "rack_id", None)
            except Exception:
                cm.subscribed_topic_names = []
            cm.member_epoch = epoch
            cm.previous_member_epoch = epoch - 1
            cm.assigned = {ids[t]: ps for t, ps in decode_assignment(m.assignment).items() if t in ids and ps}
            converted.members[cm.member_id] = cm
            converted.target[cm.member_id] = copy_assignment(cm.assigned)
        converted.group_epoch = converted.assignment_epoch = epoch
        converted.subscription_metadata = self._subscription_metadata(converted, topics)
        self._drop_group(group)
        self.groups[group.group_id] = converted
        records = [(rec.group_metadata_key(group.group_id), None)]
        for cm in converted.members.values():
            records += [crec.member_metadata_record(group.group_id, cm),
                        crec.target_member_record(group.group_id, cm.member_id, converted.target[cm.member_id]),
                        crec.current_assignment_record(group.group_id, cm)]
        records += [crec.partition_metadata_record(converted), crec.target_metadata_record(converted),
                    crec.group_epoch_record(converted)]
        self._append(self.partition_for(group.group_id), records)
        for cm in converted.members.values():
            self._schedule_consumer_session(converted, cm)
        log.info("classic group %s upgraded to a consumer group with %d classic members at epoch %d",
                 group.group_id, len(converted.members), epoch)
        return converted

    # ================================================================ downgrade

    def _maybe_downgrade(self, group: ConsumerGroup) -> None:
        if not group.members or not self._migration("downgrade"):
            return
        if any(m.classic is None for m in group.members.values()):
            return
        classic = Group(group.group_id, EMPTY, self._now)
        classic.offsets, classic.pending_txn = group.offsets, group.pending_txn
        classic.pending_offsets = group.pending_offsets
        classic.protocol_type = CONSUMER_PROTOCOL_TYPE
        classic.generation = group.group_epoch
        names = {tid: name for name, (tid, _n) in group.subscription_metadata.items()}
        for cm in group.members.values():
            version = _VERSION.unpack_from(cm.classic.protocols[0][1], 0)[0] if cm.classic.protocols else 0
            assignment = encode_assignment(version, {names[t]: ps for t, ps in cm.assigned.items() if t in names})
            member = Member(cm.member_id, cm.instance_id, cm.client_id, cm.client_host, cm.rebalance_timeout_ms,
                            cm.classic.session_timeout_ms, CONSUMER_PROTOCOL_TYPE, list(cm.classic.protocols),
                            assignment)
            classic.members[member.member_id] = member
            if member.instance_id is not None:
                classic.static_members[member.instance_id] = member.member_id
        classic.leader_id = next(iter(classic.members))
        classic.protocol_name = classic.select_protocol()
        classic.subscribed_topics = classic.compute_subscribed_topics()
        classic.state = "Stable"
        self._drop_group(group)
        self._append(self.partition_for(group.group_id), crec.group_tombstones(group))
        self.groups[group.group_id] = classic
        log.info("consumer group %s downgraded to a classic group (%d classic members)", group.group_id,
                 len(classic.members))
        for member in classic.members.values():
            self._schedule_heartbeat(classic, member, member.session_timeout_ms)
        self._prepare_rebalance(classic, "downgraded from a consumer group: the members rejoin")

    # ================================================================ JoinGroup

    def _classic_join_consumer_group(self, ticket, group: ConsumerGroup, member_id: str, instance_id,
                                     protocol_type: str, protocols: list, session_timeout_ms: int,
                                     rebalance_timeout_ms: int, client_id: str, client_host: str,
                                     require_known_member_id: bool, topics: dict | None) -> None:
        if protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols:
            self._respond(ticket, JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        try:
            sub_version, sub = decode_subscription(protocols[0][1])
        except Exception:
            self._respond(ticket, JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        member = group.members.get(member_id) if member_id else None
        if instance_id is not None and member is None:
            existing = group.static_member(instance_id)
            if existing is not None and member_id:
                self._respond(ticket, JoinResult(E.FENCED_INSTANCE_ID, member_id))
                return
        if member is None and not member_id:
            # (Kafka keeps no pending list here: the id it hands out is accepted when the member comes back)
            new_id = self.new_member_id(instance_id if instance_id is not None else client_id)
            if require_known_member_id:
                self._respond(ticket, JoinResult(E.MEMBER_ID_REQUIRED, new_id))
                return
            member_id = new_id
        elif member is not None and member.classic is None:
            self._respond(ticket, JoinResult(E.UNKNOWN_MEMBER_ID, member_id))   # a consumer-protocol member
            return
        if len(group.members) >= self.config.consumer_max_size and member is None:
            self._respond(ticket, JoinResult(E.GROUP_MAX_SIZE_REACHED, member_id))
            return
        is_new = member is None
        if is_new:
            member = ConsumerMember(member_id, instance_id)
            group.members[member_id] = member
        before = (member.subscribed_topic_names, member.rack_id)
        member.subscribed_topic_names = sorted(set(sub.topics))
        member.rack_id = getattr(sub, "rack_id", None) or None
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.client_id, member.client_host = client_id, client_host
        member.classic = ClassicInfo(session_timeout_ms, [(n, bytes(d)) for n, d in protocols])
        records = [crec.member_metadata_record(group.group_id, member)]
        bump = is_new or before != (member.subscribed_topic_names, member.rack_id)
        if topics is not None:
            metadata = self._subscription_metadata(group, topics)
            if metadata != group.subscription_metadata:
                group.subscription_metadata = metadata
                records.append(crec.partition_metadata_record(group))
                bump = True
        if bump:
            group.group_epoch += 1
            records.append(crec.group_epoch_record(group))
        if group.group_epoch > group.assignment_epoch:
            records.extend(self._compute_target(group))
        ids = {name: tid for name, (tid, _n) in group.subscription_metadata.items()}
        owned = [(ids[tp.topic], p) for tp in (sub.owned_partitions or []) if tp.topic in ids
                 for p in tp.partitions] if sub_version >= 1 else []
        self._reconcile_classic(group, member, owned, records)
        self._append(self.partition_for(group.group_id), records)
        self._schedule_consumer_session(group, member)
        self._respond(ticket, JoinResult(E.NONE, member_id, member.member_epoch, CONSUMER_PROTOCOL_TYPE,
                                         protocols[0][0], "", False, []))

    def _reconcile_classic(self, group: ConsumerGroup, member: ConsumerMember, owned, records: list) -> None:
        old = (member.member_epoch, member.state, copy_assignment(member.assigned),
               copy_assignment(member.pending_revocation))
        target = group.target.get(member.member_id, {})
        for _ in range(2):   # revoke, then (the join says what it still owns) move on
            reconcile(member, group.assignment_epoch, target, group.owner_map(exclude=member.member_id), owned)
        if (old[0] != member.member_epoch or old[1] != member.state or not same_assignment(old[2], member.assigned)
                or not same_assignment(old[3], member.pending_revocation)):
            records.append(crec.current_assignment_record(group.group_id, member))
        key = ("consumer-rebalance", group.group_id, member.member_id)
        if member.state == MEMBER_UNREVOKED_PARTITIONS:
            if not self.has_timer(key):
                self._set_timer(key, self._now + member.rebalance_timeout_ms)
        else:
            self._cancel_timer(key)

    def _classic_needs_rejoin(self, group: ConsumerGroup, member: ConsumerMember) -> bool:
        if group.group_epoch > group.assignment_epoch:
            records = self._compute_target(group)
            self._append(self.partition_for(group.group_id), records)
        if member.member_epoch != group.assignment_epoch or member.state == MEMBER_UNREVOKED_PARTITIONS:
            return True
        if member.state == MEMBER_UNRELEASED_PARTITIONS:
            owners = group.owner_map(exclude=member.member_id)
            target = group.target.get(member.member_id, {})
            return any((t, p) not in owners and p not in member.assigned.get(t, ())
                       for t, ps in target.items() for p in ps)
        return False

    # ================================================================ SyncGroup, Heartbeat, LeaveGroup

    def _classic_member(self, group: ConsumerGroup, member_id: str, instance_id, generation_id: int | None):
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            return None, E.UNKNOWN_MEMBER_ID
        if instance_id is not None and member.instance_id is not None and member.instance_id != instance_id:
            return None, E.FENCED_INSTANCE_ID
        if generation_id is not None and generation_id != member.member_epoch:
            return None, E.ILLEGAL_GENERATION
        return member, None

    def _classic_sync_consumer_group(self, ticket, group: ConsumerGroup, generation_id: int, member_id: str,
                                     instance_id, protocol_type, protocol_name) -> None:
        member, err = self._classic_member(group, member_id, instance_id, generation_id)
        if err is not None:
            self._respond(ticket, SyncResult(err))
            return
        if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE:
            self._respond(ticket, SyncResult(E.INCONSISTENT_GROUP_PROTOCOL))
            return
        names = {tid: name for name, (tid, _n) in group.subscription_metadata.items()}
        version = _VERSION.unpack_from(member.classic.protocols[0][1], 0)[0] if member.classic.protocols else 0
        assignment = encode_assignment(version, {names[t]: ps for t, ps in member.assigned.items() if t in names})
        self._schedule_consumer_session(group, member)
        self._respond(ticket, SyncResult(E.NONE, CONSUMER_PROTOCOL_TYPE,
                                         protocol_name or member.classic.protocols[0][0], assignment))

    def _classic_heartbeat_consumer_group(self, ticket, group: ConsumerGroup, member_id: str, generation_id: int,
                                          instance_id) -> None:
        member, err = self._classic_member(group, member_id, instance_id, generation_id)
        if err is not None:
            self._respond(ticket, err)
            return
        self._schedule_consumer_session(group, member)
        self._respond(ticket, E.REBALANCE_IN_PROGRESS if self._classic_needs_rejoin(group, member) else E.NONE)

    def _classic_leave_consumer_group(self, ticket, group: ConsumerGroup, members: list) -> None:
        out = []
        for member_id, instance_id, _reason in members:
            if not member_id and instance_id is not None:
                m = group.static_member(instance_id)
            else:
                m = group.members.get(member_id)
            if m is None:
                out.append((member_id, instance_id, E.UNKNOWN_MEMBER_ID))
                continue
            if instance_id is not None and m.instance_id != instance_id:
                out.append((member_id, instance_id, E.FENCED_INSTANCE_ID))
                continue
            self._remove_consumer_member(group, m, "left the group (LeaveGroup)", downgrade=False)
            out.append((member_id, instance_id, E.NONE))
        self._respond(ticket, LeaveResult(E.NONE, out))
        if any(m.classic is None for m in group.members.values()):
            return
        self._maybe_downgrade(group)

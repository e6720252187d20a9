"""KIP-848 consumer groups in the group state machine: ConsumerGroupHeartbeat,
ConsumerGroupDescribe, their timers and records. Pure like the classic part
(`state.py` mixes this in): every input carries `now_ms` and the topics it
needs, every output is an `Effects`.

After Kafka's GroupMetadataManager.consumerGroupHeartbeat: validate the
request, find or create the group and member, fence stale epochs, update the
member's subscription, bump the group epoch when members or subscribed
topics change, recompute the target assignment with the server-side
assignor when the group epoch moved past the assignment epoch, then move
the calling member one step towards its target (revocation before
assignment) and answer with its epoch and assignment.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kproto.errors import ErrorCode as E

from broker.groups import consumer_records as crec
from broker.groups import records as rec
from broker.groups.consumer_model import (
    DEAD, LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH, MEMBER_UNREVOKED_PARTITIONS,
    ConsumerGroup, ConsumerMember, InvalidRegex, compile_regex, copy_assignment, reconcile, same_assignment,
)
from broker.groups.model import EMPTY
from broker.groups.results import Effects

if TYPE_CHECKING:
    from broker.groups.consumer_results import DescribedConsumerGroup, HeartbeatResult

log = logging.getLogger("kproto.groups")


def _error(err: int, message: str | None = None, member_id: str | None = None) -> HeartbeatResult:
    # imported at the first consumer-group answer: a node serving classic groups never needs it (issue 26)
    from broker.groups.consumer_results import HeartbeatResult
    return HeartbeatResult(err, message, member_id)


def _answer(member_id: str, member_epoch: int, heartbeat_interval_ms: int) -> HeartbeatResult:
    from broker.groups.consumer_results import HeartbeatResult   # (see _error)
    return HeartbeatResult(E.NONE, None, member_id, member_epoch, heartbeat_interval_ms)


class ConsumerGroupsMixin:
    """Mixed into GroupStateMachine; uses its plumbing (_begin/_end/_respond,
    _append, timers, groups, partition_for, status_error)."""

    # ================================================================ ConsumerGroupHeartbeat

    def consumer_group_heartbeat(self, ticket, now_ms: int, group_id: str, member_id: str, member_epoch: int,
                                 topics: dict, instance_id: str | None = None, rack_id: str | None = None,
                                 rebalance_timeout_ms: int = -1, subscribed_topic_names: list | None = None,
                                 subscribed_topic_regex: str | None = None, server_assignor: str | None = None,
                                 owned: list | None = None, client_id: str = "", client_host: str = "",
                                 ) -> "Effects":
        """topics: name -> (topic id, partition count) of every topic now;
        owned: the (topic id, partition) the member says it owns, None when
        not sent."""
        self._begin(now_ms)
        try:
            result = self._consumer_heartbeat(group_id, member_id or "", member_epoch, topics, instance_id, rack_id,
                                              rebalance_timeout_ms, subscribed_topic_names, subscribed_topic_regex,
                                              server_assignor, owned, client_id, client_host)
        except _Reject as exc:
            result = _error(exc.code, exc.message, member_id)
        self._respond(ticket, result)
        return self._end()

    def _consumer_heartbeat(self, group_id, member_id, member_epoch, topics, instance_id, rack_id,
                            rebalance_timeout_ms, names, regex, server_assignor, owned, client_id, client_host):
        cfg = self.config
        self._validate_heartbeat(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                                 names, regex, server_assignor, owned)
        err = self.status_error(group_id, allow_empty=False)
        if err is not None:
            raise _Reject(err)
        group = self._consumer_group_for(group_id, member_epoch, topics)
        if member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._consumer_leave(group, member_id, member_epoch, instance_id)

        joining = member_epoch == 0
        member, is_new = self._member_for(group, member_id, member_epoch, instance_id, owned)
        if joining:
            owned = []   # a (re)joining member owns nothing
        bump = is_new
        before = (member.subscribed_topic_names, member.subscribed_topic_regex, member.server_assignor,
                  member.rack_id, member.rebalance_timeout_ms, member.client_id, member.client_host,
                  member.instance_id)
        if names is not None:
            member.subscribed_topic_names = sorted(set(names))
        if regex is not None:
            member.subscribed_topic_regex = regex or None
        if server_assignor is not None:
            member.server_assignor = server_assignor
        if rack_id is not None:
            member.rack_id = rack_id
        if rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if instance_id is not None:
            member.instance_id = instance_id
        member.client_id, member.client_host = client_id, client_host
        after = (member.subscribed_topic_names, member.subscribed_topic_regex, member.server_assignor,
                 member.rack_id, member.rebalance_timeout_ms, member.client_id, member.client_host,
                 member.instance_id)
        records = []
        if is_new or before != after:
            records.append(crec.member_metadata_record(group.group_id, member))
            if before[:3] != after[:3]:
                bump = True   # what it subscribes to, or how it wants it assigned
        metadata = self._subscription_metadata(group, topics)
        if metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            records.append(crec.partition_metadata_record(group))
            bump = True
        if bump:
            group.group_epoch += 1
            records.append(crec.group_epoch_record(group))
            log.info("consumer group %s: epoch %d (member %s %s)", group.group_id, group.group_epoch, member.member_id,
                     "joined" if is_new else "changed subscription")
        if group.group_epoch > group.assignment_epoch:
            records.extend(self._compute_target(group))

        old = (member.member_epoch, member.state, copy_assignment(member.assigned),
               copy_assignment(member.pending_revocation))
        reconcile(member, group.assignment_epoch, group.target.get(member.member_id, {}),
                  group.owner_map(exclude=member.member_id), owned)
        changed = (old[0] != member.member_epoch or old[1] != member.state
                   or not same_assignment(old[2], member.assigned)
                   or not same_assignment(old[3], member.pending_revocation))
        if changed or is_new:
            records.append(crec.current_assignment_record(group.group_id, member))
        if records:
            self._append(self.partition_for(group.group_id), records)
        self._schedule_consumer_session(group, member)
        rebalance_key = ("consumer-rebalance", group.group_id, member.member_id)
        if member.state == MEMBER_UNREVOKED_PARTITIONS:
            if old[1] != MEMBER_UNREVOKED_PARTITIONS or not self.has_timer(rebalance_key):
                self._set_timer(rebalance_key, self._now + member.rebalance_timeout_ms)
        else:
            self._cancel_timer(rebalance_key)

        full = rebalance_timeout_ms != -1 and (names is not None or regex is not None) and owned is not None
        send = joining or full or not same_assignment(old[2], member.assigned)
        from broker.groups.consumer_results import HeartbeatResult   # (see _error)
        return HeartbeatResult(E.NONE, None, member.member_id, member.member_epoch,
                               cfg.consumer_heartbeat_interval_ms,
                               {t: sorted(ps) for t, ps in member.assigned.items() if ps} if send else None)

    def _validate_heartbeat(self, group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                            names, regex, server_assignor, owned) -> None:
        """GroupMetadataManager.throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        if not group_id:
            raise _Reject(E.INVALID_REQUEST, "GroupId can't be empty.")
        if instance_id is not None and instance_id == "":
            raise _Reject(E.INVALID_REQUEST, "InstanceId can't be empty.")
        if rack_id is not None and rack_id == "":
            raise _Reject(E.INVALID_REQUEST, "RackId can't be empty.")
        if server_assignor is not None and server_assignor not in self.config.consumer_assignors:
            raise _Reject(E.UNSUPPORTED_ASSIGNOR,
                          f"ServerAssignor {server_assignor} is not supported. Supported assignors: "
                          f"{', '.join(self.config.consumer_assignors)}.")
        if member_epoch > 0 or member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if not member_id:
                raise _Reject(E.INVALID_REQUEST, "MemberId can't be empty.")
        elif member_epoch == 0:
            if rebalance_timeout_ms == -1:
                raise _Reject(E.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
            if owned is None or owned:
                raise _Reject(E.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
            if names is None and regex is None:
                # (Kafka 4.0 names the regex too; 3.9, without it, says this)
                raise _Reject(E.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
        elif member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if not member_id:
                raise _Reject(E.INVALID_REQUEST, "MemberId can't be empty.")
            if instance_id is None:
                raise _Reject(E.INVALID_REQUEST, "InstanceId can't be null.")
        else:
            raise _Reject(E.INVALID_REQUEST, "MemberEpoch is invalid.")
        if regex:
            try:
                compile_regex(regex)
            except InvalidRegex as exc:
                raise _Reject(E.INVALID_REGULAR_EXPRESSION, str(exc)) from None

    def _consumer_group_for(self, group_id: str, member_epoch: int, topics: dict) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None and not isinstance(group, ConsumerGroup):
            if group.is_(DEAD) or (group.is_(EMPTY) and not group.members):
                if member_epoch != 0:
                    raise _Reject(E.UNKNOWN_MEMBER_ID)
                # an empty classic group becomes a consumer group; its offsets stay
                converted = ConsumerGroup(group_id, self._now)
                converted.offsets, converted.pending_txn = group.offsets, group.pending_txn
                converted.pending_offsets = group.pending_offsets
                self._drop_group(group)
                if group.generation > 0:
                    self._append(self.partition_for(group_id), [(rec.group_metadata_key(group_id), None)])
                self.groups[group_id] = converted
                log.info("empty classic group %s converted to a consumer group", group_id)
                return converted
            if member_epoch == 0 and self._can_upgrade(group):
                return self._upgrade_classic_group(group, topics)
            raise _Reject(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        if group is None or group.is_(DEAD):
            if member_epoch != 0:
                raise _Reject(E.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
            group = self.groups[group_id] = ConsumerGroup(group_id, self._now)
        return group

    def _member_for(self, group: ConsumerGroup, member_id: str, member_epoch: int, instance_id: str | None,
                    owned: list | None) -> tuple[ConsumerMember, bool]:
        if member_epoch == 0:
            if instance_id is not None:
                existing = group.static_member(instance_id)
                if existing is not None and existing.member_id != member_id:
                    if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                        raise _Reject(E.UNRELEASED_INSTANCE_ID,
                                      f"Static member {existing.member_id} with instance id {instance_id} "
                                      f"is not released yet.")
                    return self._replace_static_consumer_member(group, existing, member_id or self.new_member_id(instance_id)), False
            member = group.members.get(member_id) if member_id else None
            if member is not None:
                return member, False   # the member lost its state (fenced, say) and rejoins
            if len(group.members) >= self.config.consumer_max_size:
                raise _Reject(E.GROUP_MAX_SIZE_REACHED,
                              f"The consumer group has reached its maximum capacity of "
                              f"{self.config.consumer_max_size} members.")
            member = ConsumerMember(member_id or self.new_member_id("consumer"), instance_id)
            group.members[member.member_id] = member
            return member, True
        member = group.members.get(member_id)
        if instance_id is not None:
            existing = group.static_member(instance_id)
            if existing is None:
                raise _Reject(E.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
            if existing.member_id != member_id:
                raise _Reject(E.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} "
                                                    f"was fenced by member {existing.member_id}.")
        if member is None:
            raise _Reject(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
        if member_epoch > member.member_epoch:
            raise _Reject(E.FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch "
                                                 f"({member_epoch}) than the one known by the group coordinator "
                                                 f"({member.member_epoch}). The member must abandon all its "
                                                 f"partitions and rejoin.")
        if member_epoch < member.member_epoch:
            # the answer that moved it on may have been lost: fine if it owns nothing it should not
            ok = (member_epoch == member.previous_member_epoch and owned is not None
                  and all(p in member.assigned.get(t, ()) for t, p in owned))
            if not ok:
                raise _Reject(E.FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member epoch "
                                                     f"({member_epoch}) than the one known by the group "
                                                     f"coordinator ({member.member_epoch}). The member must "
                                                     f"abandon all its partitions and rejoin.")
        return member, False

    def _replace_static_consumer_member(self, group: ConsumerGroup, old: ConsumerMember, new_id: str) -> ConsumerMember:
        """A static member that left with epoch -2 comes back under a new member id:
        it takes over the old member's epoch and assignment, without a rebalance."""
        new = ConsumerMember(new_id, old.instance_id, old.rack_id, old.client_id, old.client_host,
                             old.rebalance_timeout_ms, old.subscribed_topic_names, old.subscribed_topic_regex,
                             old.server_assignor)
        new.member_epoch, new.previous_member_epoch, new.state = old.previous_member_epoch, old.previous_member_epoch, old.state
        if new.member_epoch < 0:
            new.member_epoch = 0
        new.assigned = copy_assignment(old.assigned)
        new.pending_revocation = copy_assignment(old.pending_revocation)
        target = group.target.pop(old.member_id, {})
        records = crec.member_tombstones(group.group_id, old.member_id)
        del group.members[old.member_id]
        self._cancel_consumer_timers(group.group_id, old.member_id)
        group.members[new_id] = new
        group.target[new_id] = target
        records += [crec.member_metadata_record(group.group_id, new),
                    crec.target_member_record(group.group_id, new_id, target),
                    crec.current_assignment_record(group.group_id, new)]
        self._append(self.partition_for(group.group_id), records)
        log.info("static member %s of group %s rejoined as %s (was %s)", new.instance_id, group.group_id, new_id,
                 old.member_id)
        return new

    def _consumer_leave(self, group: ConsumerGroup, member_id: str, member_epoch: int, instance_id: str | None):
        member = group.members.get(member_id)
        if instance_id is not None:
            existing = group.static_member(instance_id)
            if existing is None:
                raise _Reject(E.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
            if existing.member_id != member_id:
                raise _Reject(E.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} "
                                                    f"was fenced by member {existing.member_id}.")
        if member is None:
            raise _Reject(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
        if member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # a static member leaves for now: its partitions wait for it until its session expires
            if member.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                member.previous_member_epoch = member.member_epoch
            member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
            self._append(self.partition_for(group.group_id),
                         [crec.current_assignment_record(group.group_id, member)])
            self._cancel_timer(("consumer-rebalance", group.group_id, member_id))
            self._schedule_consumer_session(group, member)
            return _answer(member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH, 0)
        self._remove_consumer_member(group, member, "left the group")
        # Kafka answers a leave without a heartbeat interval
        return _answer(member_id, LEAVE_GROUP_MEMBER_EPOCH, 0)

    def _remove_consumer_member(self, group: ConsumerGroup, member: ConsumerMember, reason: str,
                                downgrade: bool = True) -> None:
        records = crec.member_tombstones(group.group_id, member.member_id)
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        self._cancel_consumer_timers(group.group_id, member.member_id)
        group.group_epoch += 1
        records.append(crec.group_epoch_record(group))
        self._append(self.partition_for(group.group_id), records)
        log.info("consumer group %s: member %s %s; epoch %d", group.group_id, member.member_id, reason,
                 group.group_epoch)
        if downgrade and member.classic is None:
            self._maybe_downgrade(group)

    def _cancel_consumer_timers(self, group_id: str, member_id: str) -> None:
        self._cancel_timer(("consumer-session", group_id, member_id))
        self._cancel_timer(("consumer-rebalance", group_id, member_id))

    def _schedule_consumer_session(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        timeout = (self.config.consumer_session_timeout_ms if member.classic is None
                   else member.classic.session_timeout_ms)
        self._set_timer(("consumer-session", group.group_id, member.member_id), self._now + timeout)

    def _on_consumer_timer(self, group, key: tuple) -> None:
        if not isinstance(group, ConsumerGroup):
            return
        member = group.members.get(key[2])
        if member is None:
            return
        if key[0] == "consumer-session":
            self._remove_consumer_member(group, member, "session timed out")
        elif member.state == MEMBER_UNREVOKED_PARTITIONS:
            self._remove_consumer_member(group, member, "did not revoke its partitions within the rebalance timeout")

    # ================================================================ assignment

    def _subscription_metadata(self, group: ConsumerGroup, topics: dict) -> dict:
        cache: dict = {}
        out = {}
        for m in group.members.values():
            for name in m.subscribed_topic_names:
                if name in topics:
                    out[name] = tuple(topics[name])
            if m.subscribed_topic_regex:
                for name in topics:
                    if name not in out and m.subscribes(name, cache):
                        out[name] = tuple(topics[name])
        return out

    def _compute_target(self, group: ConsumerGroup) -> list:
        # imported at the first consumer group's assignment: a classic-only node never runs them (issue 26)
        from broker.groups.assignors import ASSIGNORS
        cache: dict = {}
        meta = group.subscription_metadata
        members = {mid: {meta[name][0] for name in meta if m.subscribes(name, cache)}
                   for mid, m in group.members.items()}
        partitions = {tid: n for tid, n in meta.values()}
        default = self.config.consumer_assignors[0]
        assignor = group.preferred_assignor(default)
        if assignor not in ASSIGNORS:
            assignor = default
        group.assignor = assignor
        new = ASSIGNORS[assignor](members, partitions, group.target)
        records = []
        for mid in group.members:
            target = new.get(mid, {})
            if mid not in group.target or not same_assignment(group.target[mid], target):
                records.append(crec.target_member_record(group.group_id, mid, target))
        group.target = {mid: copy_assignment(new.get(mid, {})) for mid in group.members}
        group.assignment_epoch = group.group_epoch
        records.append(crec.target_metadata_record(group))
        return records

    # ================================================================ ConsumerGroupDescribe

    def consumer_group_describe(self, group_id: str) -> DescribedConsumerGroup:
        from broker.groups.consumer_results import DescribedConsumerGroup, DescribedMember   # (see _error)
        err = self.status_error(group_id, allow_empty=True)
        if err is not None:
            return DescribedConsumerGroup(group_id, err)
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return DescribedConsumerGroup(group_id, E.GROUP_ID_NOT_FOUND)
        if not isinstance(group, ConsumerGroup):
            return DescribedConsumerGroup(group_id, E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        members = [DescribedMember(m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                                   list(m.subscribed_topic_names), m.subscribed_topic_regex,
                                   copy_assignment(m.assigned), copy_assignment(group.target.get(mid, {})),
                                   m.classic is not None)
                   for mid, m in group.members.items()]
        return DescribedConsumerGroup(group_id, E.NONE, None, group.state, group.group_epoch, group.assignment_epoch,
                                      group.assignor or self.config.consumer_assignors[0], members)

    # ================================================================ loading

    def _on_consumer_group_loaded(self, group: ConsumerGroup) -> None:
        # members get a full session from the load to come back (Kafka does the same)
        for member in group.members.values():
            self._schedule_consumer_session(group, member)
            if member.state == MEMBER_UNREVOKED_PARTITIONS:
                self._set_timer(("consumer-rebalance", group.group_id, member.member_id),
                                self._now + member.rebalance_timeout_ms)


class _Reject(Exception):
    def __init__(self, code: int, message: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message

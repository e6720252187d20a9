"""The classic protocol's membership and rebalances for GroupStateMachine (broker/groups/state.py):
JoinGroup (new, known and static members, the initial delay), the rebalance that completes the join,
SyncGroup and the leader's assignment, heartbeats and session expiry, LeaveGroup. Kafka 3.9's
GroupCoordinator.handleJoinGroup / handleSyncGroup / handleHeartbeat / handleLeaveGroup, DelayedJoin,
InitialDelayedJoin, DelayedSync and DelayedHeartbeat."""
from __future__ import annotations

import logging

from kproto.errors import ErrorCode as E

from broker.groups.consumer_model import ConsumerGroup
from broker.groups.consumer_records import group_tombstones as consumer_group_tombstones
from broker.groups.model import (
    COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE, UNKNOWN_MEMBER_ID, Group, Member,
)
from broker.groups.results import Effects, JoinResult, LeaveResult, SyncResult

log = logging.getLogger("kproto.groups")


class ClassicRebalanceMixin:
    def join_group(self, ticket, now_ms: int, group_id: str, member_id: str, instance_id: str | None,
                   protocol_type: str, protocols: list[tuple[str, bytes]], session_timeout_ms: int,
                   rebalance_timeout_ms: int, client_id: str = "", client_host: str = "",
                   require_known_member_id: bool = True, support_skip_assignment: bool = True,
                   reason: str | None = None, topics: dict | None = None) -> Effects:
        """topics (name -> (topic id, partitions)) matter when the group is a consumer group."""
        self._begin(now_ms)
        member_id = member_id or UNKNOWN_MEMBER_ID
        err = self.status_error(group_id, allow_empty=False)
        if err is not None:
            self._respond(ticket, JoinResult(err, member_id))
            return self._end()
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            self._respond(ticket, JoinResult(E.INVALID_SESSION_TIMEOUT, member_id))
            return self._end()
        unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            if group.members:
                # a classic member in a consumer group: the coordinator assigns (Kafka 3.9 accepts
                # it whatever group.consumer.migration.policy says; the policy governs conversions)
                self._classic_join_consumer_group(ticket, group, member_id, instance_id, protocol_type,
                                                  [(n, bytes(d) if d is not None else b"") for n, d in protocols],
                                                  session_timeout_ms, rebalance_timeout_ms, client_id,
                                                  client_host, require_known_member_id, topics)
                return self._end()
            group = self._convert_to_classic(group, now_ms)
        if group is None:
            if not unknown:
                self._respond(ticket, JoinResult(E.UNKNOWN_MEMBER_ID, member_id))
                return self._end()
            group = self.groups[group_id] = Group(group_id, EMPTY, now_ms)
        protocols = [(name, bytes(data) if data is not None else b"") for name, data in protocols]
        reason = reason or "not provided"
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            self._respond(ticket, JoinResult(E.GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID))
        elif unknown:
            self._new_member_join(ticket, group, instance_id, require_known_member_id, support_skip_assignment,
                                  client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                                  protocol_type, protocols, reason)
        else:
            self._current_member_join(ticket, group, member_id, instance_id, client_id, client_host,
                                      rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, reason)
        if group.is_(PREPARING_REBALANCE):
            self._try_complete_join(group)
        return self._end()

    def _convert_to_classic(self, group: ConsumerGroup, now_ms: int) -> Group:
        """An empty consumer group becomes a classic group on a JoinGroup; its offsets stay."""
        classic = Group(group.group_id, EMPTY, now_ms)
        classic.offsets, classic.pending_txn = group.offsets, group.pending_txn
        classic.pending_offsets = group.pending_offsets
        self._drop_group(group)
        self._append(self.partition_for(group.group_id), consumer_group_tombstones(group))
        self.groups[group.group_id] = classic
        log.info("empty consumer group %s converted to a classic group", group.group_id)
        return classic

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        if group.state in (EMPTY, DEAD):
            return True
        max_size = self.config.max_size
        if group.is_(PREPARING_REBALANCE):
            # awaiting members, not all members: the last ones to rejoin a shrunk group are kicked out
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join is not None) or group.num_awaiting_join < max_size
        return group.has(member_id) or group.size < max_size

    def _new_member_join(self, ticket, group, instance_id, require_known_member_id, support_skip_assignment,
                         client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type,
                         protocols, reason) -> None:
        if group.is_(DEAD):
            self._respond(ticket, JoinResult(E.COORDINATOR_NOT_AVAILABLE, UNKNOWN_MEMBER_ID))
            return
        if not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            self._respond(ticket, JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID))
            return
        new_id = self.new_member_id(instance_id if instance_id is not None else client_id)
        if instance_id is not None:
            old_id = group.static_members.get(instance_id)
            if old_id is not None:
                log.info("static member %s of group %s rejoins in %s: %s replaces %s", instance_id,
                         group.group_id, group.state, new_id, old_id)
                self._update_static_member_and_rebalance(ticket, group, old_id, new_id, instance_id, protocols,
                                                         rebalance_timeout_ms, session_timeout_ms, reason,
                                                         support_skip_assignment)
            else:
                self._add_member_and_rebalance(ticket, group, new_id, instance_id, client_id, client_host,
                                               rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                               protocols, reason)
        elif require_known_member_id:
            # KIP-394: hand out the id and have the client join again with it
            group.pending_members.add(new_id)
            self._set_timer(("pending-member", group.group_id, new_id), self._now + session_timeout_ms)
            self._respond(ticket, JoinResult(E.MEMBER_ID_REQUIRED, new_id))
        else:
            self._add_member_and_rebalance(ticket, group, new_id, None, client_id, client_host,
                                           rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                           reason)

    def _current_member_join(self, ticket, group, member_id, instance_id, client_id, client_host,
                             rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, reason) -> None:
        if group.is_(DEAD):
            self._respond(ticket, JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id))
            return
        if not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            self._respond(ticket, JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        if member_id in group.pending_members:
            if instance_id is not None:
                # Kafka throws IllegalStateException here: pending members are never static
                self._respond(ticket, JoinResult(E.UNKNOWN_SERVER_ERROR, member_id))
                return
            self._cancel_timer(("pending-member", group.group_id, member_id))
            self._add_member_and_rebalance(ticket, group, member_id, None, client_id, client_host,
                                           rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                           reason)
            return
        err = self._validate_current_member(group, member_id, instance_id)
        if err is not None:
            self._respond(ticket, JoinResult(err, member_id))
            return
        member = group.members[member_id]
        if group.is_(PREPARING_REBALANCE):
            self._update_member_and_rebalance(ticket, group, member, protocols, rebalance_timeout_ms,
                                              session_timeout_ms)
        elif group.is_(COMPLETING_REBALANCE):
            if member.matches(protocols):
                # the member missed its JoinGroup answer: give it the current generation again
                self._respond(ticket, self._join_result(group, member, include_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(ticket, group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms)
        elif group.is_(STABLE):
            if group.is_leader(member_id) or not member.matches(protocols):
                # a leader's JoinGroup forces a rebalance (topic metadata changes, say)
                self._update_member_and_rebalance(ticket, group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms)
            else:
                self._respond(ticket, self._join_result(group, member, include_members=False))
        else:
            self._respond(ticket, JoinResult(E.UNKNOWN_MEMBER_ID, member_id))

    def _join_result(self, group: Group, member: Member, include_members: bool, leader: str | None = None,
                     skip_assignment: bool = False) -> JoinResult:
        return JoinResult(E.NONE, member.member_id, group.generation, group.protocol_type, group.protocol_name,
                          group.leader_id if leader is None else leader, skip_assignment,
                          group.current_member_metadata() if include_members else [])

    def _validate_current_member(self, group: Group, member_id: str, instance_id: str | None) -> int | None:
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return E.UNKNOWN_MEMBER_ID
            if current != member_id:
                log.info("member %s of group %s is fenced by %s (group.instance.id %s)", member_id,
                         group.group_id, current, instance_id)
                return E.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        return None

    def _park_join(self, member: Member, ticket) -> None:
        if member.awaiting_join is not None and member.awaiting_join is not ticket:
            # a second JoinGroup for the same member (a retry on another connection):
            # Kafka drops the first silently; answer it so its handler does not hang
            self._respond(member.awaiting_join, JoinResult(E.REBALANCE_IN_PROGRESS, member.member_id))
        member.awaiting_join = ticket

    def _add_member_and_rebalance(self, ticket, group, member_id, instance_id, client_id, client_host,
                                  rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                  reason) -> None:
        member = Member(member_id, instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                        protocol_type, protocols)
        member.is_new = True
        if group.is_(PREPARING_REBALANCE) and group.generation == 0:
            group.new_member_added = True   # lets the initial delay extend itself
        group.add(member, ticket)
        # a new member cannot heartbeat before its JoinGroup is answered; if its client
        # gave up, drop it after the new-member join timeout
        self._schedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id} with group instance id "
                                             f"{instance_id}; client reason: {reason}")

    def _update_member_and_rebalance(self, ticket, group, member, protocols, rebalance_timeout_ms,
                                     session_timeout_ms) -> None:
        self._park_join(member, ticket)
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, ticket)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoining")

    def _update_static_member_and_rebalance(self, ticket, group, old_id, new_id, instance_id, protocols,
                                            rebalance_timeout_ms, session_timeout_ms, reason,
                                            support_skip_assignment) -> None:
        current_leader = group.leader_id
        member = self._replace_static_member(group, instance_id, old_id, new_id)
        self._cancel_timer(("heartbeat", group.group_id, old_id))
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        old = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, ticket)
        if group.is_(STABLE):
            if group.protocol_name == group.select_protocol():
                # same assignment strategy: no rebalance, just persist the new member id
                err = self._store_group(group, {m.member_id: m.assignment for m in group.members.values()})
                if err is not None:
                    group.update_member(member, old[0], old[1], old[2], None)
                    self._replace_static_member(group, instance_id, new_id, old_id)
                    self._schedule_heartbeat(group, member, member.session_timeout_ms)
                    self._respond(ticket, JoinResult(err, UNKNOWN_MEMBER_ID, group.generation, group.protocol_type,
                                                     group.protocol_name, current_leader or ""))
                elif support_skip_assignment:
                    # JoinGroup v9+: a static leader is told it leads but must not reassign
                    is_leader = group.is_leader(new_id)
                    self._invoke_join(member, self._join_result(group, member, include_members=is_leader,
                                                                skip_assignment=is_leader))
                else:
                    # older clients: name the old leader id so the member does not run the assignor
                    self._invoke_join(member, self._join_result(group, member, include_members=False,
                                                                leader=current_leader or ""))
            else:
                self._maybe_prepare_rebalance(group, f"static member {new_id} ({instance_id}) changed protocols")
        elif group.is_(COMPLETING_REBALANCE):
            # the leader may already be assigning for the old member id
            self._prepare_rebalance(group, f"static member {instance_id} rejoined during CompletingRebalance")

    def _replace_static_member(self, group: Group, instance_id: str, old_id: str, new_id: str) -> Member:
        member = group.members[old_id]
        # fence a duplicate of the instance that may be waiting for an answer
        self._invoke_join(member, JoinResult(E.FENCED_INSTANCE_ID, old_id))
        self._invoke_sync(member, SyncResult(E.FENCED_INSTANCE_ID))
        member.member_id = new_id
        group.members = {(new_id if k == old_id else k): v for k, v in group.members.items()}
        if group.is_leader(old_id):
            group.leader_id = new_id
        group.static_members[instance_id] = new_id
        return member

    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, E.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        initial = group.is_(EMPTY)
        group.transition(PREPARING_REBALANCE, self._now)
        log.info("preparing to rebalance group %s with old generation %d (%s)", group.group_id,
                 group.generation, reason)
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            group.join_kind = "initial"
            group.initial_delay = (delay, delay, max(group.rebalance_timeout_ms - delay, 0))
            self._set_timer(("join", group.group_id), self._now + delay)
        else:
            group.join_kind = "normal"
            self._set_timer(("join", group.group_id), self._now + group.rebalance_timeout_ms)
            self._try_complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        """DelayedJoin.tryComplete: an initial delay always runs its course."""
        if group.join_kind == "normal" and group.has_all_members_joined():
            self._cancel_timer(("join", group.group_id))
            group.join_kind = None
            self._complete_join(group)

    def _on_join_timer(self, group: Group) -> None:
        if group.join_kind == "initial":
            configured, delay, remaining = group.initial_delay
            if group.new_member_added and remaining != 0:
                # members are still arriving: wait another delay, within the rebalance timeout
                group.new_member_added = False
                next_delay = min(configured, remaining)
                group.initial_delay = (configured, next_delay, max(remaining - delay, 0))
                self._set_timer(("join", group.group_id), self._now + next_delay)
                return
        group.join_kind = None
        self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """GroupCoordinator.onCompleteJoin."""
        for member in [m for m in group.not_yet_rejoined() if not m.is_static]:
            log.info("group %s removes member %s, which did not rejoin", group.group_id, member.member_id)
            self._forget_member(group, member)
        if group.is_(DEAD):
            return
        if not self._maybe_elect_new_joined_leader(group) and group.members:
            # nobody rejoined (only static members left): wait until sessions expire
            log.warning("group %s could not complete its rebalance: no member rejoined", group.group_id)
            group.join_kind = "normal"
            self._set_timer(("join", group.group_id), self._now + group.rebalance_timeout_ms)
            self._try_complete_join(group)
            return
        group.init_next_generation(self._now)
        if group.is_(EMPTY):
            log.info("group %s with generation %d is now empty", group.group_id, group.generation)
            self._store_group(group, {})
            return
        log.info("stabilized group %s generation %d with %d members (protocol %s)", group.group_id,
                 group.generation, group.size, group.protocol_name)
        for member in list(group.members.values()):
            self._invoke_join(member, self._join_result(group, member,
                                                        include_members=group.is_leader(member.member_id)))
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        group.sync_generation = group.generation
        self._set_timer(("sync", group.group_id), self._now + group.rebalance_timeout_ms)
        self._maybe_complete_sync(group)

    def _maybe_elect_new_joined_leader(self, group: Group) -> bool:
        if group.leader_id is None:
            return False
        leader = group.members.get(group.leader_id)
        if leader is not None and leader.awaiting_join is not None:
            return True
        for member in group.members.values():
            if member.awaiting_join is not None:
                group.leader_id = member.member_id
                return True
        return False

    def _invoke_join(self, member: Member, result: JoinResult) -> None:
        if member.awaiting_join is not None:
            ticket, member.awaiting_join = member.awaiting_join, None
            self._respond(ticket, result)

    def _invoke_sync(self, member: Member, result: SyncResult) -> bool:
        if member.awaiting_sync is not None:
            ticket, member.awaiting_sync = member.awaiting_sync, None
            self._respond(ticket, result)
            return True
        return False

    def _forget_member(self, group: Group, member: Member) -> None:
        """Remove a member and its session timer. A SyncGroup still parked for
        it is answered (Kafka would leave it unanswered)."""
        self._invoke_sync(member, SyncResult(E.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        self._cancel_timer(("heartbeat", group.group_id, member.member_id))

    def _remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        log.info("removing member %s from group %s: %s", member.member_id, group.group_id, reason)
        # a new member may be waiting on its JoinGroup: it must retry
        self._invoke_join(member, JoinResult(E.UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID))
        self._forget_member(group, member)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _remove_pending_member_and_update_group(self, group: Group, member_id: str) -> None:
        group.remove(member_id)
        self._cancel_timer(("pending-member", group.group_id, member_id))
        if group.is_(PREPARING_REBALANCE):
            self._try_complete_join(group)

    def sync_group(self, ticket, now_ms: int, group_id: str, generation_id: int, member_id: str,
                   instance_id: str | None = None, protocol_type: str | None = None,
                   protocol_name: str | None = None, assignments: dict | None = None) -> Effects:
        self._begin(now_ms)
        err = self.status_error(group_id, allow_empty=False)
        if err == E.COORDINATOR_LOAD_IN_PROGRESS:
            # the rebalance state was lost with the load: rejoining is the way out
            self._respond(ticket, SyncResult(E.REBALANCE_IN_PROGRESS))
            return self._end()
        if err is not None:
            self._respond(ticket, SyncResult(err))
            return self._end()
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            self._classic_sync_consumer_group(ticket, group, generation_id, member_id, instance_id, protocol_type,
                                              protocol_name)
            return self._end()
        if group is None:
            self._respond(ticket, SyncResult(E.UNKNOWN_MEMBER_ID))
            return self._end()
        err = self._validate_sync(group, generation_id, member_id, instance_id, protocol_type, protocol_name)
        if err is not None:
            self._respond(ticket, SyncResult(err))
        elif group.is_(EMPTY):
            self._respond(ticket, SyncResult(E.UNKNOWN_MEMBER_ID))
        elif group.is_(PREPARING_REBALANCE):
            self._respond(ticket, SyncResult(E.REBALANCE_IN_PROGRESS))
        elif group.is_(COMPLETING_REBALANCE):
            member = group.members[member_id]
            if member.awaiting_sync is not None and member.awaiting_sync is not ticket:
                self._respond(member.awaiting_sync, SyncResult(E.REBALANCE_IN_PROGRESS))
            member.awaiting_sync = ticket
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                assignment = {mid: bytes(a) if a is not None else b"" for mid, a in (assignments or {}).items()}
                missing = [mid for mid in group.members if mid not in assignment]
                if missing:
                    log.warning("group %s generation %d: empty assignment for members %s", group_id,
                                group.generation, missing)
                for mid in missing:
                    assignment[mid] = b""
                err = self._store_group(group, assignment)
                if err is not None:
                    self._reset_and_propagate_assignment_error(group, err)
                    self._maybe_prepare_rebalance(group, f"error {err} storing the group assignment")
                else:
                    # handed out once the record is replicated (append_done): a member never
                    # holds an assignment a new coordinator would not know
                    self._fx.appends[-1].sync = (group.group_id, group.generation, assignment)
        elif group.is_(STABLE):
            member = group.members[member_id]
            self._remove_pending_sync_member(group, member_id)
            self._respond(ticket, SyncResult(E.NONE, group.protocol_type, group.protocol_name, member.assignment))
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
        return self._end()

    def _validate_sync(self, group, generation_id, member_id, instance_id, protocol_type, protocol_name):
        if group.is_(DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        err = self._validate_current_member(group, member_id, instance_id)
        if err is not None:
            return err
        if generation_id != group.generation:
            return E.ILLEGAL_GENERATION
        if protocol_type is not None and protocol_type != group.protocol_type:
            return E.INCONSISTENT_GROUP_PROTOCOL
        if protocol_name is not None and protocol_name != group.protocol_name:
            return E.INCONSISTENT_GROUP_PROTOCOL
        return None

    def _reset_and_propagate_assignment_error(self, group: Group, error: int) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: Group, error: int) -> None:
        ok = error == E.NONE
        for member in group.members.values():
            result = SyncResult(error, group.protocol_type if ok else None, group.protocol_name if ok else None,
                                member.assignment)
            if self._invoke_sync(member, result):
                # sessions were paused while the member waited
                self._schedule_heartbeat(group, member, member.session_timeout_ms)

    def _remove_pending_sync_member(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        self._maybe_complete_sync(group)

    def _remove_sync_expiration(self, group: Group) -> None:
        group.pending_sync.clear()
        self._maybe_complete_sync(group)

    def _maybe_complete_sync(self, group: Group) -> None:
        """DelayedSync.tryComplete."""
        if group.sync_generation is None:
            return
        if (group.sync_generation != group.generation
                or group.state in (DEAD, EMPTY, PREPARING_REBALANCE) or not group.pending_sync):
            group.sync_generation = None
            self._cancel_timer(("sync", group.group_id))

    def _on_sync_expired(self, group: Group) -> None:
        generation, group.sync_generation = group.sync_generation, None
        if generation != group.generation or group.state in (DEAD, EMPTY, PREPARING_REBALANCE):
            return
        if group.pending_sync:
            missing = sorted(group.pending_sync)
            for member_id in missing:
                member = group.members.get(member_id)
                if member is not None:
                    self._forget_member(group, member)
            group.pending_sync.clear()
            self._prepare_rebalance(group, f"removing {missing} on pending sync request expiration")

    def _schedule_heartbeat(self, group: Group, member: Member, timeout_ms: int) -> None:
        self._set_timer(("heartbeat", group.group_id, member.member_id), self._now + timeout_ms)

    def _on_heartbeat_expired(self, group: Group, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        self._remove_member_and_update_group(group, member, f"removing member {member_id} on heartbeat expiration")

    def _on_pending_member_expired(self, group: Group, member_id: str) -> None:
        if member_id in group.members or member_id not in group.pending_members:
            return
        log.info("pending member %s of group %s removed after its session timeout", member_id, group.group_id)
        self._remove_pending_member_and_update_group(group, member_id)

    def heartbeat(self, ticket, now_ms: int, group_id: str, member_id: str, generation_id: int,
                  instance_id: str | None = None) -> Effects:
        self._begin(now_ms)
        err = self.status_error(group_id, allow_empty=False)
        if err == E.COORDINATOR_LOAD_IN_PROGRESS:
            self._respond(ticket, E.NONE)   # answered blindly while the group loads
            return self._end()
        if err is not None:
            self._respond(ticket, err)
            return self._end()
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            self._classic_heartbeat_consumer_group(ticket, group, member_id, generation_id, instance_id)
            return self._end()
        if group is None:
            self._respond(ticket, E.UNKNOWN_MEMBER_ID)
            return self._end()
        if group.is_(DEAD):
            err = E.COORDINATOR_NOT_AVAILABLE
        else:
            err = self._validate_current_member(group, member_id, instance_id)
            if err is None and generation_id != group.generation:
                err = E.ILLEGAL_GENERATION
        if err is None:
            if group.is_(EMPTY):
                err = E.UNKNOWN_MEMBER_ID
            else:
                member = group.members[member_id]
                self._schedule_heartbeat(group, member, member.session_timeout_ms)
                err = E.REBALANCE_IN_PROGRESS if group.is_(PREPARING_REBALANCE) else E.NONE
        self._respond(ticket, err)
        return self._end()

    def leave_group(self, ticket, now_ms: int, group_id: str, members: list) -> Effects:
        """members: (member id, group instance id, reason)."""
        self._begin(now_ms)
        err = self.status_error(group_id, allow_empty=False)
        group = self.groups.get(group_id) if err is None else None
        if err is not None:
            self._respond(ticket, LeaveResult(err))
        elif isinstance(group, ConsumerGroup):
            self._classic_leave_consumer_group(ticket, group, members)
        elif group is None:
            self._respond(ticket, LeaveResult(E.NONE, [(mid, iid, E.UNKNOWN_MEMBER_ID) for mid, iid, _ in members]))
        elif group.is_(DEAD):
            self._respond(ticket, LeaveResult(E.COORDINATOR_NOT_AVAILABLE))
        else:
            out = []
            for member_id, instance_id, reason in members:
                reason = reason or "not provided"
                if member_id == UNKNOWN_MEMBER_ID:
                    # administrative removal by group.instance.id
                    current = group.static_members.get(instance_id) if instance_id is not None else None
                    if current is not None:
                        self._leave(group, group.members[current], reason)
                        out.append((member_id, instance_id, E.NONE))
                    else:
                        out.append((member_id, instance_id, E.UNKNOWN_MEMBER_ID))
                elif member_id in group.pending_members:
                    self._remove_pending_member_and_update_group(group, member_id)
                    out.append((member_id, instance_id, E.NONE))
                else:
                    e = self._validate_current_member(group, member_id, instance_id)
                    if e is None:
                        self._leave(group, group.members[member_id], reason)
                    out.append((member_id, instance_id, E.NONE if e is None else e))
            self._respond(ticket, LeaveResult(E.NONE, out))
        return self._end()

    def _leave(self, group: Group, member: Member, reason: str) -> None:
        self._remove_member_and_update_group(group, member, f"member {member.member_id} left (LeaveGroup); "
                                                           f"client reason: {reason}")

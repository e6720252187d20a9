"""The classic group protocol as a pure state machine.

Inputs are requests and timer ticks, each with an explicit `now_ms`.
Every input returns an `Effects`: answers for request tickets (a JoinGroup or
SyncGroup ticket may be answered by a later input, when the rebalance moves
on), batches to append to `__consumer_offsets`, and the timers set in that
step. The state machine keeps its own timer table; the driver calls
`tick(now_ms)` once `next_deadline()` has passed. No I/O, no clock.

The behaviour follows Kafka 3.9's classic coordinator (kafka.coordinator.group
GroupCoordinator, GroupMetadata, GroupMetadataManager, DelayedJoin,
InitialDelayedJoin, DelayedSync, DelayedHeartbeat): the states, the error
codes and when they are returned, the initial rebalance delay and its
extension, static membership, and the records written.
"""
from __future__ import annotations

import heapq
import logging
import uuid

from kproto.errors import ErrorCode as E

from broker.groups import records as rec
from broker.groups.append_errors import store_group_error
from broker.config.groups import GroupConfig
from broker.groups.consumer_classic import ClassicMembersMixin
from broker.groups.consumer_model import ConsumerGroup
from broker.groups.consumer_records import group_tombstones as consumer_group_tombstones
from broker.groups.consumer_state import ConsumerGroupsMixin
from broker.groups.loading import PartitionLoad
from broker.groups.model import (
    COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE, Group, Member, OffsetEntry,
)
from broker.groups.placement import partition_for
from broker.groups.results import (
    DEAD_SUMMARY, EMPTY_SUMMARY, Append, DeleteGroupsResult, DeleteOffsetsResult, Effects, FetchedOffset,
    GroupOverview, GroupSummary, JoinResult, LeaveResult, MemberSummary, OffsetCommitResult, SyncResult,
)

log = logging.getLogger("kproto.groups")

# Commits made since the load sort after every record replayed from the log.
_RUNTIME_ORDER_BASE = 1 << 62
# Bytes a batch of one record adds around key and value (batch header, record framing).
_BATCH_OVERHEAD = 61 + 24
_UNKNOWN_MEMBER_ID = ""


def java_string_length(s: str) -> int:
    """String#length: UTF-16 code units."""
    return len(s.encode("utf-16-le")) // 2


def _new_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class GroupStateMachine(ConsumerGroupsMixin, ClassicMembersMixin):
    def __init__(self, config: GroupConfig | None = None, member_id_factory=_new_member_id):
        self.config = config or GroupConfig()
        self.new_member_id = member_id_factory
        self.groups: dict[str, Group] = {}
        self.num_partitions: int | None = None   # None until __consumer_offsets exists
        self.loading: set[int] = set()
        # __consumer_offsets partitions another broker leads (replication): their groups are not here
        self.not_owned: set[int] = set()
        self._loads: dict[int, PartitionLoad] = {}
        self._timers: dict[tuple, tuple[int, int]] = {}
        self._heap: list[tuple[int, int, tuple]] = []
        self._timer_seq = 0
        self._append_seq = 0
        self._fx: Effects | None = None
        self._now = 0

    # ================================================================ plumbing

    def _begin(self, now_ms: int) -> None:
        self._now = now_ms
        self._fx = Effects()

    def _end(self) -> Effects:
        fx, self._fx = self._fx, None
        return fx

    def _respond(self, ticket, result) -> None:
        if ticket is not None:
            self._fx.responses.append((ticket, result))

    def _append(self, partition: int, records: list, producer_id: int = -1, producer_epoch: int = -1,
                transactional: bool = False) -> int:
        self._append_seq += 1
        self._fx.appends.append(Append(partition, records, self._now, producer_id, producer_epoch, transactional))
        return _RUNTIME_ORDER_BASE + self._append_seq

    def _set_timer(self, key: tuple, deadline: int) -> None:
        self._timer_seq += 1
        self._timers[key] = (deadline, self._timer_seq)
        heapq.heappush(self._heap, (deadline, self._timer_seq, key))
        if self._fx is not None:
            self._fx.timers.append((key, deadline))

    def _cancel_timer(self, key: tuple) -> None:
        self._timers.pop(key, None)

    def has_timer(self, key: tuple) -> bool:
        return key in self._timers

    def timer_deadline(self, key: tuple) -> int | None:
        entry = self._timers.get(key)
        return entry[0] if entry else None

    def next_deadline(self) -> int | None:
        heap = self._heap
        while heap:
            deadline, seq, key = heap[0]
            if self._timers.get(key) == (deadline, seq):
                return deadline
            heapq.heappop(heap)
        return None

    def tick(self, now_ms: int) -> Effects:
        """Fire every timer due at now_ms."""
        self._begin(now_ms)
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            deadline, seq, key = heapq.heappop(heap)
            if self._timers.get(key) != (deadline, seq):
                continue
            del self._timers[key]
            self._fire(key)
        return self._end()

    def _fire(self, key: tuple) -> None:
        kind = key[0]
        if kind == "expire-offsets":
            self._expire_offsets()
            return
        group = self.groups.get(key[1])
        if group is None or group.is_(DEAD):
            return
        if kind in ("consumer-session", "consumer-rebalance"):
            self._on_consumer_timer(group, key)
        elif kind == "heartbeat":
            self._on_heartbeat_expired(group, key[2])
        elif kind == "pending-member":
            self._on_pending_member_expired(group, key[2])
        elif kind == "join":
            self._on_join_timer(group)
        elif kind == "sync":
            self._on_sync_expired(group)

    def _order(self) -> int:
        return _RUNTIME_ORDER_BASE + self._append_seq

    # ================================================================ ownership and loading

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def activate(self, num_partitions: int, loading=(), now_ms: int = 0, not_owned=()) -> Effects:
        """__consumer_offsets exists with num_partitions; the listed partitions
        still have to be replayed (requests for their groups get
        COORDINATOR_LOAD_IN_PROGRESS until finish_load); not_owned: led elsewhere."""
        self._begin(now_ms)
        self.num_partitions = num_partitions
        self.not_owned.update(not_owned)
        for p in loading:
            self.loading.add(p)
            self._loads[p] = PartitionLoad(p)
        # Kafka runs the expiration task right away and then on its interval
        self._set_timer(("expire-offsets",), now_ms)
        return self._end()

    def resign(self, partition: int, now_ms: int) -> Effects:
        """Another broker leads this __consumer_offsets partition now: its groups leave this
        coordinator (Kafka's onResignation); requests for them get NOT_COORDINATOR."""
        self._begin(now_ms)
        self._drop_partition_groups(partition)
        self.not_owned.add(partition)
        return self._end()

    def begin_load(self, partition: int, now_ms: int) -> Effects:
        """This broker became the leader of the partition (Kafka's onElection): its groups are
        loaded again from the log (COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
        self._begin(now_ms)
        self._drop_partition_groups(partition)
        self.not_owned.discard(partition)
        self.loading.add(partition)
        self._loads[partition] = PartitionLoad(partition)
        return self._end()

    def _drop_partition_groups(self, partition: int) -> None:
        self.loading.discard(partition)
        self._loads.pop(partition, None)
        if self.num_partitions is None:
            return
        for gid in [g for g in self.groups if self.partition_for(g) == partition]:
            del self.groups[gid]

    def replay_batch(self, partition: int, base_offset: int, producer_id: int, transactional: bool,
                     control: bool, records) -> None:
        self._loads[partition].replay_batch(base_offset, producer_id, transactional, control, records)

    def finish_load(self, partition: int, now_ms: int) -> Effects:
        self._begin(now_ms)
        load = self._loads.pop(partition, None)
        self.loading.discard(partition)
        if load is not None:
            for group in load.build_groups():
                if group.group_id in self.groups:
                    continue
                self.groups[group.group_id] = group
                self._on_group_loaded(group)
            log.debug("loaded __consumer_offsets-%d: %d records, %d groups", partition, load.records,
                      len(load.groups))
        return self._end()

    def _on_group_loaded(self, group: Group) -> None:
        if isinstance(group, ConsumerGroup):
            self._on_consumer_group_loaded(group)
            return
        if group.size > self.config.max_size:
            self._prepare_rebalance(group, "freshly-loaded group is over capacity")
        for member in group.members.values():
            self._schedule_heartbeat(group, member, member.session_timeout_ms)

    def _status_error(self, group_id: str | None, allow_empty: bool) -> int | None:
        """GroupCoordinator.validateGroupStatus."""
        if group_id is None or (not allow_empty and group_id == ""):
            return E.INVALID_GROUP_ID
        if self.num_partitions is None:
            return E.NOT_COORDINATOR
        if self.not_owned and self.partition_for(group_id) in self.not_owned:
            return E.NOT_COORDINATOR
        if self.loading and self.partition_for(group_id) in self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        return None

    # ================================================================ JoinGroup

    def join_group(self, ticket, now_ms: int, group_id: str, member_id: str, instance_id: str | None,
                   protocol_type: str, protocols: list[tuple[str, bytes]], session_timeout_ms: int,
                   rebalance_timeout_ms: int, client_id: str = "", client_host: str = "",
                   require_known_member_id: bool = True, support_skip_assignment: bool = True,
                   reason: str | None = None, topics: dict | None = None) -> Effects:
        """topics (name -> (topic id, partitions)) matter when the group is a consumer group."""
        self._begin(now_ms)
        member_id = member_id or _UNKNOWN_MEMBER_ID
        err = self._status_error(group_id, allow_empty=False)
        if err is not None:
            self._respond(ticket, JoinResult(err, member_id))
            return self._end()
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            self._respond(ticket, JoinResult(E.INVALID_SESSION_TIMEOUT, member_id))
            return self._end()
        unknown = member_id == _UNKNOWN_MEMBER_ID
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
            self._respond(ticket, JoinResult(E.GROUP_MAX_SIZE_REACHED, _UNKNOWN_MEMBER_ID))
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
            self._respond(ticket, JoinResult(E.COORDINATOR_NOT_AVAILABLE, _UNKNOWN_MEMBER_ID))
            return
        if not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            self._respond(ticket, JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, _UNKNOWN_MEMBER_ID))
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
                    self._respond(ticket, JoinResult(err, _UNKNOWN_MEMBER_ID, group.generation, group.protocol_type,
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

    # ================================================================ rebalance

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
        self._invoke_join(member, JoinResult(E.UNKNOWN_MEMBER_ID, _UNKNOWN_MEMBER_ID))
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

    # ================================================================ SyncGroup

    def sync_group(self, ticket, now_ms: int, group_id: str, generation_id: int, member_id: str,
                   instance_id: str | None = None, protocol_type: str | None = None,
                   protocol_name: str | None = None, assignments: dict | None = None) -> Effects:
        self._begin(now_ms)
        err = self._status_error(group_id, allow_empty=False)
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

    # ================================================================ Heartbeat and sessions

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
        err = self._status_error(group_id, allow_empty=False)
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

    # ================================================================ LeaveGroup

    def leave_group(self, ticket, now_ms: int, group_id: str, members: list) -> Effects:
        """members: (member id, group instance id, reason)."""
        self._begin(now_ms)
        err = self._status_error(group_id, allow_empty=False)
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
                if member_id == _UNKNOWN_MEMBER_ID:
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

    # ================================================================ offsets

    def commit_offsets(self, ticket, now_ms: int, group_id: str, member_id: str, generation_id: int,
                       offsets: list, instance_id: str | None = None, expire_timestamp: int | None = None,
                       api_version: int = 9) -> Effects:
        """offsets: (topic, partition, offset, leader epoch, metadata, commit timestamp or -1)."""
        self._begin(now_ms)
        tps = [(o[0], o[1]) for o in offsets]
        err = self._status_error(group_id, allow_empty=True)
        if err is not None:
            self._respond(ticket, OffsetCommitResult({tp: err for tp in tps}))
            return self._end()
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # a member of a generation this coordinator never saw
                self._respond(ticket, OffsetCommitResult({tp: E.ILLEGAL_GENERATION for tp in tps}))
                return self._end()
            log.info("creating simple consumer group %s through an offset commit", group_id)
            group = self.groups[group_id] = Group(group_id, EMPTY, now_ms)
        err = self._validate_offset_commit(group, generation_id, member_id, instance_id, transactional=False,
                                           api_version=api_version)
        if err is None and group.is_(COMPLETING_REBALANCE):
            err = E.REBALANCE_IN_PROGRESS
        if err is not None:
            self._respond(ticket, OffsetCommitResult({tp: err for tp in tps}))
            return self._end()
        if isinstance(group, ConsumerGroup):
            pass
        elif group.state in (STABLE, PREPARING_REBALANCE):
            member = group.members[member_id]
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
        self._respond(ticket, OffsetCommitResult(self._store_offsets(group, offsets, expire_timestamp)))
        return self._end()

    def txn_commit_offsets(self, ticket, now_ms: int, group_id: str, producer_id: int, producer_epoch: int,
                           offsets: list, member_id: str = "", generation_id: int = -1,
                           instance_id: str | None = None) -> Effects:
        """TxnOffsetCommit: the offsets become visible once complete_transaction
        sees the producer's COMMIT (they block require_stable fetches until then)."""
        self._begin(now_ms)
        tps = [(o[0], o[1]) for o in offsets]
        err = self._status_error(group_id, allow_empty=False)
        if err is not None:
            self._respond(ticket, OffsetCommitResult({tp: err for tp in tps}))
            return self._end()
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, EMPTY, now_ms)
        err = self._validate_offset_commit(group, generation_id, member_id, instance_id, transactional=True)
        if err is not None:
            self._respond(ticket, OffsetCommitResult({tp: err for tp in tps}))
            return self._end()
        self._respond(ticket, OffsetCommitResult(self._store_offsets(group, offsets, None, producer_id,
                                                                     producer_epoch)))
        return self._end()

    def complete_transaction(self, now_ms: int, producer_id: int, commit: bool,
                             partitions: set[int] | None = None) -> Effects:
        """A COMMIT or ABORT marker for producer_id reached these
        __consumer_offsets partitions (None: all)."""
        self._begin(now_ms)
        for group in list(self.groups.values()):
            pending = group.pending_txn.get(producer_id)
            if pending is None or group.is_(DEAD):
                continue
            if partitions is not None and self.partition_for(group.group_id) not in partitions:
                continue
            del group.pending_txn[producer_id]
            if commit:
                for tp, entry in pending.items():
                    current = group.offsets.get(tp)
                    if current is None or current.order < entry.order:
                        group.offsets[tp] = entry
        return self._end()

    def _validate_offset_commit(self, group, generation_id, member_id, instance_id, transactional, api_version=9):
        if group.is_(DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if isinstance(group, ConsumerGroup):
            return self._validate_consumer_commit(group, generation_id, member_id, transactional, api_version)
        if generation_id < 0 and group.is_(EMPTY):
            return None   # admin clients and consumers without group management
        if generation_id >= 0 or member_id != _UNKNOWN_MEMBER_ID or instance_id is not None:
            err = self._validate_current_member(group, member_id, instance_id)
            if err is None and generation_id != group.generation:
                err = E.ILLEGAL_GENERATION
            return err
        if not transactional and not group.is_(EMPTY):
            return E.UNKNOWN_MEMBER_ID   # only members commit to an active group
        return None

    @staticmethod
    def _validate_consumer_commit(group, member_epoch, member_id, transactional, api_version=9):
        """ConsumerGroup.validateOffsetCommit: without a member epoch (admin
        clients, manual assignment) only into an empty group; a member
        commits with its current epoch."""
        if member_epoch < 0 and not member_id:
            return None if not group.members or transactional else E.UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if member.classic is not None:
            return None if member_epoch == member.member_epoch else E.ILLEGAL_GENERATION
        if not transactional and api_version < 9:
            return E.UNSUPPORTED_VERSION   # a consumer-protocol member commits with OffsetCommit v9+
        if member_epoch != member.member_epoch:
            return E.ILLEGAL_GENERATION if transactional else E.STALE_MEMBER_EPOCH
        return None

    def _store_offsets(self, group: Group, offsets: list, expire_timestamp: int | None,
                       producer_id: int = -1, producer_epoch: int = -1) -> dict:
        max_len = self.config.offset_metadata_max_bytes
        errors = {}
        valid = {}
        for topic, partition, offset, leader_epoch, metadata, commit_ts in offsets:
            metadata = metadata if metadata is not None else ""
            tp = (topic, partition)
            if java_string_length(metadata) > max_len:
                errors[tp] = E.OFFSET_METADATA_TOO_LARGE
                valid.pop(tp, None)
            else:
                errors[tp] = E.NONE
                valid[tp] = OffsetEntry(offset, leader_epoch, metadata,
                                        self._now if commit_ts is None or commit_ts == -1 else commit_ts,
                                        expire_timestamp)
        if not valid:
            return errors
        records = [(rec.offset_commit_key(group.group_id, tp[0], tp[1]),
                    rec.offset_commit_value(e.offset, e.leader_epoch, e.metadata, e.commit_timestamp,
                                            e.expire_timestamp))
                   for tp, e in valid.items()]
        size = _BATCH_OVERHEAD + sum(len(k) + len(v) + 16 for k, v in records)
        if size > self.config.max_batch_bytes:
            # the append would fail with MESSAGE_TOO_LARGE, which a commit reports as this
            return {tp: (err if err != E.NONE else E.INVALID_COMMIT_OFFSET_SIZE) for tp, err in errors.items()}
        transactional = producer_id >= 0
        order = self._append(self.partition_for(group.group_id), records, producer_id, producer_epoch, transactional)
        append = self._fx.appends[-1]
        if transactional:
            group.received_txn_commits = True
            pending = group.pending_txn.setdefault(producer_id, {})
            for tp, entry in valid.items():
                entry.order = order
                pending[tp] = entry
        else:
            # visible once replicated (append_done), as Kafka's pendingOffsetCommits
            group.received_consumer_commits = True
            for tp, entry in valid.items():
                entry.order = order
                group.pending_offsets[tp] = group.pending_offsets.get(tp, 0) + 1
        append.offsets = [(group.group_id, tp, entry) for tp, entry in valid.items()]
        return errors

    def append_done(self, append, error: int, now_ms: int) -> Effects:
        """The durability callback (broker/coordination/shell.py): the batch is
        replicated (error NONE: the high watermark passed it) or failed. Offsets
        commits become visible or are dropped (GroupMetadata.onOffsetCommitAppend /
        failPendingOffsetWrite); a SyncGroup leader's assignment is handed out or the
        group rebalances again (GroupCoordinator.doSyncGroup's storeGroup callback)."""
        self._begin(now_ms)
        for group_id, tp, entry in append.offsets:
            group = self.groups.get(group_id)
            if group is None:
                continue
            if append.transactional:
                if error:
                    pending = group.pending_txn.get(append.producer_id)
                    if pending is not None and pending.get(tp) is entry:
                        del pending[tp]
                        if not pending:
                            del group.pending_txn[append.producer_id]
                continue
            count = group.pending_offsets.get(tp, 0)
            if count <= 0:
                continue   # deleted meanwhile (OffsetDelete, expiry, the group's deletion)
            if count == 1:
                del group.pending_offsets[tp]
            else:
                group.pending_offsets[tp] = count - 1
            if not error:
                current = group.offsets.get(tp)
                if current is None or current.order < entry.order:
                    group.offsets[tp] = entry
        if append.sync is not None:
            self._sync_stored(append.sync, error)
        return self._end()

    def _sync_stored(self, sync: tuple, error: int) -> None:
        group_id, generation, assignment = sync
        group = self.groups.get(group_id)
        if (group is None or isinstance(group, ConsumerGroup) or group.generation != generation
                or not group.is_(COMPLETING_REBALANCE)):
            return
        if error:
            err = store_group_error(error)
            self._reset_and_propagate_assignment_error(group, err)
            self._maybe_prepare_rebalance(group, f"error {E(err).name} storing the group assignment")
            return
        for m in group.members.values():
            m.assignment = assignment.get(m.member_id, b"")
        self._propagate_assignment(group, E.NONE)
        group.transition(STABLE, self._now)

    def fetch_offsets(self, group_id: str, partitions: list | None, require_stable: bool = False
                      ) -> tuple[int, list]:
        """(group error, [(topic, partition, FetchedOffset)]); partitions None: all committed."""
        err = self._status_error(group_id, allow_empty=True)
        if err is not None:
            return err, []
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return E.NONE, [(t, p, FetchedOffset()) for t, p in (partitions or [])]
        tps = list(group.offsets) if partitions is None else partitions
        out = []
        for tp in tps:
            tp = (tp[0], tp[1])
            if require_stable and group.has_pending_commit(tp):
                out.append((tp[0], tp[1], FetchedOffset(error=E.UNSTABLE_OFFSET_COMMIT)))
                continue
            entry = group.offsets.get(tp)
            if entry is None:
                out.append((tp[0], tp[1], FetchedOffset()))
            else:
                out.append((tp[0], tp[1], FetchedOffset(entry.offset, entry.leader_epoch, entry.metadata)))
        return E.NONE, out

    # ================================================================ administration

    def describe_group(self, group_id: str) -> tuple[int, GroupSummary]:
        err = self._status_error(group_id, allow_empty=True)
        if err is not None:
            return err, EMPTY_SUMMARY
        group = self.groups.get(group_id)
        if group is None or isinstance(group, ConsumerGroup):
            # Kafka 3.9: DescribeGroups knows classic groups only (ConsumerGroupDescribe the others)
            return E.NONE, DEAD_SUMMARY
        if group.is_(STABLE):
            members = [MemberSummary(m.member_id, m.instance_id, m.client_id, m.client_host,
                                     m.metadata(group.protocol_name), m.assignment)
                       for m in group.members.values()]
            return E.NONE, GroupSummary(group.state, group.protocol_type or "", group.protocol_name, members)
        members = [MemberSummary(m.member_id, m.instance_id, m.client_id, m.client_host, b"", b"")
                   for m in group.members.values()]
        return E.NONE, GroupSummary(group.state, group.protocol_type or "", "", members)

    def list_groups(self, states=(), types=()) -> tuple[int, list[GroupOverview]]:
        error = E.COORDINATOR_LOAD_IN_PROGRESS if self.loading else E.NONE
        wanted_states = {s.lower() for s in states or ()}
        wanted_types = {t.lower() for t in types or ()}
        out = []
        for g in self.groups.values():
            kind = "consumer" if isinstance(g, ConsumerGroup) else "classic"
            if wanted_types and kind not in wanted_types:
                continue
            if not wanted_states or g.state.lower() in wanted_states:
                out.append(GroupOverview(g.group_id, g.protocol_type or "", g.state, kind))
        return error, out

    def delete_groups(self, ticket, now_ms: int, group_ids: list[str]) -> Effects:
        self._begin(now_ms)
        errors: dict[str, int] = {}
        eligible = []
        for group_id in dict.fromkeys(group_ids):
            err = self._status_error(group_id, allow_empty=True)
            if err is not None:
                errors[group_id] = err
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_(DEAD):
                errors[group_id] = E.GROUP_ID_NOT_FOUND
            elif group.is_(EMPTY):
                group.transition(DEAD, now_ms)
                eligible.append(group)
                errors[group_id] = E.NONE
            else:
                errors[group_id] = E.NON_EMPTY_GROUP
        if eligible:
            removed = self._cleanup(eligible, lambda g: g.remove_offsets(list(g.offsets)))
            log.info("deleted groups %s (%d offsets)", [g.group_id for g in eligible], removed)
        self._respond(ticket, DeleteGroupsResult(errors))
        return self._end()

    def delete_offsets(self, ticket, now_ms: int, group_id: str, partitions: list) -> Effects:
        """OffsetDelete; partitions: (topic, partition)."""
        self._begin(now_ms)
        err = self._status_error(group_id, allow_empty=False)
        result = DeleteOffsetsResult(E.NONE)
        if err is not None:
            result.error = err
        else:
            group = self.groups.get(group_id)
            eligible = []
            if group is None or group.is_(DEAD):
                result.error = E.GROUP_ID_NOT_FOUND
            elif group.is_(EMPTY):
                eligible = [tuple(tp) for tp in partitions]
            elif group.is_consumer_group():
                for tp in partitions:
                    if group.is_subscribed_to(tp[0]):
                        result.errors[tuple(tp)] = E.GROUP_SUBSCRIBED_TO_TOPIC
                    else:
                        eligible.append(tuple(tp))
            else:
                result.error = E.NON_EMPTY_GROUP
            if eligible:
                self._cleanup([group], lambda g: g.remove_offsets(eligible))
                for tp in eligible:
                    result.errors[tp] = E.NONE
        self._respond(ticket, result)
        return self._end()

    def topics_deleted(self, now_ms: int, topics: set[str]) -> Effects:
        """Offsets of deleted topics go (GroupCoordinator.handleDeletedPartitions)."""
        self._begin(now_ms)
        if self.num_partitions is not None:
            self._cleanup(list(self.groups.values()),
                          lambda g: g.remove_offsets([tp for tp in g.offsets if tp[0] in topics]))
        return self._end()

    def _expire_offsets(self) -> None:
        now = self._now
        retention = self.config.offsets_retention_ms
        removed = self._cleanup([g for g in self.groups.values() if self.partition_for(g.group_id) not in self.loading],
                                lambda g: g.remove_expired_offsets(now, retention))
        if removed:
            log.info("removed %d expired offsets", removed)
        self._set_timer(("expire-offsets",), now + self.config.offsets_retention_check_interval_ms)

    def _cleanup(self, groups, selector) -> int:
        """GroupMetadataManager.cleanupGroupMetadata: tombstones for removed
        offsets, and for groups that end up Empty without offsets."""
        total = 0
        for group in groups:
            removed = selector(group)
            if group.is_(EMPTY) and not group.has_offsets():
                group.transition(DEAD, self._now)
            tombstones = [(rec.offset_commit_key(group.group_id, t, p), None) for t, p in removed]
            if group.is_(DEAD) and self.groups.get(group.group_id) is group:
                self._drop_group(group)
                # a group that only ever stored offsets has no metadata record to delete
                if isinstance(group, ConsumerGroup):
                    tombstones.extend(consumer_group_tombstones(group))
                elif group.generation > 0:
                    tombstones.append((rec.group_metadata_key(group.group_id), None))
            if tombstones:
                self._append(self.partition_for(group.group_id), tombstones)
            total += len(removed)
        return total

    def _drop_group(self, group: Group) -> None:
        del self.groups[group.group_id]
        self._cancel_timer(("join", group.group_id))
        self._cancel_timer(("sync", group.group_id))
        for member_id in list(group.members):
            self._cancel_timer(("heartbeat", group.group_id, member_id))
            self._cancel_consumer_timers(group.group_id, member_id)
        for member_id in group.pending_members:
            self._cancel_timer(("pending-member", group.group_id, member_id))

    def _store_group(self, group: Group, assignment: dict) -> int | None:
        """Append the group's metadata record. An error code when the record
        cannot be appended (too large for the partition)."""
        members = []
        if group.members:
            protocol = group.protocol_name
            for m in group.members.values():
                members.append(rec.MemberMetadata(
                    member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                    client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms, subscription=m.metadata(protocol),
                    assignment=assignment[m.member_id]))
        key = rec.group_metadata_key(group.group_id)
        value = rec.group_metadata_value(group.protocol_type or "", group.generation, group.protocol_name,
                                         group.leader_id, -1 if group.state_timestamp is None
                                         else group.state_timestamp, members)
        if _BATCH_OVERHEAD + len(key) + len(value) > self.config.max_batch_bytes:
            log.error("group %s generation %d: metadata record of %d bytes exceeds %d bytes", group.group_id,
                      group.generation, len(key) + len(value), self.config.max_batch_bytes)
            return E.UNKNOWN_SERVER_ERROR   # Kafka maps MESSAGE_TOO_LARGE to this for group metadata
        self._append(self.partition_for(group.group_id), [(key, value)])
        return None

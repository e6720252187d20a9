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

The machine is one object over one state (groups, members, timers, pending appends), written in
parts by protocol: this module has the plumbing (effects, timers), partition ownership and loading
and the administrative requests; broker/groups/classic_rebalance.py the classic JoinGroup /
SyncGroup / Heartbeat / LeaveGroup; broker/groups/offset_commits.py committed offsets;
broker/groups/consumer_state.py and consumer_classic.py the KIP-848 consumer groups;
broker/groups/share_mixins.py the share groups' records.
"""
from __future__ import annotations

import heapq
import logging
import uuid

from kproto.errors import ErrorCode as E

from broker.groups import records as rec
from broker.groups.records import BATCH_OVERHEAD
from broker.config.groups import GroupConfig
from broker.groups.classic_rebalance import ClassicRebalanceMixin
from broker.groups.consumer_classic import ClassicMembersMixin
from broker.groups.consumer_model import ConsumerGroup
from broker.groups.consumer_records import group_tombstones as consumer_group_tombstones
from broker.groups.consumer_state import ConsumerGroupsMixin
from broker.groups.loading import PartitionLoad
from broker.groups.offset_commits import OffsetCommitsMixin
from broker.groups.model import (
    DEAD, EMPTY, STABLE, Group,
)
from broker.groups.placement import partition_for
from broker.groups.share_mixins import ShareMetadataMixin, ShareRecordsMixin
from broker.groups.results import (
    DEAD_SUMMARY, EMPTY_SUMMARY, Append, DeleteGroupsResult, Effects, GroupOverview, GroupSummary, JoinResult,
    MemberSummary, SyncResult,
)

log = logging.getLogger("kproto.groups")

# Commits made since the load sort after every record replayed from the log.
_RUNTIME_ORDER_BASE = 1 << 62
def _new_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class GroupStateMachine(ClassicRebalanceMixin, OffsetCommitsMixin, ConsumerGroupsMixin, ClassicMembersMixin,
                        ShareMetadataMixin, ShareRecordsMixin):
    def __init__(self, config: GroupConfig | None = None, member_id_factory=_new_member_id):
        self.config = config or GroupConfig()
        self.new_member_id = member_id_factory
        self.groups: dict[str, Group] = {}
        # share group -> where its share-partition state is (broker/groups/share_metadata.py)
        self.share_metadata: dict = {}
        # share group -> when its record was last replayed here (written, or loaded): when its
        # share-partitions recorded initializing were, as Kafka's replay stamps its InitMapValues
        self.share_metadata_at: dict = {}
        # partition -> the share groups (membership records) it replaces at the share-group shell
        # (broker/groups/share_records.py), until the shell takes them
        self.share_loads: dict = {}
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
            self._answer_parked(self.groups.pop(gid), E.NOT_COORDINATOR)
        self._drop_partition_share_metadata(partition)
        self.share_loads[partition] = {}

    def _answer_parked(self, group, error: int) -> None:
        """The JoinGroup and SyncGroup requests a group holds get `error` (Kafka's
        onGroupUnloaded): unanswered, a client waits out its request timeout, and librdkafka's
        JoinGroup timeout is max.poll.interval.ms, five minutes, before it asks anyone else."""
        for member in list(group.members.values()):
            if getattr(member, "awaiting_join", None) is not None:
                ticket, member.awaiting_join = member.awaiting_join, None
                self._respond(ticket, JoinResult(error, member.member_id))
            if getattr(member, "awaiting_sync", None) is not None:
                ticket, member.awaiting_sync = member.awaiting_sync, None
                self._respond(ticket, SyncResult(error))

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
            self.share_loads[partition] = load.share_groups
            for group_id, meta in load.share_metadata.items():
                if group_id not in self.share_metadata:
                    self.share_metadata[group_id] = meta
                    self.share_metadata_at[group_id] = now_ms
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

    def status_error(self, group_id: str | None, allow_empty: bool) -> int | None:
        """GroupCoordinator.validateGroupStatus: INVALID_GROUP_ID, NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS or None. Public: the group handlers check it too, before
        requests (share groups, share-group offsets, DeleteGroups of share groups) that reach no method here."""
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

    # ================================================================ rebalance

    # ================================================================ SyncGroup

    # ================================================================ Heartbeat and sessions

    # ================================================================ LeaveGroup

    # ================================================================ offsets

    # ================================================================ administration

    def describe_group(self, group_id: str) -> tuple[int, GroupSummary]:
        err = self.status_error(group_id, allow_empty=True)
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
            err = self.status_error(group_id, allow_empty=True)
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

    def topics_deleted(self, now_ms: int, topics: set[str]) -> Effects:
        """Offsets of deleted topics go (GroupCoordinator.handleDeletedPartitions)."""
        self._begin(now_ms)
        if self.num_partitions is not None:
            self._cleanup(list(self.groups.values()),
                          lambda g: g.remove_offsets([tp for tp in g.offsets if tp[0] in topics]))
        return self._end()

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
        if BATCH_OVERHEAD + len(key) + len(value) > self.config.max_batch_bytes:
            log.error("group %s generation %d: metadata record of %d bytes exceeds %d bytes", group.group_id,
                      group.generation, len(key) + len(value), self.config.max_batch_bytes)
            return E.UNKNOWN_SERVER_ERROR   # Kafka maps MESSAGE_TOO_LARGE to this for group metadata
        self._append(self.partition_for(group.group_id), [(key, value)])
        return None

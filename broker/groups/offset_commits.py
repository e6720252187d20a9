"""Committed offsets for GroupStateMachine (broker/groups/state.py): OffsetCommit and
TxnOffsetCommit with their validation, the pending transactional offsets a marker completes,
the stored offsets once `__consumer_offsets` acknowledged the append, OffsetFetch, OffsetDelete
and retention (Kafka 3.9's GroupMetadataManager offset paths)."""
from __future__ import annotations

import logging

from kproto.errors import ErrorCode as E

from broker.groups import records as rec
from broker.groups.append_errors import store_group_error
from broker.groups.consumer_model import ConsumerGroup
from broker.groups.model import (
    COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE, UNKNOWN_MEMBER_ID, Group,
    OffsetEntry, java_string_length,
)
from broker.groups.records import BATCH_OVERHEAD
from broker.groups.results import DeleteOffsetsResult, Effects, FetchedOffset, OffsetCommitResult

log = logging.getLogger("kproto.groups")


class OffsetCommitsMixin:
    def commit_offsets(self, ticket, now_ms: int, group_id: str, member_id: str, generation_id: int,
                       offsets: list, instance_id: str | None = None, expire_timestamp: int | None = None,
                       api_version: int = 9) -> Effects:
        """offsets: (topic, partition, offset, leader epoch, metadata, commit timestamp or -1)."""
        self._begin(now_ms)
        tps = [(o[0], o[1]) for o in offsets]
        err = self.status_error(group_id, allow_empty=True)
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
        err = self.status_error(group_id, allow_empty=False)
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
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or instance_id is not None:
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
        size = BATCH_OVERHEAD + sum(len(k) + len(v) + 16 for k, v in records)
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
        if append.share_metadata is not None:
            self._share_metadata_stored(append.share_metadata, error)
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
        err = self.status_error(group_id, allow_empty=True)
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

    def delete_offsets(self, ticket, now_ms: int, group_id: str, partitions: list) -> Effects:
        """OffsetDelete; partitions: (topic, partition)."""
        self._begin(now_ms)
        err = self.status_error(group_id, allow_empty=False)
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

    def _expire_offsets(self) -> None:
        now = self._now
        retention = self.config.offsets_retention_ms
        removed = self._cleanup([g for g in self.groups.values() if self.partition_for(g.group_id) not in self.loading],
                                lambda g: g.remove_expired_offsets(now, retention))
        if removed:
            log.info("removed %d expired offsets", removed)
        self._set_timer(("expire-offsets",), now + self.config.offsets_retention_check_interval_ms)

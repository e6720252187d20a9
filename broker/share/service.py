"""The share-group shell of one broker: share-group membership for the groups it coordinates, the
share-partitions of the partitions it leads, share sessions (ShareFetch/ShareAcknowledge session
epochs), and one trio task that wakes at the earliest deadline (an acquisition lock, a member's
session) and applies it. The decisions are in `membership.py` and `partition.py`.

Every change of a share-partition's state (records acquired, acknowledged, released) is written to
the share coordinator of its key (WriteShareGroupState through `persister.py`; the coordinator
appends it to `__share_group_state`, `coordinator_shell.py`) before the answer goes out; a
share-partition is read from its coordinator when this broker starts leading the partition, so a
restart or a failover loses no acknowledgement and offers again only what was in flight.
"""
from __future__ import annotations

import logging
import os
import struct
import time
import weakref

import trio

from kproto.errors import ErrorCode as E

from broker.groups.results import GroupOverview
from broker.partitions.partition import OffsetOutOfRange

from broker.share import group_configs
from broker.share.coordinator_shell import ShareCoordinatorService
from broker.share.initialized_topics import InitializedTopics
from broker.share.persister import Persister
from broker.share import membership
from broker.share.membership import ShareGroups
from broker.share.partition import SharePartition, changed_batches

log = logging.getLogger("kproto.share")

_BATCH_HEAD = struct.Struct(">qi")          # base offset, batch length
_LAST_DELTA = struct.Struct(">i")           # at byte 23 of a v2 batch


def batch_ranges(data: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of every whole v2 record batch in `data`."""
    out, pos, n = [], 0, len(data)
    while pos + 27 <= n:
        base, length = _BATCH_HEAD.unpack_from(data, pos)
        end = pos + 12 + length
        if end > n:
            break
        out.append((base, base + _LAST_DELTA.unpack_from(data, pos + 23)[0]))
        pos = end
    return out


class ShareSession:
    __slots__ = ("group_id", "member_id", "epoch", "partitions", "connection")

    def __init__(self, group_id: str, member_id: str, connection=None):
        self.group_id = group_id
        self.member_id = member_id
        self.epoch = 1                                  # the epoch the next request must carry
        self.partitions: dict = {}                      # (topic id, index) -> None, in order
        self.connection = connection                    # id of the connection that opened it, or None


class Change:
    """One acquisition's or acknowledgement's change of a share-partition, until its write is
    answered: the share-partition, its version after the change, the records changed (for a
    rollback)."""
    __slots__ = ("sp", "version", "records")

    def __init__(self):
        self.sp: SharePartition | None = None
        self.version: int | None = None
        self.records: list = []


class ShareService:
    def __init__(self, broker):
        self.broker = broker
        get = self._config_int
        self.lock_duration_ms = get("group.share.record.lock.duration.ms", 30000)
        self.delivery_count_limit = get("group.share.delivery.count.limit", 5)
        self.max_record_locks = get("group.share.partition.max.record.locks", 2000)
        # the share groups of the __consumer_offsets partitions led here: `groups` (replayed ones
        # taken from the group coordinator first)
        self._groups = ShareGroups(session_timeout_ms=get("group.share.session.timeout.ms", 45000),
                                  heartbeat_interval_ms=get("group.share.heartbeat.interval.ms", 5000),
                                  max_size=get("group.share.max.size", 200),
                                  interval_of=lambda gid: int(self.group_config(gid, "share.assignment.interval.ms")))
        self.partitions: dict[tuple, SharePartition] = {}  # (group, topic id, index) -> share-partition
        self.sessions: dict[tuple, ShareSession] = {}       # (group, member) -> session
        # connection id -> (group, member) of the sessions opened on it: its close ends them
        self._opened_on: dict[int, set] = {}
        self._group_locks: dict[str, trio.Lock] = {}        # one membership change written at a time
        self._wake = trio.Event()
        # (group, topic id, index) -> (leader epoch, state epoch) the share-partition was read under
        self._epochs: dict[tuple, tuple] = {}
        self._dirty: set = set()                    # share-partitions whose change is not yet written
        self._write_locks: dict[tuple, trio.Lock] = {}
        # change counters: a key's share-partition's latest change, and the latest one a write that
        # succeeded carried (a caller whose change a later write carried needs no write of its own)
        self._versions: dict[tuple, int] = {}
        self._written: dict[tuple, int] = {}
        # the state batches the share coordinator holds from a key's last successful write: the next
        # write carries only what differs from them
        self._sent: dict[tuple, list] = {}
        # why a share-partition was dropped (a fenced write's error), for the callers still holding it
        self._dropped: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # group -> topic ids it subscribed to or an administrator reset here (the group coordinator's
        # memory of where its state may be; DescribeShareGroupOffsets of all topics asks about them)
        self.group_topics: dict[str, set] = {}
        self._write_wake = trio.Event()
        self.coordinator = ShareCoordinatorService(broker)   # the share-state RPCs of keys led here
        self.persister = Persister(broker, self.coordinator)  # this broker's way to the coordinators
        self.initialized = InitializedTopics(self)   # the group coordinator's record of where state is

    def _config_int(self, key: str, default: int) -> int:
        return group_configs.broker_int(self.broker.config, key, default)

    def group_config(self, group_id: str, key: str):
        """A share group's config: its override (IncrementalAlterConfigs on GROUP), else the broker's."""
        value = self.broker.image.configs.get((group_configs.GROUP_RESOURCE, group_id), {}).get(key)
        if value is not None:
            return value
        if key == "share.auto.offset.reset":
            return "latest"
        if key == "share.isolation.level":
            return "read_uncommitted"
        return self._config_int(group_configs.DEFAULTS[key], group_configs.BROKER_DEFAULTS.get(key, 0))

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    def topic_table(self) -> dict:
        return {name: (t.topic_id, len(t.partitions)) for name, t in self.broker.image.topics.items()}

    # -- membership ------------------------------------------------------------------------------

    @property
    def groups(self) -> ShareGroups:
        """The share groups, with those the group coordinator replayed since the last look: a load of
        a __consumer_offsets partition replaces that partition's groups (a resignation drops them)."""
        gc = getattr(self.broker, "groups", None)
        loads = gc.take_share_loads() if hasattr(gc, "take_share_loads") else None
        if loads:
            groups, now = self._groups.groups, self.now_ms()
            for partition, replayed in loads.items():
                for gid in [g for g in groups if gc.partition_for(g) == partition]:
                    del groups[gid]
                for gid, load in replayed.items():
                    group = self._groups.restore(gid, load, now)
                    if group is not None:
                        groups[gid] = group
            self._kick()
        return self._groups

    async def heartbeat(self, **kwargs):
        """ShareGroupHeartbeat: the membership's answer once the records of the change it made are
        replicated in __consumer_offsets (as Kafka's coordinator answers); if they cannot be, the
        group is as before and the answer is the append's error. One change of a group at a time,
        so an answer never tells of a change not yet written."""
        group_id = kwargs["group_id"]
        lock = self._group_locks.get(group_id)
        if lock is None:
            lock = self._group_locks[group_id] = trio.Lock()
        async with lock:
            groups = self.groups.groups
            member = (kwargs["member_id"],)
            before = membership.view(groups.get(group_id), member)
            # a member leaving keeps its share session: its last acknowledgements (ShareAcknowledge with
            # epoch -1) come after the leave; the session's end releases what it still holds
            res = self.groups.heartbeat(topics=self.topic_table(), now_ms=self.now_ms(),
                                        initialized=self.initialized.partitions(group_id), **kwargs)
            group = groups.get(group_id)
            if group is not None:
                seen = self.group_topics.setdefault(group_id, set())
                seen.update(tid for tid, _n in (group.topics_seen or {}).values())
                changes = membership.records(group, before, member)
                if changes:
                    error = await self.broker.groups.put_share_records(group_id, changes)
                    if error != E.NONE:
                        if groups.get(group_id) is group:      # (not replaced by a load meanwhile)
                            if before is None:
                                del groups[group_id]
                            else:
                                membership.revert(group, before)
                        res = type(res)(error, None)
        if group_id not in self._groups.groups and not lock.locked() and not lock.statistics().tasks_waiting:
            self._group_locks.pop(group_id, None)      # (no group, no one waiting: no lock kept)
        self._kick()
        return res

    def _member_gone(self, group_id: str, member_id: str) -> None:
        """A member's group session expired: its records are released, its share session ends."""
        self.sessions.pop((group_id, member_id), None)
        for (gid, tid, idx), sp in self.partitions.items():
            if gid == group_id and sp.release_member(member_id):
                self.persist((gid, tid, idx), sp)
                self._notify(tid, idx)

    def list_groups(self, states=(), types=()) -> list:
        """ListGroups entries of the share groups (protocol type "share", as Kafka 4.x lists them)."""
        wanted_states = {s.lower() for s in states or ()}
        wanted_types = {t.lower() for t in types or ()}
        if wanted_types and "share" not in wanted_types:
            return []
        return [GroupOverview(g.group_id, "share", g.state, "share") for g in self.groups.groups.values()
                if not wanted_states or g.state.lower() in wanted_states]

    async def offsets(self, group_id: str, keys) -> dict:
        """(topic id, index) -> (share-partition start offset, done offsets above it, the leader epoch
        stored with the state) from the share coordinators (ReadShareGroupStateSummary), for the given
        (topic id, index) keys; start offset -1 for a share-partition with no state. A key whose
        coordinator answered an error is left out."""
        out = {}
        for tid, idx in keys:
            res = await self.persister.summary(group_id, tid, idx)
            if res.error_code == E.NONE:
                out[(tid, idx)] = (res.start_offset, max(0, getattr(res, "delivery_complete_count", 0)),
                                   res.leader_epoch)
        return out

    def keys_with_state(self, group_id: str) -> set:
        """(topic id, index) of the group's share-partitions known here: held by this broker, or in the
        share coordinator's partitions it leads."""
        keys = {(tid, idx) for gid, tid, idx in self.partitions if gid == group_id}
        keys |= {(tid, idx) for gid, tid, idx in self.coordinator.keys() if gid == group_id}
        return keys

    # -- share sessions --------------------------------------------------------------------------

    def session_for(self, group_id: str, member_id: str, epoch: int, connection=None):
        """(error, session) for a ShareFetch/ShareAcknowledge at `epoch`: 0 opens a new session (on
        `connection`, whose close ends it: `connection_closed`), -1 is the last request of one, others
        must be the session's next epoch."""
        key = (group_id, member_id)
        if epoch == 0:
            old = self.sessions.pop(key, None)
            if old is not None:
                self._release_session(old)
            s = self.sessions[key] = ShareSession(group_id, member_id, connection)
            if connection is not None:
                self._opened_on.setdefault(connection, set()).add(key)
            return E.NONE, s
        s = self.sessions.get(key)
        if s is None:
            return E.SHARE_SESSION_NOT_FOUND, None
        if epoch == -1:
            return E.NONE, s
        if epoch != s.epoch:
            return E.INVALID_SHARE_SESSION_EPOCH, None
        s.epoch = s.epoch + 1 if s.epoch < 2**31 - 1 else 1
        return E.NONE, s

    def connection_closed(self, connection) -> None:
        """The client connection `connection` ended: the share sessions opened on it (by a ShareFetch
        of epoch 0) end too, and the records their members acquired are released at once, as Kafka
        4.x's ShareSessionCache disconnect listener and SharePartitionManager.releaseSession do; their
        delivery counts stay, so a record at share.delivery.count.limit is archived. The members stay
        in their groups (their heartbeats time out on their own). A session opened again since on
        another connection is that one's."""
        for key in self._opened_on.pop(connection, ()):
            s = self.sessions.get(key)
            if s is not None and s.connection == connection:
                log.info("share group %s: member %s's connection closed: its share session ends", *key)
                self.close_session(s)

    def close_session(self, session: ShareSession) -> None:
        if self.sessions.get((session.group_id, session.member_id)) is session:
            del self.sessions[(session.group_id, session.member_id)]
        self._release_session(session)

    def _release_session(self, session: ShareSession) -> None:
        for tid, idx in session.partitions:
            sp = self.partitions.get((session.group_id, tid, idx))
            if sp is not None and sp.release_member(session.member_id):
                self.persist((session.group_id, tid, idx), sp)
                self._notify(tid, idx)
        self._kick()

    # -- __share_group_state, through the share coordinator ---------------------------------------

    def persist(self, key: tuple, sp: SharePartition) -> int:
        """The share-partition's state changed: the writer task sends it to the share coordinator
        (a timer's change); an answer that depends on it awaits `write_through` (or `commit`) with the
        version returned here."""
        version = self._versions[key] = self._versions.get(key, 0) + 1
        self._dirty.add(key)
        self._write_wake.set()
        return version

    async def commit(self, key: tuple, change: Change) -> int:
        """The answer of an acquisition or acknowledgement `change` once its state is written: NONE,
        or the write's error after the change is rolled back (nothing the caller is told failed stays
        acquired or acknowledged here; Kafka 4.3's SharePartition.rollbackOrProcessStateUpdates)."""
        if change.sp is None or change.version is None:
            return E.NONE
        error = await self.write_through(key, change.sp, change.version)
        if error != E.NONE and self.partitions.get(key) is change.sp and change.records:
            if change.sp.rollback(change.records):
                self._notify(key[1], key[2])     # records released again: a waiting member may take them
                self.persist(key, change.sp)     # the rolled-back state goes with the next write
        return error

    def undelivered(self, key: tuple, change: Change) -> None:
        """The ShareFetch answer that was to carry acquisition `change` was never made (its handler
        failed or was cancelled, whether or not the change was written): the records it acquired
        are released at once, not held until group.share.record.lock.duration.ms runs out for a
        member that never saw them; the released state goes with the next write."""
        sp = self.partitions.get(key)
        if sp is None or sp is not change.sp or not change.records:
            return
        if sp.release_undelivered(change.records):
            self.persist(key, sp)
            self._notify(key[1], key[2])         # a waiting member may take them

    async def write_through(self, key: tuple, sp: SharePartition | None = None, version: int | None = None) -> int:
        """WriteShareGroupState of the share-partition's whole state (its start offset, its
        in-flight batches, its leader and state epochs); NONE once a write that carried change
        `version` of `sp` (default: the latest change of the one held now) is replicated. A fenced
        share-partition (a newer leader, or an administrator's reset: a higher state epoch) is dropped
        here: the next ShareFetch reads its state again. A caller whose `sp` was dropped before its
        change was written gets the error that dropped it (INVALID_RECORD_STATE when it was not a
        write), never NONE: its change is not with the coordinator."""
        if sp is None:
            sp = self.partitions.get(key)
            if sp is None:
                return E.NONE
        if version is None:
            version = self._versions.get(key, 0)
        lock = self._write_locks.setdefault(key, trio.Lock())
        async with lock:
            if self.partitions.get(key) is not sp:
                return self._dropped.get(sp, E.INVALID_RECORD_STATE)
            written = self._written.get(key, 0)
            if written >= version:
                if written >= self._versions.get(key, 0):
                    self._dirty.discard(key)    # nothing newer to write either
                return E.NONE               # a write of another task carried this change already
            self._dirty.discard(key)
            carried = self._versions.get(key, 0)
            leader_epoch, state_epoch = self._epochs.get(key, (-1, 0))
            start = sp.start_offset
            whole = sp.state_batches()
            # only what changed since the last write the coordinator took (Kafka 4.3's SharePartition);
            # the whole state after a failed or uncertain one, or when this leader has not written yet
            written = self._sent.pop(key, None)
            batches = whole if written is None else changed_batches(written, whole)
            res = await self.persister.write(key[0], key[1], key[2], leader_epoch, state_epoch, start,
                                             sp.delivery_complete_count(), batches)
            error = res.error_code
            if self.partitions.get(key) is not sp:       # dropped while the write was out
                return error if error != E.NONE else self._dropped.get(sp, E.INVALID_RECORD_STATE)
            if error == E.NONE:
                self._written[key] = carried
                self._sent[key] = whole
                sp.persisted(start)
            elif error in (E.FENCED_STATE_EPOCH, E.FENCED_LEADER_EPOCH, E.INVALID_REQUEST):
                log.info("share-partition %s:%s:%d fenced (%s): its state is read again", key[0], key[1], key[2],
                         E(error).name)
                self.drop(key, error)
            else:
                self._dirty.add(key)       # written again by the writer task
            return error

    def drop(self, key: tuple, error: int = E.INVALID_RECORD_STATE) -> None:
        """Forget a share-partition held here (fenced, reset or deleted by an administrator); a
        caller still waiting for its change to be written gets `error`."""
        sp = self.partitions.pop(key, None)
        if sp is not None:
            self._dropped[sp] = error
        self._epochs.pop(key, None)
        self._dirty.discard(key)
        self._versions.pop(key, None)
        self._written.pop(key, None)
        self._sent.pop(key, None)

    async def _writer(self) -> None:
        """Sends the changes nobody awaits (expired locks, members gone) to the share coordinator."""
        while True:
            await self._write_wake.wait()
            self._write_wake = trio.Event()
            for key in list(self._dirty):
                if key in self._dirty:
                    if await self.write_through(key) not in (E.NONE, E.FENCED_STATE_EPOCH,
                                                             E.FENCED_LEADER_EPOCH, E.INVALID_REQUEST):
                        await trio.sleep(0.5)       # the coordinator is moving: try again shortly
                        self._write_wake.set()

    async def load(self, group_id: str, partition) -> int:
        """Make the share-partition of a partition led here, from the share coordinator's state
        (ReadShareGroupState with this leader epoch: a new leader after a failover resumes what the
        old one wrote; acknowledged records stay done, in-flight ones are offered again with their
        delivery counts). A share-partition the coordinator has no state of is initialised at
        share.auto.offset.reset (InitializeShareGroupState). NONE, or the coordinator's error."""
        key = (group_id, partition.topic_id, partition.index)
        held = self._epochs.get(key)
        if key in self.partitions and held is not None and held[0] == partition.leader_epoch:
            return E.NONE
        lock = self._write_locks.setdefault(key, trio.Lock())
        async with lock:
            held = self._epochs.get(key)
            if key in self.partitions and held is not None and held[0] == partition.leader_epoch:
                return E.NONE
            self.drop(key)
            epoch = partition.leader_epoch
            res = await self.persister.read(group_id, partition.topic_id, partition.index, epoch)
            if res.error_code == E.INVALID_REQUEST:            # no state yet
                init = await self.persister.initialize(group_id, partition.topic_id, partition.index, 0, -1)
                if init.error_code != E.NONE:
                    return init.error_code
                res = await self.persister.read(group_id, partition.topic_id, partition.index, epoch)
            if res.error_code != E.NONE:
                return res.error_code
            start, batches = res.start_offset, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                                for b in res.state_batches]
            if start < 0:                                      # initialised without a start offset
                start, batches = self._initial_offset(group_id, partition), []
            self._epochs[key] = (epoch, res.state_epoch)
            sp = self.partitions[key] = SharePartition(
                start, batches=batches,
                delivery_count_limit=int(self.group_config(group_id, "share.delivery.count.limit")),
                max_record_locks=self.max_record_locks, lock_duration_ms=self.lock_duration_ms)
        if sp.start_offset < partition.log_start_offset:
            sp.move_start(partition.log_start_offset)
        if res.start_offset < 0 or sp.start_offset != res.start_offset:
            # a change of its own (a version to carry): a write_through of no change writes nothing
            self.persist(key, sp)
            return await self.write_through(key)
        return E.NONE

    # -- share-partitions ------------------------------------------------------------------------

    def share_partition(self, group_id: str, partition) -> SharePartition | None:
        """The share-partition `load` made (None before)."""
        sp = self.partitions.get((group_id, partition.topic_id, partition.index))
        if sp is not None and sp.start_offset < partition.log_start_offset:
            sp.move_start(partition.log_start_offset)
        return sp

    def _initial_offset(self, group_id: str, partition) -> int:
        """Where a new share-partition starts: share.auto.offset.reset (latest by default)."""
        reset = self.group_config(group_id, "share.auto.offset.reset")
        if reset == "earliest":
            return partition.log_start_offset
        if reset.startswith("by_duration:"):
            found = partition.offset_for_timestamp(self.now_ms() - group_configs.by_duration_ms(reset))
            return partition.high_watermark if found is None else found.offset
        return partition.high_watermark

    def lock_duration_for(self, group_id: str) -> int:
        return int(self.group_config(group_id, "share.record.lock.duration.ms"))

    def acquire(self, group_id: str, member_id: str, partition, max_records: int, max_bytes: int,
                change: Change | None = None):
        """(record bytes, acquired ranges) for one partition of a ShareFetch; `change` (for `commit`)
        gets what was acquired."""
        sp = self.share_partition(group_id, partition)
        if sp is None:
            return b"", []
        offset = sp.fetch_offset()
        if offset is None or max_records <= 0:
            return b"", []
        committed = self.group_config(group_id, "share.isolation.level") == "read_committed"
        try:
            region, _upper = partition.read(offset, max(max_bytes, 1), 1 if committed else 0)
        except OffsetOutOfRange:     # the log moved under the share-partition (retention)
            sp.move_start(partition.log_start_offset)
            return b"", []
        if region is None:
            return b"", []
        data = os.pread(region.fd, region.length, region.offset)
        ranges = batch_ranges(data)
        records = change.records if change is not None else None
        got = sp.acquire(member_id, ranges, max_records, self.now_ms(), self.lock_duration_for(group_id),
                         changes=records)
        if got:
            # the delivery counts are durable before the records go out: a restart never hands a
            # record out more than share.delivery.count.limit times
            version = self.persist((group_id, partition.topic_id, partition.index), sp)
            if change is not None:
                change.sp, change.version = sp, version
            self._kick()
        return (data if got else b""), got

    def acknowledge(self, group_id: str, member_id: str, topic_id, index: int, batches,
                    change: Change | None = None) -> int:
        """batches: (first, last, types); the first error, or NONE. `change` (for `commit`, which the
        answer awaits: no acknowledgement is lost) gets what was acknowledged."""
        sp = self.partitions.get((group_id, topic_id, index))
        if sp is None:
            return E.INVALID_RECORD_STATE
        now = self.now_ms()
        error = E.NONE
        records = change.records if change is not None else None
        for first, last, types in batches:
            code = sp.acknowledge(member_id, first, last, list(types), now, changes=records)
            if code != E.NONE and error == E.NONE:
                error = code
        version = self.persist((group_id, topic_id, index), sp)
        if change is not None:
            change.sp, change.version = sp, version
        self._notify(topic_id, index)      # released records may be fetched by a waiting member
        return error

    def _notify(self, topic_id, index: int) -> None:
        t = self.broker.image.topics_by_id.get(topic_id)
        p = self.broker.partitions.get(t.name, index) if t is not None else None
        if p is not None:
            p.notify()

    # -- the timer task --------------------------------------------------------------------------

    def _kick(self) -> None:
        self._wake.set()

    def _next_deadline(self):
        deadlines = [d for d in (sp.next_deadline() for sp in self.partitions.values()) if d is not None]
        g = self.groups.next_deadline()
        if g is not None:
            deadlines.append(g)
        return min(deadlines, default=None)

    def tick(self, now_ms: int) -> None:
        """Apply every deadline passed by `now_ms`: expired locks, expired members."""
        for (gid, tid, idx), sp in self.partitions.items():
            if sp.expire(now_ms):
                self.persist((gid, tid, idx), sp)
                self._notify(tid, idx)
        groups = self.groups.groups
        before = {gid: membership.view(g, ()) for gid, g in groups.items()
                  if any(m.deadline <= now_ms for m in g.members.values())}
        for gid, mid in self.groups.expire(now_ms, self.topic_table(), self.initialized.partitions):
            log.info("share group %s: member %s session expired", gid, mid)
            self._member_gone(gid, mid)
        for gid, view in before.items():
            if gid in groups:               # the members' tombstones and the group's new epoch
                self.broker.groups.append_share_records(gid, membership.records(groups[gid], view, ()))

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer)
                nursery.start_soon(self.persister.run)
                nursery.start_soon(self.coordinator.run)      # the __share_group_state pruner
                await self._timers()
        finally:
            with trio.CancelScope(shield=True):
                await self.persister.aclose()

    async def _timers(self) -> None:
        while True:
            self._wake = trio.Event()
            self.tick(self.now_ms())
            deadline = self._next_deadline()
            with trio.move_on_after(60 if deadline is None else max(0, deadline - self.now_ms()) / 1000 + 0.001):
                await self._wake.wait()

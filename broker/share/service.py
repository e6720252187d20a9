"""The share-group shell of one broker: share-group membership for the groups it coordinates, the
share-partitions of the partitions it leads, share sessions (ShareFetch/ShareAcknowledge session
epochs), and one trio task that wakes at the earliest deadline (an acquisition lock, a member's
session) and applies it. The decisions are in `membership.py` and `partition.py`.

Every change of a share-partition's state (records acquired, acknowledged, released) is appended to
`__share_group_state` as a ShareSnapshot record (`state_store.py`) before the answer goes out, and
read back at start, so a restart loses no acknowledgement and offers again only what was in flight.
"""
from __future__ import annotations

import logging
import os
import struct
import time

import trio

from kproto.errors import ErrorCode as E

from broker.groups.results import GroupOverview
from broker.partitions.partition import OffsetOutOfRange
from kproto import records as rec

from broker.coordination.topic import ensure_internal_topic
from broker.share import group_configs, state_store
from broker.storage.replay import stored_batches
from broker.share.coordinator_shell import ShareCoordinatorService
from broker.share.membership import ShareGroups
from broker.share.partition import SharePartition

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
    __slots__ = ("group_id", "member_id", "epoch", "partitions")

    def __init__(self, group_id: str, member_id: str):
        self.group_id = group_id
        self.member_id = member_id
        self.epoch = 1                                  # the epoch the next request must carry
        self.partitions: dict = {}                      # (topic id, index) -> None, in order


class ShareService:
    def __init__(self, broker):
        self.broker = broker
        get = self._config_int
        self.lock_duration_ms = get("group.share.record.lock.duration.ms", 30000)
        self.delivery_count_limit = get("group.share.delivery.count.limit", 5)
        self.max_record_locks = get("group.share.partition.max.record.locks", 2000)
        self.groups = ShareGroups(session_timeout_ms=get("group.share.session.timeout.ms", 45000),
                                  heartbeat_interval_ms=get("group.share.heartbeat.interval.ms", 5000),
                                  max_size=get("group.share.max.size", 200))
        self.partitions: dict[tuple, SharePartition] = {}  # (group, topic id, index) -> share-partition
        self.sessions: dict[tuple, ShareSession] = {}       # (group, member) -> session
        self._wake = trio.Event()
        # (group, topic id, index) -> (snapshot epoch, start offset, state batches) read back from
        # __share_group_state at start: a share-partition created later resumes from it
        self.stored: dict[tuple, tuple] = {}
        self._epochs: dict[tuple, int] = {}
        self._loaded = False           # read back on first use, when the partitions' leadership is settled
        self.coordinator = ShareCoordinatorService(broker)   # the share-state RPCs of keys led here

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
        return self._config_int(group_configs.DEFAULTS[key], 0)

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    def topic_table(self) -> dict:
        return {name: (t.topic_id, len(t.partitions)) for name, t in self.broker.image.topics.items()}

    # -- membership ------------------------------------------------------------------------------

    def heartbeat(self, **kwargs):
        # a member leaving keeps its share session: its last acknowledgements (ShareAcknowledge with
        # epoch -1) come after the leave; the session's end releases what it still holds
        res = self.groups.heartbeat(topics=self.topic_table(), now_ms=self.now_ms(), **kwargs)
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

    def offsets(self, group_id: str) -> dict:
        """(topic id, index) -> (share-partition start offset, done offsets above it) of the group's
        share-partitions this broker holds, live or read back from __share_group_state."""
        if not self._loaded:
            self._load()
        out = {}
        for (gid, tid, idx), (_epoch, start, batches) in self.stored.items():
            if gid == group_id:
                out[(tid, idx)] = (start, sum(last - first + 1 for first, last, state, _c in batches if state in (2, 4)))
        for (gid, tid, idx), sp in self.partitions.items():
            if gid == group_id:
                out[(tid, idx)] = (sp.start_offset, sp.delivery_complete_count())
        return out

    # -- share sessions --------------------------------------------------------------------------

    def session_for(self, group_id: str, member_id: str, epoch: int):
        """(error, session) for a ShareFetch/ShareAcknowledge at `epoch`: 0 opens a new session, -1 is
        the last request of one, others must be the session's next epoch."""
        key = (group_id, member_id)
        if epoch == 0:
            old = self.sessions.pop(key, None)
            if old is not None:
                self._release_session(old)
            s = self.sessions[key] = ShareSession(group_id, member_id)
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

    # -- __share_group_state ---------------------------------------------------------------------

    def _load(self) -> None:
        """Replay the local partitions of __share_group_state (the latest snapshot of a key wins)."""
        self._loaded = True
        topic = self.broker.image.topics.get(state_store.TOPIC)
        if topic is None:
            return
        for index in topic.partitions:
            p = self.broker.partitions.get(state_store.TOPIC, index)
            if p is None:
                continue
            for chunk in stored_batches(p.log, p.high_watermark):
                for header, batch in chunk:
                    if header.is_control:
                        continue
                    for r in rec.iter_records(batch):
                        got = state_store.decode(r.key, r.value)
                        if got is None:
                            continue
                        ident, state = got
                        if state is None:
                            self.stored.pop(ident, None)
                        else:
                            self.stored[ident] = state
        if self.stored:
            log.info("share groups: %d share-partition states read from %s", len(self.stored), state_store.TOPIC)

    def persist(self, key: tuple, sp: SharePartition) -> bool:
        """Append the share-partition's state as a ShareSnapshot record to its __share_group_state
        partition, when this broker leads that partition (creating the topic on first use); whether
        it was appended."""
        group_id, tid, idx = key
        now = self.now_ms()
        t = self.broker.image.topics_by_id.get(tid)
        data = self.broker.partitions.get(t.name, idx) if t is not None else None

        def value(epoch):
            return state_store.snapshot_value(epoch, data.leader_epoch if data is not None else -1, sp.start_offset,
                                              sp.state_batches(), sp.delivery_complete_count(), now, now)
        return self._append(key, value)

    def tombstone(self, key: tuple) -> bool:
        """Append a tombstone for the share-partition's state (DeleteShareGroupOffsets): a restart
        reads nothing back for it; whether it was appended."""
        return self._append(key, None)

    def _append(self, key: tuple, value) -> bool:
        """value: None for a tombstone, else a function of the next snapshot epoch giving the value."""
        topic = self.broker.image.topics.get(state_store.TOPIC)
        if topic is None:
            ensure_internal_topic(self.broker, state_store.TOPIC, False, lambda: None, log)
            return False
        group_id, tid, idx = key
        index = state_store.partition_for(group_id, tid, idx, len(topic.partitions))
        p = self.broker.partitions.get(state_store.TOPIC, index)
        if p is None or not p.is_leader:
            return False
        now = self.now_ms()
        if value is not None:
            epoch = self._epochs[key] = self._epochs.get(key, 0) + 1
            value = value(epoch)
        batch = bytearray(rec.build_batch([(state_store.snapshot_key(group_id, tid, idx), value, [], now)]))
        try:
            p.append(batch, rec.BatchHeader(batch), now)
        except Exception:
            log.exception("appending to %s-%d failed", state_store.TOPIC, index)
            return False
        return True

    # -- share-partitions ------------------------------------------------------------------------

    def share_partition(self, group_id: str, partition) -> SharePartition:
        key = (group_id, partition.topic_id, partition.index)
        sp = self.partitions.get(key)
        if sp is None:
            if not self._loaded:
                self._load()
            stored = self.stored.pop(key, None)
            if stored is not None:          # resume: acknowledged stays done, in-flight is offered again
                self._epochs[key] = stored[0]
                start, batches = stored[1], stored[2]
            else:
                start, batches = self._initial_offset(group_id, partition), ()
            sp = self.partitions[key] = SharePartition(
                start, batches=batches,
                delivery_count_limit=int(self.group_config(group_id, "share.delivery.count.limit")),
                max_record_locks=self.max_record_locks, lock_duration_ms=self.lock_duration_ms)
            self.persist(key, sp)
        if sp.start_offset < partition.log_start_offset:
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

    def acquire(self, group_id: str, member_id: str, partition, max_records: int, max_bytes: int):
        """(record bytes, acquired ranges) for one partition of a ShareFetch."""
        sp = self.share_partition(group_id, partition)
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
        got = sp.acquire(member_id, ranges, max_records, self.now_ms(), self.lock_duration_for(group_id))
        if got:
            # the delivery counts are durable before the records go out: a restart never hands a
            # record out more than share.delivery.count.limit times
            self.persist((group_id, partition.topic_id, partition.index), sp)
            self._kick()
        return (data if got else b""), got

    def acknowledge(self, group_id: str, member_id: str, topic_id, index: int, batches) -> int:
        """batches: (first, last, types); the first error, or NONE."""
        sp = self.partitions.get((group_id, topic_id, index))
        if sp is None:
            return E.INVALID_RECORD_STATE
        now = self.now_ms()
        error = E.NONE
        for first, last, types in batches:
            code = sp.acknowledge(member_id, first, last, list(types), now)
            if code != E.NONE and error == E.NONE:
                error = code
        self.persist((group_id, topic_id, index), sp)      # before the answer: no acknowledgement is lost
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
        for gid, mid in self.groups.expire(now_ms, self.topic_table()):
            log.info("share group %s: member %s session expired", gid, mid)
            self._member_gone(gid, mid)

    async def run(self) -> None:
        while True:
            self._wake = trio.Event()
            self.tick(self.now_ms())
            deadline = self._next_deadline()
            with trio.move_on_after(60 if deadline is None else max(0, deadline - self.now_ms()) / 1000 + 0.001):
                await self._wake.wait()

"""The leader's side of a follower's Fetch (replica id >= 0, ReplicaState
from Fetch v15): records up to the log end offset (not the high watermark),
the diverging epoch when the follower's last fetched epoch ends elsewhere in
this log (KIP-595 style truncation, as Kafka 3.9's followers use it), and the
follower's fetch offset recorded as its log end offset, which may move the
high watermark and complete acks=all produces, and its log start offset (for
DeleteRecords' low watermark). The answer says the log start offset this
leader is sure of (Partition.replication_log_start_offset), which followers
adopt."""
from __future__ import annotations

import time
from time import perf_counter
from typing import NamedTuple

import trio

from kproto.errors import ErrorCode
from kproto.messages.fetch_response import FetchResponse

from broker.metrics.registry import remote_time
from broker.partitions.partition import OffsetOutOfRange  # noqa: F401

_Part = FetchResponse.PartitionData
_Epoch = FetchResponse.EpochEndOffset


def replica_id_of(req, version: int) -> int:
    if version >= 15:
        return req.replica_state.replica_id
    return req.replica_id


def _error(index: int, code: int, partition=None) -> _Part:
    return _Part(partition_index=index, error_code=code,
                 high_watermark=partition.high_watermark if partition is not None else -1,
                 last_stable_offset=-1,
                 log_start_offset=partition.log_start_offset if partition is not None else -1,
                 aborted_transactions=None, preferred_read_replica=-1, records=b"")


# An idle follower session's fetch visits only the partitions that changed: every change a follower
# is told of calls Partition.notify() (an append, the log start moved by retention, DeleteRecords,
# tiered deletion or a truncation, a role or ISR change) or notify_high_watermark(). Every
# partition of the session is still visited this often, a safety net for a change that does not:
# at 10,000 partitions a visit of every 10 s was most of an idle node's CPU (docs/performance.md)
FULL_VISIT_MS = 60_000
# A fetch that visits thousands of partitions (a follower's first, full fetch; a leadership change;
# the full visit above) lets the event loop run every this many partitions: one answer for 3,333
# partitions was a step of 0.1-0.2 s (more at 10,000 partitions), long enough to starve
# heartbeats and metadata fetches
YIELD_EVERY = 256


class IdleSession:
    """What a follower's incremental fetch session (KIP-227) leaves out of its fetches: the
    partitions it found caught up with nothing new to learn (``armed``: each one watches its
    Partition, whose next notify() puts its key in ``dirty``), and the partitions to look at again
    at the next fetch (``revisit``: answered, in error, or not caught up). A fetch visits the
    partitions the request names, ``revisit`` and ``dirty``: O(changed partitions), not O(session),
    where Kafka walks the whole session at every fetch. ``answer_ms``: the last time all of
    ``armed`` were seen caught up (every build), which the leader's follower state counts as the
    follower's last caught-up fetch of each (leader_state.FollowerState.idle)."""
    __slots__ = ("armed", "dirty", "revisit", "answer_ms", "next_full_ms", "closed", "visited", "waiter")

    def __init__(self):
        self.armed: set = set()
        self.dirty: set = set()
        self.revisit: set = set()
        self.answer_ms = 0
        self.next_full_ms = 0     # the first incremental fetch visits the whole session
        self.closed = False       # the session was closed or evicted (FetchSessionCacheShard.remove)
        self.visited = 0          # partitions visited so far (tests count the work)
        self.waiter = None        # the long poll's event: set when an armed partition changes

    def mark(self, key, wake: bool = True) -> None:
        """An armed partition changed (Partition.notify); ``wake``: the long poll ends now
        (not for a high watermark move alone: Partition.notify_high_watermark)."""
        self.dirty.add(key)
        if wake and self.waiter is not None:
            self.waiter.set()

    def items(self, session, fetch_data: dict, forget: list, now_ms: int, leaving) -> list:
        """The (key, topic name, topic id, cached partition) to visit in this fetch."""
        parts = session.partitions
        for key in forget:
            self.revisit.discard(key)
            if key in self.armed:
                self.armed.discard(key)
                leaving(key)
        if now_ms >= self.next_full_ms:
            self.next_full_ms = now_ms + FULL_VISIT_MS
            self.drain()
            keys = parts
        else:
            keys = dict.fromkeys(fetch_data)
            keys.update(dict.fromkeys(self.revisit))
            keys.update(dict.fromkeys(self.drain()))
        out = []
        for key in keys:
            c = parts.get(key)
            if c is not None:
                out.append((key, c.topic, c.topic_id, c))
        return out

    def drain(self) -> set:
        """The armed partitions that changed since: no longer armed."""
        dirty, self.dirty = self.dirty, set()
        self.armed -= dirty
        return dirty

    def arm(self, partition, key) -> None:
        if key not in self.armed:
            self.armed.add(key)
            partition.watch(self, key)


async def _build(broker, req, version: int, replica: int, items, incremental: bool = False, idle=None):
    """The answer entries (key, topic name, topic id, partition) for the
    partitions to read (``items``, as the fetch handler gives them), the
    record bytes and the partitions to wait on. ``incremental``: the items
    are a session's cached partitions; a follower caught up on one with
    nothing new to learn is recorded as fetched and left out unread.
    ``idle``: the session's IdleSession, which such partitions are armed in
    (the others are visited again at the next fetch)."""
    manager = broker.replication
    now_ms = int(time.time() * 1000)
    limit = min(req.max_bytes, broker.config.get_int("replica.fetch.response.max.bytes"))
    total = 0
    first = True
    entries, unknown, watched = [], [], []
    quota = manager.quotas.leader   # replication throttles (broker/replication/quota.py)
    exceeded = None                 # the leader quota's state, looked at once per answer
    throttled_bytes, held = 0, False
    news = False   # a log start the follower was not told yet: answered without the long poll
    clean = set()  # partitions armed in ``idle`` by this build
    for i, (key, name, topic_id, fp) in enumerate(items):
        if i % YIELD_EVERY == YIELD_EVERY - 1:
            # (each partition is looked up again at its turn: a role change meanwhile is seen)
            await trio.lowlevel.checkpoint()
        t = broker.image.topics_by_id.get(topic_id) if version >= 13 else broker.image.topics.get(name)
        if t is None or fp.partition not in t.partitions:
            # Kafka appends the partitions the metadata does not know
            unknown.append((key, name, topic_id, _error(fp.partition, ErrorCode.UNKNOWN_TOPIC_ID
                                                        if version >= 13 and t is None
                                                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
            continue
        partition = broker.partitions.get(t.name, fp.partition)
        if partition is None:   # (its log not made yet here: the follower retries)
            entries.append((key, name, topic_id, _error(fp.partition, broker.partitions.missing_error(t.name, fp.partition))))
            continue
        if not getattr(partition, "is_leader", True):
            entries.append((key, name, topic_id, _error(fp.partition, ErrorCode.NOT_LEADER_OR_FOLLOWER)))
            continue
        epoch = fp.current_leader_epoch
        if epoch >= 0 and epoch != partition.leader_epoch:
            entries.append((key, name, topic_id, _error(
                fp.partition, ErrorCode.FENCED_LEADER_EPOCH if epoch < partition.leader_epoch
                else ErrorCode.UNKNOWN_LEADER_EPOCH)))
            continue
        plog = partition.log
        last_epoch = getattr(fp, "last_fetched_epoch", -1)
        recorded = False
        if (incremental and fp.fetch_offset == plog.log_end_offset
                and (last_epoch < 0 or last_epoch == plog.latest_epoch)):
            # caught up, in the leader's latest epoch (no divergence): what Kafka
            # would leave out of the answer unless the high watermark or log start moved
            start = partition.replication_log_start_offset
            if fp.high_watermark == partition.high_watermark and fp.local_log_start_offset == start:
                if manager.follower_fetched(partition, replica, fp.fetch_offset, now_ms, fp.log_start_offset, idle):
                    idle.arm(partition, key)
                    clean.add(key)
                    if partition.high_watermark != fp.high_watermark:
                        # this fetch moved the high watermark (before the partition watched the
                        # session): the answer after the long poll says it
                        idle.mark(key, wake=False)
                    # (not watched: its notify() wakes the long poll through IdleSession.mark,
                    # and thousands of waiters added and removed per long poll cost a full visit)
                    continue
                watched.append(partition)
                continue
            manager.follower_fetched(partition, replica, fp.fetch_offset, now_ms, fp.log_start_offset)
            recorded = True
            # (DeleteRecords waits for the followers to adopt it: no replica.fetch.wait.max.ms more)
            news |= fp.local_log_start_offset != start
        out = _Part(partition_index=fp.partition, error_code=0, high_watermark=partition.high_watermark,
                    last_stable_offset=partition.last_stable_offset,
                    log_start_offset=partition.replication_log_start_offset, aborted_transactions=None,
                    preferred_read_replica=-1, records=b"")
        if last_epoch >= 0:
            end_epoch, end_offset = plog.end_offset_for_epoch(last_epoch)
            if end_epoch < last_epoch or end_offset < fp.fetch_offset:
                if end_offset < 0:
                    # no epoch at or below the follower's here: all of its data in those
                    # epochs diverges (a default EpochEndOffset would read as no divergence)
                    end_epoch, end_offset = last_epoch, plog.log_start_offset
                out.diverging_epoch = _Epoch(epoch=end_epoch, end_offset=end_offset)
                entries.append((key, name, topic_id, out))
                continue
        if fp.fetch_offset > plog.log_end_offset or fp.fetch_offset < plog.log_start_offset:
            # below the local log start but in the tier: the follower rebuilds from it (KIP-405)
            code = (ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE
                    if partition.log_start_offset <= fp.fetch_offset < plog.log_start_offset
                    else ErrorCode.OFFSET_OUT_OF_RANGE)
            entries.append((key, name, topic_id, _error(fp.partition, code, partition)))
            continue
        if not recorded:
            manager.follower_fetched(partition, replica, fp.fetch_offset, now_ms, fp.log_start_offset)
        out.high_watermark = partition.high_watermark
        throttled = quota.is_throttled(t.name, fp.partition)
        if throttled and replica not in manager.leader_isr(partition):
            if exceeded is None:
                exceeded = quota.is_quota_exceeded()
            if exceeded:
                # ReplicaManager.shouldLeaderThrottle: a replica out of the ISR gets no records
                # while the leader quota is exceeded; its data does not end the long poll
                entries.append((key, name, topic_id, out))
                held = True
                continue
        part_limit = min(fp.partition_max_bytes, max(0, limit - total))
        sl, incomplete = plog.fetch_slice(fp.fetch_offset, part_limit, plog.log_end_offset, min_one_batch=first)
        if sl.length and not incomplete:
            out.records = sl.region()
            total += sl.length
            first = False
            if throttled:
                throttled_bytes += sl.length
        entries.append((key, name, topic_id, out))
        watched.append(partition)
    if idle is not None:
        idle.visited += len(items)
        idle.answer_ms = now_ms
        # the partitions not armed: visited again at the next fetch (the follower may not name them)
        idle.revisit = {item[0] for item in items if item[0] not in clean} if len(clean) < len(items) else set()
    return _Built(entries + unknown, total, watched, throttled_bytes, held, news)


class _Built(NamedTuple):
    entries: list
    total: int              # record bytes in the answer
    watched: list           # partitions whose new data ends the long poll
    throttled_bytes: int    # record bytes of leader-throttled partitions
    held: bool              # a throttled partition was answered without records
    news: bool = False      # a log start offset the follower was not told yet


def _idle_session(broker, context, replica: int, fetch_data: dict, forget: list):
    """(IdleSession or None, the items to visit) of a follower's fetch in ``context``."""
    session = context.session
    if context.kind != "incremental" or not session.uses_topic_ids:
        return None, context.partitions()
    idle = session.follower
    if idle is None:
        idle = session.follower = IdleSession()
    by_id = broker.image.topics_by_id
    manager = broker.replication

    def leaving(key):
        t = by_id.get(key[0])
        if t is not None:
            manager.follower_left(t.name, key[1], replica)
    return idle, idle.items(session, fetch_data, forget, int(time.time() * 1000), leaving)


async def serve(ctx, req, version: int, context, fetch_data: dict, forget: list) -> list:
    broker = ctx.broker
    replica = replica_id_of(req, version)
    incremental = context.kind == "incremental"
    idle, items = _idle_session(broker, context, replica, fetch_data, forget)
    built = await _build(broker, req, version, replica, items, incremental, idle)
    if (built.total >= max(1, req.min_bytes) or req.max_wait_ms <= 0 or built.news
            or not (built.watched or built.held or (idle is not None and idle.armed))):
        return _sent(broker, built)
    waiting = perf_counter()
    ev = trio.Event()
    for p in built.watched:
        p.add_waiter(ev, follower=True)
    if idle is not None:
        idle.waiter = ev   # (the partitions left out wake it through their notify())
    # a partition held back by the leader quota waits out max_wait_ms (Kafka's DelayedFetch does
    # not count its bytes), then is looked at again
    with trio.move_on_after(req.max_wait_ms / 1000):
        await ev.wait()
    for p in built.watched:
        p.remove_waiter(ev)
    if idle is not None:
        idle.waiter = None
        items = _after_wait(idle, items, context.session.partitions)
    built = await _build(broker, req, version, replica, items, incremental, idle)
    remote_time(ctx, waiting)   # RequestMetrics RemoteTimeMs: the follower's long poll
    return _sent(broker, built)


def _after_wait(idle: IdleSession, items: list, parts: dict) -> list:
    """What the answer after a long poll looks at: the items the first look did not arm, and
    what changed meanwhile (armed partitions unchanged are still caught up: a full visit looks at
    each partition of the session once, not twice)."""
    dirty = idle.drain()
    armed = idle.armed
    out = [item for item in items if item[0] not in armed]
    if dirty:
        seen = {item[0] for item in out}
        out += [(key, c.topic, c.topic_id, c) for key in dirty
                if key not in seen and (c := parts.get(key)) is not None]
    return out


def _sent(broker, built: _Built) -> list:
    # KafkaApis records what a follower's answer carries for throttled partitions (in-sync
    # replicas' too) against the leader quota
    broker.replication.quotas.leader.record(built.throttled_bytes)
    return built.entries

"""Incremental fetch sessions (KIP-227), as Kafka 3.9's FetchSessionCache,
FetchManager and FetchSession (core/.../server/FetchSession.scala) keep them.

A fetch names its session with (session id, epoch):

- epoch 0 (INITIAL) or -1 (FINAL) is a *full* fetch: the session it names,
  if any, is closed; with epoch 0 the broker tries to cache a new session of
  the partitions answered (its id goes back in the response), with -1 it
  does not (session id 0 = no session).
- epoch > 0 is an *incremental* fetch of an existing session: the request
  lists only partitions added or changed (fetch offset, max bytes, leader
  epochs, log start) and those to drop (forgotten_topics_data); the broker
  reads every partition of the session and answers only those with
  something new for the fetcher (records, a high watermark or log start
  offset other than last sent, an error, a diverging epoch).
  An unknown id is FETCH_SESSION_ID_NOT_FOUND, another epoch than expected
  INVALID_FETCH_SESSION_EPOCH, a session made with topic ids (Fetch v13+)
  used by an older version or the reverse FETCH_SESSION_TOPIC_ID_ERROR; a
  session error answers no partitions and session id 0.

The cache belongs to the broker, not to a connection: a consumer may go on
with its session on a new connection. As Kafka's it is split in 8 shards of
`max.incremental.fetch.session.cache.slots` / 8 sessions each; a new session
goes to the next shard round-robin, and a full shard makes room only by
evicting (within that shard) a session unused for 120 s, or else the least
valuable one the newcomer may evict: followers' sessions (privileged) can
evict consumers' at once, a consumer can evict only sessions older than
120 s that have no more partitions than its own.

Everything here is bookkeeping on small objects: records stay the bytes
(file regions) the fetch handler read; nothing is decoded."""
from __future__ import annotations

import random
import time

from kproto.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1

NUM_SHARDS = 8                               # Kafka's NumFetchSessionCacheShards
SESSION_ID_RANGE = 0x7FFFFFFF // NUM_SHARDS  # ids of shard n: [max(1, n * range), (n + 1) * range)
MIN_EVICTION_MS = 120_000                    # KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 0x7FFFFFFF else epoch + 1


class ShardError(Exception):
    """A session id no shard covers (Kafka's shard lookup fails: UNKNOWN_SERVER_ERROR)."""


class CachedPartition:
    """One partition of a session: the fetcher's last request parameters
    (under the same attribute names as a FetchRequest partition, so the
    fetch handler reads either alike) and what it was last told."""
    __slots__ = ("topic", "topic_id", "partition", "partition_max_bytes", "fetch_offset", "high_watermark",
                 "current_leader_epoch", "log_start_offset", "local_log_start_offset", "last_fetched_epoch")

    def __init__(self, topic, topic_id, fp, high_watermark: int = -1, local_log_start_offset: int = -1):
        self.topic = topic
        self.topic_id = topic_id
        self.partition = fp.partition
        self.high_watermark = high_watermark
        self.local_log_start_offset = local_log_start_offset
        self.update(fp)

    def update(self, fp) -> None:
        self.partition_max_bytes = fp.partition_max_bytes
        self.fetch_offset = fp.fetch_offset
        self.log_start_offset = getattr(fp, "log_start_offset", -1)
        self.current_leader_epoch = getattr(fp, "current_leader_epoch", -1)
        self.last_fetched_epoch = getattr(fp, "last_fetched_epoch", -1)

    def must_respond(self, part) -> bool:
        """Kafka's CachedPartition.maybeUpdateResponseData: whether the
        partition goes into an incremental response; remembers what is sent."""
        respond = bool(part.records) and len(part.records) > 0
        if self.high_watermark != part.high_watermark:
            respond = True
            self.high_watermark = part.high_watermark
        if self.local_log_start_offset != part.log_start_offset:
            respond = True
            self.local_log_start_offset = part.log_start_offset
        if part.preferred_read_replica is not None and part.preferred_read_replica >= 0:
            respond = True
        if part.error_code:
            # sent every time; once the error is gone the partition is sent again
            self.high_watermark = -1
            respond = True
        div = getattr(part, "diverging_epoch", None)
        if div is not None and div.epoch != -1:
            respond = True
        return respond


def partition_key(topic_id, name, partition: int, uses_topic_ids: bool):
    """Sessions made with topic ids know partitions by id (a topic recreated
    under the same name is another partition), older ones by name."""
    return (topic_id if uses_topic_ids else name, partition)


class FetchSession:
    __slots__ = ("id", "privileged", "partitions", "uses_topic_ids", "creation_ms", "last_used_ms", "epoch",
                 "cached_size", "evictable_by_all", "evictable_by_privileged", "unresolved", "follower")

    def __init__(self, session_id, privileged, partitions, uses_topic_ids, now_ms):
        self.id = session_id
        self.privileged = privileged
        self.partitions: dict = partitions   # key -> CachedPartition, in fetch order
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.cached_size = -1
        self.evictable_by_all = False
        self.evictable_by_privileged = False
        # keys of partitions added while their topic was unknown (no name yet): resolved at each
        # fetch without walking every partition of the session
        self.unresolved = {k for k, c in partitions.items() if c.topic is None}
        # a follower's session: what its fetches left out (broker/replication/replica_fetch.py)
        self.follower = None

    def evictable_key(self):
        return (self.privileged, self.cached_size, self.id)

    def update(self, fetch_data: dict, to_forget: list) -> tuple[int, int, int]:
        """An incremental request: add the partitions it names for the
        first time (at the end), update those known, drop the forgotten."""
        added = updated = removed = 0
        parts = self.partitions
        for key, (topic, topic_id, fp) in fetch_data.items():
            cached = parts.get(key)
            if cached is None:
                parts[key] = CachedPartition(topic, topic_id, fp)
                if topic is None:
                    self.unresolved.add(key)
                added += 1
            else:
                cached.update(fp)
                updated += 1
        for key in to_forget:
            if parts.pop(key, None) is not None:
                self.unresolved.discard(key)
                removed += 1
        return added, updated, removed


class FetchSessionCacheShard:
    def __init__(self, max_entries: int, eviction_ms: int = MIN_EVICTION_MS, shard_num: int = 0):
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.shard_num = shard_num
        self.sessions: dict[int, FetchSession] = {}
        self.num_partitions = 0
        self.evictions = 0

    def new_session_id(self) -> int:
        low = max(1, self.shard_num * SESSION_ID_RANGE)
        high = (self.shard_num + 1) * SESSION_ID_RANGE
        while True:
            sid = random.randrange(low, high)
            if sid not in self.sessions and sid != INVALID_SESSION_ID:
                return sid

    def maybe_create(self, now_ms: int, privileged: bool, size: int, uses_topic_ids: bool, make_partitions) -> int:
        if len(self.sessions) < self.max_entries or self._try_evict(privileged, (privileged, size, 0), now_ms):
            session = FetchSession(self.new_session_id(), privileged, make_partitions(), uses_topic_ids, now_ms)
            self.sessions[session.id] = session
            self.touch(session, now_ms)
            return session.id
        return INVALID_SESSION_ID

    def _try_evict(self, privileged: bool, key, now_ms: int) -> bool:
        """Kafka's tryEvict: the least recently used session if it is stale,
        else the first of the sessions the newcomer may evict, if it is not
        worth more than the newcomer ((privileged, size, id) order)."""
        if not self.sessions:
            return False
        lru = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - lru.last_used_ms > self.eviction_ms:
            self.remove(lru)
            self.evictions += 1
            return True
        flag = "evictable_by_privileged" if privileged else "evictable_by_all"
        candidates = [s for s in self.sessions.values() if getattr(s, flag)]
        if not candidates:
            return False
        first = min(candidates, key=FetchSession.evictable_key)
        if key < first.evictable_key():
            return False
        self.remove(first)
        self.evictions += 1
        return True

    def remove(self, session: FetchSession):
        if self.sessions.pop(session.id, None) is None:
            return None
        if session.follower is not None:
            session.follower.closed = True   # its partitions stop telling it about changes
        self.num_partitions -= max(0, session.cached_size)
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """Last use and eviction classes, decided now (as Kafka's touch puts
        the session into its evictable trees): a consumer's session may be
        evicted by followers at once, any session older than the eviction
        time by anybody."""
        session.last_used_ms = now_ms
        if session.cached_size != -1:
            self.num_partitions -= session.cached_size
        session.cached_size = len(session.partitions)
        old = now_ms - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = (not session.privileged) or old
        session.evictable_by_all = old
        self.num_partitions += session.cached_size


class Context:
    """What one fetch request is in the session protocol: "error" (answer
    only the code), "sessionless", "full" (maybe create a session from the
    answer) or "incremental" (an existing session)."""
    __slots__ = ("kind", "error", "fetch_data", "session", "request_epoch", "privileged", "uses_topic_ids")

    def __init__(self, kind, error=ErrorCode.NONE, fetch_data=None, session=None, request_epoch=0,
                 privileged=False, uses_topic_ids=False):
        self.kind = kind
        self.error = error
        self.fetch_data = fetch_data
        self.session = session
        self.request_epoch = request_epoch
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids

    def partitions(self):
        """(partition key, topic name or None, topic id, request parameters)
        to read, in order."""
        if self.kind == "incremental":
            return [(key, c.topic, c.topic_id, c) for key, c in self.session.partitions.items()]
        if self.kind == "error":
            return []
        return [(key, name, topic_id, fp) for key, (name, topic_id, fp) in self.fetch_data.items()]


class FetchSessionCache:
    """The broker's sessions (FetchSessionCache + FetchManager)."""

    def __init__(self, slots: int = 1000, eviction_ms: int = MIN_EVICTION_MS, clock=None):
        self.shards = [FetchSessionCacheShard(slots // NUM_SHARDS, eviction_ms, n) for n in range(NUM_SHARDS)]
        self._counter = 0
        self.clock = clock or (lambda: int(time.time() * 1000))

    # -- the cache ---------------------------------------------------------------------------

    def shard_of(self, session_id: int) -> FetchSessionCacheShard:
        n = int(session_id / SESSION_ID_RANGE)   # Java's int division truncates towards 0
        if not 0 <= n < NUM_SHARDS:
            raise ShardError(session_id)
        return self.shards[n]

    def next_shard(self) -> FetchSessionCacheShard:
        shard = self.shards[(self._counter & 0x7FFFFFFF) % NUM_SHARDS]
        self._counter = (self._counter + 1) & 0xFFFFFFFF
        return shard

    def get(self, session_id: int):
        try:
            return self.shard_of(session_id).sessions.get(session_id)
        except ShardError:
            return None

    @property
    def size(self) -> int:
        return sum(len(s.sessions) for s in self.shards)

    @property
    def total_partitions(self) -> int:
        return sum(s.num_partitions for s in self.shards)

    @property
    def evictions(self) -> int:
        return sum(s.evictions for s in self.shards)

    # -- the manager -------------------------------------------------------------------------

    def new_context(self, version: int, session_id: int, epoch: int, follower: bool,
                    fetch_data: dict, to_forget: list, resolve=None) -> Context:
        """Kafka's FetchManager.newContext. ``fetch_data``: partition key ->
        (topic name or None, topic id, request partition), in request order;
        ``to_forget``: partition keys; ``resolve``: topic id -> name or None
        (a session's partitions of a topic unknown when added get their name
        once the topic exists). Raises ShardError for a session id no shard
        covers."""
        uses_ids = version >= 13
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                shard = self.shard_of(session_id)
                session = shard.sessions.get(session_id)
                if session is not None:
                    shard.remove(session)   # a full fetch closes the session it names
            if epoch == FINAL_EPOCH:
                return Context("sessionless", fetch_data=fetch_data)
            return Context("full", fetch_data=fetch_data, privileged=follower, uses_topic_ids=uses_ids)
        shard = self.shard_of(session_id)
        session = shard.sessions.get(session_id)
        if session is None:
            return Context("error", ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return Context("error", ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_ids:
            return Context("error", ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(fetch_data, to_forget)
        if not session.partitions:
            shard.remove(session)   # nothing left: closed, this fetch is answered sessionless
            return Context("sessionless", fetch_data=fetch_data)
        shard.touch(session, self.clock())
        session.epoch = next_epoch(session.epoch)
        if uses_ids and resolve is not None and session.unresolved:
            for key in list(session.unresolved):
                c = session.partitions[key]
                c.topic = resolve(c.topic_id)
                if c.topic is not None:
                    session.unresolved.discard(key)
        return Context("incremental", session=session, request_epoch=epoch)

    def finish(self, context: Context, entries: list) -> tuple[int, int, list]:
        """The answer of a context: (error code, session id, entries) from the
        partitions read, ``entries`` = [(key, topic name, topic id, response
        partition)] in answer order. A full fetch may create a session of
        them; an incremental one keeps only what the fetcher must be told."""
        kind = context.kind
        if kind == "error":
            return context.error, INVALID_SESSION_ID, []
        if kind == "sessionless":
            return ErrorCode.NONE, INVALID_SESSION_ID, entries
        if kind == "full":
            fetch_data = context.fetch_data

            def make():
                parts = {}
                for key, topic, topic_id, part in entries:
                    fp = fetch_data[key][2]
                    parts[key] = CachedPartition(topic, topic_id, fp, part.high_watermark, part.log_start_offset)
                return parts
            sid = self.next_shard().maybe_create(self.clock(), context.privileged, len(entries),
                                                 context.uses_topic_ids, make)
            return ErrorCode.NONE, sid, entries
        session = context.session
        if session.epoch != next_epoch(context.request_epoch):
            # another fetch of this session came in while this one waited
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH, session.id, []
        parts = session.partitions
        out = []
        for entry in entries:
            key, part = entry[0], entry[3]
            cached = parts.get(key)
            if cached is None or not cached.must_respond(part):
                continue
            out.append(entry)
            if part.records and len(part.records) > 0:
                # partitions that returned data go to the back: the next
                # fetch's byte budget goes to the others first
                del parts[key]
                parts[key] = cached
        return ErrorCode.NONE, session.id, out

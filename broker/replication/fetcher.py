"""A follower's fetcher: fetches the partitions this broker follows from one leader broker
(Fetch v16 with ReplicaState, an incremental fetch session: KIP-227), truncates a divergent tail
from the answer's diverging epoch and appends the rest. broker/replication/manager.py makes one
per leader broker; a single node follows nobody and never imports this module (nor the Fetch
request codec, the inter-broker connection and its SASL/TLS: start-up CPU, issue 26)."""
from __future__ import annotations

import logging
import time

import trio

from kproto import records as rec
from kproto.errors import ErrorCode
from kproto.messages.fetch_request import FetchRequest

from broker.replication.fetch_session_handler import FetchSessionHandler
from broker.replication.replica_fetch import FULL_VISIT_MS, YIELD_EVERY
from broker.security.outbound import AuthenticationFailed

log = logging.getLogger("kproto.replication")

FETCH_VERSION = 16


class Fetcher:
    """Fetches the partitions this broker follows from one leader broker."""

    def __init__(self, manager, leader_id: int):
        self.manager = manager   # the broker's ReplicationManager (manager.py, which makes this)
        self.leader_id = leader_id
        self.partitions: dict[tuple[str, int], object] = {}
        self.done = False
        self.tier_pending: set = set()   # partitions to rebuild from remote storage (OFFSET_MOVED_TO_TIERED_STORAGE)
        self.session = FetchSessionHandler()   # incremental fetch session with this leader (KIP-227)
        # Kafka's PartitionFetchState.lag: the leader's high watermark minus our log end offset
        # after the last answer with records; 0 is in sync (never throttled), unknown is not
        self.lag: dict[tuple[str, int], int] = {}
        self.held = False   # the last request left partitions out for the follower quota
        self._last: dict = {}   # (topic id, partition) -> (its fetch parameters, the request partition made for them)
        # An idle fetch looks only at the partitions whose fetch parameters may have moved: those
        # of the last answer (appended, truncated, log start adopted) and those whose leader epoch
        # changed, and those whose log start moved here (log_start_moved: retention, the
        # cleaner). Every partition is looked at when the set changed, under a follower quota, and
        # every FULL_VISIT_MS (a safety net: replica.fetch.max.bytes changed, say).
        self._moved: set = set()       # keys (topic, index)
        self._walk_all = True
        self._next_walk = 0.0          # time.monotonic() of the next look at every partition
        self._parts: dict = {}         # (topic id, index) -> partition, of every partition fetched
        self.looked_at = 0             # partitions looked at building requests (tests count the work)

    async def run(self) -> None:
        m = self.manager
        conn = None
        backoff = m._cfg_int("replica.fetch.backoff.ms", 1000) / 1000
        try:
            while self.partitions:
                ep = m.endpoint_of(self.leader_id)
                if ep is None:
                    await trio.sleep(0.1)
                    continue
                if conn is None or (conn.host, conn.port) != ep:
                    if conn is not None:
                        await conn.aclose()
                    conn = m.connection(ep[0], ep[1], f"replica-fetcher-{m.node_id}")
                req, parts = await self._request()
                if not parts:
                    # every partition held back by the follower quota: Kafka's fetcher backs off
                    # replica.fetch.backoff.ms when it has nothing to fetch
                    await trio.sleep(backoff if self.held else 0.05)
                    continue
                try:
                    with trio.fail_after(m._cfg_int("replica.socket.timeout.ms", 30000) / 1000):
                        resp = await conn.request(req, FETCH_VERSION)
                except AuthenticationFailed as exc:
                    # as Kafka's ReplicaFetcherThread: an error each time, retried after the backoff
                    log.error("[ReplicaFetcher replicaId=%d, leaderId=%d] Error sending fetch request: %s",
                              m.node_id, self.leader_id, exc)
                    self.session.handle_error()
                    await conn.aclose()
                    await trio.sleep(max(backoff, 1.0))
                    continue
                except (OSError, EOFError, trio.TooSlowError, trio.BrokenResourceError) as exc:
                    log.debug("fetch from %d: %s", self.leader_id, exc)
                    self.session.handle_error()
                    await conn.aclose()
                    await trio.sleep(min(backoff, 0.2))
                    continue
                if await self._handle(resp, parts):
                    await self._rebuild_from_tier(conn)
                    await trio.sleep(min(backoff, 0.1))
        finally:
            self.done = True
            if conn is not None:
                await conn.aclose()

    def follow(self, key, part) -> None:
        if self.partitions.get(key) is not part:
            self.partitions[key] = part
            self._walk_all = True

    def unfollow(self, key) -> None:
        if self.partitions.pop(key, None) is not None:
            self._walk_all = True

    def retain(self, keys) -> None:
        """Follow only the partitions of ``keys`` (those still in the metadata)."""
        gone = [k for k in self.partitions if k not in keys]
        for key in gone:
            self.unfollow(key)

    def moved(self, key) -> None:
        """The partition's fetch parameters may have moved (leader epoch, log end, log start)."""
        self._moved.add(key)

    def _entry(self, key, part, image, max_bytes: int):
        """((topic id, index), the request partition) of a followed partition; None if its topic
        is gone."""
        t = image.topics.get(key[0])
        if t is None:
            return None
        plog = part.log
        latest = plog.latest_epoch
        params = (plog.log_end_offset, part.replication_log_start_offset, max_bytes, part.leader_epoch,
                  latest if latest is not None else -1)
        fkey = (t.topic_id, key[1])
        last = self._last.get(fkey)
        if last is None or last[0] != params:
            # a new request partition only when something in it moved: the same object again
            # is what FetchSessionHandler.build recognises as unchanged at once (thousands of
            # idle partitions per fetch)
            last = self._last[fkey] = (params, FetchRequest.FetchPartition(
                partition=key[1], current_leader_epoch=params[3], fetch_offset=params[0],
                last_fetched_epoch=params[4], log_start_offset=params[1], partition_max_bytes=max_bytes))
        return fkey, last[1]

    async def _request(self):
        m = self.manager
        image = m.broker.image
        quota, exceeded, self.held = m.quotas.follower, None, False
        max_bytes = m._cfg_int("replica.fetch.max.bytes", 1048576)
        now = time.monotonic()
        if not (self._walk_all or quota.throttled or self.session.full or now >= self._next_walk):
            # only what moved since the last request (the session has the rest: KIP-227)
            changed = {}
            moved, self._moved = self._moved, set()
            for key in moved:
                part = self.partitions.get(key)
                entry = self._entry(key, part, image, max_bytes) if part is not None else None
                if entry is not None:
                    changed[entry[0]] = entry[1]
                    self._parts[entry[0]] = part
            self.looked_at += len(moved)
            return self._fetch_request(self.session.build_changed(changed), []), self._parts
        self._walk_all, self._moved, self._next_walk = False, set(), now + FULL_VISIT_MS / 1000
        self.looked_at += len(self.partitions)
        wanted = {}
        parts = {}
        if len(self._last) > 2 * len(self.partitions) + 100:
            self._last = {}   # (partitions moved away: their entries go now and then)
        for i, (key, part) in enumerate(list(self.partitions.items())):
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                # (thousands of partitions: ~0.25 s at 10,000 in one step otherwise; one unfollowed
                # meanwhile is still asked for, and its answer skipped by _handle)
                await trio.lowlevel.checkpoint()
            if quota.is_throttled(*key) and self.lag.get(key, 1) > 0:
                if exceeded is None:
                    exceeded = quota.is_quota_exceeded()
                if exceeded:
                    # shouldFollowerThrottle: an out-of-sync throttled partition is left out of
                    # the fetch while the follower quota is exceeded
                    self.held = True
                    continue
            entry = self._entry(key, part, image, max_bytes)
            if entry is not None:
                wanted[entry[0]] = entry[1]
                parts[entry[0]] = part
        self._parts = parts
        if not wanted:
            return None, parts   # nothing to send: the session stays as it is
        # an incremental fetch names only partitions added or changed (KIP-227)
        return self._fetch_request(*self.session.build(wanted)), parts

    def _fetch_request(self, send: list, forget: list):
        m = self.manager
        topics: dict = {}
        for (tid, _index), fp in send:
            topics.setdefault(tid, []).append(fp)
        forgotten: dict = {}
        for tid, index in forget:
            forgotten.setdefault(tid, []).append(index)
        req = FetchRequest(
            replica_state=FetchRequest.ReplicaState(replica_id=m.node_id, replica_epoch=-1),
            max_wait_ms=m._cfg_int("replica.fetch.wait.max.ms", 500),
            min_bytes=m._cfg_int("replica.fetch.min.bytes", 1),
            max_bytes=m._cfg_int("replica.fetch.response.max.bytes", 10485760), isolation_level=0,
            session_id=self.session.session_id, session_epoch=self.session.epoch,
            topics=[FetchRequest.FetchTopic(topic_id=tid, partitions=ps) for tid, ps in topics.items()],
            forgotten_topics_data=[FetchRequest.ForgottenTopic(topic_id=tid, partitions=ps)
                                   for tid, ps in forgotten.items()], rack_id="")
        return req

    async def _handle(self, resp, parts) -> bool:
        """Apply a fetch answer; True if the leader answered errors (back off). The event loop
        runs every YIELD_EVERY partitions (a first answer of thousands, each appended)."""
        if not self.session.handle_response(resp):
            # a session error: the next fetch is full (no back-off for the usual ones, as Kafka)
            return resp.error_code not in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                                           ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        errors = False
        seen = 0
        for tr in resp.responses:
            for pr in tr.partitions:
                seen += 1
                if seen % YIELD_EVERY == 0:
                    # (each partition is checked again below: one unfollowed meanwhile is skipped)
                    await trio.lowlevel.checkpoint()
                part = parts.get((tr.topic_id, pr.partition_index))
                if part is None or self.partitions.get((part.topic, part.index)) is not part:
                    continue
                self._moved.add((part.topic, part.index))   # its fetch parameters may have moved
                try:
                    errors |= self._apply(part, pr)
                except Exception as exc:
                    failures = getattr(self.manager.broker, "dir_failures", None)
                    if failures is None or not failures.report(exc):
                        log.exception("%s-%d: applying fetched data failed", part.topic, part.index)
                    errors = True
        return errors

    async def _rebuild_from_tier(self, conn) -> None:
        """The partitions the leader has only in remote storage at our offset (broker/tiered),
        rebuilt to start at the leader's local log start (asked with ListOffsets
        EARLIEST_LOCAL_TIMESTAMP, as Kafka's tier state machine)."""
        tiered = self.manager.broker.tiered
        while self.tier_pending:
            part = self.tier_pending.pop()
            if tiered is not None and self.partitions.get((part.topic, part.index)) is part:
                local_start = await self._leader_local_start(conn, part)
                if await tiered.rebuild_follower(part, local_start):
                    self._rebuild(part)
                self._moved.add((part.topic, part.index))

    async def _leader_local_start(self, conn, part) -> int | None:
        """The leader's local log start offset of part (None: not known, unanswered)."""
        from kproto.messages.list_offsets_request import ListOffsetsRequest as L
        req = L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name=part.topic, partitions=[
            L.ListOffsetsPartition(partition_index=part.index, current_leader_epoch=part.leader_epoch,
                                   timestamp=-4)])])
        try:
            with trio.fail_after(10):
                resp = await conn.request(req, 8)
        except (OSError, EOFError, trio.TooSlowError, trio.BrokenResourceError) as exc:
            log.debug("%s-%d: leader's local log start: %s", part.topic, part.index, exc)
            return None
        p = resp.topics[0].partitions[0]
        return p.offset if p.error_code == 0 and p.offset >= 0 else None

    def _apply(self, part, pr) -> bool:
        plog = part.log
        if pr.error_code == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE:
            self.tier_pending.add(part)
            return True
        if pr.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if pr.log_start_offset > plog.log_end_offset or pr.log_start_offset < 0:
                plog.truncate_fully_and_start_at(max(0, pr.log_start_offset))
            elif pr.high_watermark >= 0 and pr.high_watermark < plog.log_end_offset:
                plog.truncate_to(max(pr.high_watermark, plog.log_start_offset))
            self._rebuild(part)
            return True
        if pr.error_code:
            if pr.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                self._refused()
            return True
        div = pr.diverging_epoch
        if div is not None and div.end_offset >= 0:
            _e, local_end = plog.end_offset_for_epoch(div.epoch)
            target = min(div.end_offset, local_end if local_end >= 0 else div.end_offset)
            if target < plog.log_end_offset:
                log.info("%s-%d: truncating %d -> %d (leader epoch %d ends at %d)", part.topic, part.index,
                         plog.log_end_offset, target, div.epoch, div.end_offset)
                plog.truncate_to(max(target, plog.log_start_offset))
                self._rebuild(part)
            else:
                # no record to cut, but an epoch of ours that starts at our log end and that the
                # leader never had must go, or the next fetch claims it again and gets the same
                # answer, forever (AbstractFetcherThread truncates to the offset either way)
                plog.truncate_to(target)
            return False
        data = pr.records
        if data:
            key = (part.topic, part.index)
            quota = self.manager.quotas.follower
            if quota.is_throttled(*key):
                quota.record(len(data))   # ReplicaFetcherThread.processPartitionData
            before = plog.log_end_offset
            self._append(part, data)
            if plog.log_end_offset > before and pr.high_watermark >= 0:
                self.lag[key] = max(0, pr.high_watermark - plog.log_end_offset)
        leo = plog.log_end_offset
        if pr.high_watermark >= 0:
            part.hw_epoch = part.leader_epoch   # the high watermark is the current leader's (consumer lag)
            hw = min(pr.high_watermark, leo)
            if hw != part.replicated_hw:
                part.replicated_hw = hw
                part.notify()   # consumers reading from this follower (KIP-392) wait for its high watermark
        self._adopt_log_start(part, pr.log_start_offset)
        return False

    @staticmethod
    def _adopt_log_start(part, leader_start: int) -> None:
        """ReplicaFetcherThread's maybeIncrementLogStartOffset(LeaderOffsetIncremented): the
        leader's log start (DeleteRecords, retention) becomes ours, never backwards and never
        above our high watermark; the next fetch tells the leader (DeleteRecords waits for it).
        The leader says a start it is sure of (Partition.replication_log_start_offset)."""
        target = min(leader_start, part.high_watermark)
        if target > part.replication_log_start_offset or target > part.log.log_start_offset:
            part.delete_records_before(target)

    def _refused(self) -> None:
        """The leader refused this broker's principal (no CLUSTER_ACTION): said every 10 s."""
        now = time.monotonic()
        if now - getattr(self, "_refused_logged", -1e9) >= 10:
            self._refused_logged = now
            log.error("[ReplicaFetcher replicaId=%d, leaderId=%d] the leader refused the fetch with "
                      "TOPIC_AUTHORIZATION_FAILED: this broker's principal needs CLUSTER_ACTION on the cluster "
                      "(super.users or an ACL)", self.manager.node_id, self.leader_id)

    def _append(self, part, data) -> None:
        """Append the answer's whole batches past our log end (``data``: a view of the
        answer's frame, copied once, into the buffer the log appends)."""
        plog = part.log
        view = memoryview(data)
        pos, end, start = 0, len(data), None
        headers = []
        while pos + rec.HEADER_SIZE <= end:
            length = int.from_bytes(view[pos + 8:pos + 12], "big")
            size = 12 + length
            if pos + size > end:
                break   # a trailing partial batch
            header = rec.BatchHeader(view, pos)
            if header.base_offset + header.last_offset_delta >= plog.log_end_offset:
                if start is None:
                    start = pos
                headers.append(header)
            pos += size
        if start is None:
            return
        chunk = bytearray(view[start:pos])
        plog.append(chunk, None, assign_offsets=False)
        producers = self.manager.broker.producers
        state = producers.state(part)
        for header in headers:
            if header.producer_id >= 0:
                producers._replay(part, state, header)

    def _rebuild(self, part) -> None:
        """After a truncation the producer state and open transactions are rebuilt from the log."""
        part.open_transactions.clear()
        self.manager.broker.producers.attach(part)
        if part.replicated_hw is not None:
            part.replicated_hw = min(part.replicated_hw, part.log.log_end_offset)

"""The remote log manager: one pass every `remote.log.manager.task.interval.ms` over the
partitions of `remote.storage.enable` topics this broker hosts (Kafka's RemoteLogManager).

On a partition's leader it copies the closed segments below the last stable offset (the
segment with its offset, time and transaction indexes, the leader-epoch checkpoint and the
producer snapshot) to the object store, announcing each copy in `__remote_log_metadata`
(COPY_SEGMENT_STARTED, then COPY_SEGMENT_FINISHED once every object is stored); it removes the
objects of copies that never finished (its own failed ones, or a previous leader's), expires
remote segments by total retention and deletes the remote data of deleted topics. On every
replica it hands local retention the offset below which segments are copied
(`PartitionLog.tier`) and gives the partition its remote log start offset. The metadata view is
built by reading this broker's replicas of `__remote_log_metadata`, so every broker holding them
knows every remote segment.
"""
from __future__ import annotations

import bisect
import logging
import time
import uuid
from typing import TYPE_CHECKING

import trio

import kproto.records as rec
from kproto.errors import ErrorCode

from broker.storage.log_retention import TierLimits
from broker.storage.snapshots import snapshot_path

from . import lineage
from .metrics import TieredMetrics
from .keys import SUFFIXES, partition_prefix, segment_key
from .segment_view import PartitionView, RemoteSegment, SegmentView
from .settings import METADATA_TOPIC, list_offsets_timeout_ms, remote_enabled, rlmm_setting
from .store_types import ObjectStoreError
from .backoff import Backoff

# the record codecs (metadata_records.py) and the planner are imported by the methods that run
# with tiered storage on: a broker without it never loads them (start-up CPU, issue #26)
if TYPE_CHECKING:
    from . import metadata_records as mr
    from .planner import LocalSegment
    from .remote_read import RemoteReader

log = logging.getLogger("kproto.tiered")

class MetadataUnavailable(Exception):
    """The `__remote_log_metadata` partition to write is not led here (or not there yet)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class RemoteLogManager:
    def __init__(self, broker):
        self.broker = broker
        self.enabled = bool(broker.config.get_bool("remote.log.storage.system.enable"))
        self.view = SegmentView()
        self.store = None
        self.metrics = TieredMetrics()
        self.reader: RemoteReader | None = None
        self._positions: dict[int, int] = {}
        self._led: set[tuple[str, int]] = set()
        self._backoff_until = 0.0
        self._conns: dict = {}
        # remote.log.manager.copy.max.bytes.per.second: bytes copied in the current window
        self._copy_window = (0.0, 0)
        self._fetch_window = (0.0, 0)   # remote.log.manager.fetch.max.bytes.per.second
        self.interval_s = broker.config.get_long("remote.log.manager.task.interval.ms") / 1000
        self.list_offsets_timeout_ms = list_offsets_timeout_ms(broker.config)
        self._backoff = Backoff(initial=self.interval_s, cap=max(30.0, self.interval_s))

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        if not self.enabled:
            return
        # the stores and the remote reader: imported only by a broker that tiers (start-up CPU, #26)
        from .counted_store import CountedStore
        from .remote_read import RemoteReader
        from .store import open_store
        self.store = CountedStore(open_store(self.broker.config), self.metrics)
        self.reader = RemoteReader(self)

    async def run(self) -> None:
        """The periodic pass, until cancelled (under the broker's nursery)."""
        if not self.enabled:
            return
        if self.store is None:
            self.open()
        log.info("remote log manager started: %s store, a pass every %.1f s", self.store.name, self.interval_s)
        try:
            while True:
                try:
                    await self.run_once()
                except MetadataUnavailable as exc:
                    log.info("remote log metadata not ready: %s", exc)
                except ObjectStoreError as exc:
                    self._store_failed(exc)
                except Exception:
                    log.exception("remote log manager pass failed")
                await trio.sleep(self.interval_s)
        finally:
            with trio.CancelScope(shield=True):
                for conn in list(self._conns.values()):
                    await conn.aclose()
                await self.store.aclose()

    def _store_failed(self, exc) -> None:
        # retry with a growing delay: the passes go on, copying waits for the store
        delay = self._backoff.next_delay()
        self._backoff_until = time.monotonic() + delay
        log.warning("remote storage unavailable (%s); copying retried in %.1f s", exc, delay)

    # ------------------------------------------------------------------ metadata topic

    def metadata_partitions(self) -> int:
        t = self.broker.image.topics.get(METADATA_TOPIC)
        return len(t.partitions) if t is not None else 0

    def ensure_metadata_topic(self) -> bool:
        if METADATA_TOPIC in self.broker.image.topics:
            return True
        partitions = rlmm_setting(self.broker.config, "remote.log.metadata.topic.num.partitions")
        configs = {"cleanup.policy": "delete",
                   "retention.ms": str(rlmm_setting(self.broker.config, "remote.log.metadata.topic.retention.ms"))}
        try:
            self.broker.controller.ensure_internal_topic(METADATA_TOPIC, partitions, configs)
        except Exception as exc:
            log.warning("cannot create %s yet: %s", METADATA_TOPIC, exc)
            return False
        return METADATA_TOPIC in self.broker.image.topics

    def catch_up(self) -> None:
        """Apply the records of this broker's replicas of __remote_log_metadata up to their high
        watermark (replicas only: what a majority has is what every reader sees)."""
        parts = self.broker.partitions
        for idx in range(self.metadata_partitions()):
            part = parts.get(METADATA_TOPIC, idx)
            if part is None:
                continue
            pos = max(self._positions.get(idx, 0), part.log.log_start_offset)
            hw = part.high_watermark
            while pos < hw:
                data = part.log.read_bytes(pos, 1 << 20, hw)
                if not data:
                    break
                pos = self._apply_records(idx, data, pos)
            self._positions[idx] = pos

    def _apply_records(self, idx: int, data, pos: int) -> int:
        """Apply the records of ``data`` (batches of __remote_log_metadata-idx) at or after
        ``pos``; the offset after them."""
        from . import metadata_records as mr
        for offset, value in _records(data):
            if offset < pos:
                continue
            try:
                self.view.apply(mr.decode(value))
            except mr.MetadataDecodeError as exc:
                log.warning("%s-%d offset %d: skipped: %s", METADATA_TOPIC, idx, offset, exc)
        return _next_offset(data, pos)

    def needed_metadata_partitions(self) -> set[int]:
        """The __remote_log_metadata partitions of the tiered partitions this broker leads or
        follows (what Kafka's TopicBasedRemoteLogMetadataManager subscribes to)."""
        from . import metadata_records as mr
        n = self.metadata_partitions()
        if n == 0:
            return set()
        return {mr.metadata_partition(self._tp(p), n) for p in self.broker.partitions.all()
                if p.topic != METADATA_TOPIC and remote_enabled(p)}

    async def consume_remote_metadata(self) -> set[int]:
        """Read, from their leaders, the needed __remote_log_metadata partitions this broker holds
        no replica of (with a replication factor below the number of brokers): a follower must
        know the leader's remote segments to delete only copied local segments and, once it
        leads, to continue where the old leader stopped (no second copy) and serve the tier.
        The partitions that could not be read this time (their leader away) are returned."""
        failed: set[int] = set()
        if self.broker.replication is None:
            return failed
        for idx in sorted(self.needed_metadata_partitions()):
            if self.broker.partitions.get(METADATA_TOPIC, idx) is None:   # (else catch_up reads it)
                try:
                    await self._consume_partition(idx)
                except MetadataUnavailable as exc:
                    log.info("remote log metadata not read: %s", exc)
                    failed.add(idx)
        return failed

    async def _request(self, endpoint, req, version: int, what: str):
        """One request to another broker over this manager's kept connection to it; a connection
        that fails is dropped (the next request opens a new one) and MetadataUnavailable raised."""
        conn = self._conns.get(endpoint)
        if conn is None:
            conn = self._conns[endpoint] = self.broker.replication.connection(
                endpoint[0], endpoint[1], "kproto-remote-log-metadata")
        try:
            with trio.fail_after(30):
                return await conn.request(req, version)
        except (OSError, EOFError, trio.BrokenResourceError, trio.TooSlowError) as exc:
            self._conns.pop(endpoint, None)
            await conn.aclose()
            raise MetadataUnavailable(f"{what}: {exc}") from exc

    async def _consume_partition(self, idx: int) -> None:
        """Apply what the leader of __remote_log_metadata-idx has up to its high watermark."""
        from kproto.messages.fetch_request import FetchRequest as F
        t = self.broker.image.topics.get(METADATA_TOPIC)
        if t is None or idx not in t.partitions or self.broker.replication is None:
            raise MetadataUnavailable(f"{METADATA_TOPIC}-{idx} unknown")
        leader = t.partitions[idx].leader
        endpoint = self.broker.replication.endpoint_of(leader) if leader >= 0 else None
        if endpoint is None:
            raise MetadataUnavailable(f"{METADATA_TOPIC}-{idx} has no leader")
        for _round in range(64):   # bounded per pass; the next pass goes on
            pos = self._positions.get(idx, 0)
            req = F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 22, isolation_level=0,
                    session_id=0, session_epoch=-1, topics=[F.FetchTopic(
                        topic=METADATA_TOPIC, partitions=[F.FetchPartition(
                            partition=idx, current_leader_epoch=-1, fetch_offset=pos,
                            partition_max_bytes=1 << 22)])])
            resp = await self._request(endpoint, req, 12, f"fetch of {METADATA_TOPIC}-{idx}")
            if resp.error_code or not resp.responses or not resp.responses[0].partitions:
                raise MetadataUnavailable(f"fetch of {METADATA_TOPIC}-{idx}: error {resp.error_code}")
            p = resp.responses[0].partitions[0]
            if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and p.log_start_offset > pos:
                self._positions[idx] = p.log_start_offset
                continue
            if p.error_code:
                raise MetadataUnavailable(f"fetch of {METADATA_TOPIC}-{idx}: error {p.error_code}")
            data = bytes(p.records or b"")
            if not data:
                break
            after = self._apply_records(idx, data, pos)
            if after <= pos:
                break
            self._positions[idx] = after

    async def publish(self, tp: mr.TopicIdPartition, record) -> None:
        """Append one record to tp's partition of __remote_log_metadata (acks=all), locally when
        this broker leads that partition, else produced to its leader; then wait until this
        broker's replica of it has the record applied."""
        from . import metadata_records as mr
        n = self.metadata_partitions()
        if n == 0:
            raise MetadataUnavailable(f"{METADATA_TOPIC} does not exist yet")
        idx = mr.metadata_partition(tp, n)
        part = self.broker.partitions.get(METADATA_TOPIC, idx)
        now = _now_ms()
        batch = bytearray(rec.build_batch([(None, mr.encode(record), [], now)]))
        if part is not None and part.is_leader:
            info = part.append(batch, rec.BatchHeader(batch), now)
            last = info.last_offset
            repl = part.replication
            if repl is not None and (part.topic, part.index) in getattr(repl, "leaders", ()):
                error = await repl.wait_replicated(part, last, self.broker.config.get_int("request.timeout.ms"))
                if error:
                    raise MetadataUnavailable(f"{METADATA_TOPIC}-{idx}: not replicated: {error}")
        else:
            last = await self._produce(idx, bytes(batch))
        with trio.move_on_after(10):
            while True:
                if part is None:
                    await self._consume_partition(idx)   # no replica here: read back from its leader
                else:
                    self.catch_up()
                if self._positions.get(idx, 0) > last:
                    return
                await trio.sleep(0.02)
        raise MetadataUnavailable(f"{METADATA_TOPIC}-{idx}: offset {last} not replicated here in time")

    async def _produce(self, idx: int, batch: bytes) -> int:
        """Produce one batch (acks=all) to the leader of __remote_log_metadata-idx; its offset."""
        from kproto.messages.produce_request import ProduceRequest
        t = self.broker.image.topics.get(METADATA_TOPIC)
        leader = t.partitions[idx].leader if t is not None and idx in t.partitions else -1
        if leader < 0 or self.broker.replication is None:
            raise MetadataUnavailable(f"{METADATA_TOPIC}-{idx} has no leader")
        endpoint = self.broker.replication.endpoint_of(leader)
        if endpoint is None:
            raise MetadataUnavailable(f"{METADATA_TOPIC}-{idx}: leader {leader} unknown")
        req = ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[ProduceRequest.TopicProduceData(
            name=METADATA_TOPIC, partition_data=[ProduceRequest.PartitionProduceData(index=idx, records=batch)])])
        resp = await self._request(endpoint, req, 9, f"produce to {METADATA_TOPIC}-{idx}")
        p = resp.responses[0].partition_responses[0]
        if p.error_code:
            raise MetadataUnavailable(f"produce to {METADATA_TOPIC}-{idx}: error {p.error_code}")
        return p.base_offset

    # ------------------------------------------------------------------ the pass

    def partition_view(self, part) -> PartitionView | None:
        return self.view.get(part.topic_id, part.index)

    def lineage(self, part, view: PartitionView) -> list[tuple[int, int]]:
        """The partition's leader-epoch lineage down to its log start (lineage.py)."""
        return lineage.extended_below(part.log.epochs.entries, view.copied())

    def highest_copied(self, part, view: PartitionView | None) -> int:
        """The highest copied offset on this replica's lineage, -1 with none: where copying
        continues, what local retention may delete below, LATEST_TIERED_TIMESTAMP."""
        if view is None:
            return -1
        return lineage.highest_copied_offset(view.copied(), self.lineage(part, view), part.log.log_end_offset)

    def segment_for(self, part, view: PartitionView, offset: int) -> RemoteSegment | None:
        """The copied segment on the partition's lineage holding ``offset`` (else the first one
        above it: a gap left by a deletion), None with none. A divergent segment (another
        leader's history, lineage.py) is never picked."""
        segs = view.copied()
        lin = self.lineage(part, view)
        leo = part.log.log_end_offset

        def valid(s):
            return lineage.within_lineage(s.leader_epochs, s.end_offset, lin, leo)
        i = bisect.bisect_right([s.start_offset for s in segs], offset)
        for s in reversed(segs[:i]):
            if s.end_offset >= offset and valid(s):
                return s
        return next((s for s in segs[i:] if valid(s)), None)

    async def run_once(self) -> None:
        from . import metadata_records as mr
        if not self.ensure_metadata_topic():
            return
        self.catch_up()
        unread = await self.consume_remote_metadata()
        store_ok = time.monotonic() >= self._backoff_until
        n = self.metadata_partitions()
        for part in list(self.broker.partitions.all()):
            if part.topic == METADATA_TOPIC:
                continue
            if unread and mr.metadata_partition(self._tp(part), n) in unread:
                continue   # its remote segments not known for sure: nothing copied or deleted now
            if not remote_enabled(part):
                part.log.tier = None
                if part.remote_log_start is not None:
                    part.remote_log_start = None
                    part.notify()   # (the log start is the local one again: followers learn it)
                self._led.discard((part.topic, part.index))
                if part.is_leader and store_ok:
                    await self.delete_on_disable(part)
                continue
            if part.is_leader and store_ok:
                key = (part.topic, part.index)
                if key not in self._led:
                    self._led.add(key)
                    await self.remove_orphans(part)
                await self.copy_segments(part)
                await self.expire_segments(part)
            elif not part.is_leader:
                self._led.discard((part.topic, part.index))
            self.update_limits(part)
            if part.is_leader:
                # local retention at once for what was just copied (not at the next retention check)
                part.log.apply_retention(None, part.high_watermark)
        if store_ok:
            await self.delete_removed_partitions()
            self._backoff.reset()

    def update_limits(self, part) -> None:
        from . import planner
        view = self.partition_view(part)
        highest = self.highest_copied(part, view)
        cfg = part.config
        limits = part.log.tier
        if limits is None:
            limits = part.log.tier = TierLimits()
        limits.copied_end = highest + 1
        if str(cfg.get("remote.log.copy.disable", "false")).lower() == "true":
            # KIP-950: nothing more will be copied; retention deletes local segments as usual
            limits.copied_end = part.log.log_end_offset
        limits.retention_ms = planner.effective_local_retention(int(cfg["local.retention.ms"]), int(cfg["retention.ms"]))
        limits.retention_bytes = planner.effective_local_retention(int(cfg["local.retention.bytes"]),
                                                                   int(cfg["retention.bytes"]))
        # the first segment on the lineage (another leader's segments are not read: lineage.py)
        told = part.replication_log_start_offset
        part.remote_log_start = None
        if view is not None and view.copied():
            lin, leo = self.lineage(part, view), part.log.log_end_offset
            part.remote_log_start = next((s.start_offset for s in view.copied()
                                          if lineage.within_lineage(s.leader_epochs, s.end_offset, lin, leo)), None)
        if part.replication_log_start_offset != told:
            part.notify()   # (remote segments expired or the view read: followers learn the new start)
        epochs = part.log.epochs
        first = epochs.earliest_entry
        if part.remote_log_start is not None and first is not None and first[1] < part.log_start_offset:
            # the lineage reaches down to the log start, not below (expired remote segments)
            epochs.truncate_from_start(part.log_start_offset)
        key = (part.topic, part.index)
        self.metrics.remote_log_size[key] = view.size() if view is not None else 0
        pending = [s for s in part.log.segments[:-1] if s.base_offset > highest]
        self.metrics.copy_lag_segments[key] = len(pending)
        self.metrics.copy_lag_bytes[key] = sum(s.size for s in pending)
        self.metrics.local_deletes_held_back = sum(
            p.log.tier.held_back for p in self.broker.partitions.all() if p.log.tier is not None)

    def _tp(self, part) -> mr.TopicIdPartition:
        from . import metadata_records as mr
        return mr.TopicIdPartition(part.topic, _as_uuid(part.topic_id), part.index)

    async def copy_segments(self, part) -> None:
        from . import planner
        from .planner import LocalSegment
        if str(part.config.get("remote.log.copy.disable", "false")).lower() == "true":
            return
        tp = self._tp(part)
        view = self.view.partition(tp.topic_id, tp.partition)
        for seg in view.unfinished():
            await self.delete_segment(part, tp, seg)
        plog = part.log
        segs = plog.segments
        leo = plog.log_end_offset
        local = [LocalSegment(s.base_offset, segs[i + 1].base_offset if i + 1 < len(segs) else leo, s.size,
                              s.largest_timestamp()) for i, s in enumerate(segs)]
        by_base = {s.base_offset: s for s in segs}
        for cand in planner.segments_to_copy(local, self.highest_copied(part, view), part.last_stable_offset):
            seg = by_base[cand.base_offset]
            if seg.deleted or not part.is_leader:
                return
            await self.copy_segment(part, tp, seg, cand)

    async def copy_segment(self, part, tp, seg, cand: LocalSegment) -> None:
        from . import metadata_records as mr
        plog = part.log
        sid = uuid.uuid4()
        history = [(e, o) for e, o in plog.epochs.entries if o < cand.next_offset]
        first = [x for x in history if x[1] <= cand.base_offset]
        epochs = ([(first[-1][0], cand.base_offset)] if first else []) + [x for x in history if x[1] > cand.base_offset]
        meta = mr.SegmentMetadata(tp, sid, cand.base_offset, cand.next_offset - 1, self.broker.node_id,
                                  cand.max_timestamp_ms, _now_ms(), epochs, cand.size, mr.COPY_SEGMENT_STARTED)
        await self.publish(tp, meta)
        remote = self.view.partition(tp.topic_id, tp.partition).segments[sid]
        prefix = partition_prefix(tp.topic, tp.partition, tp.topic_id)
        try:
            await self.store.put_file(segment_key(prefix, remote, ".log"), seg.log_path, cand.size)
            await self._copy_quota(cand.size)
            for suffix, path in ((".index", seg.offset_index.path), (".timeindex", seg.time_index.path),
                                 (".txnindex", seg.log_path[:-4] + ".txnindex")):
                data = _read_if_exists(path)
                await self.store.put(segment_key(prefix, remote, suffix), data if suffix != ".index"
                                     else _trim_index(data))
            await self.store.put(segment_key(prefix, remote, ".snapshot"),
                                 _read_if_exists(snapshot_path(plog.dir, cand.next_offset)))
            # the lineage up to the segment's end, as Kafka's checkpoint: a follower rebuilding
            # from this segment takes its whole leader epoch cache from it
            await self.store.put(segment_key(prefix, remote, ".leader_epoch_checkpoint"),
                                 _epoch_checkpoint(history))
        except ObjectStoreError:
            self.metrics.copy_errors += 1
            raise   # the objects go with the next pass's clean-up (COPY_SEGMENT_STARTED stays)
        await self.publish(tp, mr.SegmentUpdate(tp, sid, self.broker.node_id, _now_ms(), mr.COPY_SEGMENT_FINISHED))
        self.metrics.copy_bytes += cand.size
        self.metrics.copy_requests += 1
        log.info("%s-%d: copied segment %d-%d (%d bytes) to remote storage as %s", tp.topic, tp.partition,
                 cand.base_offset, cand.next_offset - 1, cand.size, remote.key_base)

    async def _copy_quota(self, size: int) -> None:
        """Hold copying back to remote.log.manager.copy.max.bytes.per.second (over one-second
        windows, as Kafka's copy quota)."""
        rate = self.broker.config.get_long("remote.log.manager.copy.max.bytes.per.second")
        if rate <= 0 or rate >= 2 ** 62:
            return
        start, done = self._copy_window
        now = time.monotonic()
        if now - start > 1.0 and done <= rate:
            start, done = now, 0
        done += size
        self._copy_window = (start, done)
        due = start + done / rate
        if due > now:
            await trio.sleep(due - now)

    def _fetch_owed(self) -> tuple[float, int]:
        """(now, bytes read remotely beyond what remote.log.manager.fetch.max.bytes.per.second has
        allowed so far): the reads drain at the quota's rate."""
        rate = self.broker.config.get_long("remote.log.manager.fetch.max.bytes.per.second")
        last, owed = self._fetch_window
        now = time.monotonic()
        return now, max(0, owed - (now - last) * rate)

    def fetch_quota_exceeded(self) -> bool:
        """Remote reads are more than a second's worth of the fetch quota ahead."""
        rate = self.broker.config.get_long("remote.log.manager.fetch.max.bytes.per.second")
        return self._fetch_owed()[1] > rate

    def record_fetch(self, size: int) -> None:
        if self.broker.config.get_long("remote.log.manager.fetch.max.bytes.per.second") >= 2 ** 62:
            self._fetch_window = (time.monotonic(), 0)   # no quota: nothing owed (should one be set later)
            return
        now, owed = self._fetch_owed()
        self._fetch_window = (now, owed + size)

    async def rebuild_follower(self, part, leader_local_start: int | None = None) -> bool:
        """A follower asked for an offset the leader has only in remote storage
        (OFFSET_MOVED_TO_TIERED_STORAGE): as Kafka's ReplicaFetcherTierStateMachine, start the
        local log at the leader's local log start, with the leader epochs and producer snapshot
        of the remote segment ending there (the segment holding the offset before it), so the
        follower holds what the leader holds locally; without the leader's answer (or no such
        segment yet), after the last copied segment. False when the tier does not say enough
        yet (retried)."""
        if self.store is None:
            return False
        self.catch_up()
        view = self.partition_view(part)
        highest = view.highest_copied_offset() if view is not None else -1
        if highest < 0:
            return False
        seg = None
        if leader_local_start is not None and 0 < leader_local_start <= highest + 1:
            seg = view.segment_for(leader_local_start - 1)
            if seg is not None and seg.start_offset <= leader_local_start - 1 <= seg.end_offset:
                highest = leader_local_start - 1
            else:
                seg = None
        if seg is None:
            seg = view.segment_for(highest)
        tp = self._tp(part)
        prefix = partition_prefix(tp.topic, tp.partition, tp.topic_id)
        try:
            epochs = _parse_epochs(await self.store.get(segment_key(prefix, seg, ".leader_epoch_checkpoint")))
            snapshot = await self.store.get(segment_key(prefix, seg, ".snapshot"))
        except ObjectStoreError as exc:
            log.warning("%s-%d: cannot rebuild from remote storage yet: %s", tp.topic, tp.partition, exc)
            return False
        plog = part.log
        start = highest + 1
        plog.truncate_fully_and_start_at(start)
        for epoch, offset in epochs:
            # the lineage below start: the epochs of the offsets only remote (lineage.py)
            if offset < start:
                plog.epochs.assign(epoch, offset)
        if snapshot:
            with open(snapshot_path(plog.dir, start), "wb") as f:
                f.write(snapshot)
        log.info("%s-%d: local log rebuilt from remote storage: starts at %d (leader epoch %s)", tp.topic,
                 tp.partition, start, epochs[-1][0] if epochs else None)
        self.update_limits(part)
        return True

    async def delete_segment(self, part_or_none, tp, seg: RemoteSegment) -> None:
        from . import metadata_records as mr
        if seg.state != mr.DELETE_SEGMENT_STARTED:
            await self.publish(tp, mr.SegmentUpdate(tp, seg.segment_id, self.broker.node_id, _now_ms(),
                                                    mr.DELETE_SEGMENT_STARTED))
        prefix = partition_prefix(tp.topic, tp.partition, tp.topic_id)
        try:
            await self.store.delete([segment_key(prefix, seg, s) for s in SUFFIXES])
        except ObjectStoreError:
            self.metrics.delete_errors += 1
            raise
        self.metrics.delete_requests += 1
        if self.reader is not None:
            self.reader.forget(seg)
        await self.publish(tp, mr.SegmentUpdate(tp, seg.segment_id, self.broker.node_id, _now_ms(),
                                                mr.DELETE_SEGMENT_FINISHED))

    async def delete_on_disable(self, part) -> None:
        """KIP-950: remote storage turned off with remote.log.delete.on.disable=true: the leader
        deletes the partition's remote segments (the log then starts at the local log start)."""
        if str(part.config.get("remote.log.delete.on.disable", "false")).lower() != "true":
            return
        view = self.partition_view(part)
        if view is None or not view.segments:
            return
        tp = self._tp(part)
        log.info("%s-%d: remote storage disabled: deleting %d remote segment(s)", tp.topic, tp.partition,
                 len(view.segments))
        for seg in list(view.segments.values()):
            await self.delete_segment(part, tp, seg)

    async def remove_orphans(self, part) -> None:
        """Objects under the partition's prefix that no metadata names (a copy whose start record
        was never written cannot exist: the record goes first; this catches stores shared with
        a previous incarnation of the topic id, and interrupted deletions)."""
        tp = self._tp(part)
        prefix = partition_prefix(tp.topic, tp.partition, tp.topic_id)
        view = self.view.partition(tp.topic_id, tp.partition)
        known = {s.key_base for s in view.segments.values()}
        orphans = [k for k in await self.store.list(prefix) if k[len(prefix):].split(".")[0] not in known]
        if orphans:
            log.info("%s-%d: removing %d orphan remote object(s)", tp.topic, tp.partition, len(orphans))
            await self.store.delete(orphans)

    def split_by_lineage(self, part, view: PartitionView) -> tuple[list[RemoteSegment], list[RemoteSegment]]:
        """(the copied segments on the partition's lineage, those off it), in offset order."""
        lin = self.lineage(part, view)
        leo = part.log.log_end_offset
        prepared = lineage.prepare(lin)
        on, off = [], []
        for s in view.copied():
            (on if lineage.within_lineage(s.leader_epochs, s.end_offset, lin, leo, prepared) else off).append(s)
        return on, off

    async def expire_segments(self, part) -> None:
        from . import planner
        from .planner import RemoteSeg
        tp = self._tp(part)
        view = self.view.partition(tp.topic_id, tp.partition)
        if not view.copied():
            return
        copied, off = self.split_by_lineage(part, view)
        # another leader's segments (lineage.py) are never read; they go once below the log
        # start or older than the lineage's earliest epoch (Kafka's RLMExpirationTask)
        start = max(part.log.deleted_below, copied[0].start_offset if copied else part.local_log_start_offset)
        for seg in lineage.off_lineage_to_delete(off, self.lineage(part, view), start):
            log.info("%s-%d: remote segment %d-%d (leader epochs %s) is off the leader epoch lineage: deleted",
                     tp.topic, tp.partition, seg.start_offset, seg.end_offset, [e for e, _o in seg.leader_epochs])
            await self.delete_segment(part, tp, seg)
        if not copied:
            return
        highest = self.highest_copied(part, view)
        local_only = sum(s.size for s in part.log.segments if s.base_offset > highest)
        # retention counts and deletes the segments on the lineage only, as Kafka's
        remote = [RemoteSeg(s, s.start_offset, s.end_offset, s.size, s.max_timestamp_ms) for s in copied]
        cfg = part.config
        # wholly below the offset DeleteRecords moved the log start to, or past total retention
        # (not part.log_start_offset: until update_limits has run that is the local log start)
        deleted_below = part.log.deleted_below
        for r in planner.remote_to_expire(remote, _now_ms(), int(cfg["retention.ms"]), int(cfg["retention.bytes"]),
                                          local_only, deleted_below):
            log.info("%s-%d: remote segment %d-%d deleted (%s)", tp.topic, tp.partition, r.start_offset,
                     r.end_offset, "below the log start offset" if r.end_offset < deleted_below else "retention")
            await self.delete_segment(part, tp, r.key)

    async def delete_removed_partitions(self) -> None:
        """The remote data of partitions whose topic is gone (RemotePartitionDeleteMetadata),
        done by the leader of the partition's __remote_log_metadata partition."""
        from . import metadata_records as mr
        n = self.metadata_partitions()
        topics = self.broker.image.topics_by_id
        for (topic_id, index), view in list(self.view.partitions.items()):
            if topic_id in topics or not view.segments or view.tp is None:
                continue
            tp = view.tp
            meta = self.broker.partitions.get(METADATA_TOPIC, mr.metadata_partition(tp, n))
            if meta is None or not meta.is_leader:
                continue
            await self.publish(tp, mr.PartitionDelete(tp, self.broker.node_id, _now_ms(), mr.DELETE_PARTITION_STARTED))
            prefix = partition_prefix(tp.topic, tp.partition, tp.topic_id)
            keys = await self.store.list(prefix)
            await self.store.delete(keys)
            await self.publish(tp, mr.PartitionDelete(tp, self.broker.node_id, _now_ms(), mr.DELETE_PARTITION_FINISHED))
            log.info("%s-%d: remote data deleted with its topic (%d objects)", tp.topic, tp.partition, len(keys))


def _as_uuid(value) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, (bytes, bytearray)):
        return uuid.UUID(bytes=bytes(value))
    return uuid.UUID(str(value))


def _records(data: bytes):
    """(offset, value) of every record of the data batches in data."""
    for pos, h in rec.iter_batch_headers(data, allow_partial_tail=True):
        if h.is_control:
            continue
        for r in rec.iter_records(data[pos:pos + h.size]):
            yield r.offset, r.value


def _next_offset(data: bytes, pos: int) -> int:
    for _p, h in rec.iter_batch_headers(data, allow_partial_tail=True):
        pos = h.last_offset + 1
    return pos


def _read_if_exists(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def _trim_index(data: bytes) -> bytes:
    """An offset index without its preallocated zero tail."""
    n = len(data) // 8
    for i in range(1, n):
        if data[i * 8:i * 8 + 8] == b"\x00" * 8:
            return data[:i * 8]
    return data[:n * 8]


def _parse_epochs(data: bytes) -> list[tuple[int, int]]:
    lines = data.decode().split("\n") if data else []
    out = []
    for line in lines[2:]:
        if line.strip():
            e, o = line.split()
            out.append((int(e), int(o)))
    return out


def _epoch_checkpoint(epochs: list[tuple[int, int]]) -> bytes:
    """Kafka's leader-epoch-checkpoint text: version, count, then "epoch offset" lines."""
    return ("0\n%d\n" % len(epochs) + "".join(f"{e} {o}\n" for e, o in epochs)).encode()

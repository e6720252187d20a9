"""Fetch: record bytes go from the segment files to the socket by sendfile;
a fetch that finds too little data waits on the partitions' append events.
Fetch v0-3 (magic 0/1 readers) get the batches down-converted, as Kafka does."""
from __future__ import annotations

import os
import struct
from time import perf_counter

import trio

from kproto import legacy
from kproto._codec import FileRegion
from kproto import records as rec
from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.fetch_response import FetchResponse

from kproto.error_response import error_response
from broker.partitions.fetch_sessions import FetchSessionCache, ShardError
from broker.handlers import fetch_quota, handles
from broker.metrics.registry import remote_time
from broker.partitions.partition import OffsetOutOfRange
from broker.tiered import fetch as tiered_fetch
from broker.replication import follower_fetching, replica_fetch
from broker.replication.leader_hint import current_leader
from broker.replication.replica_fetch import replica_id_of

_Topic = FetchResponse.FetchableTopicResponse
_Part = FetchResponse.PartitionData
_Aborted = FetchResponse.AbortedTransaction

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


def _error_part(index: int, code: int) -> _Part:
    return _Part(partition_index=index, error_code=code, high_watermark=-1, last_stable_offset=-1,
                 log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1, records=b"")


def requested(broker, v, req) -> tuple[dict, list]:
    """The request's partitions as the session protocol knows them: key ->
    (topic name or None if unknown, topic id, request partition), in request
    order (a partition named twice keeps its first place, the last
    parameters), and the keys of forgotten_topics_data. Fetch v13+ name
    topics by id, older versions by name."""
    uses_ids = v >= 13
    by_id = broker.image.topics_by_id
    data = {}
    for ft in req.topics:
        if uses_ids:
            t = by_id.get(ft.topic_id)
            name, tid = (t.name if t is not None else None), ft.topic_id
        else:
            name, tid = ft.topic, ft.topic_id
        for fp in ft.partitions:
            data[(tid if uses_ids else name, fp.partition)] = (name, tid, fp)
    forget = []
    if v >= 7:
        for ft in req.forgotten_topics_data or ():
            ref = ft.topic_id if uses_ids else ft.topic
            forget.extend((ref, p) for p in ft.partitions)
    return data, forget


def _topic_image(broker, v, name, topic_id):
    """The topic now: by id from v13 (a topic recreated under the same name is another topic)."""
    if v >= 13:
        return broker.image.topics_by_id.get(topic_id)
    return broker.image.topics.get(name)


def response_topics(entries) -> list:
    """Kafka's FetchResponse.toMessage: partitions grouped by topic in
    answer order, a topic named again when the partitions of another came
    between."""
    topics = []
    last = None
    for _key, name, topic_id, part in entries:
        if last is None or last.topic_id != topic_id or last.topic != (name or ""):
            last = _Topic(topic=name or "", topic_id=topic_id, partitions=[])
            topics.append(last)
        last.partitions.append(part)
    return topics


# Kafka's limits (ReplicaManager.readFromLocalLog): the response budget
# starts at min(max_bytes, the broker's fetch.max.bytes); each partition may
# take min(partition_max_bytes, what is left). Until one partition returned
# bytes, the first batch is returned whole even when larger (KIP-74, so a
# consumer always makes progress); after that a batch that does not fit is
# left out. Fetch v0-2 have a hard limit: never more than the limits, the
# first batch cut if need be. The cut is a byte count: a trailing partial
# batch is sent, as Kafka sends it.
MAX_READ_SIZE = 128 * 1024  # Kafka's LazyDownConversionRecordsSend.MAX_READ_SIZE
_OVERFLOW = struct.Struct(">qi")


def _build(broker, v, req, items, isolation, incremental=False, remote=None) -> tuple[list, int, list, bool]:
    """One pass over the partitions to read (``items``: (key, topic name,
    topic id, request partition) in fetch order): the answer entries (key,
    name, topic id, partition), the record bytes read from the logs, the
    partitions to wait on and whether reading any partition failed (Kafka
    answers those at once, without waiting). Partitions whose topic or
    partition the metadata does not know come last, as Kafka appends them."""
    max_bytes = req.max_bytes if v >= 3 else 0x7FFFFFFF
    limit = min(max_bytes, broker.config.get_int("fetch.max.bytes"))
    min_one = v >= 3
    total = 0
    watched = []
    entries = []
    unknown = []
    errors = False
    for key, name, topic_id, fp in items:
        timage = _topic_image(broker, v, name, topic_id)
        if timage is None or fp.partition not in timage.partitions:
            code = ErrorCode.UNKNOWN_TOPIC_ID if v >= 13 and timage is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            unknown.append((key, name, topic_id, _error_part(fp.partition, code)))
            continue
        # this partition's limit; the response's stops at 0 after any
        # partition the log read saw (a negative max_bytes fails one)
        part_limit = min(fp.partition_max_bytes, limit)
        limit = max(0, limit)
        partition = broker.partitions.get(timage.name, fp.partition)
        if partition is None:
            code = broker.partitions.missing_error(timage.name, fp.partition)   # (its log not made yet)
            entries.append((key, name, topic_id, _error_part(fp.partition, code)))
            errors = True
            continue
        if not partition.is_leader and not follower_fetching.follower_may_serve(v, replica_id_of(req, v)):
            # a follower here: KIP-951 tells the consumer who leads now
            part = _error_part(fp.partition, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            leader, leader_epoch = current_leader(broker, timage.name, fp.partition)
            part.current_leader = FetchResponse.LeaderIdAndEpoch(leader_id=leader, leader_epoch=leader_epoch)
            entries.append((key, name, topic_id, part))
            errors = True
            continue
        epoch = fp.current_leader_epoch
        if epoch >= 0 and epoch != partition.leader_epoch:
            code = (ErrorCode.FENCED_LEADER_EPOCH if epoch < partition.leader_epoch
                    else ErrorCode.UNKNOWN_LEADER_EPOCH)
            entries.append((key, name, topic_id, _error_part(fp.partition, code)))
            errors = True
            continue
        preferred = follower_fetching.preferred_read_replica(
            broker, timage.name, fp.partition, partition, getattr(req, "rack_id", None), fp.fetch_offset,
            replica_id_of(req, v)) if partition.is_leader and v >= 11 else -1
        if preferred >= 0:
            # KIP-392: no records, the consumer fetches from the preferred replica
            entries.append((key, name, topic_id, _Part(
                partition_index=fp.partition, error_code=0, high_watermark=partition.high_watermark,
                last_stable_offset=partition.last_stable_offset,
                log_start_offset=partition.log_start_offset, aborted_transactions=None,
                preferred_read_replica=preferred, records=b"")))
            errors = True   # answered at once, as Kafka does not wait for a redirected partition
            continue
        if incremental and part_limit >= 0:
            # the session's position is at the readable end, high watermark and log
            # start are what the fetcher was last told: Kafka reads it and leaves it
            # out of the answer; the same answer without the read (most of a consumer's
            # partitions are idle: this keeps their cost per fetch small)
            hw = partition.high_watermark
            upper = partition.last_stable_offset if isolation == READ_COMMITTED else hw
            if (fp.fetch_offset == upper and fp.high_watermark == hw
                    and fp.local_log_start_offset == partition.log_start_offset):
                watched.append(partition)
                continue
        try:
            region, upper, incomplete = partition.fetch_read(
                fp.fetch_offset, part_limit, isolation, min_one)
        except OffsetOutOfRange:
            part = _error_part(fp.partition, ErrorCode.OFFSET_OUT_OF_RANGE)
            if remote is not None and tiered_fetch.in_remote(broker, partition, fp.fetch_offset):
                # below the local log start, in remote storage: read from the store (Kafka's remote fetch)
                remote.append((part, partition, fp.fetch_offset, part_limit, min_one))
                min_one = False
            entries.append((key, name, topic_id, part))
            errors = True
            continue
        except ValueError:
            # a negative limit: Kafka's log read throws, the partition
            # gets UNKNOWN_SERVER_ERROR
            entries.append((key, name, topic_id, _error_part(fp.partition, ErrorCode.UNKNOWN_SERVER_ERROR)))
            errors = True
            continue
        left_out = incomplete and v >= 3
        if left_out:
            region = None  # a batch that does not fit is left out (v3+)
        size = len(region) if region is not None else 0
        if size:
            min_one = False
        limit = max(0, limit - size)
        total += size
        records = region
        if v < 4:
            try:
                records = _down_convert(region.read() if size else b"", v, fp.fetch_offset)
            except rec.CorruptRecordError as exc:
                entries.append((key, name, topic_id, _error_part(fp.partition, exc.error_code)))
                errors = True
                continue
        aborted = None
        if isolation == READ_COMMITTED and not left_out:
            # Kafka lists the aborted transactions overlapping the data it
            # returns ([] with no data, null for a batch left out); the
            # client drops their records
            aborted = [_Aborted(producer_id=pid, first_offset=first)
                       for pid, first in partition.aborted_transactions(
                           fp.fetch_offset, _data_upper_bound(region, upper))] \
                if size and partition.txn_index.maybe_any() else []
        entries.append((key, name, topic_id, _Part(
            partition_index=fp.partition, error_code=0,
            high_watermark=partition.high_watermark,
            last_stable_offset=partition.last_stable_offset,
            log_start_offset=partition.log_start_offset,
            aborted_transactions=aborted, preferred_read_replica=-1,
            records=records if records else b"")))
        watched.append(partition)
    if unknown:
        entries.extend(unknown)
    return entries, total, watched, errors


def _data_upper_bound(region, upper: int) -> int:
    """Kafka's upper bound for the aborted transactions of a fetch: the
    offset of the first batch starting at or after the end of the returned
    bytes (the end of the segment: the offset after its last batch), never
    beyond ``upper`` (the last stable offset)."""
    if not isinstance(region, FileRegion):
        return upper
    pos, end, next_offset = region.offset, region.offset + region.length, None
    while True:
        head = os.pread(region.fd, rec.HEADER_SIZE, pos)
        if len(head) < rec.HEADER_SIZE:
            break  # the end of the segment
        base = int.from_bytes(head[0:8], "big", signed=True)
        if pos >= end:
            return min(base, upper)
        next_offset = base + int.from_bytes(head[23:27], "big", signed=True) + 1
        pos += rec.LOG_OVERHEAD + int.from_bytes(head[8:12], "big", signed=True)
    return upper if next_offset is None else min(next_offset, upper)


def _batches(raw: bytes) -> list[bytes]:
    """The whole v2 batches in ``raw`` (a trailing partial one is left out)."""
    out, pos = [], 0
    while pos + rec.LOG_OVERHEAD <= len(raw):
        end = pos + rec.LOG_OVERHEAD + int.from_bytes(raw[pos + 8:pos + 12], "big", signed=True)
        if end > len(raw) or end <= pos + rec.LOG_OVERHEAD:
            break
        out.append(raw[pos:end])
        pos = end
    return out


def _overflow(remaining: int) -> bytes:
    """Kafka's filler after the converted messages: a message header with
    offset -1 and a length past the response, which the client ignores."""
    out = bytearray()
    while remaining > 0:
        size = max(rec.LOG_OVERHEAD, min(remaining + 1, MAX_READ_SIZE))
        chunk = _OVERFLOW.pack(-1, max(remaining + 1, rec.HEADER_SIZE)) + bytes(size - rec.LOG_OVERHEAD)
        chunk = chunk[:remaining]
        out += chunk
        remaining -= len(chunk)
    return bytes(out)


def _down_convert(raw: bytes, v: int, fetch_offset: int) -> bytes:
    """Fetch v0-3 read magic 0/1 messages (v0-1: magic 0, v2-3: magic 1),
    as Kafka's LazyDownConversionRecords sends them: the response carries
    max(bytes read, the first converted batch) bytes; the converted
    messages fill them (the last one possibly cut), overflow filler pads
    what the conversion left short. No whole batch read: no bytes."""
    magic = 0 if v < 2 else 1
    batches = _batches(raw)
    first = b""
    for batch in batches:  # (raises for zstd: the partition's error)
        first = legacy.down_convert(batch, magic, fetch_offset)
        if first:
            break
    if not first:
        return _overflow(rec.LOG_OVERHEAD) if batches else b""
    size = max(len(raw), len(first))
    # Kafka sends its cached first converted batch, then converts on from
    # the second batch read: when the first batch converted to nothing (a
    # transaction marker), the first messages come twice (clients skip
    # offsets below their position)
    out = bytearray(first)
    i = 1
    while i < len(batches) and len(out) < size:
        # chunks of batches up to MAX_READ_SIZE, as Kafka converts them
        chunk, chunk_size = [batches[i]], len(batches[i])
        i += 1
        while i < len(batches) and chunk_size + len(batches[i]) <= MAX_READ_SIZE:
            chunk.append(batches[i])
            chunk_size += len(batches[i])
            i += 1
        try:
            out += b"".join(legacy.down_convert(b, magic, fetch_offset) for b in chunk)
        except rec.CorruptRecordError:
            break  # zstd after the first batch: the rest is filler
    out = out[:size]
    return bytes(out) + _overflow(size - len(out))


@handles(ApiKey.FETCH, 0, 18)   # v18: a follower's HighWatermark (KIP-1166), which only replication reads
async def fetch(ctx, req):
    resp = await _fetch(ctx, req)
    metrics = getattr(ctx.broker, "metrics", None)
    if metrics is not None:
        metrics.fetched(resp)   # BrokerTopicMetrics: bytes out, failed fetches
    return resp


def session_cache(broker) -> FetchSessionCache:
    """The broker's fetch sessions (made on first use: no broker wiring needed)."""
    cache = getattr(broker, "fetch_sessions", None)
    if cache is None:
        cache = broker.fetch_sessions = FetchSessionCache(
            broker.config.get_int("max.incremental.fetch.session.cache.slots"))
    return cache


async def _fetch(ctx, req):
    broker = ctx.broker
    v = ctx.api_version
    follower = replica_id_of(req, v) >= 0
    sessions = session_cache(broker)
    fetch_data, forget = requested(broker, v, req)
    by_id = broker.image.topics_by_id

    def resolve(topic_id):
        t = by_id.get(topic_id)
        return t.name if t is not None else None
    try:
        context = sessions.new_context(v, req.session_id if v >= 7 else 0, req.session_epoch if v >= 7 else -1,
                                       follower, fetch_data, forget, resolve)
    except ShardError:
        # a session id beyond the shards' ranges: Kafka's lookup throws
        return error_response(ApiKey.FETCH, v, req, ErrorCode.UNKNOWN_SERVER_ERROR)
    if context.kind == "error":
        return FetchResponse(throttle_time_ms=0, error_code=context.error, session_id=0, responses=[])
    read = topics = None
    if follower and getattr(broker, "replication", None) is not None:
        entries = await replica_fetch.serve(ctx, req, v, context, fetch_data, forget)   # a follower's fetch
    else:
        fetch_quota.cap_max_bytes(ctx, req, v)
        entries = read = await _read(ctx, req, v, context.partitions(), context)
        topics = response_topics(entries)
        throttle = fetch_quota.throttle_ms(ctx, v, topics)
        if throttle:
            return fetch_quota.throttled_response(context, throttle)
    code, session_id, entries = sessions.finish(context, entries)
    if entries is not read:   # (a follower's, or an incremental answer that keeps only some partitions)
        topics = response_topics(entries)
    return FetchResponse(throttle_time_ms=0, error_code=code, session_id=session_id, responses=topics)


async def _read(ctx, req, v, items, context) -> list:
    broker = ctx.broker
    isolation = req.isolation_level if v >= 4 else READ_UNCOMMITTED
    incremental = context.kind == "incremental"
    remote = []
    entries, total, watched, errors = _build(broker, v, req, items, isolation, incremental, remote)
    if remote:
        await tiered_fetch.read_remote(broker, remote, isolation)
        return entries
    if total >= req.min_bytes or req.max_wait_ms <= 0 or not watched or errors:
        return entries
    deadline = trio.current_time() + req.max_wait_ms / 1000
    waiting = perf_counter()
    while total < req.min_bytes:
        # no await between the last build and registering: no append is missed
        wake = trio.Event()
        for p in watched:
            p.add_waiter(wake)
        try:
            with trio.move_on_at(deadline):
                await wake.wait()
        finally:
            for p in watched:
                p.remove_waiter(wake)
        if not wake.is_set():
            break
        entries, total, watched, errors = _build(broker, v, req, items, isolation, incremental)
        if errors:
            break
    remote_time(ctx, waiting)   # RequestMetrics RemoteTimeMs: the long poll
    return entries

"""Fetch: record bytes go from the segment files to the socket by sendfile;
a fetch that finds too little data waits on the partitions' append events.
Fetch v0-3 (magic 0/1 readers) get the batches down-converted, as Kafka does."""
from __future__ import annotations

import trio

from kproto import legacy
from kproto import records as rec
from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.fetch_response import FetchResponse

from broker.handlers import handles
from broker.partition import OffsetOutOfRange

_Topic = FetchResponse.FetchableTopicResponse
_Part = FetchResponse.PartitionData
_Aborted = FetchResponse.AbortedTransaction

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


def _error_part(index: int, code: int) -> _Part:
    return _Part(partition_index=index, error_code=code, high_watermark=-1, last_stable_offset=-1,
                 log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1, records=b"")


def _resolve(broker, v, ft):
    """(topic name, topic image or None, error code for unknown)."""
    if v >= 13:
        t = broker.image.topics_by_id.get(ft.topic_id)
        return (t.name if t else ""), t, ErrorCode.UNKNOWN_TOPIC_ID
    t = broker.image.topics.get(ft.topic)
    return ft.topic, t, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _build(broker, v, req, isolation) -> tuple[FetchResponse, int, list, bool]:
    """One pass over the requested partitions: the response, the record
    bytes it carries, the partitions to wait on and whether any partition
    has an error (Kafka answers those at once, without waiting)."""
    budget = req.max_bytes if req.max_bytes > 0 else 0x7FFFFFFF
    total = 0
    watched = []
    topics = []
    errors = False
    for ft in req.topics:
        name, timage, unknown = _resolve(broker, v, ft)
        parts = []
        topics.append(_Topic(topic=name, topic_id=ft.topic_id, partitions=parts))
        for fp in ft.partitions:
            if timage is None:
                parts.append(_error_part(fp.partition, unknown))
                errors = True
                continue
            partition = broker.partitions.get(timage.name, fp.partition)
            if partition is None:
                parts.append(_error_part(fp.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                errors = True
                continue
            epoch = fp.current_leader_epoch
            if epoch >= 0 and epoch != partition.leader_epoch:
                code = (ErrorCode.FENCED_LEADER_EPOCH if epoch < partition.leader_epoch
                        else ErrorCode.UNKNOWN_LEADER_EPOCH)
                parts.append(_error_part(fp.partition, code))
                errors = True
                continue
            limit = min(fp.partition_max_bytes, budget - total) if total else fp.partition_max_bytes
            try:
                region, upper = partition.read(fp.fetch_offset, max(limit, 0), isolation, must_return_one=(total == 0))
            except OffsetOutOfRange:
                parts.append(_error_part(fp.partition, ErrorCode.OFFSET_OUT_OF_RANGE))
                errors = True
                continue
            if v < 4 and region is not None:
                try:
                    region = _down_convert(region, v, fp.fetch_offset, max(limit, 0), total == 0)
                except rec.CorruptRecordError as exc:
                    parts.append(_error_part(fp.partition, exc.error_code))
                    errors = True
                    continue
            size = len(region) if region is not None else 0
            total += size
            aborted = None
            if isolation == READ_COMMITTED:
                # Kafka lists the aborted transactions overlapping the data it
                # returns ([] with no data); the client drops their records
                aborted = [_Aborted(producer_id=pid, first_offset=first)
                           for pid, first in partition.aborted_transactions(fp.fetch_offset, upper)] if size else []
            parts.append(_Part(
                partition_index=fp.partition, error_code=0,
                high_watermark=partition.high_watermark,
                last_stable_offset=partition.last_stable_offset,
                log_start_offset=partition.log_start_offset,
                aborted_transactions=aborted, preferred_read_replica=-1,
                records=region if region is not None else b""))
            watched.append(partition)
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics), total, watched, errors


def _down_convert(region, v: int, fetch_offset: int, limit: int, first: bool) -> bytes | None:
    """Fetch v0-3 read magic 0/1 messages (v0-1: magic 0, v2-3: magic 1):
    the stored batches converted, cut to whole messages within the limit
    (the first message whole when nothing fits, as for v2 batches)."""
    data = legacy.down_convert(region.read(), 0 if v < 2 else 1, fetch_offset)
    if len(data) > limit:
        bounds = legacy.message_boundaries(data)
        fitting = [e for e in bounds if e <= limit]
        if fitting:
            data = data[:fitting[-1]]
        elif first and bounds:
            data = data[:bounds[0]]
        else:
            data = b""
    return data or None


@handles(ApiKey.FETCH, 0, 17)
async def fetch(ctx, req):
    resp = await _fetch(ctx, req)
    metrics = getattr(ctx.broker, "metrics", None)
    if metrics is not None:
        metrics.fetched(resp)   # BrokerTopicMetrics: bytes out, failed fetches
    return resp


async def _fetch(ctx, req):
    broker = ctx.broker
    v = ctx.api_version
    if v >= 7 and (req.session_id != 0 or req.session_epoch not in (0, -1)):
        # kproto keeps no fetch sessions: it answers every fetch in full and
        # returns session id 0, which tells the client no session was made
        return FetchResponse(throttle_time_ms=0, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                             session_id=0, responses=[])
    isolation = req.isolation_level if v >= 4 else READ_UNCOMMITTED
    resp, total, watched, errors = _build(broker, v, req, isolation)
    if total >= req.min_bytes or req.max_wait_ms <= 0 or not watched or errors:
        return resp
    deadline = trio.current_time() + req.max_wait_ms / 1000
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
        resp, total, watched, errors = _build(broker, v, req, isolation)
        if errors:
            break
    return resp

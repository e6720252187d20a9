"""Fetch of offsets below the local log start: what the Fetch handler asks tiered storage
(is the offset remote? read these partitions from the store). Kafka answers a remote read within
`remote.fetch.max.wait.ms`; a store failure is the partition's error, the other partitions of
the fetch are answered as usual."""
from __future__ import annotations

import logging

import trio

from kproto import records as rec
from kproto.errors import ErrorCode
from kproto.messages.fetch_response import FetchResponse


log = logging.getLogger("kproto.tiered")
_Aborted = FetchResponse.AbortedTransaction


async def _aborted(tiered, partition, view, offset: int, data: bytes | None) -> list:
    """The aborted transactions a read_committed consumer needs to drop the aborted records of
    ``data``: from the remote transaction indexes, then the local ones if those do not settle it."""
    if not data:
        return []
    upper = offset
    for _pos, h in rec.iter_batch_headers(data, allow_partial_tail=True):
        upper = h.last_offset + 1
    upper = min(upper, partition.last_stable_offset)
    found, complete = await tiered.reader.aborted_transactions(tiered._tp(partition), view.copied(), offset, upper)
    if not complete:
        found += partition.aborted_transactions(offset, upper)
    seen = set()
    return [_Aborted(producer_id=pid, first_offset=first) for pid, first in found
            if (pid, first) not in seen and not seen.add((pid, first))]


def in_remote(broker, partition, offset: int) -> bool:
    """Whether ``offset`` is below the local log start and in a copied remote segment."""
    tiered = getattr(broker, "tiered", None)
    if tiered is None or tiered.store is None:
        return False
    # (below the log start, which DeleteRecords may have moved above the first remote segment's
    # start: OFFSET_OUT_OF_RANGE)
    if (partition.remote_log_start is None or offset < partition.log_start_offset
            or offset >= partition.local_log_start_offset):
        return False
    view = tiered.partition_view(partition)
    return view is not None and tiered.segment_for(partition, view, offset) is not None


async def read_remote(broker, items, isolation: int) -> None:
    """Fill each (response partition, partition, offset, max bytes, min one) from the store."""
    # (the store's errors: imported by a broker that tiers, at its first remote read, issue 26)
    from .remote_records import CorruptRemoteData
    from .store_types import ObjectStoreError
    tiered = broker.tiered
    wait_s = broker.config.get_int("remote.fetch.max.wait.ms") / 1000
    for part, partition, offset, max_bytes, min_one in items:
        if tiered.fetch_quota_exceeded():
            # remote.log.manager.fetch.max.bytes.per.second: Kafka answers no records (the consumer
            # asks again) while the broker's remote reads are over the quota
            part.error_code = ErrorCode.NONE
            part.high_watermark = partition.high_watermark
            part.last_stable_offset = partition.last_stable_offset
            part.log_start_offset = partition.log_start_offset
            part.records = b""
            continue
        view = tiered.partition_view(partition)
        seg = tiered.segment_for(partition, view, offset) if view is not None else None
        part.high_watermark = partition.high_watermark
        part.last_stable_offset = partition.last_stable_offset
        part.log_start_offset = partition.log_start_offset
        if seg is None:
            continue   # expired meanwhile: OFFSET_OUT_OF_RANGE stands
        data = None
        with trio.move_on_after(wait_s) as waited:
            try:
                data = await tiered.reader.read(tiered._tp(partition), seg, max(offset, seg.start_offset),
                                                max_bytes, min_one)
            except CorruptRemoteData as exc:
                log.error("%s-%d: %s", partition.topic, partition.index, exc)
                tiered.metrics.fetch_errors += 1
                part.error_code = ErrorCode.CORRUPT_MESSAGE
                continue
            except ObjectStoreError as exc:
                log.warning("%s-%d: remote read of offset %d failed: %s", partition.topic, partition.index,
                            offset, exc)
                tiered.metrics.fetch_errors += 1
                part.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
                continue
        if waited.cancelled_caught:
            # as Kafka's DelayedRemoteFetch on expiry: the partition answers no records, no error
            # (the consumer asks again)
            tiered.metrics.fetch_expired += 1
            log.info("%s-%d: remote read of offset %d took more than remote.fetch.max.wait.ms",
                     partition.topic, partition.index, offset)
        part.error_code = ErrorCode.NONE
        part.records = data or b""
        part.aborted_transactions = None
        if isolation == 1:
            try:
                part.aborted_transactions = await _aborted(tiered, partition, view, offset, data)
            except ObjectStoreError as exc:
                log.warning("%s-%d: remote transaction index: %s", partition.topic, partition.index, exc)
                part.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
                part.records = b""
                continue
        if data:
            tiered.record_fetch(len(data))
            tiered.metrics.fetch_bytes += len(data)
            tiered.metrics.fetch_requests += 1

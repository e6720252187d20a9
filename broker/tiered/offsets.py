"""ListOffsets on a tiered partition: the special timestamps that speak of the tiers (Kafka 3.9's
EARLIEST_LOCAL_TIMESTAMP -4 and LATEST_TIERED_TIMESTAMP -5, Kafka 4.x's EARLIEST_PENDING_UPLOAD
-6, KIP-1023) and timestamp lookups that reach into remote segments."""
from __future__ import annotations

import logging

import trio

from kproto.errors import ErrorCode

from .settings import remote_enabled

log = logging.getLogger("kproto.tiered")

EARLIEST_LOCAL = -4
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6


class RemoteLookupFailed(Exception):
    """A timestamp lookup could not read the store: the partition's answer is ``error_code``
    (the other partitions of the request are answered as usual)."""

    def __init__(self, error_code: int):
        super().__init__(error_code)
        self.error_code = error_code


def special_offset(broker, partition, ts: int) -> tuple[int, int] | None:
    """(offset, leader epoch) for -4/-5/-6 (None: not one of them)."""
    tiered = getattr(broker, "tiered", None)
    enabled = tiered is not None and tiered.enabled and remote_enabled(partition)
    view = tiered.partition_view(partition) if enabled else None
    highest = tiered.highest_copied(partition, view) if view is not None else -1
    if ts == EARLIEST_LOCAL:
        offset = partition.local_log_start_offset
    elif ts == LATEST_TIERED:
        if not enabled:
            return -1, -1
        offset = highest
    elif ts == EARLIEST_PENDING_UPLOAD:
        if not enabled:
            return -1, -1
        offset = highest + 1 if highest >= 0 else partition.local_log_start_offset
    else:
        return None
    if offset < 0:
        return offset, -1
    epoch = partition.log.epochs.epoch_for_offset(offset) if offset >= partition.local_log_start_offset else None
    if epoch is None and view is not None:
        seg = tiered.segment_for(partition, view, offset)
        if seg is not None:
            epoch = max((e for e, o in seg.leader_epochs if o <= offset), default=None)
    return offset, (epoch if epoch is not None else partition.leader_epoch)


async def offset_for_timestamp(broker, partition, ts: int):
    """(offset, timestamp, leader epoch) of the first record at or after ``ts`` found in remote
    segments below the local log start; None to look in the local log. RemoteLookupFailed when
    the store cannot be read or its data is corrupt."""
    tiered = getattr(broker, "tiered", None)
    if tiered is None or tiered.store is None or partition.remote_log_start is None:
        return None
    # (what a remote lookup needs: imported by a broker that tiers, at its first one, issue 26)
    from .lineage import within_lineage
    from .remote_records import CorruptRemoteData
    from .store_types import ObjectStoreError
    view = tiered.partition_view(partition)
    if view is None:
        return None
    local_start = partition.local_log_start_offset
    floor = partition.log_start_offset
    lineage = tiered.lineage(partition, view)
    for seg in view.copied():
        if seg.start_offset >= local_start:
            break
        if seg.max_timestamp_ms < ts or seg.end_offset < floor:
            continue
        if not within_lineage(seg.leader_epochs, seg.end_offset, lineage, partition.log_end_offset):
            continue   # another leader's history (lineage.py)
        # the segment's time and offset indexes, then only the byte ranges they point at
        try:
            found = await tiered.reader.offset_for_timestamp(tiered._tp(partition), seg, ts, floor)
        except CorruptRemoteData as exc:
            log.error("%s-%d: %s", partition.topic, partition.index, exc)
            raise RemoteLookupFailed(ErrorCode.CORRUPT_MESSAGE) from None
        except ObjectStoreError as exc:
            log.warning("%s-%d: remote timestamp lookup failed: %s", partition.topic, partition.index, exc)
            raise RemoteLookupFailed(ErrorCode.UNKNOWN_SERVER_ERROR) from None
        if found is not None:
            return found
    return None


def may_be_remote(broker, partition) -> bool:
    """Whether a timestamp lookup on ``partition`` may have to read remote storage."""
    tiered = getattr(broker, "tiered", None)
    return tiered is not None and tiered.store is not None and partition.remote_log_start is not None


async def lookup_all(broker, items, timeout_ms: int, local) -> None:
    """Answer each (response partition, partition, timestamp) of a ListOffsets request whose
    lookup may read remote storage: at once (at most `remote.log.reader.threads` at a time), from
    the tier or else with ``local(out, partition, ts)``. A lookup not done within ``timeout_ms``
    answers REQUEST_TIMED_OUT (offset and timestamp -1), as Kafka 4's DelayedRemoteListOffsets;
    the others are answered as usual."""
    done: set[int] = set()
    limit = trio.Semaphore(max(1, broker.config.get_int("remote.log.reader.threads")))

    async def one(i, out, partition, ts):
        async with limit:
            try:
                found = await offset_for_timestamp(broker, partition, ts)
            except RemoteLookupFailed as exc:
                out.error_code = exc.error_code
                done.add(i)
                return
        if found is not None:
            out.offset, out.timestamp, out.leader_epoch = found
        else:
            local(out, partition, ts)
        done.add(i)

    with trio.move_on_after(timeout_ms / 1000):
        async with trio.open_nursery() as nursery:
            for i, (out, partition, ts) in enumerate(items):
                nursery.start_soon(one, i, out, partition, ts)
    for i, (out, partition, ts) in enumerate(items):
        if i not in done:
            log.warning("%s-%d: timestamp lookup in remote storage took more than %d ms", partition.topic,
                        partition.index, timeout_ms)
            broker.tiered.metrics.list_offsets_expired += 1
            out.error_code = ErrorCode.REQUEST_TIMED_OUT
            out.offset = out.timestamp = out.leader_epoch = -1

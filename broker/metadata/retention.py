"""Metadata log retention, as Kafka's KafkaMetadataLog.maybeClean: the `__cluster_metadata-0`
segments (and snapshots) that lie entirely before a newer snapshot are deleted once the log and the
snapshots together exceed `metadata.max.retention.bytes` (100 MiB), or once the older snapshot's
last contained timestamp is older than `metadata.max.retention.ms` (7 days); -1 turns either off.

Snapshots are taken in pairs (older, next), oldest first: while the older one breaches a limit, the
log start offset moves to the next one's end offset, the segments wholly below it go (after
`file.delete.delay.ms`, as any deleted segment) and so do the snapshots before it. The newest
snapshot always stays, so what was deleted is always covered: a restart loads that snapshot, and a
follower that needs older entries is sent it (FetchSnapshot). Run after each new snapshot, by the
single-node metadata log (broker/metadata/snapshotter.py) and the replicated one
(broker/quorum/raft_storage.py)."""
from __future__ import annotations

import logging
import os
import time

from kproto import records as rec

from broker.metadata import control, snapshots

log = logging.getLogger("kproto.quorum")


def maybe_clean(plog, max_bytes: int, max_ms: int, now_ms: int | None = None) -> bool:
    """Apply both limits to the metadata partition log `plog`; whether anything was cleaned."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    # segments deleted earlier whose delay passed (a metadata.log.dir outside log.dirs has no
    # periodic log maintenance to do it)
    plog.purge_deleted(now_ms)
    cleaned = False
    if max_bytes >= 0:
        sizes = {sid: _size(plog.dir, sid) for sid in snapshots.list_snapshots(plog.dir)}
        total = sum(sizes.values())

        def over_size(sid) -> str | None:
            nonlocal total
            if plog.size + total <= max_bytes:
                return None
            reason = (f"the log size ({plog.size}) and snapshots size ({total}) is greater than "
                      f"{max_bytes}")
            total -= sizes.get(sid, 0)
            return reason
        cleaned |= _clean(plog, over_size)
    if max_ms >= 0:
        def too_old(sid) -> str | None:
            ts = last_contained_timestamp(os.path.join(plog.dir, snapshots.file_name(*sid)))
            if ts is None or now_ms - ts <= max_ms:
                return None
            return f"its timestamp ({ts}) is now ({now_ms}) older than the retention ({max_ms})"
        cleaned |= _clean(plog, too_old)
    return cleaned


def _clean(plog, breached) -> bool:
    ids = snapshots.list_snapshots(plog.dir)
    cleaned = False
    for sid, next_sid in zip(ids, ids[1:]):
        reason = breached(sid)
        if reason is None or not _delete_before(plog, next_sid, ids[-1]):
            break
        log.info("metadata snapshot %d-%d deleted because %s", sid[0], sid[1], reason)
        cleaned = True
    return cleaned


def _delete_before(plog, sid, latest) -> bool:
    """deleteBeforeSnapshot: the log start offset to the snapshot's end offset, the segments below
    it and the older snapshots deleted."""
    end = sid[0]
    if not (plog.log_start_offset < end <= latest[0] <= plog.log_end_offset):
        return False
    plog.delete_records_before(end)
    for old in snapshots.list_snapshots(plog.dir):
        if old < sid:
            try:
                os.unlink(os.path.join(plog.dir, snapshots.file_name(*old)))
            except OSError:
                log.warning("could not delete metadata snapshot %s-%s", *old)
    return True


def _size(directory: str, sid) -> int:
    try:
        return os.path.getsize(os.path.join(directory, snapshots.file_name(*sid)))
    except OSError:
        return 0


def last_contained_timestamp(path: str) -> int | None:
    """The SnapshotHeaderRecord's lastContainedLogTimestamp (the first record of the file), read
    without the rest of the snapshot."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
            if len(head) < 12:
                return None
            data = head + f.read(int.from_bytes(head[8:12], "big"))
        for _pos, header in rec.iter_batch_headers(data):
            for r in rec.iter_records(memoryview(data)[:header.size]):
                type_, message = control.decode_control(r)
                return message.last_contained_log_timestamp if type_ == control.SNAPSHOT_HEADER else None
    except (OSError, ValueError, rec.CorruptRecordError):
        return None
    return None

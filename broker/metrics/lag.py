"""Consumer lag, computed by the broker itself at scrape time (what Burrow
or kafka-lag-exporter would compute from outside): per group, topic and
partition, the committed offset against the high watermark, and the time
lag: how long ago the first record not yet consumed was written.

In a cluster the group coordinator computes it from the high watermark its
own replica of the partition knows: the leader's own, or an in-sync
follower's, learned from its last fetch from the current leader (at most a
fetch round trip old: the lag may read a few records high while records
are produced, never low). A partition this broker does not host, or whose
replica here is out of sync or has not fetched from the current leader yet,
is left out rather than reported with a stale high watermark."""
from __future__ import annotations

import os
import time
from typing import NamedTuple

from kproto import records as rec

from broker.storage.errors import OffsetOutOfRange


class PartitionLag(NamedTuple):
    group: str
    topic: str
    partition: int
    offset: int          # committed
    end_offset: int      # high watermark
    lag: int
    lag_seconds: float | None   # None: the record carries no timestamp


def _first_timestamp(log, offset: int, upper: int) -> int | None:
    """Timestamp of the batch holding `offset` (its first record's): read
    from the batch header only, never the records."""
    try:
        sl = log.read(offset, 1, upper, min_one_batch=True)
    except OffsetOutOfRange:
        return None
    if not sl.length or sl.length < rec.HEADER_SIZE:
        return None
    header = rec.BatchHeader(os.pread(sl.file.fileno(), rec.HEADER_SIZE, sl.position), 0)
    return header.base_timestamp if header.base_timestamp >= 0 else None


def known_high_watermark(broker, partition) -> int | None:
    """The partition's high watermark as this broker knows it, or None when its replica here
    cannot tell (see the module's docstring)."""
    if partition.replication is None or partition.is_leader:
        return partition.high_watermark   # a single replica, or the leader: its own
    if getattr(partition, "hw_epoch", None) != partition.leader_epoch:
        return None   # no fetch answered by the current leader yet
    t = broker.image.topics.get(partition.topic)
    p = t.partitions.get(partition.index) if t is not None else None
    if p is None or broker.node_id not in p.isr:
        return None   # out of sync: what it learned last may be old
    return partition.high_watermark


def consumer_lag(broker, now_ms: int | None = None) -> list[PartitionLag]:
    groups = getattr(broker, "groups", None)
    if groups is None:
        return []
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    out = []
    for group in list(groups.state.groups.values()):
        for (topic, index), entry in list(group.offsets.items()):
            partition = broker.partitions.get(topic, index)
            if partition is None:
                continue   # not hosted here
            end = known_high_watermark(broker, partition)
            if end is None:
                continue
            # records below the log start are gone but still count as lag, as
            # lag exporters count them; the time lag is that of the oldest record left
            lag = max(end - entry.offset, 0)
            seconds = 0.0
            if lag:
                ts = _first_timestamp(partition.log, max(entry.offset, partition.log_start_offset), end)
                seconds = None if ts is None else max(now_ms - ts, 0) / 1000.0
            out.append(PartitionLag(group.group_id, topic, index, entry.offset, end, lag, seconds))
    return out

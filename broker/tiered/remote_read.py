"""Reads of offsets that only the object store holds: Fetch below the local log start
(Kafka's RemoteLogReader) and timestamp lookups in remote segments. A segment's offset and time
indexes are fetched once and kept in a cache bounded by `remote.log.index.file.cache.total.size.bytes`;
a read fetches only the byte ranges of the segment the indexes point at;
every batch served is CRC-checked first, so a corrupt or truncated object is reported
(CorruptRemoteData), never served."""
from __future__ import annotations

import bisect
import logging
import struct
from collections import OrderedDict

import kproto.records as rec

from broker.storage.txnindex import ENTRY, ENTRY_SIZE

from .keys import partition_prefix, segment_key
from .remote_records import CorruptRemoteData, verify_remote_batches
from .segment_view import RemoteSegment

log = logging.getLogger("kproto.tiered")

_ENTRY = struct.Struct(">ii")          # .index: relative offset, position
_TIME_ENTRY = struct.Struct(">qi")     # .timeindex: timestamp, relative offset
_MIN_READ = 4096                       # a timestamp lookup's smallest range read (index.interval.bytes)
_MAX_READ = 1 << 20                    # ... and its largest, doubling from the first


class RemoteReader:
    def __init__(self, manager):
        self.manager = manager
        # (segment id, ".index" | ".timeindex") -> the parsed index (two lists), least recently used first
        self._indexes: OrderedDict = OrderedDict()
        self._index_bytes = 0
        self._txns: dict = {}
        self.cache_limit = manager.broker.config.get_long("remote.log.index.file.cache.total.size.bytes")

    async def _txn_entries(self, tp, seg: RemoteSegment) -> list[tuple[int, int, int]]:
        """(producer id, first offset, last offset) of the aborted transactions in seg's
        transaction index (kept: small, and read by every read_committed fetch of the segment)."""
        entries = self._txns.get(seg.segment_id)
        if entries is None:
            data = await self.manager.store.get(self._key(tp, seg, ".txnindex"))
            entries = []
            for pos in range(0, len(data) - len(data) % ENTRY_SIZE, ENTRY_SIZE):
                _version, pid, first, last, _lso = ENTRY.unpack_from(data, pos)
                entries.append((pid, first, last))
            self._txns[seg.segment_id] = entries
        return entries

    async def aborted_transactions(self, tp, segments: list[RemoteSegment], start: int,
                                   upper: int) -> tuple[list[tuple[int, int]], bool]:
        """(producer id, first offset) of the aborted transactions overlapping [start, upper)
        found in the remote segments from the one holding start, and whether the search is
        complete (an entry ends at or beyond upper: later segments cannot add any), as Kafka's
        collectAbortedTransactions walks the remote then the local transaction indexes."""
        out = []
        for seg in segments:
            if seg.end_offset < start:
                continue
            entries = await self._txn_entries(tp, seg)
            out.extend((pid, first) for pid, first, last in entries if last >= start and first < upper)
            if any(last >= upper for _pid, _first, last in entries):
                return out, True
        return out, False

    def forget(self, seg: RemoteSegment) -> None:
        self._txns.pop(seg.segment_id, None)
        for suffix, size in ((".index", _ENTRY.size), (".timeindex", _TIME_ENTRY.size)):
            entry = self._indexes.pop((seg.segment_id, suffix), None)
            if entry is not None:
                self._index_bytes -= size * len(entry[0])

    def _key(self, tp, seg: RemoteSegment, suffix: str) -> str:
        return segment_key(partition_prefix(tp.topic, tp.partition, tp.topic_id), seg, suffix)

    async def _cached(self, tp, seg: RemoteSegment, suffix: str, parse, entry_size: int):
        """The parsed index ``suffix`` of seg, from the cache or fetched (whole: an index is
        small beside its segment) and kept, evicting the least recently used indexes beyond
        `remote.log.index.file.cache.total.size.bytes`."""
        cache_key = (seg.segment_id, suffix)
        entry = self._indexes.get(cache_key)
        if entry is not None:
            self._indexes.move_to_end(cache_key)
            return entry
        entry = parse(seg, await self.manager.store.get(self._key(tp, seg, suffix)))
        self._indexes[cache_key] = entry
        # counted as kept (its real entries), as forget() and eviction take it off: a preallocated
        # index's zero tail is not kept, and counting it would let the total drift upwards
        self._index_bytes += entry_size * len(entry[0])
        while self._index_bytes > self.cache_limit and len(self._indexes) > 1:
            (_sid, old_suffix), old = self._indexes.popitem(last=False)
            self._index_bytes -= (_ENTRY.size if old_suffix == ".index" else _TIME_ENTRY.size) * len(old[0])
        return entry

    async def _index(self, tp, seg: RemoteSegment) -> tuple[list[int], list[int]]:
        """(absolute offsets, file positions) of seg's offset index."""
        return await self._cached(tp, seg, ".index", _parse_offset_index, _ENTRY.size)

    async def _time_index(self, tp, seg: RemoteSegment) -> tuple[list[int], list[int]]:
        """(timestamps, absolute offsets) of seg's time index."""
        return await self._cached(tp, seg, ".timeindex", _parse_time_index, _TIME_ENTRY.size)

    async def read(self, tp, seg: RemoteSegment, offset: int, max_bytes: int, min_one: bool) -> bytes:
        """Whole batches of ``seg`` from the one holding ``offset``: at most ``max_bytes`` unless
        the first batch alone is larger (then that batch with ``min_one``, else nothing)."""
        store = self.manager.store
        key = self._key(tp, seg, ".log")
        offsets, positions = await self._index(tp, seg)
        i = bisect.bisect_right(offsets, offset) - 1
        pos = positions[i] if i >= 0 else 0
        chunk_size = max(max_bytes, 64 * 1024)
        # find the batch holding offset
        while True:
            if pos >= seg.size:
                return b""
            head = await store.get(key, pos, min(pos + chunk_size, seg.size))
            if len(head) < rec.HEADER_SIZE:
                raise CorruptRemoteData(key, offset, pos, "truncated")
            p = 0
            found = None
            while p + rec.HEADER_SIZE <= len(head):
                h = rec.BatchHeader(head, p)
                if h.batch_length < rec.MIN_BATCH_LENGTH - rec.LOG_OVERHEAD or pos + p + h.size > seg.size:
                    raise CorruptRemoteData(key, offset, pos + p, f"invalid batch length {h.batch_length}")
                if h.last_offset >= offset:
                    found = p
                    break
                p += h.size
            if found is not None:
                break
            if p == 0:
                raise CorruptRemoteData(key, offset, pos, "no batch at this position")
            pos += p
        start = pos + found
        data = head[found:]
        first = rec.BatchHeader(data, 0)
        if first.size > max_bytes and not min_one:
            return b""
        want = max(max_bytes, first.size) if min_one else max_bytes
        if len(data) < min(want, seg.size - start):
            data = await store.get(key, start, min(start + want, seg.size))
        # whole batches only, each checked
        out_end = 0
        while out_end + rec.LOG_OVERHEAD <= len(data):
            length = int.from_bytes(data[out_end + 8:out_end + 12], "big", signed=True)
            end = out_end + rec.LOG_OVERHEAD + length
            if end > len(data) or (end > want and out_end > 0):
                break
            out_end = end
        if out_end == 0:
            raise CorruptRemoteData(key, offset, start, "truncated batch")
        out = bytes(data[:out_end])
        verify_remote_batches(key, out, first_offset=first.base_offset)   # CRC of every batch served
        return out

    async def offset_for_timestamp(self, tp, seg: RemoteSegment, ts: int, floor_offset: int):
        """(offset, timestamp, leader epoch) of the first record of seg with timestamp >= ts and
        offset >= floor_offset; None when it has none. As Kafka's RemoteLogManager.lookupTimestamp:
        the time index gives the last entry at or below ts, the offset index the position of
        the batch to start from, and the batches are scanned from there, read in byte ranges
        (the first up to where the next time index entry says the answer must be)."""
        store = self.manager.store
        key = self._key(tp, seg, ".log")
        offsets, positions = await self._index(tp, seg)
        times, time_offsets = await self._time_index(tp, seg)
        i = bisect.bisect_right(times, ts) - 1
        start_offset = max(floor_offset, time_offsets[i] if i >= 0 else seg.start_offset)
        j = bisect.bisect_right(offsets, start_offset) - 1
        pos = positions[j] if j >= 0 else 0
        # the batch holding the next time index entry's offset has a timestamp >= ts: the answer
        # is at or before it, so the first read ends where the offset index places the batch after
        end = seg.size
        if i + 1 < len(times):
            k = bisect.bisect_right(offsets, time_offsets[i + 1])
            if k < len(offsets) and positions[k] > pos:
                end = positions[k]
        buf = b""                  # the bytes of seg from pos on, read so far
        chunk = max(end - pos, _MIN_READ)
        while pos < seg.size:
            if len(buf) < rec.HEADER_SIZE:
                buf += await self._read_more(store, key, seg, pos + len(buf), chunk)
                chunk = min(chunk * 2, _MAX_READ)
                if len(buf) < rec.HEADER_SIZE:
                    raise CorruptRemoteData(key, start_offset, pos, "truncated")
            h = rec.BatchHeader(buf, 0)
            if h.batch_length < rec.MIN_BATCH_LENGTH or pos + h.size > seg.size:
                raise CorruptRemoteData(key, start_offset, pos, f"invalid batch length {h.batch_length}")
            if h.max_timestamp >= ts and h.last_offset >= floor_offset:
                if len(buf) < h.size:
                    buf += await self._read_more(store, key, seg, pos + len(buf), max(h.size - len(buf), chunk))
                batch = buf[:h.size]
                verify_remote_batches(key, batch, first_offset=h.base_offset)   # CRC before use
                for r in rec.iter_records(batch):
                    if r.offset >= floor_offset and r.timestamp >= ts:
                        return r.offset, r.timestamp, h.partition_leader_epoch
            if len(buf) < h.size:
                # skip the rest of a batch without reading it
                pos, buf = pos + h.size, b""
            else:
                pos, buf = pos + h.size, buf[h.size:]
        return None

    async def _read_more(self, store, key: str, seg: RemoteSegment, start: int, length: int) -> bytes:
        data = await store.get(key, start, min(start + length, seg.size))
        if not data:
            raise CorruptRemoteData(key, -1, start, "truncated")
        return data


def _parse_offset_index(seg: RemoteSegment, data: bytes) -> tuple[list[int], list[int]]:
    offsets, positions = [], []
    for i in range(len(data) // _ENTRY.size):
        rel, pos = _ENTRY.unpack_from(data, i * _ENTRY.size)
        if i and rel == 0 and pos == 0:
            break   # a preallocated zero tail
        offsets.append(seg.start_offset + rel)
        positions.append(pos)
    return offsets, positions


def _parse_time_index(seg: RemoteSegment, data: bytes) -> tuple[list[int], list[int]]:
    times, offsets = [], []
    for i in range(len(data) // _TIME_ENTRY.size):
        ts, rel = _TIME_ENTRY.unpack_from(data, i * _TIME_ENTRY.size)
        if times and ts <= times[-1]:
            break   # entries only grow: what follows is a zero tail
        times.append(ts)
        offsets.append(seg.start_offset + rel)
    return times, offsets

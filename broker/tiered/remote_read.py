"""Reads of offsets that only the object store holds: Fetch below the local log start
(Kafka's RemoteLogReader) and timestamp lookups in remote segments. A segment's offset index is
fetched once and kept in a cache bounded by `remote.log.index.file.cache.total.size.bytes`;
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

_ENTRY = struct.Struct(">ii")


class RemoteReader:
    def __init__(self, manager):
        self.manager = manager
        self._indexes: OrderedDict = OrderedDict()   # segment id -> (offsets, positions)
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
        entry = self._indexes.pop(seg.segment_id, None)
        if entry is not None:
            self._index_bytes -= 8 * len(entry[0])

    def _key(self, tp, seg: RemoteSegment, suffix: str) -> str:
        return segment_key(partition_prefix(tp.topic, tp.partition, tp.topic_id), seg, suffix)

    async def _index(self, tp, seg: RemoteSegment) -> tuple[list[int], list[int]]:
        entry = self._indexes.get(seg.segment_id)
        if entry is not None:
            self._indexes.move_to_end(seg.segment_id)
            return entry
        data = await self.manager.store.get(self._key(tp, seg, ".index"))
        offsets, positions = [], []
        for i in range(len(data) // 8):
            rel, pos = _ENTRY.unpack_from(data, i * 8)
            if i and rel == 0 and pos == 0:
                break
            offsets.append(seg.start_offset + rel)
            positions.append(pos)
        entry = (offsets, positions)
        self._indexes[seg.segment_id] = entry
        # counted as kept (8 bytes an entry), as forget() and eviction take it off: a preallocated
        # index's zero tail is not kept, and counting it would let the total drift upwards
        self._index_bytes += 8 * len(offsets)
        while self._index_bytes > self.cache_limit and len(self._indexes) > 1:
            _sid, old = self._indexes.popitem(last=False)
            self._index_bytes -= 8 * len(old[0])
        return entry

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
        """(offset, timestamp, leader epoch) of the first record of seg with timestamp >= ts."""
        store = self.manager.store
        data = await store.get(self._key(tp, seg, ".log"), 0, seg.size)
        for pos, h in rec.iter_batch_headers(data, validate=True):
            if h.max_timestamp < ts or h.last_offset < floor_offset:
                continue
            for r in rec.iter_records(data[pos:pos + h.size]):
                if r.offset >= floor_offset and r.timestamp >= ts:
                    return r.offset, r.timestamp, h.partition_leader_epoch
        return None

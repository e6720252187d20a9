"""One cleaning round of a compacted log (Kafka's Cleaner.doClean), and the
choice of what a round covers (LogCleanerManager.cleanableOffsets).

One cleaning round: map every key of the cleanable dirty section to its
latest offset, then recopy every segment from the log start up to where the
map ends, in groups of consecutive segments that together fit
``segment.bytes`` and ``segment.index.bytes``, keeping a record only if no
later offset holds its key. Each group becomes one segment written as
``<base>.log.cleaned`` (with its indexes), renamed to ``.swap``, then put in
place of the group (old files go through the usual ``.deleted`` delay, so a
fetch holding one of them still completes).
Batches keep their offsets, producer id/epoch/base sequence, last offset
delta, leader epoch, codec and timestamp type; a batch that loses records is
rebuilt, one that keeps all of them is copied byte for byte. Records without
a key are dropped. Tombstones (null values) and COMMIT markers get a delete
horizon the first time the cleaner keeps them in a cleaned segment (the
``hasDeleteHorizonMs`` attribute with the horizon as the batch's base
timestamp, as in Kafka's magic-2 batches) and go in a later round once the
horizon (``delete.retention.ms`` after that cleaning) has passed. The last
batch of every active producer is kept, emptied if need be, so its sequence
and epoch survive; so is the last batch of each round.

Transactions: the cleaner never passes the last stable offset, so every
transaction it sees is decided; records of aborted transactions (known from
the ``.txnindex`` files) are removed at once. A COMMIT marker goes, as in
Kafka, only after no batch of its transaction remains and its delete horizon
has passed. ABORT markers are always kept (Kafka removes them the same way):
the partition's in-memory aborted-transaction index is not told about
rewritten segments, and a stale entry whose marker had disappeared would
make read_committed consumers skip that producer's later committed data.
A kept ABORT marker makes every such entry harmless.
"""
from __future__ import annotations

import hashlib
import heapq
import logging
import os
import time
from collections.abc import Generator, Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from kproto.records import (
    ABORT, COMMIT, CONTROL_BIT, DELETE_HORIZON_BIT, HEADER, HEADER_SIZE, LOG_OVERHEAD,
    MIN_BATCH_LENGTH, NO_TIMESTAMP, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT, BatchHeader,
    CorruptRecordError, build_batch, control_record_type, iter_records, set_crc,
)

from . import checkpoints as cp
from .files import (
    CLEANED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX,
    segment_path,
)
from .index import OffsetIndex, TimeIndex
from .logconfig import LONG_MAX
from .swaps import remove_file
from .txnindex import AbortedTxn, read_entries

if TYPE_CHECKING:
    from .log import PartitionLog
    from .segment import LogSegment

# one logger for everything the cleaner does, as before the split (its lines keep their name)
log = logging.getLogger("broker.storage.cleaner")


INT_MAX = 2**31 - 1


# broker settings the cleaner reads (Kafka's names and defaults)
CLEANER_DEFAULTS = {
    "log.cleaner.enable": True,
    "log.cleaner.backoff.ms": 15000,
    "log.cleaner.dedupe.buffer.size": 134217728,
    "log.cleaner.io.buffer.load.factor": 0.9,
    "log.cleaner.threads": 1,
}


# Kafka's offset map spends 24 bytes a key (MD5 + offset); a Python dict entry
# with its key and int costs about this much, so the dedupe buffer buys fewer keys
_MAP_ENTRY_BYTES = 128


# keys longer than this are mapped by a 16-byte BLAKE2b digest (Kafka: MD5)
_DIGEST_OVER = 16


# source segments are read this much at a time (Kafka: log.cleaner.io.buffer.size)
_READ_CHUNK = 1 << 20


# cleaned data is written this much at a time
_WRITE_CHUNK = 1 << 20


# cleaned data is fsynced as it goes, so the fsync before the swap (on the
# broker's one thread) has little left to write
_SYNC_EVERY = 8 << 20


# the generator offers to pause after about this many bytes of work
_SLICE_BYTES = 256 * 1024


# ... or this many records (compressed batches hold many in few bytes)
_SLICE_RECORDS = 2000


# a long round reports its progress at most this often
_PROGRESS_EVERY_S = 10.0


_TXN_FILE_MASK = TRANSACTIONAL_BIT | CONTROL_BIT | TIMESTAMP_TYPE_BIT


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class CleaningAborted(Exception):
    """The log changed under a cleaning round (segments deleted, log closed)."""


# ===================================================================== recovery


class CleanerSettings(NamedTuple):
    enabled: bool = True
    backoff_ms: int = 15000
    dedupe_buffer_size: int = 134217728
    load_factor: float = 0.9

    @classmethod
    def from_settings(cls, settings: Mapping) -> "CleanerSettings":
        def get(key):
            value = settings.get(key, CLEANER_DEFAULTS[key])
            return CLEANER_DEFAULTS[key] if value is None else value
        enabled = get("log.cleaner.enable")
        if isinstance(enabled, str):
            enabled = enabled.strip().lower() == "true"
        return cls(bool(enabled) and int(get("log.cleaner.threads")) > 0,
                   int(get("log.cleaner.backoff.ms")),
                   int(get("log.cleaner.dedupe.buffer.size")),
                   float(get("log.cleaner.io.buffer.load.factor")))

    @property
    def max_map_keys(self) -> int:
        return max(1, int(self.dedupe_buffer_size * self.load_factor / _MAP_ENTRY_BYTES))


# ================================================================ what to clean


class LogToClean(NamedTuple):
    """Kafka's LogToClean: the dirty range and how dirty the log is."""
    first_dirty_offset: int
    first_uncleanable_offset: int  # a segment base
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool     # max.compaction.lag.ms passed
    reset_checkpoint: bool        # the checkpointed offset was out of range

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    def should_clean(self, min_ratio: float) -> bool:
        return ((self.need_compaction_now and self.cleanable_bytes > 0)
                or self.cleanable_ratio > min_ratio)


def _segments_overlapping(segments: list["LogSegment"], start: int, end: int) -> list["LogSegment"]:
    """Kafka's logSegments(from, to): from the segment holding ``start`` to the
    last one whose base offset is below ``end``."""
    out = []
    for i, seg in enumerate(segments):
        nxt = segments[i + 1].base_offset if i + 1 < len(segments) else LONG_MAX
        if nxt <= start:
            continue
        if seg.base_offset >= end:
            break
        out.append(seg)
    return out


def log_to_clean(plog: "PartitionLog", checkpoint: int | None, now_ms: int,
                 stable_offset: int | None = None) -> LogToClean:
    """Kafka's LogCleanerManager.cleanableOffsets + calculateCleanableBytes +
    maxCompactionDelay for one log. ``stable_offset`` is the last stable
    offset (default: the log end)."""
    cfg = plog.config
    segments = plog.segments
    start = plog.log_start_offset
    leo = plog.log_end_offset
    reset = False
    first_dirty = start if checkpoint is None else checkpoint
    if first_dirty < start or first_dirty > leo:
        if checkpoint is not None and not (first_dirty < start and cfg.delete_enabled):
            log.warning("%s-%d: resetting the first dirty offset to the log start offset %d since "
                        "the checkpointed offset %d is invalid", plog.topic, plog.partition, start,
                        first_dirty)
        first_dirty, reset = start, True
    active = segments[-1]
    bounds = [leo if stable_offset is None else stable_offset, active.base_offset]
    dirty_closed = [s for s in _segments_overlapping(segments, first_dirty, LONG_MAX) if s is not active]
    lag = max(cfg.min_compaction_lag_ms, 0)
    if lag > 0:
        for seg in dirty_closed:
            if seg.largest_timestamp() > now_ms - lag:
                bounds.append(seg.base_offset)
                break
    uncleanable = max(first_dirty, min(bounds))
    # rounded down to the base of the segment holding it
    holding = [s for s in segments if s.base_offset <= uncleanable]
    first_uncleanable = holding[-1].base_offset if holding else segments[0].base_offset
    clean_bytes = sum(s.size for s in _segments_overlapping(segments, -1, first_dirty))
    cleanable_bytes = sum(s.size for s in _segments_overlapping(
        segments, min(first_dirty, first_uncleanable), first_uncleanable))
    need_now = False
    max_lag = max(cfg.max_compaction_lag_ms, 0)
    if max_lag < LONG_MAX:
        firsts = [ts for ts in (s._first_batch_timestamp() for s in dirty_closed) if ts is not None and ts > 0]
        if firsts and min(firsts) < now_ms - max_lag:
            need_now = True
    return LogToClean(first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, need_now, reset)


# ============================================================ round state


class _OffsetMap:
    """key -> latest offset over the dirty section (Kafka's SkimpyOffsetMap,
    exact for short keys)."""

    __slots__ = ("offsets", "capacity", "latest_offset")

    def __init__(self, capacity: int):
        self.offsets: dict[bytes, int] = {}
        self.capacity = capacity
        self.latest_offset = -1

    @staticmethod
    def key_of(key: bytes) -> bytes:
        if len(key) <= _DIGEST_OVER:
            return key
        return b"\x00" + hashlib.blake2b(key, digest_size=16).digest()

    def update_latest(self, offset: int) -> None:
        if offset > self.latest_offset:
            self.latest_offset = offset


class _AbortedMeta:
    __slots__ = ("txn", "observed")

    def __init__(self, txn: AbortedTxn):
        self.txn = txn
        self.observed = False


class _TxnTracker:
    """Kafka's CleanedTransactionMetadata: which batches belong to aborted
    transactions, and which markers may go."""

    def __init__(self, aborted: Iterable[AbortedTxn]):
        self._pending = [(t.first_offset, t.producer_id, t.last_offset, t) for t in set(aborted)]
        heapq.heapify(self._pending)
        self._ongoing_aborted: dict[int, _AbortedMeta] = {}
        self._ongoing_committed: set[int] = set()
        self.retained_aborted: list[AbortedTxn] = []

    def _consume_upto(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0][0] <= offset:
            txn = heapq.heappop(pending)[3]
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedMeta(txn))

    def on_batch(self, header: BatchHeader) -> bool:
        """A data batch: True when it belongs to an aborted transaction."""
        self._consume_upto(header.base_offset + header.last_offset_delta)
        if not header.attributes & TRANSACTIONAL_BIT:
            return False
        meta = self._ongoing_aborted.get(header.producer_id)
        if meta is not None:
            meta.observed = True
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control(self, header: BatchHeader, marker: int | None) -> bool:
        """A control batch (``marker``: its record type, None when empty):
        True when it may be discarded."""
        self._consume_upto(header.base_offset + header.last_offset_delta)
        if marker is None:
            return True  # emptied by an earlier round
        pid = header.producer_id
        if marker == ABORT:
            meta = self._ongoing_aborted.pop(pid, None)
            if meta is not None and meta.observed:
                self.retained_aborted.append(meta.txn)
            # kept in any case: see the module docstring
            return False
        if marker == COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False


class _LastRecord(NamedTuple):
    last_data_offset: int | None
    producer_epoch: int


def _active_producers(plog: "PartitionLog") -> dict[int, _LastRecord] | None:
    """The producers whose last batch must stay (Kafka's
    lastRecordsOfActiveProducers), from the producer state when the log has a
    snapshot provider; None to derive them from the log itself."""
    if plog.snapshot_provider is None:
        return None
    out = {}
    for e in plog.snapshot_provider(plog.log_end_offset):
        out[e.producer_id] = _LastRecord(e.last_offset if e.last_offset >= 0 else None, e.producer_epoch)
    return out


class CleanerStats:
    def __init__(self):
        self.started = time.monotonic()
        self.map_done: float | None = None
        self.ended: float | None = None
        self.map_bytes_read = 0
        self.map_messages_read = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.messages_read = 0
        self.messages_written = 0
        self.invalid_messages = 0
        self.groups = 0

    def __repr__(self) -> str:
        return (f"CleanerStats(read={self.bytes_read}B/{self.messages_read} msgs, "
                f"written={self.bytes_written}B/{self.messages_written} msgs)")


# ==================================================================== writing


class _CleanedSegmentWriter:
    """``<base>.log.cleaned`` with its ``.index.cleaned`` / ``.timeindex.cleaned``
    (and ``.txnindex.cleaned`` when it has aborted transactions), indexed as
    LogSegment.append indexes."""

    def __init__(self, dir: str, base_offset: int, config, sync: bool):
        self.dir = dir
        self.base_offset = base_offset
        self.config = config
        self.sync = sync
        self.paths = {s: segment_path(dir, base_offset, s) + CLEANED_SUFFIX
                      for s in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)}
        for path in self.paths.values():
            remove_file(path)
        self.fd = os.open(self.paths[LOG_SUFFIX], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.offset_index = OffsetIndex(self.paths[INDEX_SUFFIX], base_offset)
        self.time_index = TimeIndex(self.paths[TIME_INDEX_SUFFIX], base_offset)
        self.offset_index.activate(config.segment_index_bytes)
        self.time_index.activate(config.segment_index_bytes)
        self.size = 0
        self._buffer = bytearray()
        self._unsynced = 0
        self._bytes_since_index = 0
        self._max = (NO_TIMESTAMP, base_offset)
        self.closed = False

    def append(self, batch, last_offset: int, max_timestamp: int) -> None:
        position = self.size
        n = len(batch)
        if max_timestamp > self._max[0]:
            self._max = (max_timestamp, last_offset)
        if self._bytes_since_index > self.config.index_interval_bytes and not self.offset_index.is_full():
            if self.offset_index.can_append_offset(last_offset):
                self.offset_index.append(last_offset, position)
                if not self.time_index.is_full():
                    self.time_index.maybe_append(*self._max)
            self._bytes_since_index = 0
        self._bytes_since_index += n
        self._buffer += batch
        self.size += n
        if len(self._buffer) >= _WRITE_CHUNK:
            self._flush_buffer()

    def _flush_buffer(self) -> None:
        view = memoryview(self._buffer)
        self._unsynced += len(view)
        while view:
            view = view[os.write(self.fd, view):]
        self._buffer = bytearray()
        if self.sync and self._unsynced >= _SYNC_EVERY:
            os.fdatasync(self.fd)
            self._unsynced = 0

    def finish(self, aborted: list[AbortedTxn], mtime: float | None) -> None:
        """Write out, close the indexes as an inactive segment's, fsync."""
        self._flush_buffer()
        self.time_index.maybe_append(*self._max, skip_full_check=True)
        self.offset_index.trim()
        self.time_index.trim()
        if aborted:
            with open(self.paths[TXN_INDEX_SUFFIX], "wb") as f:
                f.write(b"".join(t.encode() for t in sorted(aborted, key=lambda t: t.last_offset)))
                if self.sync:
                    os.fsync(f.fileno())
        if self.sync:
            os.fsync(self.fd)
            self.offset_index.flush()
            self.time_index.flush()
        os.close(self.fd)
        self.closed = True
        if mtime is not None:
            os.utime(self.paths[LOG_SUFFIX], (mtime, mtime))

    def rename_to_swap(self) -> None:
        """``.cleaned`` -> ``.swap``, the log first (Kafka's changeFileSuffixes)."""
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            path = self.paths[suffix]
            if os.path.exists(path):
                os.rename(path, path[:-len(CLEANED_SUFFIX)] + SWAP_SUFFIX)
        if self.sync:
            cp.fsync_dir(self.dir)

    def discard(self) -> None:
        if not self.closed:
            self.offset_index._release()
            self.time_index._release()
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.closed = True
        for path in self.paths.values():
            remove_file(path)


def _empty_batch(header: BatchHeader) -> bytes:
    """Kafka's DefaultRecordBatch.writeEmptyHeader: the batch's offsets,
    producer fields and max timestamp, no records, no codec."""
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(out, 0, header.base_offset, HEADER_SIZE - LOG_OVERHEAD, header.partition_leader_epoch,
                     2, 0, header.attributes & _TXN_FILE_MASK, header.last_offset_delta, NO_TIMESTAMP,
                     header.max_timestamp, header.producer_id, header.producer_epoch, header.base_sequence, 0)
    set_crc(out)
    return bytes(out)


def _rebuild(header: BatchHeader, records: list, horizon: int | None) -> bytes:
    """The batch with only ``records``, everything else as it was (Kafka's
    buildRetainedRecordsInto); with a delete horizon as its base timestamp."""
    out = bytearray(build_batch(
        records, base_offset=header.base_offset, compression=header.compression,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence, transactional=header.is_transactional,
        control=header.is_control, partition_leader_epoch=header.partition_leader_epoch,
        timestamp_type=header.timestamp_type, base_timestamp=horizon, preserve_offsets=True,
        last_offset_delta=header.last_offset_delta))
    if horizon is not None:
        attributes = int.from_bytes(out[21:23], "big") | DELETE_HORIZON_BIT
        out[21:23] = attributes.to_bytes(2, "big")
        set_crc(out)
    return bytes(out)


def _delete_horizon(header: BatchHeader) -> int | None:
    return header.base_timestamp if header.attributes & DELETE_HORIZON_BIT else None


def _iter_segment_batches(seg: "LogSegment", position: int = 0) -> Iterable[tuple[int, BatchHeader, memoryview]]:
    """(position, header, whole batch) for the batches of a closed segment,
    read a chunk at a time."""
    f = seg.file   # held across the yields: eviction cannot close it under us
    fd = f.fileno()
    end = seg.size
    while position + HEADER_SIZE <= end:
        chunk = os.pread(fd, min(_READ_CHUNK, end - position), position)
        view = memoryview(chunk)
        off = 0
        while off + HEADER_SIZE <= len(chunk):
            header = BatchHeader(chunk, off)
            size = header.batch_length + LOG_OVERHEAD
            if header.batch_length < MIN_BATCH_LENGTH:
                raise CorruptRecordError(f"{seg.log_path}: invalid batch length at {position + off}")
            if off + size > len(chunk):
                break
            yield position + off, header, view[off:off + size]
            off += size
        if off == 0:
            # one batch larger than the chunk
            header = BatchHeader(chunk, 0)
            size = header.batch_length + LOG_OVERHEAD
            if position + size > end:
                return
            data = os.pread(fd, size, position)
            yield position, header, memoryview(data)
            off = size
        position += off


# ================================================================= the round


class CleaningRound:
    """One round of cleaning one log, run a slice at a time (run(deadline))."""

    def __init__(self, plog: "PartitionLog", to_clean: LogToClean, now_ms: int,
                 settings: CleanerSettings, sync: bool):
        self.plog = plog
        self.to_clean = to_clean
        self.now_ms = now_ms
        self.settings = settings
        self.sync = sync
        self.stats = CleanerStats()
        self.end_offset: int | None = None  # the next first dirty offset, once done
        self.done = False
        self._writer: _CleanedSegmentWriter | None = None
        self._gen = self._work()
        self._last_progress = time.monotonic()
        self._total = 0
        self._progress = 0

    @property
    def name(self) -> str:
        return f"{self.plog.topic}-{self.plog.partition}"

    def run(self, deadline: float) -> bool:
        """Work until ``deadline`` (time.monotonic()) or the end; True when done.
        Raises CleaningAborted when the log changed underneath."""
        try:
            while True:
                next(self._gen)
                if time.monotonic() >= deadline:
                    return False
        except StopIteration:
            self.done = True
            return True
        except BaseException:
            self.abort()
            raise

    def run_to_end(self) -> int:
        self.run(float("inf"))
        return self.end_offset

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.discard()
            self._writer = None
        self._gen.close()

    def _check(self, segments: Iterable["LogSegment"]) -> None:
        if self.plog.closed:
            raise CleaningAborted(f"{self.name} was closed")
        for seg in segments:
            if seg.deleted:
                raise CleaningAborted(f"segment {seg.base_offset} of {self.name} was deleted")

    def _report(self, done_bytes: int) -> None:
        self._progress += done_bytes
        now = time.monotonic()
        if now - self._last_progress >= _PROGRESS_EVERY_S and self._total:
            self._last_progress = now
            log.info("cleaning %s: %d%% (%d of %d MiB)", self.name, self._progress * 100 // self._total,
                     self._progress >> 20, self._total >> 20)

    # ------------------------------------------------------------ the work

    def _work(self) -> Generator[None, None, None]:
        plog = self.plog
        cfg = plog.config
        start, upper = self.to_clean.first_dirty_offset, self.to_clean.first_uncleanable_offset
        log.info("cleaning %s: dirty section [%d, %d)", self.name, start, upper)
        aborted = self._aborted_txns()
        dirty = _segments_overlapping(plog.segments, start, upper)
        self._total = sum(s.size for s in dirty) + sum(
            s.size for s in _segments_overlapping(plog.segments, -1, upper))
        offset_map = _OffsetMap(self.settings.max_map_keys)
        yield from self._build_offset_map(dirty, start, upper, offset_map, aborted)
        self.stats.map_done = time.monotonic()
        end_offset = offset_map.latest_offset + 1
        if end_offset <= start:
            raise ValueError(f"the offset map ({offset_map.capacity} keys, log.cleaner.dedupe.buffer.size) "
                             f"is too small to make progress in {self.name}")
        active = yield from self._active_producer_batches()
        txns = _TxnTracker(aborted)
        groups = _group_by_size(_segments_overlapping(plog.segments, -1, end_offset), cfg.segment_bytes,
                                cfg.segment_index_bytes, upper)
        for group in groups:
            self._check(group)
            yield from self._clean_group(group, offset_map, txns, active, upper)
            self.stats.groups += 1
            yield
        self.end_offset = end_offset
        self.stats.ended = time.monotonic()

    def _aborted_txns(self) -> list[AbortedTxn]:
        """Every aborted transaction the log's ``.txnindex`` files list."""
        out = []
        for seg in self.plog.segments:
            out.extend(read_entries(segment_path(self.plog.dir, seg.base_offset, TXN_INDEX_SUFFIX)))
        return out

    def _build_offset_map(self, dirty, start: int, upper: int, offset_map: _OffsetMap,
                          aborted) -> Generator[None, None, None]:
        """Kafka's buildOffsetMap: the latest offset of each key in [start, upper)."""
        txns = _TxnTracker(aborted)
        offsets = offset_map.offsets
        key_of = offset_map.key_of
        capacity = offset_map.capacity
        stats = self.stats
        for i, seg in enumerate(dirty):
            self._check([seg])
            next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else upper
            _, position = seg.offset_index.lookup(start)
            since_yield = records = 0
            for _pos, header, batch in _iter_segment_batches(seg, position):
                if header.base_offset >= upper:
                    break
                if header.attributes & CONTROL_BIT:
                    txns.on_control(header, _marker_type(batch, header))
                    stats.map_messages_read += 1
                elif txns.on_batch(header):
                    stats.map_messages_read += header.record_count
                else:
                    for record in iter_records(batch):
                        key = record.key
                        if key is not None and record.offset >= start:
                            mapped = key_of(key)
                            if len(offsets) >= capacity and mapped not in offsets:
                                # full: the map ends before this record
                                log.info("%s: offset map full (%d keys); this round ends at %d", self.name,
                                         len(offsets), offset_map.latest_offset + 1)
                                return
                            offsets[mapped] = record.offset
                        stats.map_messages_read += 1
                last = header.base_offset + header.last_offset_delta
                if last >= start:
                    offset_map.update_latest(last)
                stats.map_bytes_read += len(batch)
                since_yield += len(batch)
                records += header.record_count
                if since_yield >= _SLICE_BYTES or records >= _SLICE_RECORDS:
                    self._report(since_yield)
                    since_yield = records = 0
                    yield
                    self._check([seg])
            self._report(since_yield)
            offset_map.update_latest(next_start - 1)
            yield

    def _active_producer_batches(self) -> Generator[None, None, dict[int, _LastRecord]]:
        """Without producer state, each producer's last batch in the log."""
        active = _active_producers(self.plog)
        if active is not None:
            return active
        active = {}
        for seg in self.plog.segments:
            self._check([seg])
            for i, (_pos, header) in enumerate(seg.iter_batches()):
                if i and i % _SLICE_RECORDS == 0:
                    yield
                    self._check([seg])
                pid = header.producer_id
                if pid < 0:
                    continue
                last = header.base_offset + header.last_offset_delta
                prev = active.get(pid)
                if header.attributes & CONTROL_BIT:
                    data_offset = prev.last_data_offset if prev and prev.producer_epoch == header.producer_epoch else None
                    active[pid] = _LastRecord(data_offset, header.producer_epoch)
                else:
                    active[pid] = _LastRecord(last, header.producer_epoch)
            yield
        return active

    def _clean_group(self, group, offset_map: _OffsetMap, txns: _TxnTracker,
                     active: dict[int, _LastRecord], upper: int) -> Generator[None, None, None]:
        """Kafka's cleanSegments: the group into one ``.cleaned`` segment, swapped in."""
        plog = self.plog
        base = group[0].base_offset
        writer = self._writer = _CleanedSegmentWriter(plog.dir, base, plog.config, self.sync)
        txns.retained_aborted = []
        keep = _BatchFilter(offset_map, txns, active, upper, self.now_ms, plog.config.delete_retention_ms,
                            self.stats)
        stats = self.stats
        for seg in group:
            log.debug("cleaning segment %d of %s into %d", seg.base_offset, self.name, base)
            work_bytes = work_records = 0
            for _pos, header, batch in _iter_segment_batches(seg):
                size = len(batch)
                stats.bytes_read += size
                out = keep.filter(header, batch)
                if out is not None:
                    writer.append(*out)
                    stats.bytes_written += len(out[0])
                work_bytes += size
                work_records += header.record_count
                if work_bytes >= _SLICE_BYTES or work_records >= _SLICE_RECORDS:
                    self._report(work_bytes)
                    work_bytes = work_records = 0
                    yield
                    self._check(group)
            self._report(work_bytes)
            yield
            self._check(group)
        mtime = None
        try:
            mtime = os.stat(group[-1].log_path).st_mtime
        except OSError:
            pass
        writer.finish(txns.retained_aborted, mtime)
        writer.rename_to_swap()
        self._writer = None
        plog.replace_segments(base, group, sync=self.sync)


class _BatchFilter:
    """Kafka's cleanInto filter (checkBatchRetention + shouldRetainRecord) over
    one batch at a time."""

    def __init__(self, offset_map: _OffsetMap, txns: _TxnTracker, active: dict[int, _LastRecord],
                 upper: int, now_ms: int, delete_retention_ms: int, stats: CleanerStats):
        self.offsets = offset_map.offsets
        self.key_of = offset_map.key_of
        self.latest_offset = offset_map.latest_offset
        self.txns = txns
        self.active = active
        self.upper = upper
        self.now = now_ms
        self.retention = delete_retention_ms
        self.stats = stats

    def filter(self, header: BatchHeader, batch) -> tuple[bytes, int, int] | None:
        """(batch to write, its last offset, its max timestamp), or None to drop it."""
        now = self.now
        stats = self.stats
        is_control = bool(header.attributes & CONTROL_BIT)
        last = header.base_offset + header.last_offset_delta
        horizon = _delete_horizon(header)
        # checkBatchRetention
        if is_control:
            can_discard = self.txns.on_control(header, _marker_type(batch, header))
            discard_records = can_discard and horizon is not None and horizon <= now
        else:
            can_discard = self.txns.on_batch(header)
            discard_records = can_discard
        last_of_producer = False
        if header.producer_id >= 0:
            lr = self.active.get(header.producer_id)
            if lr is not None:
                if lr.last_data_offset is not None:
                    last_of_producer = last == lr.last_data_offset
                else:
                    last_of_producer = is_control and header.producer_epoch == lr.producer_epoch
        retain_empty = last_of_producer or last + 1 == self.upper
        if discard_records and not retain_empty:
            stats.messages_read += header.record_count
            return None
        # shouldRetainRecord, record by record
        retained = []
        all_kept = True
        tombstones = False
        offsets = self.offsets
        key_of = self.key_of
        latest_offset = self.latest_offset
        for record in iter_records(batch):
            stats.messages_read += 1
            if discard_records:
                keep = False
            elif is_control or record.offset > latest_offset:
                keep = True
            elif record.key is None:
                stats.invalid_messages += 1
                keep = False
            else:
                keep = record.offset >= offsets.get(key_of(record.key), -1) and (
                    record.value is not None or horizon is None or now < horizon)
            if keep:
                retained.append(record)
                if record.value is None:
                    tombstones = True
            else:
                all_kept = False
        if retained:
            stats.messages_written += len(retained)
            need_horizon = (tombstones or (can_discard and is_control)) and horizon is None
            if all_kept and not need_horizon:
                return batch, last, header.max_timestamp
            out = _rebuild(header, retained, now + self.retention if need_horizon else horizon)
            return out, last, BatchHeader(out).max_timestamp
        if retain_empty:
            return _empty_batch(header), last, header.max_timestamp
        return None


def _marker_type(batch, header: BatchHeader) -> int | None:
    """Type of a control batch's record; None when the batch is empty."""
    if header.record_count == 0:
        return None
    for record in iter_records(batch):
        try:
            return control_record_type(record)
        except CorruptRecordError:
            return None
    return None


def _group_by_size(segments: list["LogSegment"], max_size: int, max_index_size: int,
                   first_uncleanable: int) -> list[list["LogSegment"]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose logs and indexes
    together stay within the limits and whose offsets fit one segment."""
    groups = []
    segs = list(segments)
    while segs:
        head = segs.pop(0)
        group = [head]
        log_size = head.size
        index_size = head.offset_index.size_bytes
        time_size = head.time_index.size_bytes
        while segs:
            nxt = segs[0]
            last_estimate = segs[1].base_offset - 1 if len(segs) > 1 else first_uncleanable - 1
            if not (log_size + nxt.size <= max_size
                    and index_size + nxt.offset_index.size_bytes <= max_index_size
                    and time_size + nxt.time_index.size_bytes <= max_index_size
                    and (nxt.size == 0 or last_estimate - group[0].base_offset <= INT_MAX)):
                break
            group.append(segs.pop(0))
            log_size += nxt.size
            index_size += nxt.offset_index.size_bytes
            time_size += nxt.time_index.size_bytes
        groups.append(group)
    return groups


# ================================================================= the cleaner


def clean_log(plog: "PartitionLog", first_dirty_offset: int | None = None, *, now_ms: int | None = None,
              stable_offset: int | None = None, settings: CleanerSettings | None = None,
              sync: bool = False, force: bool = True) -> int | None:
    """Run one whole cleaning round on ``plog`` now (tools, tests). Returns
    the next first dirty offset, or None when there was nothing to clean (or
    the dirty ratio was too low and not ``force``)."""
    now_ms = wall_clock_ms() if now_ms is None else now_ms
    settings = settings or CleanerSettings()
    to_clean = log_to_clean(plog, first_dirty_offset, now_ms, stable_offset)
    if to_clean.cleanable_bytes == 0 or not (force or to_clean.should_clean(plog.config.min_cleanable_dirty_ratio)):
        return None
    return CleaningRound(plog, to_clean, now_ms, settings, sync).run_to_end()

"""One log segment: ``<base>.log`` plus its ``.index`` and ``.timeindex``.

The ``.log`` is opened when first used and may be closed again while the
segment idles (open_files.py keeps the process's open files bounded); the
indexes are memory maps without descriptors (mapping.py).

Mirrors Kafka's LogSegment: appends go straight to the file (page cache) with
one write each; an offset-index entry (and a time-index entry when the max
timestamp grew) is added once more than ``index.interval.bytes`` were
appended since the previous one; reads translate an offset to a file
position through the index and a short walk over batch headers.
"""
from __future__ import annotations

import bisect
import logging
import os
import struct
from array import array
from collections.abc import Callable, Iterator

from kproto.crc import crc32c
from kproto.records import (
    HEADER_SIZE, LOG_OVERHEAD, MIN_BATCH_LENGTH, BatchHeader, iter_records, validate_batch,
)

from .errors import KafkaStorageError
from .files import (
    DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, segment_path,
)
from .index import NO_TIMESTAMP, OffsetIndex, TimeIndex
from .logconfig import LogConfig
from .open_files import FILES, SegmentFile

log = logging.getLogger(__name__)

_INT32 = struct.Struct(">i")
# header walks read this much at a time: a few dozen typical batches
_WALK_CHUNK = 16 * 1024
# recovery reads the log in large chunks; CRC-32C runs at memory speed
_RECOVERY_CHUNK = 8 * 1024 * 1024
_CRC_START = 21
# appends the active segment remembers (first offset -> position) for walks at the tail: a
# follower's or a consumer's fetch wants one of the last few appends, which the sparse offset
# index (an entry per index.interval.bytes, found by a binary search) only brackets. Between
# _TAIL_HINTS and twice as many, in arrays: ~0.6 KiB per partition at most
_TAIL_HINTS = 16


class LogSegment:
    """A segment of one partition's log. Not thread-safe (the server is one trio thread)."""

    def __init__(self, dir: str, base_offset: int, config: LogConfig, now_ms: int, create: bool = False):
        self.dir = dir
        self.base_offset = base_offset
        self.config = config
        self.log_path = segment_path(dir, base_offset, LOG_SUFFIX)
        self._file: SegmentFile | None = None   # None: not open now (open_files.py)
        self._closed = False
        if create:
            self._file = FILES.open(self, self.log_path, create=True)
            self.size = 0
        else:
            try:
                self.size = os.stat(self.log_path).st_size
            except FileNotFoundError:   # (an index without its log: start the log empty)
                self._file = FILES.open(self, self.log_path, create=True)
                self.size = 0
        self.offset_index = OffsetIndex(segment_path(dir, base_offset, INDEX_SUFFIX), base_offset)
        self.time_index = TimeIndex(segment_path(dir, base_offset, TIME_INDEX_SUFFIX), base_offset)
        self.created_ms = now_ms
        self.roll_jitter_ms = config.random_segment_jitter()
        self.deleted = False
        self._bytes_since_index = 0
        self._max: tuple[int, int] | None = None  # (timestamp, offset); None: read the time index
        self._rolling_ts: int | None = None  # first batch's max timestamp, loaded lazily
        # the last appends' first offsets and their positions, ascending (see _walk_start); only
        # appends add to them, so whatever else changes the bytes (truncation, recovery) clears them
        self._hint_offsets = array("q")
        self._hint_positions = array("q")

    # ------------------------------------------------------------ opening

    @classmethod
    def create(cls, dir: str, base_offset: int, config: LogConfig, now_ms: int,
               fresh: bool = False) -> "LogSegment":
        """A new, empty, active segment (stale files of the same name are replaced; ``fresh``:
        the directory was just made, so there are none to look for)."""
        for suffix in () if fresh else (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            path = segment_path(dir, base_offset, suffix)
            if os.path.exists(path):
                log.warning("newly rolled segment file %s already exists; deleting it", path)
                os.unlink(path)
        seg = cls(dir, base_offset, config, now_ms, create=True)
        seg.activate()
        return seg

    @classmethod
    def load(cls, dir: str, base_offset: int, config: LogConfig, now_ms: int) -> "LogSegment":
        """An existing segment; its indexes stay as found until activated or recovered."""
        return cls(dir, base_offset, config, now_ms)

    @property
    def file(self) -> SegmentFile:
        """The open ``.log``, opened again if it was let go while idle. Hold the
        object (not its number) across an await: it stays open while held."""
        f = self._file
        if f is None:
            if self._closed:
                return SegmentFile.closed_file(self.log_path)
            f = self._file = FILES.open(self, self.log_path)
        elif not self._closed:
            FILES.touch(self)
        return f

    @property
    def fd(self) -> int:
        return self.file.fileno()

    def drop_file(self) -> None:
        """Let go of the open file (open_files.py, making room); it closes once
        no fetch response holds it, and is opened again on next use."""
        self._file = None

    def close_file(self) -> None:
        """Close the ``.log`` now; the segment is not used again."""
        self._closed = True
        FILES.forget(self)
        if self._file is not None:
            self._file.close()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, dir={self.dir!r})"

    # ------------------------------------------------------------ active state

    def activate(self) -> None:
        """Preallocate the indexes for appends (``segment.index.bytes``)."""
        self.offset_index.activate(self.config.segment_index_bytes)
        self.time_index.activate(self.config.segment_index_bytes)

    def on_become_inactive(self) -> None:
        """A newer segment took over: record the final max timestamp, trim the indexes."""
        self.forget_appends()
        self.time_index.maybe_append(*self.max_timestamp_and_offset, skip_full_check=True)
        self.offset_index.trim()
        self.time_index.trim()

    # ------------------------------------------------------------ timestamps

    @property
    def max_timestamp_and_offset(self) -> tuple[int, int]:
        if self._max is None:
            self._max = self.time_index.last_entry
        return self._max

    @property
    def max_timestamp(self) -> int:
        return self.max_timestamp_and_offset[0]

    def largest_timestamp(self) -> int:
        """What time retention compares: the max timestamp, else the file's mtime."""
        ts = self.max_timestamp
        if ts >= 0:
            return ts
        return int(os.stat(self.log_path).st_mtime * 1000)

    def _first_batch_timestamp(self) -> int | None:
        if self._rolling_ts is None and self.size > 0:
            header = self.read_header(0)
            if header is not None:
                self._rolling_ts = header.max_timestamp
        return self._rolling_ts

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        ts = self._first_batch_timestamp()
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now_ms - self.created_ms

    def should_roll(self, messages_size: int, max_timestamp: int, max_offset: int, now_ms: int) -> bool:
        config = self.config
        reached_ms = self.time_waited_for_roll(now_ms, max_timestamp) > config.segment_ms - self.roll_jitter_ms
        size = self.size
        return (size > config.segment_bytes - messages_size
                or (size > 0 and reached_ms)
                or self.offset_index.is_full() or self.time_index.is_full()
                or not self.offset_index.can_append_offset(max_offset))

    # --------------------------------------------------------------- append

    def append(self, data, largest_offset: int, largest_timestamp: int,
               offset_of_max_timestamp: int, first_offset: int | None = None) -> None:
        """Write ``data`` (whole batches, offsets assigned) at the end in one write;
        ``first_offset``, the first batch's base offset, lets reads start there."""
        n = len(data)
        if n == 0:
            return
        position = self.size
        if position == 0:
            self._rolling_ts = largest_timestamp
        if not self.offset_index.can_append_offset(largest_offset):
            raise KafkaStorageError(f"offset {largest_offset} overflows segment {self.base_offset}")
        self._write_all(data, position)
        self.size = position + n
        if first_offset is not None:
            offsets = self._hint_offsets
            if len(offsets) >= 2 * _TAIL_HINTS:   # (amortized: one cut per _TAIL_HINTS appends)
                del offsets[:_TAIL_HINTS], self._hint_positions[:_TAIL_HINTS]
            offsets.append(first_offset)
            self._hint_positions.append(position)
        if largest_timestamp > self.max_timestamp:
            self._max = (largest_timestamp, offset_of_max_timestamp)
        # (an index can only be full here in a segment too empty to roll)
        if self._bytes_since_index > self.config.index_interval_bytes and not self.offset_index.is_full():
            self.offset_index.append(largest_offset, position)
            if not self.time_index.is_full():
                self.time_index.maybe_append(*self._max)
            self._bytes_since_index = 0
        self._bytes_since_index += n

    def _write_all(self, data, position: int) -> None:
        view = memoryview(data).cast("B")
        f = self.file
        fd = f.fileno()
        try:
            written = os.write(fd, view)
            while written < len(view):  # short writes only happen on trouble (disk full)
                written += os.write(fd, view[written:])
        except OSError as exc:
            try:
                os.ftruncate(fd, position)
            except OSError:
                pass
            raise KafkaStorageError(f"write to {self.log_path} failed: {exc}", self.log_path) from exc

    # ------------------------------------------------------------- reading

    def read_header(self, position: int) -> BatchHeader | None:
        data = os.pread(self.fd, HEADER_SIZE, position)
        if len(data) < HEADER_SIZE:
            return None
        return BatchHeader(data)

    def read_bytes(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    def iter_batches(self, position: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each whole batch in [position, end), by header walk."""
        if end is None:
            end = self.size
        f = self.file   # held across the yields: eviction cannot close it under us
        fd = f.fileno()
        buf = b""
        buf_start = position
        while position + HEADER_SIZE <= end:
            off = position - buf_start
            if off + HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(_WALK_CHUNK, end - position), position)
                buf_start, off = position, 0
                if len(buf) < HEADER_SIZE:
                    return
            header = BatchHeader(buf, off)
            size = header.batch_length + LOG_OVERHEAD
            if header.batch_length < MIN_BATCH_LENGTH or position + size > end:
                return
            yield position, header
            position += size

    def _walk_start(self, offset: int) -> int:
        """A batch start at or before the first batch holding an offset >= ``offset``:
        the last append starting at or below ``offset`` when one is remembered (no
        index search, a walk of a batch or two), else the offset index's entry."""
        offsets = self._hint_offsets
        if offsets and offset >= offsets[0]:
            i = bisect.bisect_right(offsets, offset) - 1
            position = self._hint_positions[i]
            if position < self.size:   # (bound check: a stale hint would skip batches)
                return position
        return self.offset_index.lookup(offset)[1]

    def forget_appends(self) -> None:
        """The bytes changed other than by an append (the remembered positions may be
        wrong), or the segment stopped being active (they are memory no longer needed)."""
        self._hint_offsets = array("q")
        self._hint_positions = array("q")

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset is >= ``offset``."""
        for position, header in self.iter_batches(max(self._walk_start(offset), start_position)):
            if header.base_offset + header.last_offset_delta >= offset:
                return position, header
        return None

    def position_of_bound(self, bound_offset: int, start_position: int = 0) -> int:
        """Position of the first batch with base offset >= ``bound_offset`` (else the size)."""
        for position, header in self.iter_batches(max(self._walk_start(bound_offset), start_position)):
            if header.base_offset >= bound_offset:
                return position
        return self.size

    def last_boundary_before(self, limit: int, start_position: int) -> int:
        """End of the last whole batch that ends at or before ``limit``, walking from
        ``start_position`` (a batch start) or a later indexed batch start."""
        _, index_position = self.offset_index.lookup_position(limit)
        position = max(index_position, start_position)
        for pos, header in self.iter_batches(position):
            end = pos + header.batch_length + LOG_OVERHEAD
            if end > limit:
                return pos
            position = end
        return position

    def read_next_offset(self) -> int:
        """The offset after the segment's last batch (its base offset when empty)."""
        start = 0
        if self.offset_index.entries:
            start = self.offset_index.entry(self.offset_index.entries - 1)[1]
        next_offset = self.base_offset
        for _, header in self.iter_batches(start):
            next_offset = header.base_offset + header.last_offset_delta + 1
        return next_offset

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int):
        """(offset, timestamp, leader epoch or None) of the first record with
        timestamp >= ``timestamp`` and offset >= ``starting_offset``."""
        _, indexed_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(indexed_offset, starting_offset))
        for pos, header in self.iter_batches(position):
            if header.max_timestamp >= timestamp:
                batch = self.read_bytes(pos, header.batch_length + LOG_OVERHEAD)
                for record in iter_records(batch):
                    if record.timestamp >= timestamp and record.offset >= starting_offset:
                        epoch = header.partition_leader_epoch
                        return record.offset, record.timestamp, (epoch if epoch >= 0 else None)
        return None

    def offset_of_max_timestamp(self):
        """(offset, timestamp, leader epoch or None) of the first record carrying
        the segment's max timestamp; None if the segment has no timestamps."""
        ts, offset = self.max_timestamp_and_offset
        _, position = self.offset_index.lookup(offset)
        for pos, header in self.iter_batches(position):
            if header.max_timestamp == ts:
                batch = self.read_bytes(pos, header.batch_length + LOG_OVERHEAD)
                for record in iter_records(batch):
                    if record.timestamp == ts:
                        epoch = header.partition_leader_epoch
                        return record.offset, ts, (epoch if epoch >= 0 else None)
        return None

    # ------------------------------------------------------- consistency

    def tail_is_sane(self) -> bool:
        """Cheap check after a clean shutdown: the batches after the last index
        entry line up exactly with the end of the file and the last one's CRC holds."""
        start = 0
        if self.offset_index.entries:
            _, start = self.offset_index.entry(self.offset_index.entries - 1)
            if start > self.size:
                return False
        end = start
        last = None
        expected = self.base_offset
        for pos, header in self.iter_batches(start):
            if header.magic != 2 or header.base_offset < expected or header.last_offset_delta < 0:
                return False
            expected = header.base_offset + header.last_offset_delta + 1
            end = pos + header.batch_length + LOG_OVERHEAD
            last = (pos, header)
        if end != self.size:
            return False
        if last is not None:
            pos, header = last
            data = self.read_bytes(pos, header.batch_length + LOG_OVERHEAD)
            if crc32c(memoryview(data)[_CRC_START:]) != header.crc:
                return False
        return True

    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None,
                progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the indexes from the log, validating every batch (length,
        magic, CRC, increasing offsets); cut the file at the first bad or
        partial batch. Returns the number of bytes cut. ``on_batch`` sees each
        valid batch's header (leader epochs); ``progress`` the bytes scanned."""
        self.forget_appends()
        self.offset_index.reset()
        self.time_index.reset()
        self.activate()
        f = self.file   # held while the callbacks run
        fd = f.fileno()
        file_size = os.fstat(fd).st_size
        interval = self.config.index_interval_bytes
        valid = 0
        last_index_entry = 0
        max_ts, max_ts_offset = NO_TIMESTAMP, self.base_offset
        expected = self.base_offset
        buf = b""
        buf_start = 0
        corrupt = None
        while valid < file_size:
            off = valid - buf_start
            if off + LOG_OVERHEAD > len(buf):
                buf = os.pread(fd, min(_RECOVERY_CHUNK, file_size - valid), valid)
                buf_start, off = valid, 0
                if progress is not None:
                    progress(valid)
                if len(buf) < LOG_OVERHEAD:
                    corrupt = "partial batch header"
                    break
            (batch_length,) = _INT32.unpack_from(buf, off + 8)
            size = batch_length + LOG_OVERHEAD
            if batch_length >= MIN_BATCH_LENGTH and off + size > len(buf) and valid + size <= file_size:
                # the batch runs past the chunk: read from its start
                buf = os.pread(fd, max(size, min(_RECOVERY_CHUNK, file_size - valid)), valid)
                buf_start, off = valid, 0
            try:
                header = validate_batch(buf, off, len(buf))
            except ValueError as exc:
                corrupt = str(exc)
                break
            last_offset = header.base_offset + header.last_offset_delta
            if (header.base_offset < expected or header.last_offset_delta < 0
                    or not self.offset_index.can_append_offset(last_offset)):
                corrupt = f"batch at {valid} has offsets {header.base_offset}..{last_offset}, expected >= {expected}"
                break
            expected = last_offset + 1
            if header.max_timestamp > max_ts:
                max_ts, max_ts_offset = header.max_timestamp, last_offset
            if valid - last_index_entry > interval:
                self.offset_index.append(last_offset, valid)
                self.time_index.maybe_append(max_ts, max_ts_offset)
                last_index_entry = valid
            valid += size
            if on_batch is not None:
                on_batch(header)
        if progress is not None:
            progress(file_size)
        truncated = file_size - valid
        if truncated:
            log.warning("segment %s: invalid data at byte %d (%s); truncating %d bytes",
                        self.log_path, valid, corrupt, truncated)
            os.ftruncate(fd, valid)
        self.size = valid
        self._max = (max_ts, max_ts_offset)
        self._rolling_ts = None
        self._bytes_since_index = 0
        self.offset_index.trim()
        # a normally closed segment ends with its largest timestamp: do the same
        self.time_index.maybe_append(max_ts, max_ts_offset, skip_full_check=True)
        self.time_index.trim()
        return truncated

    def truncate_to(self, offset: int, now_ms: int) -> int:
        """Drop the batches at or after the one holding ``offset``; the segment
        becomes the active one. Returns the bytes removed."""
        found = self.translate_offset(offset)
        self.forget_appends()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.activate()
        removed = 0
        if found is not None:
            position = found[0]
            removed = self.size - position
            os.ftruncate(self.fd, position)
            self.size = position
        if self.size == 0:
            self.created_ms = now_ms
            self._rolling_ts = None
        self._bytes_since_index = 0
        self._max = self._read_largest_timestamp()
        return removed

    def _read_largest_timestamp(self) -> tuple[int, int]:
        last = self.time_index.last_entry
        _, position = self.offset_index.lookup(last[1])
        best = last
        for _, header in self.iter_batches(position):
            if header.max_timestamp > best[0]:
                best = (header.max_timestamp, header.base_offset + header.last_offset_delta)
        return best

    # ----------------------------------------------------------- lifecycle

    def flush(self) -> None:
        os.fsync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()

    def close(self) -> None:
        """Closing entry in the time index (active segment), trim, close the file."""
        if self.time_index.is_active:
            self.time_index.maybe_append(*self.max_timestamp_and_offset, skip_full_check=True)
        self.offset_index.close()
        self.time_index.close()
        self.close_file()

    def indexes_missing(self) -> bool:
        return not (os.path.exists(self.offset_index.path) and os.path.exists(self.time_index.path))

    def mark_deleted(self) -> None:
        """Kafka's first deletion stage: rename every file to ``*.deleted``.

        The ``.log`` stays open so fetches already holding its descriptor
        finish; delete_files() removes everything later."""
        self.offset_index.trim()
        self.time_index.trim()
        for index in (self.offset_index, self.time_index):
            if os.path.exists(index.path):
                index.rename(index.path + DELETED_SUFFIX)
            else:
                index.path += DELETED_SUFFIX  # never unlink the plain name later
        txn = segment_path(self.dir, self.base_offset, TXN_INDEX_SUFFIX)
        if os.path.exists(txn):
            os.rename(txn, txn + DELETED_SUFFIX)
        os.rename(self.log_path, self.log_path + DELETED_SUFFIX)
        self.log_path += DELETED_SUFFIX
        self.deleted = True

    def delete_files(self) -> None:
        """Close and remove the segment's files (renamed or not)."""
        self.close_file()
        self.offset_index.delete()
        self.time_index.delete()
        txn = segment_path(self.dir, self.base_offset, TXN_INDEX_SUFFIX)
        # once renamed, the plain name may already belong to a segment that
        # replaced this one at the same base offset (the log cleaner's)
        paths = (self.log_path, txn + DELETED_SUFFIX) if self.deleted else (self.log_path, txn)
        for path in paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

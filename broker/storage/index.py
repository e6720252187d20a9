"""The sparse per-segment indexes: ``.index`` (offset -> file position) and
``.timeindex`` (timestamp -> offset), in Kafka's exact file formats.

An index of the active segment is preallocated to ``segment.index.bytes``
(rounded down to whole entries) and memory-mapped for appends; when the
segment stops being active the file is trimmed to its real entries. Closed
indexes are mapped read-only on first lookup. No index holds a file
descriptor (mapping.py), as Kafka's do not. Entries are big-endian;
offsets are stored relative to the segment's base offset.
"""
from __future__ import annotations

import os
import struct

from .mapping import Mapping

NO_TIMESTAMP = -1


class CorruptIndexError(ValueError):
    """An index file whose contents cannot be right."""


class _Index:
    ENTRY: struct.Struct
    entry_size: int

    def __init__(self, path: str, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self._mm: Mapping | None = None  # active: the preallocated, writable mapping
        # closed: a read-only mapping made on first lookup (pages load on demand)
        self._ro: Mapping | None = None
        self._max_entries = 0
        try:
            size = os.path.getsize(path)
        except FileNotFoundError:
            size = 0
        # Kafka counts a loaded index's entries by its file length
        self._entries = size // self.entry_size

    # ---------------------------------------------------------- lifecycle

    @property
    def is_active(self) -> bool:
        return self._mm is not None or self._max_entries > 0

    def activate(self, max_index_size: int) -> None:
        """Preallocate to ``max_index_size`` (whole entries) and map it for appends."""
        self._release()
        length = max(max_index_size - max_index_size % self.entry_size,
                     self._entries * self.entry_size)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, length)
        finally:
            os.close(fd)
        self._max_entries = length // self.entry_size
        self._mm = Mapping(self.path, length, writable=True) if length else None

    def trim(self) -> None:
        """Shrink the file to its real entries (Kafka: trimToValidSize)."""
        self._release()
        os.truncate(self.path, self._entries * self.entry_size)
        self._max_entries = 0

    close = trim

    def _release(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if self._ro is not None:
            self._ro.close()
        self._ro = None

    unload = _release  # a closed index maps itself again on the next lookup

    def flush(self) -> None:
        if self._mm is not None:
            self._mm.flush()
        elif os.path.exists(self.path):
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def rename(self, new_path: str) -> None:
        os.rename(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self._release()
        self._max_entries = 0
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def reset(self) -> None:
        """Drop every entry (recovery rebuilds the index from the log)."""
        self._entries = 0
        if self._mm is None:
            self._release()
            if os.path.exists(self.path):
                os.truncate(self.path, 0)

    # ------------------------------------------------------------ reading

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._max_entries

    def is_full(self) -> bool:
        return self._entries >= self._max_entries

    @property
    def size_bytes(self) -> int:
        return self._entries * self.entry_size

    def _view(self):
        if self._mm is not None:
            return self._mm.view
        if self._ro is None:
            length = self._entries * self.entry_size
            if length == 0:
                return b""
            self._ro = Mapping(self.path, length, writable=False)
        return self._ro.view

    def _floor_slot(self, target: int, field: int) -> int:
        """Largest slot whose field ``field`` is <= target; -1 if none."""
        if self._entries == 0:
            return -1
        view = self._view()
        unpack = self.ENTRY.unpack_from
        size = self.entry_size
        lo, hi = 0, self._entries - 1
        if unpack(view, 0)[field] > target:
            return -1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if unpack(view, mid * size)[field] <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def raw_entry(self, slot: int) -> tuple:
        mapping = self._mm if self._mm is not None else self._ro
        if mapping is not None:
            return self.ENTRY.unpack_from(mapping.view, slot * self.entry_size)
        # one entry of an unmapped index: no need to map it
        fd = os.open(self.path, os.O_RDONLY)
        try:
            data = os.pread(fd, self.entry_size, slot * self.entry_size)
        finally:
            os.close(fd)
        if len(data) < self.entry_size:
            raise CorruptIndexError(f"{self.path}: entry {slot} is past the end")
        return self.ENTRY.unpack(data)

    def _write(self, slot: int, *values) -> None:
        self.ENTRY.pack_into(self._mm.view, slot * self.entry_size, *values)

    def _relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= 0x7FFFFFFF:
            raise CorruptIndexError(f"offset {offset} does not fit an index with base {self.base_offset}")
        return rel

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= 0x7FFFFFFF

    def _truncate_entries(self, entries: int) -> None:
        self._entries = entries
        if self._mm is None:
            self._release()
            os.truncate(self.path, entries * self.entry_size)


class OffsetIndex(_Index):
    """``.index``: (int32 relative offset, int32 position) per entry."""

    ENTRY = struct.Struct(">ii")
    entry_size = 8

    def __init__(self, path: str, base_offset: int):
        super().__init__(path, base_offset)
        self._last_offset = self._read_last_offset()

    def _read_last_offset(self) -> int:
        if self._entries == 0:
            return self.base_offset
        return self.base_offset + self.raw_entry(self._entries - 1)[0]

    @property
    def last_offset(self) -> int:
        return self._last_offset

    def entry(self, slot: int) -> tuple[int, int]:
        rel, pos = self.raw_entry(slot)
        return self.base_offset + rel, pos

    def append(self, offset: int, position: int) -> None:
        if self._entries >= self._max_entries:
            raise CorruptIndexError(f"append to a full index ({self._entries} entries): {self.path}")
        if self._entries and offset <= self._last_offset:
            raise CorruptIndexError(
                f"offset {offset} is not above the last indexed offset {self._last_offset}: {self.path}")
        self._write(self._entries, self._relative(offset), position)
        self._entries += 1
        self._last_offset = offset

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry with offset <= target; (base, 0) if none."""
        slot = self._floor_slot(target_offset - self.base_offset, 0)
        if slot < 0:
            return self.base_offset, 0
        return self.entry(slot)

    def lookup_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before ``position``; (base, 0) if none."""
        slot = self._floor_slot(position, 1)
        if slot < 0:
            return self.base_offset, 0
        return self.entry(slot)

    def truncate_to(self, offset: int) -> None:
        """Remove the entries for offsets >= ``offset``."""
        slot = self._floor_slot(offset - self.base_offset, 0)
        if slot < 0:
            keep = 0
        elif self.raw_entry(slot)[0] == offset - self.base_offset:
            keep = slot
        else:
            keep = slot + 1
        self._truncate_entries(keep)
        self._last_offset = self._read_last_offset()

    def reset(self) -> None:
        super().reset()
        self._last_offset = self.base_offset

    def sanity_check(self, file_size: int) -> None:
        if self._entries and self._last_offset < self.base_offset:
            raise CorruptIndexError(f"{self.path}: last offset {self._last_offset} below base")
        if file_size % self.entry_size:
            raise CorruptIndexError(f"{self.path}: size {file_size} is not a multiple of 8")


class TimeIndex(_Index):
    """``.timeindex``: (int64 timestamp, int32 relative offset) per entry,
    added only when the segment's max timestamp grows."""

    ENTRY = struct.Struct(">qi")
    entry_size = 12

    def __init__(self, path: str, base_offset: int):
        super().__init__(path, base_offset)
        self._last = self._read_last_entry()

    def _read_last_entry(self) -> tuple[int, int]:
        if self._entries == 0:
            return NO_TIMESTAMP, self.base_offset
        ts, rel = self.raw_entry(self._entries - 1)
        return ts, self.base_offset + rel

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry; (-1, base) when empty."""
        return self._last

    def entry(self, slot: int) -> tuple[int, int]:
        ts, rel = self.raw_entry(slot)
        return ts, self.base_offset + rel

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        last_ts, last_offset = self._last
        if self._entries and offset < last_offset:
            raise CorruptIndexError(f"offset {offset} below the last time index offset {last_offset}")
        if self._entries and timestamp < last_ts:
            raise CorruptIndexError(f"timestamp {timestamp} below the last time index timestamp {last_ts}")
        if timestamp > last_ts:
            if self._entries >= self._max_entries:
                if not skip_full_check:
                    raise CorruptIndexError(f"append to a full time index: {self.path}")
                return  # no room left for the closing entry
            self._write(self._entries, timestamp, self._relative(offset))
            self._entries += 1
            self._last = (timestamp, offset)

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp <= target; (-1, base) if none."""
        slot = self._floor_slot(target_timestamp, 0)
        if slot < 0:
            return NO_TIMESTAMP, self.base_offset
        return self.entry(slot)

    def truncate_to(self, offset: int) -> None:
        """Remove the entries for offsets >= ``offset``."""
        # offsets grow with timestamps, so the entries are sorted by offset too
        slot = self._floor_slot(offset - self.base_offset, 1)
        if slot < 0:
            keep = 0
        elif self.raw_entry(slot)[1] == offset - self.base_offset:
            keep = slot
        else:
            keep = slot + 1
        self._truncate_entries(keep)
        self._last = self._read_last_entry()

    def reset(self) -> None:
        super().reset()
        self._last = (NO_TIMESTAMP, self.base_offset)

    def sanity_check(self, file_size: int) -> None:
        if file_size % self.entry_size:
            raise CorruptIndexError(f"{self.path}: size {file_size} is not a multiple of 12")
        if self._entries and self._last[1] < self.base_offset:
            raise CorruptIndexError(f"{self.path}: last offset below base")

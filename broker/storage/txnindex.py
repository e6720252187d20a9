"""The aborted-transaction index: ``<base offset>.txnindex`` next to a
segment, in Kafka's TransactionIndex layout.

Each entry is 34 big-endian bytes: int16 version (0), int64 producer id,
int64 first offset of the aborted transaction, int64 last offset (its ABORT
marker) and int64 last stable offset right after the abort. An entry lives
in the index of the segment that holds the ABORT marker, so a fetch from
offset F finds every aborted transaction that ends at or after F by reading
the indexes of the segment holding F and those after it. The file exists
only once a segment has an entry, as in Kafka.

Each index keeps its entries in memory as the file's own bytes, and the file
is only appended to (and rewritten on truncation). Bytes, not an object per
entry: a log with many aborted transactions held about four Python blocks per
abort for as long as its segment lived (issue 26: the soak's steady rise of
live blocks), where Kafka keeps nothing on its heap; 34 bytes an entry now.
"""
from __future__ import annotations

import bisect
import logging
import os
import struct
from typing import NamedTuple

from .files import TXN_INDEX_SUFFIX, offset_from_name, segment_path

log = logging.getLogger(__name__)

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ENTRY.pack(VERSION, self.producer_id, self.first_offset, self.last_offset,
                          self.last_stable_offset)


def read_entries(path: str) -> list[AbortedTxn]:
    """The entries of one index file ([] when it does not exist). A torn
    last entry or one of an unknown version ends the list."""
    return list(_decode(_read_whole_entries(path)))


def _read_whole_entries(path: str) -> bytes:
    """The file's bytes up to its last whole entry of a known version."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return b""
    whole = len(data) - len(data) % ENTRY_SIZE
    if whole != len(data):
        log.warning("%s: %d trailing bytes are not a whole entry; ignored", path, len(data) - whole)
    for pos in range(0, whole, ENTRY_SIZE):
        version = _VERSION.unpack_from(data, pos)[0]
        if version != VERSION:
            log.warning("%s: entry of unknown version %d at %d; the rest is ignored", path, version, pos)
            return data[:pos]
    return data[:whole]


_VERSION = struct.Struct(">h")
_LAST = struct.Struct(">q")
_LAST_AT = 18            # version (2) + producer id (8) + first offset (8)


def _decode(data) -> "list[AbortedTxn]":
    return [AbortedTxn(pid, first, last, lso) for _, pid, first, last, lso in ENTRY.iter_unpack(data)]


class TransactionIndex:
    """One segment's `.txnindex`."""

    def __init__(self, dir: str, base_offset: int):
        self.base_offset = base_offset
        self.path = segment_path(dir, base_offset, TXN_INDEX_SUFFIX)
        self._data = bytearray(_read_whole_entries(self.path))
        if self._data and os.path.getsize(self.path) != len(self._data):
            self._rewrite()

    @property
    def entries(self) -> list[AbortedTxn]:
        return _decode(self._data)

    def __len__(self) -> int:
        return len(self._data) // ENTRY_SIZE

    def _last_offset_at(self, i: int) -> int:
        return _LAST.unpack_from(self._data, i * ENTRY_SIZE + _LAST_AT)[0]

    @property
    def last_offset(self) -> int | None:
        return self._last_offset_at(len(self) - 1) if self._data else None

    def append(self, txn: AbortedTxn) -> None:
        last = self.last_offset
        if last is not None and txn.last_offset <= last:
            raise ValueError(f"the last offset of appended transactions must increase: {txn.last_offset} "
                             f"is not greater than {last} in {self.path}")
        entry = txn.encode()
        with open(self.path, "ab") as f:
            f.write(entry)
        self._data += entry

    def _first_ending_at_or_after(self, offset: int) -> int:
        """The position of the first entry whose ABORT marker is at or after
        offset (the markers' offsets increase along the index)."""
        return bisect.bisect_left(range(len(self)), offset, key=self._last_offset_at)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose ABORT marker is at or after offset."""
        keep = self._first_ending_at_or_after(offset)
        if keep != len(self):
            del self._data[keep * ENTRY_SIZE:]
            self._rewrite()

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Kafka's collectAbortedTxns: the entries that overlap
        [fetch_offset, upper_bound), and whether the search can stop here
        (an entry's last stable offset reached the upper bound).

        Kafka reads the whole file; the entries that end before fetch_offset
        are skipped here by a binary search. None of them can end the search:
        an entry's last stable offset is at most its marker's offset + 1, so
        at most fetch_offset, below a non-empty range's upper bound."""
        start = self._first_ending_at_or_after(fetch_offset) if upper_bound > fetch_offset else 0
        found = []
        with memoryview(self._data) as view:
            for _, pid, first, last, lso in ENTRY.iter_unpack(view[start * ENTRY_SIZE:]):
                if last >= fetch_offset and first < upper_bound:
                    found.append(AbortedTxn(pid, first, last, lso))
                if lso >= upper_bound:
                    return found, True
        return found, False

    def _rewrite(self) -> None:
        if not self._data:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            return
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(self._data)
        os.replace(tmp, self.path)


class PartitionTxnIndex:
    """The transaction indexes of one partition log, one per segment.

    Segments come and go with the log (rolls, retention, truncation); this
    follows them through ``log.segments`` and forgets the indexes of segments
    that are gone (their files go with the segment)."""

    def __init__(self, plog):
        self.log = plog
        self._indexes: dict[int, TransactionIndex] = {}
        self.reload()

    def reload(self) -> None:
        """Read the index files again (after something rewrote segments and
        their indexes on disk, as a log cleaner does)."""
        self._indexes = {}
        for name in os.listdir(self.log.dir):
            if name.endswith(TXN_INDEX_SUFFIX) and name[:-len(TXN_INDEX_SUFFIX)].isdigit():
                base = offset_from_name(name)
                self._indexes[base] = TransactionIndex(self.log.dir, base)

    def _bases(self) -> list[int]:
        return [s.base_offset for s in self.log.segments]

    def _index_for(self, base: int) -> TransactionIndex:
        idx = self._indexes.get(base)
        if idx is None:
            idx = self._indexes[base] = TransactionIndex(self.log.dir, base)
        return idx

    def _prune(self, bases: list[int]) -> None:
        live = set(bases)
        for base in [b for b in self._indexes if b not in live]:
            del self._indexes[base]

    def append(self, txn: AbortedTxn) -> None:
        """Record an aborted transaction in the index of the segment holding
        its ABORT marker."""
        bases = self._bases()
        i = bisect.bisect_right(bases, txn.last_offset) - 1
        self._index_for(bases[max(i, 0)]).append(txn)

    def maybe_any(self) -> bool:
        """False when the partition certainly has no aborted transaction (no
        index file, the common case): a read_committed fetch then need not
        find the upper bound of the bytes it returns (a read per batch)."""
        return bool(self._indexes)

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of
        [fetch_offset, upper_bound) must report."""
        if not self._indexes:
            return []
        bases = self._bases()
        self._prune(bases)
        if not self._indexes:
            return []
        i = max(bisect.bisect_right(bases, fetch_offset) - 1, 0)
        out: list[AbortedTxn] = []
        for base in bases[i:]:
            idx = self._indexes.get(base)
            if idx is None:
                continue
            found, complete = idx.collect(fetch_offset, upper_bound)
            out.extend(found)
            if complete:
                break
        return out

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose ABORT marker is at or after offset (log
        truncation, or before the entries are rebuilt from the log)."""
        self._prune(self._bases())
        for idx in list(self._indexes.values()):
            if idx.last_offset is not None and idx.last_offset >= offset:
                idx.truncate_to(offset)

    def all_entries(self) -> list[AbortedTxn]:
        bases = self._bases()
        self._prune(bases)
        return [e for b in bases if b in self._indexes for e in self._indexes[b].entries]

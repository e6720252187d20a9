"""The share-partition: which records of one topic partition a share group has handed out, to whom,
how often, and until when (KIP-932). Pure: every input carries `now_ms`, nothing here reads a clock,
a log or a socket; the shell reads the log, passes the batches it read, and wakes the partition at
`next_deadline()` to expire acquisition locks.

After Kafka 4.3's SharePartition. Offsets below the share-partition start offset (SPSO) are done.
Offsets from the SPSO up to `end_offset` are in flight, each in one state:

  AVAILABLE     may be acquired (again)
  ACQUIRED      handed to one member under an acquisition lock that ends at a deadline
  ACKNOWLEDGED  accepted by the member that held it (done)
  ARCHIVED      rejected, a gap, or delivered `delivery_count_limit` times (done)

Acquiring counts a delivery. A release (RELEASE, the lock's expiry, the member leaving) makes the
record AVAILABLE again, or ARCHIVED once it has been delivered `delivery_count_limit` times; so
does an acquisition whose answer never went out (`release_undelivered`: the count keeps it). The
SPSO moves over the done records at the front. At most `max_record_locks` offsets are in flight:
beyond that no new record is acquired until the SPSO moves.

An acquisition or acknowledgement is answered only once its state is persisted. `acquire` and
`acknowledge` take a `changes` list that collects what they changed; when the write carrying them
fails, `rollback(changes)` puts those records back as they were (Kafka 4.3's SharePartition rolls
back the state transitions of a failed persist), so nothing stays acquired or acknowledged in memory
that the caller was told failed. The done records the SPSO passed are kept until `persisted()` says
a write carried them, so a rollback can move the SPSO back over them.

The state persisted to `__share_group_state` (ShareSnapshotValue/ShareUpdateValue) is the SPSO and
the in-flight offsets as state batches (first, last, state 0/2/4, delivery count); an ACQUIRED record
is written as AVAILABLE (a lock does not outlive its leader), with its delivery count kept, so a new
leader redelivers exactly what was in flight and counts that delivery.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from kproto.errors import ErrorCode as E

# Record states (Kafka's RecordState ids; 0, 2 and 4 are also the persisted DeliveryState).
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
DONE = (ACKNOWLEDGED, ARCHIVED)
# Acknowledge types of ShareFetch/ShareAcknowledge (RENEW from ShareAcknowledge v2, KIP-1222).
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
ACK_TYPES = (GAP, ACCEPT, RELEASE, REJECT, RENEW)


@dataclass(frozen=True)
class AcquiredRange:
    """One AcquiredRecords entry of a ShareFetch answer."""
    first_offset: int
    last_offset: int
    delivery_count: int


class _Record:
    __slots__ = ("state", "count", "member", "deadline")

    def __init__(self, state: int, count: int):
        self.state = state
        self.count = count
        self.member: str | None = None
        self.deadline = 0


def _saved(rec: _Record) -> tuple:
    return rec.state, rec.count, rec.member, rec.deadline


def changed_batches(old: list, new: list) -> list[tuple[int, int, int, int]]:
    """The parts of `new` (first, last, state, count) batches whose state or count differs from
    `old`'s at the same offsets, or that `old` does not cover; both ordered and not overlapping. One
    pass over both."""
    out: list[list[int]] = []
    k, n_old = 0, len(old)
    for first, last, state, count in new:
        pos = first
        while pos <= last:
            while k < n_old and old[k][1] < pos:
                k += 1
            if k < n_old and old[k][0] <= pos:
                end = min(last, old[k][1])
                same = old[k][2] == state and old[k][3] == count
            else:
                end = last if k == n_old else min(last, old[k][0] - 1)
                same = False
            if not same:
                if out and out[-1][1] == pos - 1 and out[-1][2] == state and out[-1][3] == count:
                    out[-1][1] = end
                else:
                    out.append([pos, end, state, count])
            pos = end + 1
    return [tuple(b) for b in out]


class SharePartition:
    def __init__(self, start_offset: int, *, delivery_count_limit: int = 5, max_record_locks: int = 2000,
                 lock_duration_ms: int = 30000, batches=()):
        """`batches`: persisted state batches (first, last, state, count) at and above `start_offset`."""
        self.delivery_count_limit = delivery_count_limit
        self.max_record_locks = max_record_locks
        self.lock_duration_ms = lock_duration_ms
        self.start_offset = start_offset
        self.end_offset = start_offset          # the first offset never acquired
        self._records: dict[int, _Record] = {}  # offset -> record, for start_offset <= offset < end_offset
        self._locks: list[tuple[int, int]] = []  # heap of (deadline, offset); stale entries skipped
        self._passed: dict[int, _Record] = {}   # done records the SPSO passed since the last persisted()
        for first, last, state, count in sorted(batches):
            state = AVAILABLE if state == ACQUIRED else state
            for off in range(max(first, start_offset), last + 1):
                self._records[off] = _Record(state, count)
            self.end_offset = max(self.end_offset, last + 1)
        for off in range(start_offset, self.end_offset):   # holes between persisted batches: nothing there
            self._records.setdefault(off, _Record(ARCHIVED, 0))
        self._advance()

    # -- questions the shell asks ----------------------------------------------------------------

    def state_of(self, offset: int) -> tuple[int, int, str | None]:
        """(state, delivery count, holder) of an offset; done below the SPSO, AVAILABLE beyond the end."""
        if offset < self.start_offset:
            return ARCHIVED, 0, None
        rec = self._records.get(offset)
        if rec is None:
            return AVAILABLE, 0, None
        return rec.state, rec.count, rec.member

    def fetch_offset(self) -> int | None:
        """Where the shell should read the log from: the first AVAILABLE in-flight offset, else the end
        offset if another record may be locked, else None (nothing can be acquired now)."""
        for off in range(self.start_offset, self.end_offset):
            if self._records[off].state == AVAILABLE:
                return off
        if self.end_offset - self.start_offset >= self.max_record_locks:
            return None
        return self.end_offset

    def in_flight(self) -> int:
        return self.end_offset - self.start_offset

    def next_deadline(self) -> int | None:
        """When the earliest acquisition lock ends (the shell's timer), or None."""
        while self._locks:
            deadline, off = self._locks[0]
            rec = self._records.get(off)
            if rec is not None and rec.state == ACQUIRED and rec.deadline == deadline:
                return deadline
            heapq.heappop(self._locks)
        return None

    # -- inputs ------------------------------------------------------------------------------------

    def acquire(self, member: str, batches, max_records: int, now_ms: int,
                lock_duration_ms: int | None = None, changes: list | None = None) -> list[AcquiredRange]:
        """Acquire for `member` up to `max_records` records of the log batches the shell read
        (`batches`: (base offset, last offset) in log order, from `fetch_offset()` on). Offsets the log
        skipped between batches (compaction, aborted data removed) are done at once."""
        duration = self.lock_duration_ms if lock_duration_ms is None else lock_duration_ms
        deadline = now_ms + duration
        got: list[AcquiredRange] = []
        taken = 0
        for base, last in batches:
            if taken >= max_records:
                break
            if last < self.start_offset:
                continue
            if base > self.end_offset:            # the log has nothing between end_offset and base
                if self.start_offset == self.end_offset:
                    self.start_offset = self.end_offset = base   # nothing in flight: jump the hole
                elif base - self.start_offset > self.max_record_locks:
                    break                         # wait until the SPSO reaches the hole
                for off in range(self.end_offset, base):
                    self._records[off] = _Record(ARCHIVED, 0)
                self.end_offset = base
            for off in range(max(base, self.start_offset), last + 1):
                if taken >= max_records:
                    break
                rec = self._records.get(off)
                if rec is None:                   # a new record, past the end
                    if off - self.start_offset >= self.max_record_locks:
                        break
                    rec = self._records[off] = _Record(AVAILABLE, 0)
                    self.end_offset = off + 1
                if rec.state != AVAILABLE:
                    continue
                before = _saved(rec)
                rec.state, rec.count, rec.member, rec.deadline = ACQUIRED, rec.count + 1, member, deadline
                if changes is not None:
                    changes.append((off, before, _saved(rec)))
                heapq.heappush(self._locks, (deadline, off))
                taken += 1
                if got and got[-1].last_offset == off - 1 and got[-1].delivery_count == rec.count:
                    got[-1] = AcquiredRange(got[-1].first_offset, off, rec.count)
                else:
                    got.append(AcquiredRange(off, off, rec.count))
        self._advance()
        return got

    def acknowledge(self, member: str, first: int, last: int, types: list[int], now_ms: int,
                    changes: list | None = None) -> int:
        """One AcknowledgementBatch of `member`: `types` is one type for the whole range or one per
        offset. All or nothing: INVALID_RECORD_STATE unless every offset is ACQUIRED by `member`,
        INVALID_REQUEST for a malformed batch."""
        if last < first or not types or (len(types) != 1 and len(types) != last - first + 1) \
                or any(t not in ACK_TYPES for t in types):
            return E.INVALID_REQUEST
        for off in range(first, last + 1):
            rec = self._records.get(off) if off >= self.start_offset else None
            if rec is None or rec.state != ACQUIRED or rec.member != member:
                return E.INVALID_RECORD_STATE
        for i, off in enumerate(range(first, last + 1)):
            t = types[0] if len(types) == 1 else types[i]
            rec = self._records[off]
            before = _saved(rec)
            if t == ACCEPT:
                self._finish(rec, ACKNOWLEDGED)
            elif t in (REJECT, GAP):
                self._finish(rec, ARCHIVED)
            elif t == RELEASE:
                self._release(rec)
            else:                                 # RENEW: the lock starts again
                rec.deadline = now_ms + self.lock_duration_ms
                heapq.heappush(self._locks, (rec.deadline, off))
            if changes is not None:
                changes.append((off, before, _saved(rec)))
        self._advance()
        return E.NONE

    def rollback(self, changes: list) -> int:
        """Undo `changes` (filled by `acquire`/`acknowledge`) whose write failed: every record still
        as the change left it is put back as it was before (an acquired one AVAILABLE with its count
        back, an acknowledged one ACQUIRED by its member until its old deadline); the SPSO moves back
        below a record put back. Records changed since (a lock expired, the log start moved) are left
        as they are. The number of records put back."""
        undone = 0
        for off, before, after in reversed(changes):
            rec = self._records.get(off) if off >= self.start_offset else self._passed.get(off)
            if rec is None or _saved(rec) != after:
                continue
            if off < self.start_offset:
                if any(o not in self._passed for o in range(off, self.start_offset)):
                    continue                      # the log start passed it meanwhile: gone
                for o in range(off, self.start_offset):
                    self._records[o] = self._passed.pop(o)
                self.start_offset = off
            rec.state, rec.count, rec.member, rec.deadline = before
            if rec.state == ACQUIRED:
                heapq.heappush(self._locks, (rec.deadline, off))
            undone += 1
        self._advance()
        return undone

    def release_undelivered(self, changes: list) -> list[int]:
        """The answer that was to carry the acquisitions in `changes` (filled by `acquire`) never
        went out (its handler failed, its task was cancelled): every record still acquired as that
        acquisition left it is released now rather than at the end of its lock. As Kafka 4.3's
        releaseAcquiredRecords treats records "fetched but not actually delivered" (a NO_OP on the
        delivery count): the count keeps the attempt, so the record is AVAILABLE again, or ARCHIVED
        once it has been handed out `delivery_count_limit` times (a record whose answers always
        fail is not fetched for ever). Records changed since are left as they are. The offsets
        released."""
        out = []
        for off, _before, after in changes:
            rec = self._records.get(off) if off >= self.start_offset else None
            if rec is None or after[0] != ACQUIRED or _saved(rec) != after:
                continue
            self._release(rec)
            out.append(off)
        self._advance()
        return out

    def persisted(self, start_offset: int) -> None:
        """A write of the state with SPSO `start_offset` succeeded: the records below it are done
        for good."""
        for off in [o for o in self._passed if o < start_offset]:
            del self._passed[off]

    def expire(self, now_ms: int) -> list[int]:
        """Release every record whose lock has ended by `now_ms`; the offsets released."""
        out = []
        while self._locks and self._locks[0][0] <= now_ms:
            deadline, off = heapq.heappop(self._locks)
            rec = self._records.get(off)
            if rec is not None and rec.state == ACQUIRED and rec.deadline == deadline:
                self._release(rec)
                out.append(off)
        self._advance()
        return out

    def release_member(self, member: str) -> list[int]:
        """The member left the group (or its share session closed): its records are released now."""
        out = []
        for off in range(self.start_offset, self.end_offset):
            rec = self._records[off]
            if rec.state == ACQUIRED and rec.member == member:
                self._release(rec)
                out.append(off)
        self._advance()
        return out

    def move_start(self, offset: int) -> None:
        """The log start offset passed the SPSO (retention, DeleteRecords) or an admin reset it
        forward: everything below `offset` is done."""
        while self.start_offset < offset:
            self._records.pop(self.start_offset, None)
            self.start_offset += 1
        self._passed.clear()          # below the log start: nothing to move back over
        self.end_offset = max(self.end_offset, self.start_offset)
        self._advance()

    # -- persistence -------------------------------------------------------------------------------

    def state_batches(self) -> list[tuple[int, int, int, int]]:
        """(first, last, delivery state, delivery count) runs of the in-flight offsets, as persisted."""
        out: list[list[int]] = []
        for off in range(self.start_offset, self.end_offset):
            rec = self._records[off]
            state = AVAILABLE if rec.state == ACQUIRED else rec.state
            if out and out[-1][1] == off - 1 and out[-1][2] == state and out[-1][3] == rec.count:
                out[-1][1] = off
            else:
                out.append([off, off, state, rec.count])
        return [tuple(b) for b in out]

    def delivery_complete_count(self) -> int:
        """Done offsets at or above the SPSO (ShareSnapshotValue.DeliveryCompleteCount, KIP-1226)."""
        return sum(1 for r in self._records.values() if r.state in DONE)

    # -- internals ---------------------------------------------------------------------------------

    def _finish(self, rec: _Record, state: int) -> None:
        rec.state, rec.member, rec.deadline = state, None, 0

    def _release(self, rec: _Record) -> None:
        self._finish(rec, ARCHIVED if rec.count >= self.delivery_count_limit else AVAILABLE)

    def _advance(self) -> None:
        while self.start_offset < self.end_offset and self._records[self.start_offset].state in DONE:
            self._passed[self.start_offset] = self._records.pop(self.start_offset)
            self.start_offset += 1

"""The share coordinator's state of one `__share_group_state` partition (Kafka 4.3's
ShareCoordinatorShard): the latest share-partition state of every key ("group:topicId:partition")
written to that partition, and the decisions of the five share-state RPCs on it
(InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState,
ReadShareGroupStateSummary) with Kafka's checks and error codes. Pure: no log, no clock, no I/O.
Each operation returns its answer and the record to append (a ShareSnapshot, a ShareUpdate, or
tombstones); the
shell (`coordinator_shell.py`) appends it and answers only once it is replicated. The state changes
when the operation is decided; a shell whose append fails drops the whole shard and reads the
partition again.

A write is stored as a ShareUpdate record (the batches it wrote, merged) until a key has had
`share.coordinator.snapshot.update.records.per.snapshot` (500) of them since its last ShareSnapshot;
then as a ShareSnapshot of the whole state (Kafka 4.3's generateShareStateRecord). The batches
of a WriteShareGroupState are laid over the stored ones (the newer state of an offset wins, offsets
below the start offset are dropped), as Kafka's PersisterStateBatchCombiner does; except that
nothing goes back: not the start offset, not an offset's delivery count, not a done offset to
AVAILABLE (`no_regress`). A share-partition leader's writes only move its state forward, so what
would go back is a write that arrived after a newer one (its sender gave up waiting and wrote the
newer state since): it must not overwrite the newer state.

`__share_group_state` is a delete-policy topic (Kafka 4.3): the shard knows the offset of every
record it writes or reads back (`next_offset`, which the shell sets from the log end before each
decision) and says the lowest offset still needed (`redundant_offset`, Kafka's
ShareCoordinatorOffsetsManager): the oldest latest-committed ShareSnapshot of a live key. The shell's
pruner deletes the records below it, so a new coordinator replays from a snapshot of every key. On a
topic an older kproto made compacted (`compacted`), every record is a ShareSnapshot: compaction keeps
only a key's last ShareUpdate, so a ShareUpdate carrying part of the state (a leader's delta) would
lose the ones before it on replay.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from kproto.errors import ErrorCode as E

from broker.share import state_store

NULL_TOPIC_ID = "The topic id cannot be null."
NEGATIVE_PARTITION_ID = "The partition id cannot be a negative number."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."
READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."
MESSAGES = {
    E.FENCED_LEADER_EPOCH: "The leader epoch in the request is older than the epoch on the broker.",
    E.FENCED_STATE_EPOCH: "The share coordinator rejected the request because the share-group state epoch "
                          "did not match.",
    E.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
}
UNINITIALIZED = -1          # start offset / delivery complete count of a share-partition with no state


@dataclass
class ShareState:
    """One key's state, as its latest ShareSnapshot says."""
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    complete: int                       # DeliveryCompleteCount
    batches: list = field(default_factory=list)   # [(first, last, delivery state, delivery count)]
    created_ms: int = 0
    written_ms: int = 0                 # its latest ShareSnapshot's WriteTimestamp
    updates: int = 0                    # ShareUpdate records since the last ShareSnapshot (Kafka's rule)


@dataclass(frozen=True)
class Outcome:
    """An operation's answer: error (NONE), its message, the state read (Read/Summary), and the record
    to append ((key bytes, value bytes or None for a tombstone), or None)."""
    error: int
    message: str | None = None
    state: ShareState | None = None
    record: tuple | None = None
    extra: tuple = ()                   # more records after `record` (a delete's ShareUpdate tombstone)


def combine(old: list, new: list, start_offset: int) -> list:
    """`new` state batches laid over `old` ones, both (first, last, state, count); offsets below
    `start_offset` dropped; adjacent runs of the same state and count joined."""
    ordered = sorted(new)
    if ordered and all(a[1] + 1 == b[0] for a, b in zip(ordered, ordered[1:])):
        # the usual write, a leader's whole state: one contiguous run from the start offset that
        # covers every stored offset still above it, so nothing of `old` is left
        kept = [b for b in old if b[1] >= start_offset]
        if ordered[0][0] <= max(start_offset, kept[0][0] if kept else start_offset) and \
                (not kept or ordered[-1][1] >= kept[-1][1]):
            return _joined([(max(f, start_offset), last, st, c) for f, last, st, c in ordered
                            if last >= start_offset])
    if _tidy(old):
        # a leader's delta over the stored state: each batch spliced in where it falls (bisect),
        # joined with its neighbours only; the rest of the state is not walked
        result = old[bisect_left(old, start_offset, key=_last):]
        if result and result[0][0] < start_offset:
            result[0] = (start_offset, *result[0][1:])
        for first, last, state, count in new:         # in the request's order: a later batch wins
            _lay(result, max(first, start_offset), last, state, count)
        return result
    # by intervals, never by offset: a batch may span any number of offsets
    result = sorted((max(f, start_offset), last, st, c) for f, last, st, c in old if last >= start_offset)
    for first, last, state, count in new:             # in the request's order: a later batch wins
        first = max(first, start_offset)
        if last < first:
            continue
        cut = []
        for b in result:
            if b[1] < first or b[0] > last:
                cut.append(b)
                continue
            if b[0] < first:
                cut.append((b[0], first - 1, b[2], b[3]))
            if b[1] > last:
                cut.append((last + 1, b[1], b[2], b[3]))
        cut.append((first, last, state, count))
        result = sorted(cut)
    return _joined(result)


def _first(b: tuple) -> int:
    return b[0]


def _last(b: tuple) -> int:
    return b[1]


def _tidy(batches: list) -> bool:
    """Ordered, not overlapping, adjacent runs of the same state and count joined: what `combine`
    and `_joined` make (a stored state read from a record need not be)."""
    return all(a[1] < b[0] and (a[1] + 1 != b[0] or a[2] != b[2] or a[3] != b[3])
               for a, b in zip(batches, batches[1:]))


def _lay(result: list, first: int, last: int, state: int, count: int) -> None:
    """One batch laid over `result` (tidy) in place: the batches it overlaps cut around it, then
    joined with its neighbours where they have its state and count."""
    if last < first:
        return
    i = bisect_left(result, first, key=_last)         # the first batch ending at or after `first`
    j = bisect_right(result, last, key=_first)        # result[i:j] overlap it
    pieces = []
    if i < j and result[i][0] < first:
        pieces.append((result[i][0], first - 1, result[i][2], result[i][3]))
    pieces.append((first, last, state, count))
    if i < j and result[j - 1][1] > last:
        pieces.append((last + 1, result[j - 1][1], result[j - 1][2], result[j - 1][3]))
    result[i:j] = pieces
    k = min(i + len(pieces), len(result) - 1)
    while k > max(i - 1, 0):
        a, b = result[k - 1], result[k]
        if a[1] + 1 == b[0] and a[2] == b[2] and a[3] == b[3]:
            result[k - 1:k + 1] = [(a[0], b[1], a[2], a[3])]
        k -= 1


_DONE = (2, 4)                          # ACKNOWLEDGED, ARCHIVED


def _rank(state: int, count: int) -> tuple:
    # how far an offset has got: delivered more often, then done; under one leader and state
    # epoch a share-partition's writes only ever move an offset up this order
    return state in _DONE, count


def _goes_back(old: list, new: list) -> bool:
    """Whether some offset of `new` is behind `old`'s (`no_regress`'s walk, without building)."""
    k, n_old = 0, len(old)
    jump = len(new) * 8 < n_old         # a delta over a large state: bisect; a whole state: walk
    for first, last, state, count in new:
        rank = (state in _DONE, count)
        if jump:
            k = bisect_left(old, first, k, key=_last)
        while k < n_old and old[k][1] < first:
            k += 1
        j = k
        while j < n_old and old[j][0] <= last:
            if (old[j][2] in _DONE, old[j][3]) > rank:
                return True
            j += 1
    return False


def no_regress(old: list, new: list) -> tuple[list, bool]:
    """`new` batches (combined over `old`; both ordered, not overlapping) with every offset that
    `old` had further along (`_rank`) kept as `old` had it, and whether there was one: a write that
    arrives after a newer one (its sender timed out and wrote the newer state since) must not take an
    acknowledged record back to AVAILABLE or lower a delivery count. One pass over both."""
    if not old or not _goes_back(old, new):
        return new, False
    out, regressed, k, n_old = [], False, 0, len(old)
    for first, last, state, count in new:
        rank = (state in _DONE, count)
        pos = first
        while pos <= last:
            while k < n_old and old[k][1] < pos:
                k += 1
            if k < n_old and old[k][0] <= pos:
                o = old[k]
                end = min(last, o[1])
                if (o[2] in _DONE, o[3]) > rank:
                    out.append((pos, end, o[2], o[3]))
                    regressed = True
                else:
                    out.append((pos, end, state, count))
            else:
                end = min(last, old[k][0] - 1) if k < n_old else last
                out.append((pos, end, state, count))
            pos = end + 1
    return (_joined(out), True) if regressed else (new, False)


def _joined(batches: list) -> list:
    """Ordered, non-overlapping batches with adjacent runs of the same state and count joined."""
    out: list[list] = []
    for first, last, state, count in batches:
        if out and out[-1][1] == first - 1 and out[-1][2] == state and out[-1][3] == count:
            out[-1][1] = last
        else:
            out.append([first, last, state, count])
    return [tuple(b) for b in out]


def _fenced(st: ShareState, leader_epoch: int, state_epoch: int = -1) -> Outcome | None:
    """FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH for a request from an older leader or state (-1: not
    checked), as ShareCoordinatorShard's write and read validation."""
    if leader_epoch != -1 and st.leader_epoch > leader_epoch:
        return Outcome(E.FENCED_LEADER_EPOCH, MESSAGES[E.FENCED_LEADER_EPOCH])
    if state_epoch != -1 and st.state_epoch > state_epoch:
        return Outcome(E.FENCED_STATE_EPOCH, MESSAGES[E.FENCED_STATE_EPOCH])
    return None


def _covered(batches: list, covering: list, start_offset: int) -> list:
    """The parts of `batches` (ordered, not overlapping) inside the offsets `covering` batches span
    (at or above `start_offset`); one pass over both, as a leader's write may hold many batches."""
    spans: list[list] = []
    for f, last, _s, _c in sorted(covering):
        f = max(f, start_offset)
        if last < f:
            continue
        if spans and f <= spans[-1][1] + 1:
            spans[-1][1] = max(spans[-1][1], last)
        else:
            spans.append([f, last])
    if len(spans) == 1 and batches and spans[0][0] <= batches[0][0] and batches[-1][1] <= spans[0][1]:
        return batches                  # the usual write, a leader's whole state: all of it
    out = []
    for lo, hi in spans:                # a leader's delta: few spans over many batches
        k = bisect_left(batches, lo, key=_last)
        while k < len(batches) and batches[k][0] <= hi:
            first, last, state, count = batches[k]
            out.append((max(first, lo), min(last, hi), state, count))
            k += 1
    return _joined(out)


SNAPSHOT_UPDATES_DEFAULT = 500      # share.coordinator.snapshot.update.records.per.snapshot


class ShareCoordinatorShard:
    def __init__(self, updates_per_snapshot: int = SNAPSHOT_UPDATES_DEFAULT):
        self.states: dict[tuple, ShareState] = {}       # (group, topic id, partition) -> state
        # a write is a ShareUpdate record (only the batches it wrote) until a key has had this many
        # since its last ShareSnapshot; then the write is a ShareSnapshot of the whole state
        self.updates_per_snapshot = updates_per_snapshot
        # the offset the next record this shard emits gets (records of one decision batch are
        # appended together at the log end, in the order the operations emitted them)
        self.next_offset = 0
        # the topic's cleanup.policy has compact (a data dir of an older kproto): snapshots only
        self.compacted = False
        # key -> [(offset, live)] of its ShareSnapshot records (live False: its tombstone) from the
        # latest committed one on; a key read back from updates alone holds at its first update
        self._held: dict[tuple, list] = {}

    # -- which records are still needed (Kafka's ShareCoordinatorOffsetsManager) -------------------

    def _placed(self, key: tuple, kind: str) -> None:
        """A record of `key` takes the next offset: "snapshot", "tombstone" (of the snapshot),
        "update", or "other" (a ShareUpdate tombstone)."""
        held = self._held.get(key)
        if kind in ("snapshot", "tombstone"):
            self._held.setdefault(key, []).append((self.next_offset, kind == "snapshot"))
        elif kind == "update" and (held is None or not held[-1][1]):
            # updates with no snapshot before them in this log (pruned or compacted away): the
            # first of them is where the key's state starts
            self._held.setdefault(key, []).append((self.next_offset, True))
        self.next_offset += 1

    def redundant_offset(self, high_watermark: int) -> int:
        """The lowest offset still needed to rebuild every key's state from the records below
        `high_watermark` (only committed records count: an uncommitted snapshot may be lost with its
        leader, and the snapshot before it is then the one a new coordinator needs): the oldest latest
        committed snapshot of a live key; a key whose records are all uncommitted, or whose delete is
        committed, holds nothing back. The high watermark itself when no key holds anything."""
        low = high_watermark
        for key in list(self._held):
            held = self._held[key]
            i = next((j for j in range(len(held) - 1, -1, -1) if held[j][0] < high_watermark), None)
            if i is None:
                continue
            del held[:i]                    # older snapshots than a committed one: never needed again
            offset, live = held[0]
            if live:
                low = min(low, offset)
            elif len(held) == 1:
                del self._held[key]         # deleted for good
        return low

    # -- the log -------------------------------------------------------------------------------

    def replay(self, key: tuple, value, kind: int = state_store.SNAPSHOT, offset: int | None = None) -> None:
        """A ShareSnapshot or ShareUpdate record read back (value: ShareSnapshotValue or
        ShareUpdateValue; None for a tombstone) at `offset` (default: the next one). A key's state is
        its last snapshot with the updates after it laid over it in log order, as Kafka's
        ShareCoordinatorShard replays them."""
        if offset is not None:
            self.next_offset = offset
        self._placed(key, ("snapshot" if value is not None else "tombstone") if kind == state_store.SNAPSHOT
                     else ("update" if value is not None else "other"))
        if kind == state_store.UPDATE:
            if value is not None:           # (a delete writes a ShareUpdate tombstone after the snapshot's)
                self.states[key] = self._updated(
                    self.states.get(key), value.leader_epoch, value.start_offset, value.delivery_complete_count,
                    [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                     for b in value.state_batches], value.snapshot_epoch)
            return
        if value is None:
            self.states.pop(key, None)
            return
        old = self.states.get(key)
        self.states[key] = ShareState(
            # Kafka keeps counting the updates over a snapshot other than the one the count asked for
            updates=old.updates if old is not None and old.updates < self.updates_per_snapshot else 0,
            snapshot_epoch=value.snapshot_epoch,
            # the epochs never go back (Kafka's leaderEpochMap / stateEpochMap keep the highest)
            state_epoch=max(value.state_epoch, old.state_epoch if old else value.state_epoch),
            leader_epoch=max(value.leader_epoch, old.leader_epoch if old else value.leader_epoch),
            start_offset=value.start_offset, complete=value.delivery_complete_count,
            batches=[(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                     for b in value.state_batches],
            created_ms=value.create_timestamp, written_ms=value.write_timestamp)

    def _updated(self, old: ShareState | None, leader_epoch: int, start_offset: int, complete: int, batches: list,
                 snapshot_epoch: int) -> ShareState:
        """The state after a ShareUpdate (Kafka's ShareCoordinatorShard.merge): its batches laid over
        the state's, its start offset and leader epoch taken unless -1. The decision and the replay
        both make the new state here, so a coordinator that reads the log back has the same state."""
        if old is None:                     # its snapshot compacted away before an update of it
            return ShareState(snapshot_epoch=snapshot_epoch, state_epoch=0, leader_epoch=leader_epoch,
                              start_offset=start_offset, complete=complete, batches=_joined(sorted(batches)),
                              updates=1)
        start = old.start_offset if start_offset == -1 else start_offset
        return ShareState(
            snapshot_epoch=old.snapshot_epoch, state_epoch=old.state_epoch,
            leader_epoch=old.leader_epoch if leader_epoch == -1 else max(old.leader_epoch, leader_epoch),
            start_offset=start, complete=complete, batches=combine(old.batches, batches, start),
            created_ms=old.created_ms, written_ms=old.written_ms, updates=old.updates + 1)

    def _update_record(self, key: tuple, st: ShareState, start_offset: int, batches: list) -> tuple:
        group, tid, idx = key
        self._placed(key, "update")
        return (state_store.update_key(group, tid, idx),
                state_store.update_value(st.snapshot_epoch, st.leader_epoch, start_offset, batches, st.complete))

    def _record(self, key: tuple, st: ShareState | None, now_ms: int) -> tuple:
        group, tid, idx = key
        k = state_store.snapshot_key(group, tid, idx)
        self._placed(key, "snapshot" if st is not None else "tombstone")
        if st is None:
            return k, None
        st.written_ms = now_ms
        return k, state_store.snapshot_value(st.snapshot_epoch, st.leader_epoch, st.start_offset, st.batches,
                                             st.complete, st.created_ms, now_ms, state_epoch=st.state_epoch)

    def _update_allowed(self, st: ShareState) -> bool:
        """Whether the next record of `st` may be a ShareUpdate rather than a ShareSnapshot: not
        every `updates_per_snapshot`, and never on a compacted topic, where only a key's last
        ShareUpdate survives and the deltas before it would be lost on replay."""
        return not self.compacted and st.updates < self.updates_per_snapshot

    @staticmethod
    def _checked(tid, partition: int):
        if tid is None:
            return Outcome(E.INVALID_REQUEST, NULL_TOPIC_ID)
        if partition < 0:
            return Outcome(E.INVALID_REQUEST, NEGATIVE_PARTITION_ID)
        return None

    @staticmethod
    def _unknown():
        return Outcome(E.UNKNOWN_TOPIC_OR_PARTITION, MESSAGES[E.UNKNOWN_TOPIC_OR_PARTITION])

    def snapshot_cold(self, now_ms: int, interval_ms: int) -> Outcome:
        """Kafka 4.3's snapshotColdPartitions: a new ShareSnapshot of every key whose latest one was
        written `interval_ms` ago or more, so a key with few writes does not hold the pruning back
        for ever at its old snapshot; nothing while every key's latest snapshot is such a forced one
        (a quiet coordinator: it would only rewrite them). One Outcome carrying all the records."""
        if all(st.created_ms != st.written_ms for st in self.states.values()):
            return Outcome(E.NONE)
        records = []
        for key, st in self.states.items():
            if now_ms - st.written_ms >= interval_ms:
                st.snapshot_epoch += 1
                # the update count goes on, as a read-back of this snapshot has it (`replay`)
                st.updates = st.updates if st.updates < self.updates_per_snapshot else 0
                records.append(self._record(key, st, now_ms))
        if not records:
            return Outcome(E.NONE)
        return Outcome(E.NONE, record=records[0], extra=tuple(records[1:]))

    # -- the operations: `known` says whether the topic id and partition exist in the metadata --

    def initialize(self, key: tuple, state_epoch: int, start_offset: int, known: bool, now_ms: int) -> Outcome:
        """InitializeShareGroupState: a fresh state (no batches) at `start_offset` and `state_epoch`."""
        bad = self._checked(key[1], key[2])
        if bad:
            return bad
        old = self.states.get(key)
        if state_epoch != -1 and old is not None and old.state_epoch > state_epoch:
            return Outcome(E.FENCED_STATE_EPOCH, MESSAGES[E.FENCED_STATE_EPOCH])
        if not known:
            return self._unknown()
        st = self.states[key] = ShareState(
            # the leader epoch as a read-back has it: the highest seen (Kafka's leaderEpochMap)
            snapshot_epoch=old.snapshot_epoch + 1 if old else 0, state_epoch=state_epoch,
            leader_epoch=max(-1, old.leader_epoch) if old else -1,
            start_offset=start_offset, complete=UNINITIALIZED if start_offset == UNINITIALIZED else 0,
            batches=[], created_ms=now_ms,
            updates=old.updates if old is not None and old.updates < self.updates_per_snapshot else 0)
        return Outcome(E.NONE, record=self._record(key, st, now_ms))

    def write(self, key: tuple, leader_epoch: int, state_epoch: int, start_offset: int, complete: int,
              batches: list, known: bool, now_ms: int) -> Outcome:
        """WriteShareGroupState: the share-partition leader's new state (start offset -1: unchanged)."""
        bad = self._checked(key[1], key[2])
        if bad:
            return bad
        old = self.states.get(key)
        if old is None:
            return Outcome(E.INVALID_REQUEST, WRITE_UNINITIALIZED)
        fenced = _fenced(old, leader_epoch, state_epoch)
        if fenced:
            return fenced
        if not known:
            return self._unknown()
        # the start offset never goes back under one state epoch (a reset is a new state epoch):
        # a lower one is a write older than the stored state, arriving late
        start = old.start_offset if start_offset == -1 else max(start_offset, old.start_offset)
        merged = combine(old.batches, batches, start)
        # only the offsets the write covers can have gone back: the rest of `merged` is the stored state
        delta = _covered(merged, batches, start)
        regressed = False
        if _goes_back(old.batches, delta):
            merged, regressed = no_regress([b for b in old.batches if b[1] >= start], merged)
            delta = _covered(merged, batches, start)
        if regressed or start != start_offset != -1:
            complete = sum(last - first + 1 for first, last, state, _c in merged if state in _DONE)
        if self._update_allowed(old):
            # a ShareUpdate of what this write changed: the merged state inside the offsets it wrote
            # (the state is `merged`: what `_updated` makes of the delta when the record is read back,
            # as the seeded test in tests/test_share_coordinator.py checks, without a second merge)
            st = self.states[key] = ShareState(
                snapshot_epoch=old.snapshot_epoch, state_epoch=old.state_epoch, leader_epoch=old.leader_epoch,
                start_offset=start, complete=complete, batches=merged, created_ms=old.created_ms,
                written_ms=old.written_ms,
                updates=old.updates + 1)
            return Outcome(E.NONE, record=self._update_record(key, st, start, delta))
        st = self.states[key] = ShareState(
            snapshot_epoch=old.snapshot_epoch + 1, state_epoch=old.state_epoch,
            leader_epoch=old.leader_epoch, start_offset=start, complete=complete,
            batches=merged, created_ms=now_ms)
        return Outcome(E.NONE, record=self._record(key, st, now_ms))

    def read(self, key: tuple, leader_epoch: int, known: bool, now_ms: int) -> Outcome:
        """ReadShareGroupState: the state, and a record of the new leader epoch when it is higher."""
        bad = self._checked(key[1], key[2])
        if bad:
            return bad
        st = self.states.get(key)
        if st is None:
            return Outcome(E.INVALID_REQUEST, READ_UNINITIALIZED)
        fenced = _fenced(st, leader_epoch)
        if fenced:
            return fenced
        if not known:
            return self._unknown()
        if leader_epoch == -1 or st.leader_epoch == leader_epoch:
            return Outcome(E.NONE, state=st)
        # a new leader: later writes of the old one are fenced
        if self._update_allowed(st):
            st = self.states[key] = self._updated(st, leader_epoch, -1, st.complete, [], st.snapshot_epoch)
            return Outcome(E.NONE, state=st, record=self._update_record(key, st, -1, []))
        st.leader_epoch = leader_epoch
        st.snapshot_epoch += 1
        st.updates = 0
        return Outcome(E.NONE, state=st, record=self._record(key, st, now_ms))

    def summary(self, key: tuple, known: bool) -> Outcome:
        """ReadShareGroupStateSummary: start offset, epochs and delivery complete count (or the
        uninitialised answer: start offset -1, epochs 0)."""
        bad = self._checked(key[1], key[2])
        if bad:
            return bad
        if not known:
            return self._unknown()
        st = self.states.get(key)
        if st is None:
            st = ShareState(snapshot_epoch=0, state_epoch=0, leader_epoch=0, start_offset=UNINITIALIZED,
                            complete=UNINITIALIZED)
        return Outcome(E.NONE, state=st)

    def delete(self, key: tuple, known: bool) -> Outcome:
        """DeleteShareGroupState: a tombstone (nothing to write for a key with no state)."""
        bad = self._checked(key[1], key[2])
        if bad:
            return bad
        if not known:
            return self._unknown()
        if self.states.pop(key, None) is None:
            return Outcome(E.NONE)
        # the ShareUpdate key too: on a compacted topic (an older kproto's) a key's last update must
        # not outlive its snapshot's tombstone (read back alone it would bring the state back)
        group, tid, idx = key
        record = self._record(key, None, 0)
        self._placed(key, "other")
        return Outcome(E.NONE, record=record, extra=((state_store.update_key(group, tid, idx), None),))

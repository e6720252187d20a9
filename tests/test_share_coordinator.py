"""The share coordinator's pure shard (broker/share/coordinator.py): Kafka 4.3's ShareCoordinatorShard
decisions for Initialize/Read/Write/Delete/ReadSummary ShareGroupState, the records it writes (read
back they give the same state), and the merge of written state batches."""
from __future__ import annotations

import random
import uuid

from kproto.errors import ErrorCode as E

from broker.share import state_store
from broker.share.coordinator import ShareCoordinatorShard, combine

TID = uuid.UUID(int=7)
KEY = ("g", TID, 0)


def replayed(shard_records, updates_per_snapshot: int = 500) -> ShareCoordinatorShard:
    """A new shard that read the records back, as a new coordinator after a failover does."""
    s = ShareCoordinatorShard(updates_per_snapshot)
    for k, v in shard_records:
        s.replay(*state_store.decode_full(k, v))
    return s


def appended(log: list, out) -> None:
    if out.record is not None:
        log.extend((out.record, *out.extra))


def test_lifecycle_and_failover_read_back():
    s, log = ShareCoordinatorShard(), []
    out = s.read(KEY, 3, True, 1)
    assert (out.error, out.message) == (E.INVALID_REQUEST, "Read operation on uninitialized share partition not allowed.")
    assert s.write(KEY, 3, 0, 5, 0, [], True, 1).error == E.INVALID_REQUEST
    assert s.summary(KEY, True).state.start_offset == -1          # uninitialised: -1
    out = s.initialize(KEY, 0, 5, True, 1)
    assert out.error == E.NONE and out.record is not None
    log.append(out.record)
    out = s.read(KEY, 3, True, 2)                 # a leader epoch higher than known: recorded
    assert out.error == E.NONE and out.state.start_offset == 5 and out.record is not None
    log.append(out.record)
    out = s.write(KEY, 3, 0, 5, 1, [(5, 6, 2, 1), (7, 9, 0, 1)], True, 3)
    assert out.error == E.NONE
    log.append(out.record)
    out = s.write(KEY, 3, 0, 7, 2, [(7, 7, 4, 3), (8, 9, 2, 2)], True, 4)
    log.append(out.record)
    assert s.states[KEY].batches == [(7, 7, 4, 3), (8, 9, 2, 2)]
    # a new coordinator reads the log: the same state, and the old leader's epoch fenced
    t = replayed(log)
    assert (t.states[KEY].start_offset, t.states[KEY].batches, t.states[KEY].leader_epoch) == (7, [(7, 7, 4, 3), (8, 9, 2, 2)], 3)
    assert t.write(KEY, 2, 0, 7, 0, [], True, 5).error == E.FENCED_LEADER_EPOCH
    assert t.read(KEY, 2, True, 5).error == E.FENCED_LEADER_EPOCH
    # an administrator's reset: a higher state epoch fences the leader's writes of the old state
    log.append(t.initialize(KEY, 1, 20, True, 6).record)
    assert t.write(KEY, 3, 0, 21, 0, [], True, 7).error == E.FENCED_STATE_EPOCH
    assert t.initialize(KEY, 0, 0, True, 7).error == E.FENCED_STATE_EPOCH
    assert t.summary(KEY, True).state.start_offset == 20
    out = t.delete(KEY, True)
    assert out.error == E.NONE and out.record[1] is None           # a tombstone
    log.append(out.record)
    assert t.delete(KEY, True).record is None                      # nothing left to delete
    assert KEY not in replayed(log).states


def test_bad_keys_get_kafkas_errors():
    s = ShareCoordinatorShard()
    assert s.initialize(("g", TID, -1), 0, 0, True, 1).message == "The partition id cannot be a negative number."
    assert s.initialize(("g", None, 0), 0, 0, True, 1).message == "The topic id cannot be null."
    assert s.initialize(KEY, 0, 0, False, 1).error == E.UNKNOWN_TOPIC_OR_PARTITION
    assert s.summary(KEY, False).error == E.UNKNOWN_TOPIC_OR_PARTITION
    assert s.delete(KEY, False).error == E.UNKNOWN_TOPIC_OR_PARTITION


def test_combine_lays_new_batches_over_old_ones():
    rng = random.Random(31)
    for _ in range(200):
        start = rng.randrange(0, 10)
        old = [(f, f + rng.randrange(0, 3), rng.choice((0, 2, 4)), rng.randrange(1, 4)) for f in range(0, 30, 3)]
        if rng.random() < 0.5:          # scattered batches
            new = [(f, f + rng.randrange(0, 4), rng.choice((0, 2, 4)), rng.randrange(1, 4))
                   for f in sorted(rng.sample(range(0, 30), 4))]
        else:                           # one contiguous run, as a leader writes its whole state
            f, new, end = rng.randrange(0, start + 2), [], rng.choice((25, 35))
            while f <= end:
                last = f + rng.randrange(0, 5)
                new.append((f, last, rng.choice((0, 2, 4)), rng.randrange(1, 4)))
                f = last + 1
        want = {}
        for batches in (old, new):
            for f, last, st, c in batches:
                for o in range(max(f, start), last + 1):
                    want[o] = (st, c)
        got = combine(old, new, start)
        flat = {o: (st, c) for f, last, st, c in got for o in range(f, last + 1)}
        assert flat == want
        assert all(a[1] < b[0] for a, b in zip(got, got[1:]))         # ordered, not overlapping
        assert all(not (a[1] + 1 == b[0] and a[2:] == b[2:]) for a, b in zip(got, got[1:]))   # joined


def test_combine_works_by_intervals():
    """A batch spanning 10^12 offsets costs no more than a short one (a bad write cannot stall it)."""
    huge = 10 ** 12
    assert combine([(0, huge, 0, 1)], [(5, 7, 2, 1), (2, 3, 4, 1)], 1) == [
        (1, 1, 0, 1), (2, 3, 4, 1), (4, 4, 0, 1), (5, 7, 2, 1), (8, huge, 0, 1)]


def test_a_late_older_write_does_not_overwrite_a_newer_one():
    """Issue #31 race (b): a leader's whole-state write S1 times out on its side but reaches the
    coordinator after the retry wrote the newer S2 (more acknowledged, a higher start offset). The
    stored state stays S2, and a coordinator reading the log back after a failover rebuilds S2."""
    s, log = ShareCoordinatorShard(), []
    log.append(s.initialize(KEY, 0, 0, True, 1).record)
    log.append(s.read(KEY, 1, True, 1).record)
    s1 = (0, 1, [(0, 3, 2, 1), (4, 9, 0, 1)])                  # 0-3 acknowledged, 4-9 delivered once
    s2 = (6, 2, [(6, 7, 2, 1), (8, 9, 0, 2)])                  # 4-7 acknowledged since, 8-9 delivered again
    out = s.write(KEY, 1, 0, s2[0], s2[1], s2[2], True, 2)
    assert out.error == E.NONE
    log.append(out.record)
    out = s.write(KEY, 1, 0, s1[0], s1[1], s1[2], True, 3)     # the late one
    assert out.error == E.NONE
    log.append(out.record)
    for st in (s.states[KEY], replayed(log).states[KEY]):
        assert (st.start_offset, st.batches, st.complete) == (6, [(6, 7, 2, 1), (8, 9, 0, 2)], 2)
    # a leader's write that moves on is taken as before
    out = s.write(KEY, 1, 0, 8, 0, [(8, 8, 4, 5), (9, 9, 0, 3)], True, 4)
    assert (s.states[KEY].start_offset, s.states[KEY].batches) == (8, [(8, 8, 4, 5), (9, 9, 0, 3)])
    # an administrator's reset (a new state epoch) still starts afresh, lower start offset included
    s.initialize(KEY, 1, 0, True, 5)
    out = s.write(KEY, 1, 1, 0, 0, [(0, 0, 0, 1)], True, 6)
    assert (out.error, s.states[KEY].start_offset, s.states[KEY].batches) == (E.NONE, 0, [(0, 0, 0, 1)])


def test_writes_are_share_updates_and_a_snapshot_every_n_and_read_back_the_same():
    """Issue #31 item 2: writes append ShareUpdate records (only the batches written) and a
    ShareSnapshot once a key has had `updates_per_snapshot` updates since its last snapshot; a new
    coordinator reading the log (a restart, a failover) rebuilds exactly the same state, at every
    point of a seeded run of initialize / leader reads / whole and partial writes / late writes /
    resets / deletes over three keys."""
    for seed in range(12):
        rng = random.Random(seed)
        n = rng.choice((1, 2, 3, 5))
        s, log = ShareCoordinatorShard(n), []
        back = ShareCoordinatorShard(n)        # reads each record as it is appended
        restarted_at = rng.randrange(20, 100)  # and one that reads the whole log once, part-way
        keys = [("g", TID, p) for p in range(3)]
        leader = {k: 0 for k in keys}
        kinds = []
        for step in range(120):
            key = rng.choice(keys)
            st = s.states.get(key)
            op = rng.random()
            if st is None or op < 0.03:
                out = s.initialize(key, (st.state_epoch + 1) if st else 0, rng.randrange(0, 20), True, step)
            elif op < 0.08:
                leader[key] += 1
                out = s.read(key, leader[key], True, step)
            elif op < 0.10:
                out = s.delete(key, True)
            else:
                start = max(st.start_offset, 0) + rng.randrange(0, 3)
                f, batches = start - rng.randrange(0, 2), []
                for _ in range(rng.randrange(0, 4)):
                    last = f + rng.randrange(0, 4)
                    batches.append((f, last, rng.choice((0, 2, 4)), rng.randrange(1, 5)))
                    f = last + 1 + rng.choice((0, 0, 2))          # partial writes leave holes
                if rng.random() < 0.1:
                    start -= 3                                     # a late, older write
                out = s.write(key, leader[key], st.state_epoch, start, rng.randrange(0, 5), batches, True, step)
            assert out.error == E.NONE
            before = len(log)
            appended(log, out)
            for k, v in log[before:]:
                back.replay(*state_store.decode_full(k, v))
            if out.record is not None:
                kinds.append(state_store.decode_full(*out.record)[2])
            shards = [back, replayed(log, n)] if step in (restarted_at, 119) else [back]
            for other in shards:
                assert_same(other, s, n, (seed, step))
        assert state_store.UPDATE in kinds and state_store.SNAPSHOT in kinds


def assert_same(back, s, n, where):
    assert back.states.keys() == s.states.keys()
    for k, want in s.states.items():
        got = back.states[k]
        assert (got.start_offset, got.batches, got.leader_epoch, got.state_epoch, got.complete,
                got.snapshot_epoch, got.updates) == \
            (want.start_offset, want.batches, want.leader_epoch, want.state_epoch, want.complete,
             want.snapshot_epoch, want.updates), where
        assert want.updates <= n


def assert_same_state(back, s, where):
    """The states a coordinator reading a pruned log rebuilds: all but the count of updates since the
    last snapshot (read back from a snapshot with nothing before it, that count starts again at 0;
    it only says when the next snapshot is written)."""
    assert back.states.keys() == s.states.keys()
    for k, want in s.states.items():
        got = back.states[k]
        assert (got.start_offset, got.batches, got.leader_epoch, got.state_epoch, got.complete) == \
            (want.start_offset, want.batches, want.leader_epoch, want.state_epoch, want.complete), where


def test_a_write_records_only_what_it_changed():
    s, log = ShareCoordinatorShard(2), []
    appended(log, s.initialize(KEY, 0, 0, True, 1))
    appended(log, s.write(KEY, 0, 0, 0, 0, [(0, 9, 0, 1)], True, 2))
    out = s.write(KEY, 0, 0, 0, 1, [(3, 3, 2, 1)], True, 3)           # one offset acknowledged
    key, value, kind = state_store.decode_full(*out.record)
    assert kind == state_store.UPDATE and value.snapshot_epoch == 0
    assert [(b.first_offset, b.last_offset, b.delivery_state) for b in value.state_batches] == [(3, 3, 2)]
    appended(log, out)
    out = s.write(KEY, 0, 0, 0, 2, [(4, 4, 2, 1)], True, 4)           # the third: a snapshot
    _key, value, kind = state_store.decode_full(*out.record)
    assert kind == state_store.SNAPSHOT and value.snapshot_epoch == 1
    assert [(b.first_offset, b.last_offset, b.delivery_state) for b in value.state_batches] == [
        (0, 2, 0), (3, 4, 2), (5, 9, 0)]
    appended(log, out)
    appended(log, s.delete(KEY, True))
    assert KEY not in replayed(log[-2:], 2).states         # compacted: both tombstones, nothing back


def kinds_of(log):
    return [state_store.decode_full(k, v)[2] if v is not None else "tomb" for k, v in log]


def test_redundant_offset_is_the_oldest_committed_snapshot_a_live_key_needs():
    """Issue #31 (pruning, Kafka's ShareCoordinatorOffsetsManager): the records below the oldest latest
    snapshot of a live key are not needed; a snapshot not yet committed (at or above the high
    watermark) does not count yet; a committed delete releases its key; a key read back from updates
    alone (its snapshot pruned or compacted away) holds at its first update."""
    a, b = ("g", TID, 0), ("g", TID, 1)
    s, log = ShareCoordinatorShard(2), []
    appended(log, s.initialize(a, 0, 0, True, 1))                    # 0: a's snapshot
    appended(log, s.initialize(b, 0, 0, True, 1))                    # 1: b's snapshot
    assert s.redundant_offset(0) == 0 and s.redundant_offset(2) == 0
    for i in range(3):                                               # 2, 3: updates; 4: a snapshot
        appended(log, s.write(a, 0, 0, 0, 0, [(i, i, 2, 1)], True, 2))
    assert kinds_of(log) == [0, 0, 1, 1, 0] and s.next_offset == 5
    assert s.redundant_offset(4) == 0                                # a's new snapshot: not committed
    assert s.redundant_offset(5) == 1                                # now b's is the oldest needed
    appended(log, s.delete(b, True))                                 # 5, 6: b's tombstones
    assert s.redundant_offset(5) == 1
    assert s.redundant_offset(7) == 4                                # b deleted: a's snapshot
    appended(log, s.delete(a, True))                                 # 7, 8
    assert s.redundant_offset(9) == 9                                # nothing live: all of it
    # a new coordinator reads a log pruned at 2: a's updates with no snapshot before them
    back = ShareCoordinatorShard(2)
    for offset in range(2, 4):
        back.replay(*state_store.decode_full(*log[offset]), offset=offset)
    assert back.redundant_offset(4) == 2 and back.next_offset == 4


def test_leader_deltas_replayed_from_the_pruned_log_give_the_live_state():
    """Issue #31 (deltas + pruning): a share-partition leader's writes carry only what changed
    (`changed_batches`), the coordinator lays them over its state; pruning the log below
    `redundant_offset` at random points never changes what a new coordinator reading the rest
    rebuilds: the live shard's state, which is the leader's. Seeded random acquisitions,
    acknowledgements, releases and lock expiries over three share-partitions, with leader changes."""
    from broker.share.partition import ACCEPT, RELEASE, REJECT, SharePartition, changed_batches
    for seed in range(10):
        rng = random.Random(seed)
        n = rng.choice((1, 3, 10))
        s, log, start = ShareCoordinatorShard(n), [], 0     # log[i] is at offset start + i
        keys = [("g", TID, p) for p in range(3)]
        sps, sent, epoch = {}, {}, {k: 0 for k in keys}
        for k in keys:
            appended(log, s.initialize(k, 0, 0, True, 0))
            appended(log, s.read(k, 0, True, 0))
            sps[k] = SharePartition(0, delivery_count_limit=3, max_record_locks=50, lock_duration_ms=10)
        for step in range(1, 300):
            key = rng.choice(keys)
            sp = sps[key]
            op = rng.random()
            if op < 0.03:                    # a new leader reads the state back and writes it whole
                epoch[key] += 1
                out = s.read(key, epoch[key], True, step)
                appended(log, out)
                st = out.state
                sp = sps[key] = SharePartition(st.start_offset, batches=st.batches, delivery_count_limit=3,
                                               max_record_locks=50, lock_duration_ms=10)
                sent.pop(key, None)
                continue
            if op < 0.4:
                end = sp.end_offset
                sp.acquire(f"m{rng.randrange(3)}", [(end, end + rng.randrange(0, 6))], rng.randrange(1, 8), step)
            elif op < 0.85:
                held = [o for o in range(sp.start_offset, sp.end_offset) if sp.state_of(o)[0] == 1]
                if held:
                    o = rng.choice(held)
                    sp.acknowledge(sp.state_of(o)[2], o, o, [rng.choice((ACCEPT, ACCEPT, RELEASE, REJECT))], step)
            else:
                sp.expire(step + rng.randrange(0, 20))
            whole = sp.state_batches()
            batches = whole if key not in sent else changed_batches(sent[key], whole)
            out = s.write(key, epoch[key], 0, sp.start_offset, sp.delivery_complete_count(), batches, True, step)
            assert out.error == E.NONE
            appended(log, out)
            sent[key] = whole
            assert s.states[key].batches == whole and s.states[key].start_offset == sp.start_offset, (seed, step)
            assert s.next_offset == start + len(log)
            if rng.random() < 0.2:           # the pruner, with some records not yet committed
                hw = start + len(log) - rng.randrange(0, 3)
                cut = s.redundant_offset(hw)
                assert cut <= hw
                del log[:cut - start]
                start = max(start, cut)
                back = ShareCoordinatorShard(n)
                for i, (k, v) in enumerate(log):
                    back.replay(*state_store.decode_full(k, v), offset=start + i)
                assert_same_state(back, s, (seed, step))
        assert start > 0, seed


def test_on_a_compacted_topic_every_record_is_a_snapshot():
    """Upgrade safety (issue #31): a data dir of an older kproto has `__share_group_state` compacted,
    which keeps only a key's last ShareUpdate: there the coordinator writes every change as a
    ShareSnapshot of the whole state, so what compaction keeps still holds all of it."""
    s, log = ShareCoordinatorShard(500), []
    s.compacted = True
    appended(log, s.initialize(KEY, 0, 0, True, 1))
    appended(log, s.write(KEY, 0, 0, 0, 0, [(0, 9, 0, 1)], True, 2))
    appended(log, s.write(KEY, 0, 0, 0, 1, [(3, 3, 2, 1)], True, 3))     # a leader's delta
    appended(log, s.read(KEY, 1, True, 4))
    assert kinds_of(log) == [state_store.SNAPSHOT] * 4
    assert replayed(log[-1:]).states[KEY].batches == s.states[KEY].batches == [(0, 2, 0, 1), (3, 3, 2, 1),
                                                                                (4, 9, 0, 1)]


def test_cold_snapshots_let_the_pruning_pass_a_quiet_key():
    """Kafka 4.3's snapshotColdPartitions: a key with no write for the interval holds the prune point
    at its old snapshot until the coordinator writes it a new one; the log read back from the new
    prune point gives the same states; while every key's latest snapshot is such a forced one, none
    is written again."""
    quiet, busy = ("g", TID, 0), ("g", TID, 1)
    s, log = ShareCoordinatorShard(500), []
    appended(log, s.initialize(quiet, 0, 0, True, 1000))            # 0
    appended(log, s.write(quiet, 0, 0, 0, 1, [(0, 0, 2, 1)], True, 1000))
    appended(log, s.initialize(busy, 0, 0, True, 1000))             # 2
    for i in range(20):
        appended(log, s.write(busy, 0, 0, 0, 0, [(i, i, 2, 1)], True, 2000 + i))
    assert s.redundant_offset(len(log)) == 0
    assert s.snapshot_cold(1500, 1000).record is None               # nothing that old yet
    out = s.snapshot_cold(5000, 1000)
    appended(log, out)
    assert kinds_of(log[-2:]) == [state_store.SNAPSHOT] * 2
    cut = s.redundant_offset(len(log))
    assert cut == len(log) - 2
    back = ShareCoordinatorShard(500)
    for offset in range(cut, len(log)):
        back.replay(*state_store.decode_full(*log[offset]), offset=offset)
    assert_same_state(back, s, "cold")
    assert s.snapshot_cold(9000, 1000).record is None               # all forced already: quiet

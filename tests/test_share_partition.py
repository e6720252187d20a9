"""The share-partition state machine (broker/share/partition.py): acquisition, acknowledgement,
lock expiry, delivery-count limit, start-offset movement, the in-flight cap and the persisted
state batches; then a seeded simulation of several members checked by tests/share_checker.py."""
from __future__ import annotations

import random

import pytest

from kproto.errors import ErrorCode as E

from broker.share.partition import (
    ACCEPT, ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, GAP, REJECT, RELEASE, RENEW, AcquiredRange, SharePartition,
)
from tests.share_checker import ShareHistoryChecker


def one_batch(first, last):
    return [(first, last)]


def test_members_share_records_and_accept_moves_start():
    sp = SharePartition(0, lock_duration_ms=1000)
    a = sp.acquire("a", one_batch(0, 9), max_records=4, now_ms=0)
    b = sp.acquire("b", one_batch(0, 9), max_records=4, now_ms=0)
    assert a == [AcquiredRange(0, 3, 1)]
    assert b == [AcquiredRange(4, 7, 1)]          # b gets the next ones, never a's
    assert sp.acknowledge("b", 4, 7, [ACCEPT], 10) == E.NONE
    assert sp.start_offset == 0                   # 0-3 still locked by a
    assert sp.acknowledge("a", 0, 3, [ACCEPT], 10) == E.NONE
    assert sp.start_offset == 8 and sp.in_flight() == 0


def test_release_redelivers_with_higher_count_and_reject_never_again():
    sp = SharePartition(0, lock_duration_ms=1000)
    sp.acquire("a", one_batch(0, 2), 10, 0)
    assert sp.acknowledge("a", 0, 2, [RELEASE, REJECT, ACCEPT], 1) == E.NONE
    assert sp.state_of(1)[0] == ARCHIVED and sp.state_of(2)[0] == ACKNOWLEDGED
    assert sp.fetch_offset() == 0
    assert sp.acquire("b", one_batch(0, 2), 10, 2) == [AcquiredRange(0, 0, 2)]   # only the released one


def test_lock_expiry_returns_records_and_stale_ack_is_refused():
    sp = SharePartition(0, lock_duration_ms=1000)
    sp.acquire("a", one_batch(0, 4), 10, 0)
    assert sp.next_deadline() == 1000
    assert sp.expire(999) == []
    assert sp.expire(1000) == [0, 1, 2, 3, 4]
    assert sp.acknowledge("a", 0, 4, [ACCEPT], 1001) == E.INVALID_RECORD_STATE
    assert sp.acquire("b", one_batch(0, 4), 10, 1001) == [AcquiredRange(0, 4, 2)]
    assert sp.acknowledge("a", 0, 0, [ACCEPT], 1002) == E.INVALID_RECORD_STATE   # b holds it now


def test_renew_extends_the_lock():
    sp = SharePartition(0, lock_duration_ms=1000)
    sp.acquire("a", one_batch(0, 0), 10, 0)
    assert sp.acknowledge("a", 0, 0, [RENEW], 900) == E.NONE
    assert sp.expire(1500) == [] and sp.state_of(0)[0] == ACQUIRED
    assert sp.next_deadline() == 1900


def test_delivery_count_limit_archives():
    sp = SharePartition(0, delivery_count_limit=3, lock_duration_ms=10)
    now = 0
    for n in (1, 2, 3):
        assert sp.acquire("a", one_batch(0, 0), 10, now) == [AcquiredRange(0, 0, n)]
        now += 10
        sp.expire(now)
    assert sp.start_offset == 1 and sp.fetch_offset() == 1   # archived after the 3rd delivery
    assert sp.acquire("a", one_batch(0, 0), 10, now) == []


def test_ack_validation():
    sp = SharePartition(0)
    sp.acquire("a", one_batch(0, 3), 10, 0)
    assert sp.acknowledge("a", 0, 3, [ACCEPT, ACCEPT], 1) == E.INVALID_REQUEST   # neither 1 nor 4 types
    assert sp.acknowledge("a", 3, 0, [ACCEPT], 1) == E.INVALID_REQUEST
    assert sp.acknowledge("a", 0, 0, [9], 1) == E.INVALID_REQUEST
    assert sp.acknowledge("a", 2, 5, [ACCEPT], 1) == E.INVALID_RECORD_STATE       # 4, 5 never acquired
    assert sp.state_of(2)[0] == ACQUIRED                                          # all or nothing
    assert sp.acknowledge("b", 0, 0, [ACCEPT], 1) == E.INVALID_RECORD_STATE


def test_in_flight_cap_and_log_gaps():
    sp = SharePartition(0, max_record_locks=5)
    assert sp.acquire("a", [(0, 1), (4, 9)], 100, 0) == [AcquiredRange(0, 1, 1), AcquiredRange(4, 4, 1)]
    assert sp.in_flight() == 5 and sp.fetch_offset() is None
    assert sp.state_of(2)[0] == ARCHIVED                     # skipped by the log: done
    sp.acknowledge("a", 0, 1, [ACCEPT], 1)
    assert sp.start_offset == 4 and sp.fetch_offset() == 5
    assert sp.acquire("a", [(4, 9)], 100, 2) == [AcquiredRange(5, 8, 1)]


def test_gap_ack_and_member_leaving():
    sp = SharePartition(0)
    sp.acquire("a", one_batch(0, 3), 10, 0)
    assert sp.acknowledge("a", 0, 3, [ACCEPT, GAP, ACCEPT, ACCEPT], 1) == E.NONE
    assert sp.start_offset == 4
    sp.acquire("a", one_batch(4, 6), 10, 2)
    assert sp.release_member("a") == [4, 5, 6]
    assert sp.state_of(5) == (AVAILABLE, 1, None)


def test_state_batches_round_trip_keeps_acks_and_redelivers_in_flight():
    sp = SharePartition(0)
    sp.acquire("a", one_batch(0, 5), 10, 0)
    sp.acknowledge("a", 1, 1, [ACCEPT], 1)
    sp.acknowledge("a", 3, 3, [REJECT], 1)
    batches = sp.state_batches()
    assert batches == [(0, 0, AVAILABLE, 1), (1, 1, ACKNOWLEDGED, 1), (2, 2, AVAILABLE, 1),
                       (3, 3, ARCHIVED, 1), (4, 5, AVAILABLE, 1)]
    again = SharePartition(sp.start_offset, batches=batches)
    got = again.acquire("b", one_batch(0, 9), 100, 5)
    assert got == [AcquiredRange(0, 0, 2), AcquiredRange(2, 2, 2), AcquiredRange(4, 5, 2), AcquiredRange(6, 9, 1)]


def test_move_start_archives_below():
    sp = SharePartition(0)
    sp.acquire("a", one_batch(0, 5), 10, 0)
    sp.move_start(3)
    assert sp.start_offset == 3
    assert sp.acknowledge("a", 0, 0, [ACCEPT], 1) == E.INVALID_RECORD_STATE
    assert sp.acknowledge("a", 3, 5, [ACCEPT], 1) == E.NONE and sp.start_offset == 6


def make_log(rng, n):
    """Log batches (base, last) over offsets 0..n-1, with some offsets missing between batches."""
    batches, off = [], 0
    while off < n:
        if rng.random() < 0.1:
            off += rng.randint(1, 3)                    # compacted away
            continue
        size = min(rng.randint(1, 6), n - off)
        batches.append((off, off + size - 1))
        off += size
    return batches


@pytest.mark.parametrize("seed", range(12))
def test_seeded_simulation_meets_the_share_rules(seed):
    rng = random.Random(seed)
    limit, lock_ms, cap = rng.randint(2, 5), 100, rng.choice([8, 20, 200])
    log = make_log(rng, 150)
    present = {o for b, l in log for o in range(b, l + 1)}
    sp = SharePartition(0, delivery_count_limit=limit, max_record_locks=cap, lock_duration_ms=lock_ms)
    chk = ShareHistoryChecker(limit)
    members = ["m0", "m1", "m2"]
    held = {m: {} for m in members}                     # what each member believes it holds: offset -> deadline
    now, start = 0, 0

    def fetch(m, n):
        fo = sp.fetch_offset()
        if fo is None:
            return
        for r in sp.acquire(m, [b for b in log if b[1] >= fo], n, now):
            for off in range(r.first_offset, r.last_offset + 1):
                if off in present:
                    chk.deliver(now, m, off, r.delivery_count, now + lock_ms)
                held[m][off] = now + lock_ms

    def ack(m, off, t, kind):
        code = sp.acknowledge(m, off, off, [t], now)
        if code == E.NONE:
            chk.ack(now, m, off, kind)
        elif code != E.INVALID_RECORD_STATE:
            chk.errors.append(f"ack of {off} answered {code}")
        held[m].pop(off, None)

    def expire():
        for off in sp.expire(now):
            chk.freed(off)

    for _ in range(600):
        op = rng.random()
        m = rng.choice(members)
        if op < 0.35:
            fetch(m, rng.randint(1, 8))
        elif op < 0.75 and held[m]:
            off = rng.choice(sorted(held[m]))
            if off not in present:
                ack(m, off, GAP, "reject")
                continue
            t, kind = rng.choice([(ACCEPT, "accept")] * 4 + [(RELEASE, "release"), (REJECT, "reject"), (RENEW, "renew")])
            ack(m, off, t, kind)
        elif op < 0.95:
            now += rng.randint(1, 60)
            expire()
        else:
            for off in sp.release_member(m):
                chk.freed(off)
            held[m].clear()
        assert sp.start_offset >= start and sp.in_flight() <= cap
        start = sp.start_offset
    # drain: every member accepts whatever it gets, until the log is done
    for _ in range(2000):
        if sp.start_offset >= log[-1][1] + 1:
            break
        m = rng.choice(members)
        fetch(m, 8)
        for off in sorted(held[m]):
            ack(m, off, ACCEPT if off in present else GAP, "accept" if off in present else "reject")
        now += 7
        expire()
    assert sp.start_offset == log[-1][1] + 1
    chk.final(sorted(present), lambda off: sp.state_of(off)[0] if off >= sp.start_offset else None)
    assert chk.problems() == []


def test_rollback_of_a_failed_acknowledgement_and_acquisition():
    """Issue #31: the write carrying an acknowledgement or an acquisition failed, the caller is told
    so: nothing of it stays acknowledged or acquired (the SPSO moves back over the records put back)."""
    sp = SharePartition(0, lock_duration_ms=1000)
    sp.acquire("a", one_batch(0, 9), 10, 0)
    sp.persisted(sp.start_offset)
    changes = []
    assert sp.acknowledge("a", 0, 4, [ACCEPT], 10, changes=changes) == E.NONE
    assert sp.start_offset == 5
    assert sp.rollback(changes) == 5
    assert sp.start_offset == 0
    assert [sp.state_of(o) for o in range(0, 5)] == [(ACQUIRED, 1, "a")] * 5
    assert sp.acknowledge("a", 0, 9, [ACCEPT], 20) == E.NONE    # the member's retry is taken
    assert sp.start_offset == 10
    # an acquisition: the records are AVAILABLE again with the count they had
    sp.persisted(sp.start_offset)
    changes = []
    got = sp.acquire("b", one_batch(10, 12), 10, 30, changes=changes)
    assert got == [AcquiredRange(10, 12, 1)]
    assert sp.rollback(changes) == 3
    assert [sp.state_of(o)[:2] for o in (10, 11, 12)] == [(AVAILABLE, 0)] * 3
    assert sp.acquire("c", one_batch(10, 12), 10, 40) == [AcquiredRange(10, 12, 1)]
    # a record changed since (its lock expired) is left as it is; one the log start passed is gone
    changes = []
    sp.acknowledge("c", 10, 10, [RELEASE], 50, changes=changes)
    sp.acquire("d", one_batch(10, 10), 10, 60)
    assert sp.rollback(changes) == 0 and sp.state_of(10)[2] == "d"
    changes = []
    sp.acknowledge("c", 11, 11, [ACCEPT], 70, changes=changes)
    sp.move_start(12)
    assert sp.rollback(changes) == 0 and sp.start_offset == 12


def test_an_acquisition_never_answered_is_released_at_once_with_its_count():
    """Issue #31: the ShareFetch answer that was to carry an acquisition was never made (its handler
    failed after the write): its records are released now, not when the lock ends. As Kafka's
    releaseAcquiredRecords, the count keeps the attempt: AVAILABLE, ARCHIVED at the limit."""
    sp = SharePartition(0, lock_duration_ms=60000, delivery_count_limit=2)
    changes = []
    assert sp.acquire("a", one_batch(0, 4), 10, 0, changes=changes) == [AcquiredRange(0, 4, 1)]
    assert sp.release_undelivered(changes) == [0, 1, 2, 3, 4]
    assert [sp.state_of(o) for o in range(5)] == [(AVAILABLE, 1, None)] * 5
    assert sp.next_deadline() is None                       # no lock left to expire
    assert sp.acquire("b", one_batch(0, 4), 2, 10) == [AcquiredRange(0, 1, 2)]
    # the second attempt at 2..4 is not answered either: at the limit they are done
    changes = []
    assert sp.acquire("b", one_batch(0, 4), 10, 20, changes=changes) == [AcquiredRange(2, 4, 2)]
    assert sp.release_undelivered(changes) == [2, 3, 4]
    assert [sp.state_of(o)[0] for o in range(2, 5)] == [ARCHIVED] * 3
    # a record changed since (acknowledged, or its lock expired and another member took it) stays
    changes = []
    sp.acquire("c", one_batch(5, 7), 10, 30, changes=changes)
    assert sp.acknowledge("c", 5, 5, [ACCEPT], 31) == E.NONE
    sp.expire(30 + 60000)
    assert sp.acquire("d", one_batch(6, 7), 1, 60040) == [AcquiredRange(6, 6, 2)]
    assert sp.release_undelivered(changes) == []
    assert [sp.state_of(o) for o in (6, 7)] == [(ACQUIRED, 2, "d"), (AVAILABLE, 1, None)]

"""The copier's retry loop: exponential backoff with jitter and a cap (a seeded, clock-free
schedule), retrying only store errors, giving up after a limit when asked, and ending at once when
its cancel scope is cancelled (trio's MockClock: no real waiting)."""
from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from broker.tiered.backoff import Backoff, retry
from broker.tiered.object_store import ObjectNotFound, ObjectStoreError


def test_delays_grow_exponentially_with_jitter_up_to_the_cap():
    b = Backoff(initial=0.1, cap=2.0, multiplier=2.0, jitter=0.5, rng=random.Random(7))
    delays = [b.next_delay() for _ in range(10)]
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0, 2.0, 2.0]
    for d, c in zip(delays, ceilings):
        assert c * 0.5 <= d <= c
    assert len(set(delays)) == 10                         # jittered: no two alike
    again = Backoff(initial=0.1, cap=2.0, rng=random.Random(7))
    assert [again.next_delay() for _ in range(10)] == delays   # the seed decides
    b.reset()
    assert b.next_delay() <= 0.1
    no_jitter = Backoff(initial=1, cap=8, jitter=0)
    assert [no_jitter.next_delay() for _ in range(5)] == [1, 2, 4, 8, 8]
    with pytest.raises(ValueError):
        Backoff(initial=0)


def test_retry_until_success_sleeping_the_backoff_delays():
    slept, calls = [], []

    async def flaky():
        calls.append(1)
        if len(calls) < 4:
            raise ObjectStoreError("store unreachable")
        return "copied"

    async def sleep(d):
        slept.append(d)

    result = trio.run(lambda: retry(flaky, backoff=Backoff(initial=1, cap=3, jitter=0), sleep=sleep))
    assert result == "copied" and len(calls) == 4 and slept == [1, 2, 3]


def test_retry_gives_up_after_max_attempts_and_never_retries_other_errors():
    calls = []

    async def down():
        calls.append(1)
        raise ObjectNotFound("gone")            # an ObjectStoreError: retried

    async def nosleep(d):
        pass
    with pytest.raises(ObjectNotFound):
        trio.run(lambda: retry(down, max_attempts=3, sleep=nosleep))
    assert len(calls) == 3

    async def bug():
        calls.append(2)
        raise KeyError("a bug, not the store")
    with pytest.raises(KeyError):
        trio.run(lambda: retry(bug, max_attempts=50, sleep=nosleep))
    assert calls.count(2) == 1


def test_cancelling_the_scope_ends_a_backoff_wait_at_once():
    clock = trio.testing.MockClock(autojump_threshold=0)
    attempts = []

    async def main():
        async def down():
            attempts.append(trio.current_time())
            raise ObjectStoreError("down")
        with trio.move_on_after(100) as scope:      # the copier stopping after 100 s
            await retry(down, backoff=Backoff(initial=1, cap=60, jitter=0), max_attempts=20)
        assert scope.cancelled_caught
        assert trio.current_time() == pytest.approx(100)
    trio.run(main, clock=clock)
    # waits of 1, 2, 4, 8, 16, 32 s: attempts at 0, 1, 3, 7, 15, 31, 63; cut during the 60 s wait
    assert attempts == pytest.approx([0, 1, 3, 7, 15, 31, 63])

"""The leader's bookkeeping (broker/replication/leader_state.py): the high
watermark is the smallest log end offset of the ISR, never moving backwards;
a follower behind for replica.lag.time.max.ms leaves the ISR; one that
reached the high watermark and the leader's epoch start rejoins it."""
from __future__ import annotations

from broker.replication.leader_state import LeaderState


def _state(isr=(1, 2, 3), hw=0, epoch_start=0):
    return LeaderState(1, [1, 2, 3], list(isr), leader_epoch=3, partition_epoch=5,
                       epoch_start_offset=epoch_start, high_watermark=hw, now_ms=0)


def test_high_watermark_is_the_smallest_isr_log_end_offset():
    s = _state()
    assert not s.advance_high_watermark(10)          # followers have not fetched
    s.follower_fetched(2, 10, 10, now_ms=1)
    assert not s.advance_high_watermark(10)          # 3 has nothing yet
    s.follower_fetched(3, 7, 10, now_ms=1)
    assert s.advance_high_watermark(10) and s.hw == 7
    s.follower_fetched(3, 5, 10, now_ms=2)           # (a stale fetch) never moves it back
    assert not s.advance_high_watermark(10) and s.hw == 7


def test_out_of_sync_follower_does_not_hold_the_high_watermark():
    s = _state(isr=(1, 2))
    s.follower_fetched(2, 10, 10, now_ms=1)
    assert s.advance_high_watermark(10) and s.hw == 10


def test_lagging_follower_is_shrunk_after_the_lag_time_and_a_caught_up_one_is_not():
    s = _state()
    s.follower_fetched(2, 10, 10, now_ms=1000)       # caught up
    s.follower_fetched(3, 4, 10, now_ms=1000)        # behind since the start (t=0)
    assert s.isr_to_shrink(now_ms=20000, lag_max_ms=30000, leader_leo=10) is None
    assert s.isr_to_shrink(now_ms=31000, lag_max_ms=30000, leader_leo=10) == [1, 2]


def test_follower_rejoins_once_it_reaches_the_high_watermark_and_the_epoch_start():
    s = _state(isr=(1, 2), hw=10, epoch_start=12)
    s.follower_fetched(3, 11, 15, now_ms=5)
    assert s.isr_to_expand(15) is None               # past the high watermark, not the epoch start
    s.follower_fetched(3, 12, 15, now_ms=6)
    assert s.isr_to_expand(15) == [1, 2, 3]
    # while the expansion is in flight the high watermark counts the new member (maximal ISR)
    s.pending_isr = [1, 2, 3]
    s.follower_fetched(2, 15, 15, now_ms=7)
    s.advance_high_watermark(15)
    assert s.hw == 12
    s.update_isr([1, 2, 3], 6)
    assert s.pending_isr is None and s.isr == [1, 2, 3]


def test_low_watermark_is_the_smallest_log_start_of_the_live_replicas():
    s = _state(isr=(1, 2))
    alive = {1, 2, 3}.__contains__
    assert s.low_watermark(6, alive) == -1           # followers have not fetched: unknown
    s.follower_fetched(2, 10, 10, now_ms=1, log_start=6)
    s.follower_fetched(3, 4, 10, now_ms=1, log_start=2)
    assert s.low_watermark(6, alive) == 2            # 3 counts out of the ISR too (Kafka)
    assert s.low_watermark(6, {1, 2}.__contains__) == 6   # not 3 once its broker is fenced
    s.follower_fetched(3, 5, 10, now_ms=2)           # a fetch that does not say its log start
    assert s.low_watermark(6, alive) == 2
    s.follower_fetched(3, 6, 10, now_ms=3, log_start=6)
    assert s.low_watermark(6, alive) == 6

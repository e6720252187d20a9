"""The fetch session cache's rules that take minutes to show on a wire
(Kafka's eviction after 120 s unused, or by age and size), with a clock of
the test's own; and the follower's session bookkeeping
(broker/replication/fetch_session_handler.py)."""
from __future__ import annotations

import uuid

from kproto.errors import ErrorCode
from kproto.messages.fetch_request import FetchRequest
from kproto.messages.fetch_response import FetchResponse

from broker.partitions.fetch_sessions import NUM_SHARDS, SESSION_ID_RANGE, FetchSessionCache, ShardError, next_epoch
from broker.replication.fetch_session_handler import FetchSessionHandler

TID = uuid.UUID(int=7)


class Clock:
    def __init__(self):
        self.now = 1_000_000

    def __call__(self):
        return self.now


def _data(n: int) -> dict:
    return {(TID, i): ("t", TID, FetchRequest.FetchPartition(partition=i, fetch_offset=0, partition_max_bytes=100))
            for i in range(n)}


def _entries(data: dict) -> list:
    return [(key, "t", TID, FetchResponse.PartitionData(partition_index=key[1], high_watermark=0,
                                                         log_start_offset=0, records=b""))
            for key in data]


def _open(cache, n: int, follower: bool = False) -> int:
    """A full fetch asking for a session of n partitions; the session id (0: none)."""
    data = _data(n)
    ctx = cache.new_context(17, 0, 0, follower, data, [])
    return cache.finish(ctx, _entries(data))[1]


def _incremental(cache, sid: int) -> int:
    session = cache.get(sid)
    if session is None:
        return ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    ctx = cache.new_context(17, sid, session.epoch, False, {}, [])
    return cache.finish(ctx, _entries(_data(0)))[0] if ctx.kind != "error" else ctx.error


def _full_cache(clock, sizes, follower=False):
    cache = FetchSessionCache(NUM_SHARDS, clock=clock)   # one session per shard
    return cache, [_open(cache, n, follower) for n in sizes]


def test_session_ids_fall_in_their_shard_and_epochs_wrap():
    cache = FetchSessionCache(1000)
    for n in range(16):
        sid = _open(cache, 1)
        assert max(1, (n % NUM_SHARDS) * SESSION_ID_RANGE) <= sid < (n % NUM_SHARDS + 1) * SESSION_ID_RANGE
    assert next_epoch(0x7FFFFFFF) == 1 and next_epoch(-1) == -1 and next_epoch(0) == 1
    for bad in (0x7FFFFFFF, -(SESSION_ID_RANGE + 1)):
        try:
            cache.shard_of(bad)
        except ShardError:
            continue
        raise AssertionError(f"session id {bad} has no shard in Kafka")


def test_a_session_unused_for_120_s_is_evicted_by_anybody():
    clock = Clock()
    cache, sids = _full_cache(clock, [5] * NUM_SHARDS)
    assert _open(cache, 1) == 0                      # full, nobody stale: no session
    clock.now += 60_000
    for sid in sids[2:]:
        assert _incremental(cache, sid) == 0          # used a minute later
    clock.now += 60_001                               # sids[0], sids[1]: unused for 120.001 s
    assert _open(cache, 1) != 0                       # (shard 1 is next: the failed try took shard 0)
    assert _incremental(cache, sids[1]) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert _incremental(cache, sids[0]) == 0          # another shard: untouched
    assert cache.evictions == 1


def test_an_old_session_gives_way_to_a_consumer_with_more_partitions():
    clock = Clock()
    cache, sids = _full_cache(clock, [5] * NUM_SHARDS)
    clock.now += 121_000
    for sid in sids:
        assert _incremental(cache, sid) == 0          # recently used, but older than 120 s
    assert _open(cache, 4) == 0                       # fewer partitions: kept (shard 0)
    assert _open(cache, 5) == 0                       # as many: kept (shard 1)
    assert _open(cache, 6) != 0                       # more: evicted (shard 2)
    assert _incremental(cache, sids[2]) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert [_incremental(cache, s) for s in sids[:2] + sids[3:]] == [0] * (NUM_SHARDS - 1)


def test_followers_evict_young_consumers_but_not_young_followers():
    clock = Clock()
    cache, consumers = _full_cache(clock, [1] * NUM_SHARDS)
    assert _open(cache, 1) == 0                                  # a consumer: nobody old enough
    followers = [_open(cache, 1, follower=True) for _ in range(NUM_SHARDS)]
    assert all(followers)                                        # each evicted a consumer
    assert all(_incremental(cache, s) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND for s in consumers)
    assert _open(cache, 50, follower=True) == 0                  # a young follower stays
    clock.now += 121_000
    for s in followers:
        cache.shard_of(s).touch(cache.get(s), clock())
    assert _open(cache, 50, follower=True) != 0                  # old now, and smaller


def test_follower_handler_sends_only_changes_and_falls_back_to_full():
    h = FetchSessionHandler()

    def part(i, offset, epoch=0):
        return FetchRequest.FetchPartition(partition=i, fetch_offset=offset, current_leader_epoch=epoch,
                                           partition_max_bytes=100)
    wanted = {(TID, i): part(i, 0) for i in range(3)}
    send, forget = h.build(wanted)
    assert (h.session_id, h.epoch, [k[1] for k, _ in send], forget) == (0, 0, [0, 1, 2], [])
    assert h.handle_response(FetchResponse(error_code=0, session_id=77))
    assert (h.session_id, h.epoch) == (77, 1)
    # partition 1 moved, 2 is gone, 3 is new: the new one first, then the changed one
    wanted = {(TID, 0): part(0, 0), (TID, 1): part(1, 5), (TID, 3): part(3, 0)}
    send, forget = h.build(wanted)
    assert ([k[1] for k, _ in send], forget) == ([3, 1], [(TID, 2)])
    assert h.handle_response(FetchResponse(error_code=0, session_id=77)) and h.epoch == 2
    assert h.build(dict(wanted)) == ([], [])                     # nothing changed: nothing named
    # a stale epoch: the next fetch is full, closing the session it names
    assert not h.handle_response(FetchResponse(error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH, session_id=0))
    assert (h.session_id, h.epoch) == (77, 0)
    send, _ = h.build(wanted)
    assert [k[1] for k, _ in send] == [0, 1, 3]
    # the session is unknown to the leader: a full fetch asking for a new one
    assert not h.handle_response(FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND))
    assert (h.session_id, h.epoch) == (0, 0)
    assert h.handle_response(FetchResponse(error_code=0, session_id=0))   # no session given
    assert (h.session_id, h.epoch) == (0, 0)

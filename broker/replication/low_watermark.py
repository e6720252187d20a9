"""DeleteRecords' wait on a partition leader (Kafka's DelayedDeleteRecords): the
answer comes once the partition's low watermark (the smallest log start offset
of the leader and its followers on live brokers, LeaderState.low_watermark)
reaches the offset asked for, REQUEST_TIMED_OUT when the request's timeout
passes first, NOT_LEADER_OR_FOLLOWER when leadership moves meanwhile.

Followers tell their log start in each fetch (after adopting the leader's from
the previous answer), so a waiter is looked at again after each follower fetch
of its partition (ReplicationManager.follower_fetched) and when leadership
goes (ReplicationManager._drop_leader)."""
from __future__ import annotations

import trio

from kproto.errors import ErrorCode


class LowWatermarkWaits:
    def __init__(self):
        self._events: dict[tuple[str, int], set] = {}   # partition -> events of waiting requests

    def wake(self, key) -> None:
        """Something that may move the partition's low watermark happened."""
        events = self._events.pop(key, None)
        if events:
            for ev in events:
                ev.set()

    async def wait(self, manager, part, offset: int, deadline: float) -> tuple[ErrorCode, int]:
        """(error, low watermark) once the low watermark of ``part`` is at least
        ``offset``, or at trio time ``deadline`` (REQUEST_TIMED_OUT and the low
        watermark when the wait began, as Kafka answers an expired request)."""
        key = (part.topic, part.index)
        first = None
        while True:
            if not part.is_leader:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
            low = manager.low_watermark(part)
            if first is None:
                first = low
            if low >= offset:
                return ErrorCode.NONE, low
            if trio.current_time() >= deadline:
                return ErrorCode.REQUEST_TIMED_OUT, first
            ev = trio.Event()
            self._events.setdefault(key, set()).add(ev)
            try:
                with trio.move_on_at(deadline):
                    await ev.wait()
            finally:
                events = self._events.get(key)
                if events is not None:
                    events.discard(ev)
                    if not events:
                        del self._events[key]

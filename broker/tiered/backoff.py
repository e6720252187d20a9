"""Retrying an object-store operation with exponential backoff and jitter.

The copier retries a failed upload until it succeeds (the store may be down for minutes) without
hammering it: delays grow from `initial` by `multiplier` up to `cap`, each drawn with "full
jitter" in [delay * (1 - jitter), delay] so that many partitions retrying at once spread out.
`Backoff` is the pure schedule (seeded random source, no clock); `retry` is the trio loop around
it. Cancelling the surrounding cancel scope (the partition's copier stopping) ends the wait at
once.
"""
from __future__ import annotations

import logging
import random
from typing import Awaitable, Callable, TypeVar

import trio

from broker.tiered.store_types import ObjectStoreError

log = logging.getLogger(__name__)

T = TypeVar("T")


class Backoff:
    """Delays (seconds) before successive retries: next_delay() after each failure, reset() after
    a success."""

    def __init__(self, initial: float = 0.1, cap: float = 30.0, multiplier: float = 2.0,
                 jitter: float = 0.5, rng: random.Random | None = None):
        if not 0 < initial <= cap or multiplier < 1 or not 0 <= jitter <= 1:
            raise ValueError("backoff needs 0 < initial <= cap, multiplier >= 1, 0 <= jitter <= 1")
        self.initial, self.cap, self.multiplier, self.jitter = initial, cap, multiplier, jitter
        self._rng = rng or random.Random()
        self.attempts = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.initial * self.multiplier ** min(self.attempts, 64))
        self.attempts += 1
        return ceiling * (1 - self.jitter * self._rng.random())

    def reset(self) -> None:
        self.attempts = 0


async def retry(operation: Callable[[], Awaitable[T]], *, backoff: Backoff | None = None,
                retry_on: tuple[type[BaseException], ...] = (ObjectStoreError,),
                max_attempts: int | None = None, what: str = "object store operation",
                sleep: Callable[[float], Awaitable[None]] = trio.sleep) -> T:
    """Await `operation()` until it returns, sleeping a backoff delay after each failure of a
    `retry_on` kind (other exceptions propagate at once). After `max_attempts` failures (None:
    no limit) the last error propagates."""
    backoff = backoff or Backoff()
    failures = 0
    while True:
        try:
            return await operation()
        except retry_on as e:
            failures += 1
            if max_attempts is not None and failures >= max_attempts:
                raise
            delay = backoff.next_delay()
            log.warning("%s failed (attempt %d), retrying in %.2fs: %s", what, failures, delay, e)
            await sleep(delay)

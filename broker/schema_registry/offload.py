"""Where the CPU-heavy part of a registry call runs: parsing a schema and
checking its compatibility go to worker threads (at most WORKERS at a time),
so that a huge schema slows its own HTTP call but does not stall the event
loop the broker's Kafka listeners share. What runs there is pure (text and
parsed schemas in, a parsed schema or messages out); reading the store and
writing `_schemas` stay on the event loop."""
from __future__ import annotations

import functools

import trio

WORKERS = 2   # the machines kproto targets are small; more threads would only contend for the GIL

_limiter: trio.CapacityLimiter | None = None


async def run(fn, *args, **kwargs):
    global _limiter
    if _limiter is None:
        _limiter = trio.CapacityLimiter(WORKERS)
    return await trio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=_limiter)

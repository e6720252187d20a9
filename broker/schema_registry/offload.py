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

# one limiter per trio run (an embedded broker may be started more than once in a process)
_limiter: trio.lowlevel.RunVar = trio.lowlevel.RunVar("schema_registry_offload_limiter")


async def run(fn, *args, **kwargs):
    try:
        limiter = _limiter.get()
    except LookupError:
        limiter = trio.CapacityLimiter(WORKERS)
        _limiter.set(limiter)
    return await trio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=limiter)

"""A time budget for one compatibility check. Confluent's registry has none,
but the JSON Schema rules compare every alternative of a `oneOf`/`anyOf`
with every other, so the work grows with the square of the schema (a 50 KB
schema can take seconds, a few hundred KB hours). The walkers of
json_compat, protobuf_compat and the Avro checker call `spend()` at every
node they compare; past the deadline it raises `Exhausted` in the worker
thread itself, so the thread ends and frees its place in offload's limiter
(a Python thread cannot be stopped from outside: abandoning it would leave
it running for as long as the check would have taken)."""
from __future__ import annotations

import contextlib
import threading
import time

DEFAULT_MS = 10_000   # schema.registry.compatibility.check.timeout.ms

_local = threading.local()   # the deadline of the check running in this thread


class Exhausted(Exception):
    """The check ran past its budget."""


@contextlib.contextmanager
def deadline(seconds: float | None):
    """Checks under this block stop `seconds` from now (None: no budget)."""
    previous = getattr(_local, "deadline", None)
    _local.deadline = None if seconds is None else time.monotonic() + seconds
    try:
        yield
    finally:
        _local.deadline = previous


def spend() -> None:
    at = getattr(_local, "deadline", None)
    if at is not None and time.monotonic() > at:
        raise Exhausted

"""A count of the chores partition logs have queued in this process (a rolled segment to
flush, a deleted segment to remove after its delay), so the once-a-second look of
LogManager.periodic skips its walk over every log while none was queued: at 10,000 idle
partitions that walk was the broker's largest idle cost."""
from __future__ import annotations

queued = 0


def note() -> None:
    """A log queued a chore (log.py, log_retention.py)."""
    global queued
    queued += 1

"""The broker task that makes new partitions' logs after the metadata committed them
(ReplicaManager.pending), in slices of bounded event-loop time so that produces and fetches
to the partitions that exist keep being served while thousands of logs are made.

Making a log is mostly file-creating system calls (a directory and five files); doing them in
worker threads did not make them faster on ext4 (docs/performance.md), and a slice on the loop
keeps the log manager single-threaded.

``KPROTO_TEST_HOLD_LOG_CREATION`` names a file: while it exists no log is made (tests: the
window between the answer and the logs, held open on purpose)."""
from __future__ import annotations

import os

import trio

# event-loop time one slice may take: a produce behind it waits at most about this long
SLICE_S = 0.02


async def make_pending_logs(replicas, on_made, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run for the broker's lifetime: wait for queued partitions, make their logs slice by
    slice, and hand each slice's partitions to ``on_made`` (their leader/follower roles)."""
    wake = trio.Event()

    def queued() -> None:
        wake.set()

    replicas.on_pending = queued
    task_status.started()
    try:
        while True:
            if not replicas.pending_count():
                await wake.wait()
                wake = trio.Event()
                continue
            if _held():
                await trio.sleep(0.05)
                continue
            made = replicas.make_pending(SLICE_S)
            if made:
                on_made(made)
            await trio.sleep(0)
    finally:
        replicas.on_pending = None


def _held() -> bool:
    hold = os.environ.get("KPROTO_TEST_HOLD_LOG_CREATION")
    return bool(hold) and os.path.exists(hold)

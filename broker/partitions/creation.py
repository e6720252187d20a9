"""The broker task that makes new partitions' logs after the metadata committed them
(ReplicaManager.pending), in slices of bounded event-loop time so that produces and fetches
to the partitions that exist keep being served while thousands of logs are made.

Making a log is mostly file-creating system calls (a directory and five files); doing them in
worker threads did not make them faster on ext4 (docs/performance.md), and a slice on the loop
keeps the log manager single-threaded.

``KPROTO_TEST_HOLD_LOG_CREATION`` names a file: while it exists no log is made (tests: the
window between the answer and the logs, held open on purpose)."""
from __future__ import annotations

import gc
import os
import time

import trio

# event-loop time of one slice when the loop has nothing else to do; when it has (producers
# retrying the partitions being made, other clients), a slice takes as long as the loop spent
# on the rest since the previous one, up to MAX_SLICE_S: the logs get about half the loop (a
# producer retrying 2,000 partitions not made yet took 95% of it and slowed their making 20x), so a
# storm of retries cannot starve their making. A produce behind a slice waits up to MAX_SLICE_S:
# 20 ms slices put a produce to an existing partition at a p50 of ~15 ms while 10,000 logs were
# made, and slices up to 250 ms most of its p99 (docs/performance.md, issue 26). Short slices
# lose no share now that the other big steps yield too (a produce request of thousands of
# partitions: broker/handlers/produce.py), and a slice's own cost is a few clock reads.
SLICE_S = 0.005
MAX_SLICE_S = 0.01


async def make_pending_logs(replicas, on_made, freeze: bool = False,
                            task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run for the broker's lifetime: wait for queued partitions, make their logs slice by
    slice, and hand each slice's partitions to ``on_made`` (their leader/follower roles).
    ``freeze``: gc.freeze() after each slice (a process of the broker's own: `kproto serve`)."""
    wake = trio.Event()

    def queued() -> None:
        wake.set()

    replicas.on_pending = queued
    last_end = None   # when the previous slice ended (None: the first of a run of slices)
    task_status.started()
    try:
        while True:
            if not replicas.pending_count():
                await wake.wait()
                wake = trio.Event()
                last_end = None
                continue
            if _held():
                await trio.sleep(0.05)
                last_end = None
                continue
            budget = min(MAX_SLICE_S, max(SLICE_S, time.monotonic() - last_end)) if last_end else SLICE_S
            made = replicas.make_pending(budget)
            if made:
                on_made(made)
                if freeze:
                    # what a log is made of lives as long as its partition, as the recovered logs
                    # that start-up freezes (broker/launch/cli.py): out of the cyclic collector's
                    # sight, or each full collection walks every log made so far (up to 0.11 s
                    # of the loop, seven of them while 10,000 logs were made; issue 26)
                    gc.freeze()
            last_end = time.monotonic()
            await trio.sleep(0)
    finally:
        replicas.on_pending = None


def _held() -> bool:
    hold = os.environ.get("KPROTO_TEST_HOLD_LOG_CREATION")
    return bool(hold) and os.path.exists(hold)

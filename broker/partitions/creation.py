"""The broker task that makes new partitions' logs after the metadata committed them
(ReplicaManager.pending), so that produces and fetches to the partitions that exist keep being
served while thousands of logs are made.

Making a log is mostly file-creating system calls (a directory and six files, two of them
preallocated and mapped): kernel time, which on a busy ext4 waits for the journal, tens to
hundreds of milliseconds at a time while thousands are made. A worker thread makes and opens the
new logs (LogManager.open_new, OPEN_BATCH partitions a trip), with the GIL released in every one
of those calls; the event loop registers them (LogManager.adopt: no file system call) in short
slices, oldest first, so the log manager's tables stay the loop's and logs appear in the
records' order. Threads did not make file creation faster on ext4 (docs/performance.md): the
point is the loop's latency, not the creation's speed. A log directory manager without open_new
(several log dirs: broker/storage/jbod.py, where the directory is chosen as the log is made)
has its logs made wholly in the slices.

``KPROTO_TEST_HOLD_LOG_CREATION`` names a file: while it exists no log is made, not even in
the thread (tests: the window between the answer and the logs, held open on purpose)."""
from __future__ import annotations

import gc
import os
import time

import trio

from broker.storage.open_files import off_loop

# event-loop time of one slice when the loop has nothing else to do; when it has (producers
# retrying the partitions being made, other clients), a slice takes as long as the loop spent
# on the rest since the previous one, up to MAX_SLICE_S: the logs get about half the loop (a
# producer retrying 2,000 partitions not made yet took 95% of it and slowed their making 20x), so a
# storm of retries cannot starve their making, and a produce behind a slice waits at most that.
# (The cap was 0.25 s while the slices made the files too: a probe produce's p99 was ~80 ms.)
SLICE_S = 0.005
MAX_SLICE_S = 0.02
# partitions per trip to the worker thread (0.5-4 ms each on a busy ext4), and how many opened
# logs may wait for the loop. A trip's answer waits for the event loop's next turn, 0.1 s and more
# under a storm of retried produces: trips of 32 left the thread idle three quarters of the time
# and made ~150 logs a second there. More trips in flight (three threads) made them faster but
# doubled the probe produce's median and p99 (the threads' Python competes with the loop's)
OPEN_BATCH = 128
OPENED_AHEAD = 4 * OPEN_BATCH
# logs made between two gc.freeze() calls. A new log is ~50 objects that live as long as it does;
# 10,000 of them grew the collector's oldest generation by ~0.5 M objects, and each time it grew
# by a quarter the collector walked all of it: 7 full collections while 10,000 logs were made,
# the last ones 0.25-0.9 s each, on the event loop. Frozen, they are out of its walks, as the
# start-up's objects are (broker/launch/cli.py). The price is the same as there: a cycle among a
# frozen log's objects is not freed when its topic is deleted (reference counting frees the rest)
FREEZE_EVERY = 1000



async def make_pending_logs(replicas, on_made, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run for the broker's lifetime: wait for queued partitions, have their logs made in a
    worker thread, register them slice by slice, and hand each slice's partitions to
    ``on_made`` (their leader/follower roles)."""
    state = _State()

    def queued() -> None:
        state.wake()

    replicas.on_pending = queued
    try:
        async with trio.open_nursery() as nursery:
            threaded = getattr(replicas.logs, "open_new", None) is not None
            if threaded:
                nursery.start_soon(_open_logs, replicas, state)
            task_status.started()
            await _make_logs(replicas, on_made, state, threaded)
    finally:
        replicas.on_pending = None
        # (shutdown) logs opened but not registered are removed, not left with their indexes
        # preallocated for a clean start to load: the next start makes them again
        replicas.discard_opened()


class _State:
    """The two tasks' wake-ups: one Event each, replaced once seen."""

    def __init__(self):
        self.for_maker = trio.Event()
        self.for_opener = trio.Event()

    def wake(self) -> None:
        self.for_maker.set()
        self.for_opener.set()


async def _make_logs(replicas, on_made, state: _State, opened_only: bool) -> None:
    last_end = None   # when the previous slice ended (None: the first of a run of slices)
    unfrozen = 0      # logs made since the last gc.freeze()
    while True:
        if not replicas.pending_count():
            await state.for_maker.wait()
            state.for_maker = trio.Event()
            last_end = None
            continue
        if _held():
            await trio.sleep(0.05)
            last_end = None
            continue
        budget = min(MAX_SLICE_S, max(SLICE_S, time.monotonic() - last_end)) if last_end else SLICE_S
        before = replicas.pending_count()
        made = replicas.make_pending(budget, opened_only=opened_only)
        if made:
            on_made(made)
            unfrozen += len(made)
            if unfrozen >= FREEZE_EVERY:
                gc.freeze()
                unfrozen = 0
        if replicas.pending_count() < before:   # (made, or failed: offline)
            state.for_opener.set()   # (room ahead again)
            last_end = time.monotonic()
            await trio.sleep(0)
        else:   # the head of the queue is still with the thread
            await state.for_maker.wait()
            state.for_maker = trio.Event()
            last_end = None


async def _open_logs(replicas, state: _State) -> None:
    logs = replicas.logs
    while True:
        full = replicas.opened_ahead() >= OPENED_AHEAD and not replicas.head_waits()
        batch = [] if _held() or full else replicas.to_open(OPEN_BATCH)
        if not batch:
            with trio.move_on_after(0.05 if _held() else float("inf")):
                await state.for_opener.wait()
            state.for_opener = trio.Event()
            continue
        with trio.CancelScope(shield=True):   # (what the thread made is always accounted for)
            replicas.opened(await trio.to_thread.run_sync(_open_batch, logs, batch))
        state.for_maker.set()


def _open_batch(logs, batch: list) -> list:
    """(In the worker thread.) open_new for each (key, topic id, config): (key, topic id,
    config, what it returned or raised)."""
    out = []
    off_loop(True)   # (an EMFILE here hands the log back to the loop: open_files.py)
    try:
        for key, topic_id, config in batch:
            try:
                got = logs.open_new(key[0], key[1], topic_id, config)
            except Exception as exc:   # raised again on the loop, by make_pending
                got = exc
            out.append((key, topic_id, config, got))
    finally:
        off_loop(False)
    return out


def _held() -> bool:
    hold = os.environ.get("KPROTO_TEST_HOLD_LOG_CREATION")
    return bool(hold) and os.path.exists(hold)

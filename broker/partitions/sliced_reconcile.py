"""The broker's reconcile of a large metadata change, in slices of the event loop (issue 26).

A leadership change at 10,000 RF=3 partitions on three nodes (a fence, a restarted node's
preferred elections) names thousands of partitions; reconciling each one (its log's leader
epoch, becoming leader or follower, its fetcher) in the step that applied the records held the
node's loop for 0.1-0.5 s, while its followers' fetches, heartbeats and clients waited. The image
is still applied whole in that step (readers never see half a batch); only the reconcile that
follows runs here, SLICE_PARTITIONS partitions at a time, the loop serving other tasks between
slices. Each partition is reconciled against the image of its turn, so a partition named again by
a later change before its turn is reconciled once, in its first place. Until its turn a
partition keeps the role it had: this broker answers for it as a broker whose metadata arrives a
little later would (a new leadership: NOT_LEADER_OR_FOLLOWER, which clients retry), as Kafka's
brokers each apply a change when it reaches them.

A change of at most SLICE_PARTITIONS partitions with nothing queued is reconciled at once, as
before: a client that produces the moment CreateTopics is answered finds its few partitions. So
are the internal topics' partitions (``urgent``) of any change: the group and transaction
coordinators follow their leadership from the image in the same step (their metadata listeners,
Kafka's onElection), after the roles they write through.

``KPROTO_TEST_HOLD_ROLES`` names a file: while it exists, a run of slices stops after its first
one (tests: the window where some partitions have their new role and some not, held open)."""
from __future__ import annotations

import itertools
import os
from collections.abc import Callable

import trio

# partitions per slice: becoming leader or follower costs 40-100 us a partition, so a slice stays
# near 10 ms; a step of the loop above ~100 ms is what the goal forbids
SLICE_PARTITIONS = 128
COMMIT_WAIT_S = 0.1   # a look again at whether the image holds uncommitted proposals, at most this late


class SlicedReconcile:
    def __init__(self, reconcile: Callable[[dict], None], committed: Callable[[], bool] | None = None,
                 when_committed: Callable[[Callable[[], None]], None] | None = None,
                 urgent: Callable[[tuple[str, int]], bool] | None = None):
        # reconcile(keys): the hosted logs, then the roles, of these (topic, index) keys
        self._reconcile = reconcile
        # the image holds nothing uncommitted (a quorum leader's own proposals): slices wait for it,
        # as the broker's reconcile does (broker/quorum/replicated.py when_committed)
        self._committed = committed or (lambda: True)
        self._when_committed = when_committed
        self._urgent = urgent or (lambda _key: False)   # keys never queued
        self._queue: dict[tuple[str, int], None] = {}
        self._wake: trio.Event | None = None   # set while run() serves
        self.slices = 0                         # slices run by the task (tests, the bench)
        self._committed_event = trio.Event()    # set when a commit ran a slice (run() waits on it)

    def pending(self) -> int:
        return len(self._queue)

    def submit(self, keys: dict) -> None:
        """Reconcile ``keys`` (in order): at once when few and nothing is queued (or no task runs),
        else queued behind what is."""
        if self._wake is None or (not self._queue and len(keys) <= SLICE_PARTITIONS):
            self._reconcile(keys)
            return
        now = {k: None for k in keys if self._urgent(k)}
        if now:
            self._reconcile(now)
        self._queue.update((k, None) for k in keys if k not in now)
        self._wake.set()

    def clear(self) -> None:
        """A full walk is reconciling every partition now: nothing queued is left to do."""
        self._queue.clear()

    def _on_committed(self) -> None:
        if self._queue and self._wake is not None and not _held():
            self._slice()
            self._committed_event.set()

    def _slice(self) -> None:
        keys = dict.fromkeys(itertools.islice(self._queue, SLICE_PARTITIONS))
        for key in keys:
            del self._queue[key]
        self._reconcile(keys)
        self.slices += 1

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """For the broker's lifetime: the queued partitions, a slice per step of the loop."""
        self._wake = trio.Event()
        task_status.started()
        ran = 0   # slices in this run of them
        try:
            while True:
                if not self._queue:
                    await self._wake.wait()
                    self._wake = trio.Event()
                    ran = 0
                    continue
                await trio.sleep(0)   # (the loop serves everything else between slices)
                if ran and _held():
                    await trio.sleep(0.05)
                    continue
                if not self._committed():
                    # a quorum leader's proposals ahead of the commit: the slices act on committed
                    # metadata only. The next slice runs in the commit's own step, when the image
                    # is committed (on a busy controller it seldom is by the time a task runs);
                    # a rebuilt image calls no waiter: hence the timeout
                    if self._committed_event.is_set():
                        self._committed_event = trio.Event()
                    if self._when_committed is not None:
                        self._when_committed(self._on_committed)
                    with trio.move_on_after(COMMIT_WAIT_S):
                        await self._committed_event.wait()
                    continue
                if self._queue:
                    self._slice()
                    ran += 1
        finally:
            self._wake = None
            if self._queue:   # (the broker stops: nothing serves a role any more)
                self._queue.clear()


def _held() -> bool:
    hold = os.environ.get("KPROTO_TEST_HOLD_ROLES")
    return bool(hold) and os.path.exists(hold)

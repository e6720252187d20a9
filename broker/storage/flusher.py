"""Group commit: the broker's fsyncs, off the trio thread.

Partition logs hand their due flushes (``flush.messages``, ``flush.ms``,
rolled segments) to the Flusher through ``PartitionLog.on_flush_due``. The
flusher works in rounds: a round takes every log that asked since the last
one, fdatasyncs their segment files and indexes in one worker thread, then
moves each recovery point up to the log end the round started from (never
further). Appends that arrive meanwhile wait for the next round, which covers
them all: concurrent producers, and the partitions of one request, share a
round instead of queueing one fsync each, and the trio thread hands over to
a thread once per round (on a busy two-core machine every hand-over costs
a scheduling delay).

Two lanes, each one round at a time: ``ack`` for the flushes producers may
be waiting on (flush.messages, flush.ms) and ``background`` for segments a
roll left behind, so that a large rolled segment of one topic does not hold
up the acknowledgements of another.

Produce with acks=-1 on a topic with ``flush.messages=1`` (Kafka's fsync
before ack) awaits wait_flushed() before answering. Kafka fsyncs in the
request thread; here the other connections keep being served meanwhile.

A failed fsync takes the log out of durable service, as Kafka takes the log
directory offline: after an fsync error the kernel may have dropped the dirty
pages, and a later fsync that succeeds would not prove anything. Waiters on
that log get False; its recovery point no longer moves.
"""
from __future__ import annotations

import heapq
import itertools
import logging

import trio

from .limits import flush_files_budget

log = logging.getLogger("kproto.flusher")


class _Waiter:
    __slots__ = ("event", "ok")

    def __init__(self):
        self.event = trio.Event()
        self.ok = True


class _Lane:
    __slots__ = ("name", "wanted", "kick")

    def __init__(self, name: str):
        self.name = name
        self.wanted: dict = {}  # log -> flush up to (None: its end), until its round starts
        self.kick = trio.Event()


def _sync_all(targets: list) -> list[OSError | None]:
    """The worker thread's part of a round: every log's fsyncs, one error
    (or None) per log. The descriptors are closed back on the trio thread."""
    errors = []
    for t in targets:
        try:
            t.sync(close=False)
            errors.append(None)
        except OSError as exc:
            errors.append(exc)
    return errors


class Flusher:
    def __init__(self):
        self._ack = _Lane("ack")
        self._background = _Lane("background")
        self._failed: set = set()
        self.on_disk_error = None   # callable(OSError): the broker's LogDirFailures.report
        # log -> heap of (offset, seq, waiter): wake when the recovery point passes offset
        self._waiters: dict = {}
        self._seq = itertools.count()
        # counters (tests, diagnostics)
        self.rounds = 0           # worker-thread hand-overs
        self.flushes = 0          # logs flushed (one fdatasync per file each)
        self.records_covered = 0  # offsets the recovery points moved over through them
        self.failures = 0
        # called with (log, new recovery point) after each completed flush (tests)
        self.on_flushed = None

    # -- requests ------------------------------------------------------------

    def request(self, plog, upto: int | None = None) -> None:
        """Flush ``plog`` up to ``upto`` (None: its end) soon. Cheap; called
        from appends (PartitionLog.on_flush_due) on the trio thread."""
        if upto is None:
            lane = self._ack
            lane.wanted[plog] = None
        else:
            lane = self._background
            current = lane.wanted.get(plog)
            if current is None or upto > current:
                lane.wanted[plog] = upto
        lane.kick.set()

    async def wait_flushed(self, plog, offset: int) -> bool:
        """Return once a flush covered ``offset`` of ``plog`` (True), or once
        none ever will (False: the fsync failed or the log was closed)."""
        if plog.recovery_point > offset:
            return True
        if plog in self._failed or plog.closed:
            return False
        waiter = _Waiter()
        heapq.heappush(self._waiters.setdefault(plog, []), (offset, next(self._seq), waiter))
        self.request(plog)  # (the append usually asked already)
        await waiter.event.wait()
        return waiter.ok

    # -- the rounds ------------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve flush requests until cancelled (a task of the broker's nursery)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._serve, self._ack)
            nursery.start_soon(self._serve, self._background)
            task_status.started()

    async def _serve(self, lane: _Lane) -> None:
        while True:
            if not lane.wanted:
                await lane.kick.wait()
            lane.kick = trio.Event()
            wanted, lane.wanted = lane.wanted, {}
            jobs = []
            # a round's descriptors (up to four per segment flushed) stay within a
            # budget: thousands of logs due at once are flushed over several rounds
            # instead of running the process out of open files
            budget = flush_files_budget()
            opened = 0
            items = list(wanted.items())
            for i, (plog, upto) in enumerate(items):
                if opened >= budget:
                    for later, later_upto in items[i:]:
                        self._defer(lane, later, later_upto)
                    break
                if plog in self._failed:
                    self._wake(plog, failed=True)
                    continue
                try:
                    targets = plog.flush_targets(upto)
                except Exception:
                    # (a log closed by topic deletion between the request and now)
                    if not plog.closed:
                        log.exception("preparing the flush of %s failed", plog)
                    targets = None
                if targets is None:
                    self._wake(plog, failed=plog.closed)
                    continue
                opened += len(targets.fds)
                jobs.append((plog, targets, plog.recovery_point))
            if not jobs:
                continue
            try:
                # not cancellable: the descriptors are the thread's until it returns
                errors = await trio.to_thread.run_sync(_sync_all, [t for _, t, _ in jobs])
            except BaseException:
                # cancelled before the thread started (shutdown): nothing was synced
                for plog, targets, _ in jobs:
                    targets.close()
                    plog.flushed(targets, ok=False)
                raise
            self.rounds += 1
            for (plog, targets, before), error in zip(jobs, errors):
                targets.close()
                if error is not None:
                    plog.flushed(targets, ok=False)
                    self.failures += 1
                    self._failed.add(plog)
                    log.error("fsync of %s failed; its appends are no longer acknowledged as durable: %s",
                              plog, error)
                    if self.on_disk_error is not None:
                        if error.filename is None:
                            error.filename = plog.dir
                        self.on_disk_error(error)
                    self._wake(plog, failed=True)
                    continue
                plog.flushed(targets)
                self.flushes += 1
                self.records_covered += max(0, plog.recovery_point - before)
                if self.on_flushed is not None:
                    self.on_flushed(plog, plog.recovery_point)
                self._wake(plog, failed=plog.closed)

    @staticmethod
    def _defer(lane: _Lane, plog, upto) -> None:
        """Back into the lane for its next round (merged with a newer request)."""
        if plog in lane.wanted:
            current = lane.wanted[plog]
            if current is None or upto is None:
                lane.wanted[plog] = None
            else:
                lane.wanted[plog] = max(current, upto)
        else:
            lane.wanted[plog] = upto
        lane.kick.set()

    def _wake(self, plog, failed: bool = False) -> None:
        heap = self._waiters.get(plog)
        if heap is None:
            return
        if failed:
            for _offset, _seq, waiter in heap:
                waiter.ok = False
                waiter.event.set()
            heap.clear()
        else:
            point = plog.recovery_point
            while heap and heap[0][0] < point:
                heapq.heappop(heap)[2].event.set()
        if not heap:
            del self._waiters[plog]

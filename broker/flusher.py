"""Group commit: the broker's fsyncs, off the trio thread.

Partition logs hand their due flushes (``flush.messages``, ``flush.ms``,
rolled segments) to the Flusher through ``PartitionLog.on_flush_due``. Per
log, one flush runs at a time, in a worker thread: fdatasync of the segment
files and their indexes, then the recovery point moves up to the log end the
flush started from (never further). Appends that arrive meanwhile are covered
by the next flush, which takes them all at once: concurrent producers share
fsyncs instead of queueing one each.

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

log = logging.getLogger("kproto.flusher")

# fsyncs of different logs may run side by side (each is mostly waiting on
# the device); more threads than this only queue inside the kernel
MAX_FLUSH_THREADS = 4


class _Waiter:
    __slots__ = ("event", "ok")

    def __init__(self):
        self.event = trio.Event()
        self.ok = True


class Flusher:
    def __init__(self, max_threads: int = MAX_FLUSH_THREADS):
        self._nursery: trio.Nursery | None = None
        self._limiter = trio.CapacityLimiter(max_threads)
        # log -> flush wanted up to (None: its end); a log is here until its flush starts
        self._wanted: dict = {}
        self._running: set = set()
        self._failed: set = set()
        # log -> heap of (offset, seq, waiter): wake when the recovery point passes offset
        self._waiters: dict = {}
        self._seq = itertools.count()
        # counters (tests, diagnostics)
        self.flushes = 0          # completed flushes, each one fdatasync per file it covered
        self.records_covered = 0  # offsets the recovery points moved over through them
        self.failures = 0
        # called with (log, new recovery point) after each completed flush (tests)
        self.on_flushed = None

    # -- requests ------------------------------------------------------------

    def request(self, plog, upto: int | None = None) -> None:
        """Flush ``plog`` up to ``upto`` (None: its end) soon. Cheap; called
        from appends (PartitionLog.on_flush_due) on the trio thread."""
        wanted = self._wanted
        if plog in wanted:
            current = wanted[plog]
            if current is not None and (upto is None or upto > current):
                wanted[plog] = upto
        else:
            wanted[plog] = upto
        if plog not in self._running and self._nursery is not None:
            self._running.add(plog)
            self._nursery.start_soon(self._flush_log, plog)

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

    # -- the flushing ----------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve flush requests until cancelled (a task of the broker's nursery)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for plog in list(self._wanted):  # asked for before the broker ran
                if plog not in self._running:
                    self._running.add(plog)
                    nursery.start_soon(self._flush_log, plog)
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None

    async def _flush_log(self, plog) -> None:
        try:
            while plog in self._wanted:
                upto = self._wanted.pop(plog)
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
                before = plog.recovery_point
                try:
                    # not cancellable: the descriptors are the thread's until it returns
                    await trio.to_thread.run_sync(targets.sync, limiter=self._limiter)
                except OSError as exc:
                    plog.flushed(targets, ok=False)
                    self.failures += 1
                    self._failed.add(plog)
                    log.error("fsync of %s failed; its appends are no longer acknowledged as durable: %s",
                              plog, exc)
                    self._wake(plog, failed=True)
                    continue
                except BaseException:
                    # cancelled before the thread started (shutdown): nothing was synced
                    targets.close()
                    plog.flushed(targets, ok=False)
                    raise
                plog.flushed(targets)
                self.flushes += 1
                self.records_covered += max(0, plog.recovery_point - before)
                if self.on_flushed is not None:
                    self.on_flushed(plog, plog.recovery_point)
                self._wake(plog, failed=plog.closed)
        finally:
            self._running.discard(plog)
            if not self._waiters.get(plog, True):
                del self._waiters[plog]

    def _wake(self, plog, failed: bool = False) -> None:
        heap = self._waiters.get(plog)
        if not heap:
            return
        if failed:
            for _offset, _seq, waiter in heap:
                waiter.ok = False
                waiter.event.set()
            heap.clear()
            return
        point = plog.recovery_point
        while heap and heap[0][0] < point:
            heapq.heappop(heap)[2].event.set()

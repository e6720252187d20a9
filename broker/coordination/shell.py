"""One trio shell for the coordinators' pure state machines (the group and
the transaction coordinators), so each coordinator keeps only what is its
own: which topic it writes, how a record is built, what a request means.

A machine given to CoordinatorShell has:
- request methods `method(ticket, now_ms, *args) -> effects`; the shell's
  `call` makes the ticket and waits until an effects answers it
  (`effects.responses`: a list of (ticket, result));
- `next_deadline() -> ms or None` and `tick(now_ms) -> effects`: the timers
  (the machine may be None until its coordinator builds it at first use and
  sets `shell.machine`: no timers until then);
- effects with one list attribute per kind of output (records to append,
  markers to write...). Each kind is an `Output`: `write(item, complete)`
  does the I/O and calls `complete(outcome)` once the item is durable, now
  or later (`sync_output` wraps a plain function returning the outcome);
  `done(item, outcome, now_ms) -> effects` feeds the outcome back (the
  durability callback). With `holds_answers` the answers given in the same
  step wait until that step's items are durable; a failed item (a true
  outcome, an error code) turns them into `fail_answer(result, outcome)`.

Every step's effects go through one queue, so an outcome fed back while
effects are being done (a write that completes at once, a coordinator that
calls the other) is handled after the current one, never inside it.

Timers run from one task: it sleeps until the machine's next deadline, in a
cancel scope that is cancelled when a step sets an earlier one. `run` owns
that task (and the loading) in its nursery; when it ends, requests still
waiting raise CoordinatorClosed.

The metadata quorum's shell (broker/quorum/shell.py) keeps its own loop:
docs/architecture.md, "Coordinator shell", says why.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Optional

import trio

from kproto.errors import ErrorCode

from broker.storage.replay import stored_batches

log = logging.getLogger("kproto.coordination")


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class CoordinatorClosed(Exception):
    """The coordinator stopped before the request was answered."""


class Ticket:
    """A request waiting for its answer."""
    __slots__ = ("event", "result", "closed")

    def __init__(self):
        self.event = trio.Event()
        self.result = None
        self.closed = False


@dataclass
class Output:
    """How the shell hands a state machine's output on: write, sync, done, failure answers."""
    write: Optional[Callable[[Any, Callable[[Any], None]], None]] = None
    done: Optional[Callable[[Any, Any, int], Any]] = None
    holds_answers: bool = False
    fail_answer: Optional[Callable[[Any, Any], Any]] = None
    sync: Optional[Callable[[Any], Any]] = None     # instead of write: durable (or failed) when it returns


def sync_output(fn: Callable[[Any], Any], **kwargs) -> Output:
    """An output whose write is done (durable or failed) when fn returns
    its outcome: the common case, without a completion callback per item."""
    return Output(sync=fn, **kwargs)


class _Step:
    """Answers of one step held until the step's items are durable."""
    __slots__ = ("answers", "waiting", "failure", "armed", "fail_answer")

    def __init__(self, answers):
        self.answers = answers
        self.waiting = 0
        self.failure = None
        self.armed = False
        self.fail_answer = None


class CoordinatorShell:
    def __init__(self, machine, name: str, outputs: dict[str, Output], clock: Callable[[], int] = wall_clock_ms):
        self.machine = machine
        self.name = name
        self.outputs = dict(outputs)
        self._plan = [(name, out.sync, out.done, out.holds_answers, out) for name, out in outputs.items()]
        self.now_ms = clock
        self._queue: deque = deque()
        self._applying = False
        self._timer_scope: trio.CancelScope | None = None
        self._sleeping_until: int | None = None
        self._waiting: set[Ticket] = set()
        self._closed = False

    # ================================================================ driving

    async def call(self, method, *args, **kwargs):
        """Feed one request to the machine and wait for its answer."""
        if self._closed:
            raise CoordinatorClosed(f"the {self.name} is closed")
        ticket = Ticket()
        self.apply(method(ticket, self.now_ms(), *args, **kwargs))
        if not ticket.event.is_set():
            self._waiting.add(ticket)
            try:
                await ticket.event.wait()
            finally:
                self._waiting.discard(ticket)
            if ticket.closed:
                raise CoordinatorClosed(f"the {self.name} closed before answering")
        return ticket.result

    def apply(self, fx) -> None:
        """Do what the machine asked, feeding outcomes back in, until nothing
        is left (re-entrant calls queue behind the running one)."""
        if fx is None:
            return
        if self._applying:
            self._queue.append(fx)
            return
        self._applying = True
        try:
            self._do(fx)
            queue = self._queue
            while queue:
                self._do(queue.popleft())
        finally:
            self._applying = False
        if self._timer_scope is not None:
            self._wake_timers()

    def _do(self, fx) -> None:
        answers = fx.responses
        later = None                 # answers waiting for writes completed later
        failure = fail = None        # the first failed write holding answers
        for name, sync, done, holds, out in self._plan:
            items = getattr(fx, name, None)
            if not items:
                continue
            hold = holds and answers
            for item in items:
                if sync is not None:
                    try:
                        outcome = sync(item)
                    except Exception:
                        log.exception("%s: writing %r failed", self.name, item)
                        outcome = ErrorCode.UNKNOWN_SERVER_ERROR
                    if done is not None:
                        more = done(item, outcome, self.now_ms())
                        if more is not None:
                            self._queue.append(more)   # done after this step, by apply's loop
                    if hold and outcome and failure is None:
                        failure, fail = outcome, out.fail_answer
                elif hold:
                    if later is None:
                        later = _Step(answers)
                    later.waiting += 1
                    self._write(out, item, later)
                else:
                    self._write(out, item, None)
        if later is None:
            if failure is not None and fail is not None:
                answers = [(ticket, fail(result, failure)) for ticket, result in answers]
            for ticket, result in answers:
                if isinstance(ticket, Ticket):
                    ticket.result = result
                    ticket.event.set()
        else:
            if failure is not None and later.failure is None:
                later.failure, later.fail_answer = failure, fail
            later.armed = True
            if later.waiting == 0:
                self._release(later)

    def _write(self, out: Output, item, step: _Step | None) -> None:
        finished = False

        def complete(outcome) -> None:
            nonlocal finished
            if finished:
                return
            finished = True
            if out.done is not None:
                self.apply(out.done(item, outcome, self.now_ms()))
            if step is not None:
                step.waiting -= 1
                if outcome and step.failure is None:
                    step.failure = outcome
                    step.fail_answer = out.fail_answer
                if step.armed and step.waiting == 0:
                    self._release(step)

        try:
            out.write(item, complete)
        except Exception:
            log.exception("%s: writing %r failed", self.name, item)
            complete(ErrorCode.UNKNOWN_SERVER_ERROR)

    def _release(self, step: _Step) -> None:
        if step.failure is not None and step.fail_answer is not None:
            fail = step.fail_answer
            self._answer([(ticket, fail(result, step.failure)) for ticket, result in step.answers])
        else:
            self._answer(step.answers)

    @staticmethod
    def _answer(answers) -> None:
        for ticket, result in answers:
            if isinstance(ticket, Ticket):
                ticket.result = result
                ticket.event.set()

    # ================================================================ timers

    def _wake_timers(self) -> None:
        if self._timer_scope is None or self.machine is None:
            return
        deadline = self.machine.next_deadline()
        if deadline is not None and (self._sleeping_until is None or deadline < self._sleeping_until):
            self._timer_scope.cancel()

    async def _run_timers(self) -> None:
        while True:
            deadline = self.machine.next_deadline() if self.machine is not None else None
            with trio.CancelScope() as scope:
                self._timer_scope = scope
                self._sleeping_until = deadline
                if deadline is None:
                    await trio.sleep_forever()
                else:
                    await trio.sleep(max(0, deadline - self.now_ms()) / 1000)
            self._timer_scope = None
            self._sleeping_until = None
            if self._closed:
                return
            if scope.cancelled_caught and (deadline is None or deadline > self.now_ms()):
                continue   # an earlier timer was set: sleep again
            try:
                self.apply(self.machine.tick(self.now_ms()))
            except Exception:
                log.exception("%s timers failed", self.name)

    # ================================================================ life

    async def run(self, load=None, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Run the timers (and `await load()` first thing) until cancelled."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._run_timers)
                task_status.started()
                if load is not None:
                    await load()
        finally:
            self.close()

    def close(self) -> None:
        """Requests still waiting raise CoordinatorClosed; new ones too."""
        self._closed = True
        if self._timer_scope is not None:
            self._timer_scope.cancel()
        for ticket in list(self._waiting):
            if not ticket.event.is_set():
                ticket.closed = True
                ticket.event.set()

    async def load(self, partitions, load_partition, finish_load, topic: str) -> None:
        """Replay each partition (`await load_partition(p)`), then feed
        `finish_load(p, now_ms)`; a partition that fails to load is logged and
        finished all the same (its groups or ids start empty)."""
        for partition in sorted(partitions):
            try:
                await load_partition(partition)
            except Exception:
                log.exception("loading %s-%d failed", topic, partition)
            self.apply(finish_load(partition, self.now_ms()))


async def replay_partition(partition, on_batch) -> None:
    """on_batch(header, batch) for every stored batch below the high
    watermark, yielding to trio between chunks."""
    for chunk in stored_batches(partition.log, partition.high_watermark):
        for header, batch in chunk:
            on_batch(header, batch)
        await trio.sleep(0)


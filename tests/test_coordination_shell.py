"""The coordinators' shell (broker/coordination/shell.py) driving a toy
state machine on trio's mock clock: timers fire in deadline order, answers
wait until their appends are durable, a failed append fails them with the
error, a durability callback feeds the machine, and closing wakes waiters."""
from __future__ import annotations

import trio
import trio.testing

from kproto.errors import ErrorCode

from broker.coordination.shell import CoordinatorClosed, CoordinatorShell, Output, sync_output


class Fx:
    def __init__(self):
        self.responses = []
        self.appends = []


class Toy:
    """Requests: `put` answers at once with an append of the value; `later`
    answers only once `written` hears its append is done. Timers: named
    deadlines fired by tick."""

    def __init__(self):
        self.deadlines: dict[str, int] = {}
        self.fired: list[tuple[str, int]] = []
        self.waiting: dict[object, object] = {}

    def put(self, ticket, now_ms, value):
        fx = Fx()
        fx.appends.append(value)
        fx.responses.append((ticket, f"ok {value}"))
        return fx

    def later(self, ticket, now_ms, value):
        fx = Fx()
        fx.appends.append(value)
        self.waiting[value] = ticket
        return fx

    def written(self, value, error, now_ms):
        fx = Fx()
        ticket = self.waiting.pop(value, None)
        if ticket is not None:
            fx.responses.append((ticket, error or f"written {value}"))
        return fx

    def set_timer(self, ticket, now_ms, name, deadline):
        self.deadlines[name] = deadline
        fx = Fx()
        fx.responses.append((ticket, None))
        return fx

    def next_deadline(self):
        return min(self.deadlines.values(), default=None)

    def tick(self, now_ms):
        for name, deadline in sorted(self.deadlines.items(), key=lambda kv: kv[1]):
            if deadline <= now_ms:
                self.fired.append((name, now_ms))
                del self.deadlines[name]
        return Fx()


def mock_ms():
    return int(trio.current_time() * 1000)


class Disk:
    """Appends become durable when `sync()` is called, or fail with fail()."""

    def __init__(self):
        self.pending = []
        self.log = []

    def write(self, item, complete):
        self.pending.append((item, complete))

    def sync(self, error=ErrorCode.NONE):
        pending, self.pending = self.pending, []
        for item, complete in pending:
            if not error:
                self.log.append(item)
            complete(error)


def _run(test):
    async def bounded():
        with trio.fail_after(60):   # virtual seconds: a request never answered fails the test
            await test()

    trio.run(bounded, clock=trio.testing.MockClock(autojump_threshold=0))


def test_timers_fire_in_deadline_order_even_when_an_earlier_one_comes_later():
    async def main():
        toy = Toy()
        shell = CoordinatorShell(toy, "toy", {}, clock=mock_ms)
        async with trio.open_nursery() as nursery:
            await nursery.start(shell.run)
            await shell.call(toy.set_timer, "late", 5000)
            await shell.call(toy.set_timer, "middle", 3000)
            await trio.sleep(1)
            # the shell sleeps until 3000: an earlier deadline must wake it
            await shell.call(toy.set_timer, "early", 2000)
            await trio.sleep(10)
            nursery.cancel_scope.cancel()
        assert toy.fired == [("early", 2000), ("middle", 3000), ("late", 5000)]

    _run(main)


def test_answers_wait_until_the_appends_are_durable():
    async def main():
        toy, disk = Toy(), Disk()
        shell = CoordinatorShell(toy, "toy", {"appends": Output(disk.write, holds_answers=True)}, clock=mock_ms)
        answers = []
        async with trio.open_nursery() as nursery:
            await nursery.start(shell.run)

            async def put():
                answers.append(await shell.call(toy.put, "a"))

            nursery.start_soon(put)
            await trio.sleep(1)
            assert answers == [] and [item for item, _ in disk.pending] == ["a"]
            disk.sync()
            await trio.sleep(0.001)
            assert answers == ["ok a"] and disk.log == ["a"]
            nursery.cancel_scope.cancel()

    _run(main)


def test_a_failed_append_fails_the_waiting_answers_with_its_error():
    async def main():
        toy, disk = Toy(), Disk()
        out = Output(disk.write, holds_answers=True, fail_answer=lambda result, error: f"failed {error.name}")
        shell = CoordinatorShell(toy, "toy", {"appends": out}, clock=mock_ms)
        answers = []
        async with trio.open_nursery() as nursery:
            await nursery.start(shell.run)

            async def put(value):
                answers.append(await shell.call(toy.put, value))

            nursery.start_soon(put, "a")
            nursery.start_soon(put, "b")
            await trio.sleep(1)
            disk.sync(ErrorCode.NOT_ENOUGH_REPLICAS)
            await trio.sleep(0.001)
            assert answers == ["failed NOT_ENOUGH_REPLICAS"] * 2 and disk.log == []
            nursery.cancel_scope.cancel()

    _run(main)


def test_the_durability_callback_feeds_the_machine_which_answers():
    async def main():
        toy, disk = Toy(), Disk()
        shell = CoordinatorShell(toy, "toy", {"appends": Output(disk.write, done=toy.written)}, clock=mock_ms)
        answers = []
        async with trio.open_nursery() as nursery:
            await nursery.start(shell.run)

            async def later(value):
                answers.append(await shell.call(toy.later, value))

            nursery.start_soon(later, "x")
            await trio.sleep(1)
            assert answers == []
            disk.sync()
            nursery.start_soon(later, "y")
            await trio.sleep(1)
            disk.sync(ErrorCode.KAFKA_STORAGE_ERROR)
            await trio.sleep(0.001)
            assert answers == ["written x", ErrorCode.KAFKA_STORAGE_ERROR]
            nursery.cancel_scope.cancel()

    _run(main)


def test_a_synchronous_output_answers_in_the_same_step_and_a_raising_one_is_an_error():
    async def main():
        toy = Toy()
        written = []

        def write(value):
            if value == "bad":
                raise OSError("disk gone")
            written.append(value)
            return ErrorCode.NONE

        shell = CoordinatorShell(toy, "toy", {"appends": sync_output(write, done=toy.written)}, clock=mock_ms)
        assert await shell.call(toy.later, "a") == "written a"
        assert await shell.call(toy.later, "bad") == ErrorCode.UNKNOWN_SERVER_ERROR
        assert written == ["a"]

    _run(main)


def test_closing_wakes_waiting_requests_and_refuses_new_ones():
    async def main():
        toy, disk = Toy(), Disk()
        shell = CoordinatorShell(toy, "toy", {"appends": Output(disk.write, holds_answers=True)}, clock=mock_ms)
        errors = []

        async def put():
            try:
                await shell.call(toy.put, "a")
            except CoordinatorClosed as exc:
                errors.append(exc)

        async with trio.open_nursery() as outer:
            outer.start_soon(put)
            with trio.move_on_after(1):
                await shell.run(task_status=trio.TASK_STATUS_IGNORED)   # cancelled after 1 s: closes
        assert len(errors) == 1
        try:
            await shell.call(toy.put, "b")
        except CoordinatorClosed:
            pass
        else:
            raise AssertionError("a closed shell took a request")

    _run(main)


def test_timers_stop_when_the_shell_is_cancelled():
    async def main():
        toy = Toy()
        shell = CoordinatorShell(toy, "toy", {}, clock=mock_ms)
        with trio.move_on_after(1):
            async with trio.open_nursery() as nursery:
                await nursery.start(shell.run)
                await shell.call(toy.set_timer, "t", 5000)
                await trio.sleep_forever()
        await trio.sleep(10)
        assert toy.fired == []

    _run(main)


def test_effects_applied_while_effects_are_being_done_wait_their_turn():
    async def main():
        toy = Toy()
        trace = []
        shell = None

        def write(item):
            trace.append(f"start {item}")
            if item == "a":
                fx = Fx()
                fx.appends.append("b")
                shell.apply(fx)     # e.g. the other coordinator calling back
            trace.append(f"end {item}")
            return ErrorCode.NONE

        shell = CoordinatorShell(toy, "toy", {"appends": sync_output(write)}, clock=mock_ms)
        assert await shell.call(toy.put, "a") == "ok a"
        assert trace == ["start a", "end a", "start b", "end b"]

    _run(main)

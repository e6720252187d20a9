"""Group coordinator writes are answered only once replicated (the
durability callback, GroupStateMachine.append_done), as Kafka's coordinator
appends with acks=all: an offset commit is not visible to OffsetFetch before
its record is replicated and is dropped if the append fails; a SyncGroup
leader's assignment is handed out only once the group record is replicated,
and a failed one makes the group rebalance. Errors as Kafka maps them."""
from __future__ import annotations

import time

import trio

from kproto import records as krec
from kproto.errors import ErrorCode as E

from broker.groups import records as grec
from broker.groups.append_errors import commit_error, fail_answer, operation_error, store_group_error
from broker.config.groups import GroupConfig
from broker.groups.coordinator import GroupCoordinator
from broker.groups.model import PREPARING_REBALANCE, STABLE
from broker.groups.results import JoinResult, OffsetCommitResult, SyncResult
from tests.test_group_state import TOPIC, Harness, Ticket


class Held(Harness):
    """Appends wait for the test to say they were replicated or failed."""

    def __init__(self, **config):
        super().__init__(**config)
        self.held = []

    def finish(self, error=E.NONE):
        held, self.held = self.held, []
        for append in held:
            self.apply(self.sm.append_done(append, error, self.now))
        return held

    def commit_ticket(self, group, offset, partition=0):
        t = Ticket(f"commit-{offset}")
        self.apply(self.sm.commit_offsets(t, self.now, group, "", -1, [(TOPIC, partition, offset, 0, "", -1)]))
        return t

    def fetched(self, group, partition=0, require_stable=False):
        return self.sm.fetch_offsets(group, [(TOPIC, partition)], require_stable)[1][0][2]


def test_a_commit_is_visible_only_once_replicated():
    h = Held()
    h.commit_ticket("g", 10)
    h.finish()
    assert h.fetched("g").offset == 10
    h.commit_ticket("g", 20)
    assert len(h.held) == 1
    assert h.fetched("g").offset == 10                      # the committed offset, never the pending one
    assert h.fetched("g", require_stable=True).error == E.UNSTABLE_OFFSET_COMMIT
    h.finish()
    assert h.fetched("g").offset == 20
    assert h.fetched("g", require_stable=True).offset == 20


def test_a_failed_commit_is_dropped_and_never_seen():
    h = Held()
    h.commit_ticket("g", 10)
    h.finish()
    h.commit_ticket("g", 30)
    h.finish(E.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    assert h.fetched("g").offset == 10
    assert h.fetched("g", require_stable=True).offset == 10   # nothing pending any more
    # two in flight, the first fails, the second is replicated: the second stands
    h.commit_ticket("g", 40)
    h.commit_ticket("g", 50)
    first, second = h.held
    h.held = []
    h.apply(h.sm.append_done(first, E.REQUEST_TIMED_OUT, h.now))
    assert h.fetched("g").offset == 10
    h.apply(h.sm.append_done(second, E.NONE, h.now))
    assert h.fetched("g").offset == 50


def test_offsets_deleted_while_a_commit_is_in_flight_stay_deleted():
    h = Held()
    h.commit_ticket("g", 10)
    h.finish()
    h.commit_ticket("g", 20)
    t = Ticket("delete")
    h.apply(h.sm.delete_offsets(t, h.now, "g", [(TOPIC, 0)]))
    h.finish()
    assert h.fetched("g").offset == -1


def test_the_assignment_is_handed_out_once_the_group_record_is_replicated():
    h = Held()
    h.held = None
    ids, gen = h.stable_group(n=2)
    # rebalance again: the leader's SyncGroup writes the group record
    h.held = []
    a, b = h.join(member_id=ids[0], client="c0"), h.join(member_id=ids[1], client="c1")
    h.advance(1)
    leader = h.answer(a).leader
    gen2 = h.answer(a).generation_id
    assert gen2 == gen + 1
    s_other = h.sync("g", ids[1] if leader == ids[0] else ids[0], gen2)
    s_leader = h.sync("g", leader, gen2, {m: f"new-{m}".encode() for m in ids})
    assert h.answer(s_leader) is None and h.answer(s_other) is None   # waiting for the replication
    assert h.state() != STABLE
    h.finish()
    assert h.answer(s_leader).error == E.NONE and h.answer(s_leader).assignment == f"new-{leader}".encode()
    assert h.answer(s_other).error == E.NONE
    assert h.state() == STABLE


def test_a_group_record_that_times_out_makes_the_members_rejoin():
    h = Held()
    h.held = None
    ids, gen = h.stable_group(n=2)
    h.held = []
    a, b = h.join(member_id=ids[0], client="c0"), h.join(member_id=ids[1], client="c1")
    h.advance(1)
    leader, gen2 = h.answer(a).leader, h.answer(a).generation_id
    other = ids[1] if leader == ids[0] else ids[0]
    s_other = h.sync("g", other, gen2)
    s_leader = h.sync("g", leader, gen2, {m: b"x" for m in ids})
    h.finish(E.REQUEST_TIMED_OUT)
    assert h.answer(s_leader).error == E.REBALANCE_IN_PROGRESS and h.answer(s_leader).assignment == b""
    assert h.answer(s_other).error == E.REBALANCE_IN_PROGRESS
    assert h.state() == PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in h.sm.groups["g"].members.values())


def test_error_mapping_per_api_is_kafkas():
    # GroupMetadataManager.storeOffsets (and the 3.9 runtime for a timeout)
    assert commit_error(E.NOT_ENOUGH_REPLICAS) == E.COORDINATOR_NOT_AVAILABLE
    assert commit_error(E.NOT_ENOUGH_REPLICAS_AFTER_APPEND) == E.COORDINATOR_NOT_AVAILABLE
    assert commit_error(E.REQUEST_TIMED_OUT) == E.COORDINATOR_NOT_AVAILABLE
    assert commit_error(E.NOT_LEADER_OR_FOLLOWER) == E.NOT_COORDINATOR
    assert commit_error(E.KAFKA_STORAGE_ERROR) == E.NOT_COORDINATOR
    assert commit_error(E.MESSAGE_TOO_LARGE) == E.INVALID_COMMIT_OFFSET_SIZE
    # GroupMetadataManager.storeGroup
    assert store_group_error(E.NOT_ENOUGH_REPLICAS) == E.COORDINATOR_NOT_AVAILABLE
    assert store_group_error(E.REQUEST_TIMED_OUT) == E.REBALANCE_IN_PROGRESS
    assert store_group_error(E.NOT_LEADER_OR_FOLLOWER) == E.NOT_COORDINATOR
    assert store_group_error(E.RECORD_LIST_TOO_LARGE) == E.UNKNOWN_SERVER_ERROR
    # GroupCoordinatorService.handleOperationException
    assert operation_error(E.REQUEST_TIMED_OUT) == E.COORDINATOR_NOT_AVAILABLE
    assert operation_error(E.MESSAGE_TOO_LARGE) == E.UNKNOWN_SERVER_ERROR
    # held answers of a failed step: only the successes change
    r = fail_answer(OffsetCommitResult({("t", 0): E.NONE, ("t", 1): E.OFFSET_METADATA_TOO_LARGE}),
                    E.NOT_LEADER_OR_FOLLOWER)
    assert r.errors == {("t", 0): E.NOT_COORDINATOR, ("t", 1): E.OFFSET_METADATA_TOO_LARGE}
    assert fail_answer(SyncResult(E.NONE, "consumer", "range", b"a"), E.REQUEST_TIMED_OUT).error == \
        E.REBALANCE_IN_PROGRESS
    assert fail_answer(JoinResult(E.NONE, "m", 3), E.NOT_ENOUGH_REPLICAS).error == E.COORDINATOR_NOT_AVAILABLE


# ============================================================================ the coordinator's I/O


class FakeLog:
    def __init__(self):
        self.batches = []
        self.log_start_offset = 0

    @property
    def log_end_offset(self):
        return len(self.batches)

    def add(self, records):
        batch = bytearray(krec.build_batch([(k, v, [], 0) for k, v in records]))
        batch[0:8] = len(self.batches).to_bytes(8, "big")   # one record per batch: offset = index
        self.batches.append(bytes(batch))

    def read_bytes(self, offset, _max, end):
        return b"".join(self.batches[offset:end])


class FakeReplication:
    def __init__(self):
        self.min_isr_error = None
        self.outcome = E.NONE
        self.release = trio.Event()

    def check_min_isr(self, _part):
        return self.min_isr_error

    async def wait_replicated(self, _part, _offset, _timeout_ms):
        await self.release.wait()
        return self.outcome


class FakePartition:
    def __init__(self):
        self.log = FakeLog()
        self.is_leader = True
        self.high_watermark = 0
        self.replication = FakeReplication()
        self.index = 0
        self._waiters = set()

    def append(self, batch, _header, _now):
        self.log.batches.append(bytes(batch))
        return type("Info", (), {"last_offset": self.log.log_end_offset - 1})()

    def add_waiter(self, ev):
        self._waiters.add(ev)

    def remove_waiter(self, ev):
        self._waiters.discard(ev)

    def advance(self, hw):
        self.high_watermark = hw
        for ev in self._waiters:
            ev.set()


class FakeBroker:
    def __init__(self, partition):
        self.partition = partition
        self.config = {}
        self.partitions = self

    def get(self, _topic, index):
        return self.partition if index == 0 else None


def _coordinator(partition, loading=(0,)):
    gc = GroupCoordinator(FakeBroker(partition), GroupConfig())
    gc.shell.apply(gc.state.activate(1, loading=list(loading), now_ms=gc.shell.now_ms()))
    return gc


def _fetch(gc):
    err, out = gc.fetch_offsets("g", [(TOPIC, 0)])
    return err, (out[0][2].offset if out else None)


def _with_an_unreplicated_commit(steps):
    """Run a coordinator whose partition holds one commit (offset 7) above its high watermark; after
    0.3 s of loading, `steps(part, gc)`."""
    part = FakePartition()
    part.log.add([(grec.offset_commit_key("g", TOPIC, 0), grec.offset_commit_value(7, 0, "", 0))])
    gc = _coordinator(part)

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(gc.run)
            await trio.sleep(0.3)
            await steps(part, gc)
            nursery.cancel_scope.cancel()
    trio.run(main)


def test_a_new_leader_serves_its_groups_only_once_its_high_watermark_covers_its_log():
    async def steps(part, gc):
        assert _fetch(gc)[0] == E.COORDINATOR_LOAD_IN_PROGRESS   # the record is not replicated yet
        part.advance(1)
        await trio.sleep(0.3)
        assert _fetch(gc) == (E.NONE, 7)
    _with_an_unreplicated_commit(steps)


def test_a_load_stops_when_the_leadership_moves_meanwhile():
    async def steps(part, gc):
        part.is_leader = False
        await gc.partition_leadership(0, False)
        part.advance(1)
        await trio.sleep(0.3)
        assert _fetch(gc)[0] == E.NOT_COORDINATOR
        assert not gc.state.groups
    _with_an_unreplicated_commit(steps)


def test_a_commit_is_answered_once_replicated_and_failures_are_kafkas_errors():
    part = FakePartition()
    gc = _coordinator(part, loading=())

    async def commit(offset):
        result = await gc.commit_offsets(group_id="g", member_id="", generation_id=-1,
                                         offsets=[(TOPIC, 0, offset, 0, "", -1)])
        return result.errors[(TOPIC, 0)]

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(gc.run)
            answers = []

            async def commit_into(offset):
                answers.append(await commit(offset))
            nursery.start_soon(commit_into, 5)
            await trio.sleep(0.2)
            assert answers == [] and part.log.log_end_offset == 1      # appended, not yet replicated
            assert _fetch(gc) == (E.NONE, -1)
            part.replication.release.set()
            await trio.sleep(0.1)
            assert answers == [E.NONE] and _fetch(gc) == (E.NONE, 5)
            part.replication.outcome = E.REQUEST_TIMED_OUT
            assert await commit(9) == E.COORDINATOR_NOT_AVAILABLE
            assert _fetch(gc) == (E.NONE, 5)                          # the failed commit is not seen
            part.replication.outcome = E.NOT_LEADER_OR_FOLLOWER
            assert await commit(9) == E.NOT_COORDINATOR
            part.replication.min_isr_error = E.NOT_ENOUGH_REPLICAS
            assert await commit(9) == E.COORDINATOR_NOT_AVAILABLE
            assert part.log.log_end_offset == 3                       # refused before the append
            assert _fetch(gc) == (E.NONE, 5)
            nursery.cancel_scope.cancel()
    trio.run(main)


class FakeImage:
    def __init__(self):
        self.topics = {}


def test_a_restarted_broker_that_sees_the_offsets_topic_late_loads_what_it_leads():
    # a broker restarted before it was fenced stays the leader, but its image may show
    # __consumer_offsets only once it caught up with the quorum: its groups must be loaded
    # then, not served empty (the chaos run's lost group: a generation 1 written over generation 2)
    part = FakePartition()
    # group "b" lives in partition 0 (led here) of two, group "g" in partition 1 (led elsewhere)
    # (committed now: a commit from 1970 would be expired by the expiration run that activation starts)
    part.log.add([(grec.offset_commit_key("b", TOPIC, 0),
                   grec.offset_commit_value(7, 0, "", int(time.time() * 1000)))])
    broker = FakeBroker(part)
    broker.node_id = 1
    broker.image = FakeImage()
    broker.metadata = type("M", (), {"subscribe": lambda self, fn: None})()
    gc = GroupCoordinator(broker, GroupConfig())
    gc.open()
    assert gc.state.num_partitions is None

    def fetch(group):
        err, out = gc.fetch_offsets(group, [(TOPIC, 0)])
        return err, (out[0][2].offset if out else None)

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(gc.run)
            led = type("P", (), {"leader": 1})()
            elsewhere = type("P", (), {"leader": 2})()
            broker.image.topics["__consumer_offsets"] = type("T", (), {"partitions": {0: led, 1: elsewhere}})()
            gc._on_metadata([])
            assert fetch("b")[0] == E.COORDINATOR_LOAD_IN_PROGRESS
            assert fetch("g")[0] == E.NOT_COORDINATOR
            part.advance(1)
            await trio.sleep(0.3)
            assert fetch("b") == (E.NONE, 7)
            nursery.cancel_scope.cancel()
    trio.run(main)

"""The share-partition leader's writes to the share coordinator (broker/share/service.py,
persister.py), with a scripted coordinator so the order of events is chosen, not raced: batching
of pending writes into one WriteShareGroupState, each caller getting its own key's answer, and the
two races of issue #31's share-state writes (an acknowledgement answered after its share-partition
was dropped by a fenced write; the rollback of a change whose write failed)."""
from __future__ import annotations

import uuid
from types import SimpleNamespace

import trio

from kproto.errors import ErrorCode as E

from broker.share import state_store
from broker.share.partition import ACCEPT, ACQUIRED, AVAILABLE, SharePartition
from broker.share.persister import Persister
from broker.share.service import Change, ShareService

TID = uuid.UUID(int=7)


def fake_broker():
    topic = SimpleNamespace(partitions={0: SimpleNamespace(leader=1)}, topic_id=uuid.UUID(int=1))
    return SimpleNamespace(node_id=1, config={}, replication=None,
                           image=SimpleNamespace(topics={state_store.TOPIC: topic}, topics_by_id={}, configs={}))


class ScriptedCoordinator:
    """Answers WriteShareGroupState as `answer(group, topic id, partition)` says, after `gate` (when
    set) is opened; keeps every request."""

    def __init__(self, answer=lambda *key: E.NONE):
        self.requests, self.answer, self.gate = [], answer, None

    def index_for(self, group_id, topic_id, partition):
        return 0

    async def write(self, req):
        from kproto.messages.write_share_group_state_response import WriteShareGroupStateResponse as R
        self.requests.append(req)
        if self.gate is not None:
            await self.gate.wait()
        return R(results=[R.WriteStateResult(topic_id=t.topic_id, partitions=[
            R.PartitionResult(partition=p.partition, error_code=self.answer(req.group_id, t.topic_id, p.partition),
                              error_message=None) for p in t.partitions]) for t in req.topics])


def test_pending_writes_go_in_one_request_and_each_caller_gets_its_answer():
    coord = ScriptedCoordinator(lambda g, tid, p: E.FENCED_STATE_EPOCH if p == 3 else E.NONE)
    persister = Persister(fake_broker(), coord)
    got = {}

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(persister.run)
            await trio.sleep(0)
            coord.gate = trio.Event()

            async def one(p):
                res = await persister.write("g", TID, p, 0, 0, 0, 0, [(0, 0, 0, 1)])
                got[p] = res.error_code
            nursery.start_soon(one, 0)            # the first goes out alone and waits at the gate
            await trio.sleep(0.01)
            for p in range(1, 6):                  # these wait meanwhile: the next request, together
                nursery.start_soon(one, p)
            await trio.sleep(0.01)
            coord.gate.set()
            while len(got) < 6:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    trio.run(main)
    assert [sorted(p.partition for t in r.topics for p in t.partitions) for r in coord.requests] == [
        [0], [1, 2, 3, 4, 5]]
    assert got == {0: E.NONE, 1: E.NONE, 2: E.NONE, 3: E.FENCED_STATE_EPOCH, 4: E.NONE, 5: E.NONE}


def held_service(coord):
    svc = ShareService(fake_broker())
    svc.persister = Persister(svc.broker, coord)
    key = ("g", TID, 0)
    sp = svc.partitions[key] = SharePartition(0, lock_duration_ms=30000)
    svc._epochs[key] = (0, 0)
    sp.acquire("m", [(0, 9)], 10, svc.now_ms())
    return svc, key, sp


def test_acknowledgement_after_a_fenced_write_dropped_its_share_partition_is_not_ok():
    """Race (a): a timer's write of the share-partition is out when an acknowledgement comes; that
    write is fenced (an administrator reset the group: a new state epoch) and drops the
    share-partition. The acknowledgement, waiting for its own write, must answer the fencing error,
    not NONE: its acknowledgement reached no coordinator."""
    coord = ScriptedCoordinator(lambda *key: E.FENCED_STATE_EPOCH)
    svc, key, sp = held_service(coord)
    answers = {}

    async def main():
        coord.gate = trio.Event()
        async with trio.open_nursery() as nursery:
            async def timer_write():
                svc.persist(key, sp)
                answers["timer"] = await svc.write_through(key)
            nursery.start_soon(timer_write)
            await trio.sleep(0.01)                        # its write is out, held at the gate

            async def ack():
                assert svc.acknowledge("g", "m", TID, 0, [(0, 4, [ACCEPT])]) == E.NONE
                answers["ack"] = await svc.write_through(key)
            nursery.start_soon(ack)
            await trio.sleep(0.01)
            coord.gate.set()
    trio.run(main)
    assert key not in svc.partitions
    assert answers == {"timer": E.FENCED_STATE_EPOCH, "ack": E.FENCED_STATE_EPOCH}


def test_a_failed_write_rolls_its_acknowledgement_back():
    """Item 3: the write carrying an acknowledgement fails (the coordinator is moving): the answer is
    the error and the records are still acquired by the member, so its retry is taken; the state
    written next is the rolled-back one."""
    fail = {"on": True}
    coord = ScriptedCoordinator(lambda *key: E.COORDINATOR_NOT_AVAILABLE if fail["on"] else E.NONE)
    svc, key, sp = held_service(coord)
    answers = []

    async def main():
        change = Change()
        assert svc.acknowledge("g", "m", TID, 0, [(0, 4, [ACCEPT])], change) == E.NONE
        with trio.move_on_after(30):
            answers.append(await svc.commit(key, change))
        assert [sp.state_of(o) for o in range(0, 5)] == [(ACQUIRED, 1, "m")] * 5
        assert sp.start_offset == 0
        fail["on"] = False
        change = Change()
        assert svc.acknowledge("g", "m", TID, 0, [(0, 4, [ACCEPT])], change) == E.NONE
        answers.append(await svc.commit(key, change))
    import broker.share.persister as persister_mod
    saved, persister_mod.RETRY_S = persister_mod.RETRY_S, 0.2
    try:
        trio.run(main)
    finally:
        persister_mod.RETRY_S = saved
    assert answers == [E.COORDINATOR_NOT_AVAILABLE, E.NONE]
    assert sp.start_offset == 5
    last = coord.requests[-1].topics[0].partitions[0]
    assert (last.start_offset, last.state_batches[0].first_offset) == (5, 5)


def test_writes_carry_only_the_changed_batches():
    """Issue #31 (deltas): after its first write (the whole state) a share-partition leader sends only
    the state batches that changed since the last write the coordinator took, as Kafka 4.3's
    SharePartition does; after a failed write, the whole state again (the coordinator may or may not
    hold it)."""
    fail = {"on": False}
    coord = ScriptedCoordinator(lambda *key: E.COORDINATOR_NOT_AVAILABLE if fail["on"] else E.NONE)
    svc = ShareService(fake_broker())
    svc.persister = Persister(svc.broker, coord)
    key = ("g", TID, 0)
    sp = svc.partitions[key] = SharePartition(0, lock_duration_ms=30000, max_record_locks=1000)
    svc._epochs[key] = (0, 0)
    now = svc.now_ms()
    for i in range(60):                  # 6 members take 10 records each, in turns: many runs
        sp.acquire(f"m{i % 6}", [(i * 10, i * 10 + 9)], 10, now)
        sp.acknowledge(f"m{i % 6}", i * 10 + i % 10, i * 10 + i % 10, [ACCEPT], now)

    def sent():
        return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                for b in coord.requests[-1].topics[0].partitions[0].state_batches]

    async def main():
        svc.persist(key, sp)
        assert await svc.write_through(key) == E.NONE
        assert sent() == sp.state_batches() and len(sent()) > 100
        assert svc.acknowledge("g", "m0", TID, 0, [(305, 305, [ACCEPT])]) == E.NONE
        assert await svc.write_through(key) == E.NONE
        assert sent() == [(305, 305, 2, 1)]
        fail["on"] = True
        assert svc.acknowledge("g", "m4", TID, 0, [(406, 406, [ACCEPT])]) == E.NONE
        assert await svc.write_through(key) == E.COORDINATOR_NOT_AVAILABLE
        fail["on"] = False
        assert svc.acknowledge("g", "m2", TID, 0, [(507, 507, [ACCEPT])]) == E.NONE
        assert await svc.write_through(key) == E.NONE
        assert sent() == sp.state_batches()
    import broker.share.persister as persister_mod
    saved, persister_mod.RETRY_S = persister_mod.RETRY_S, 0.2
    try:
        trio.run(main)
    finally:
        persister_mod.RETRY_S = saved


def test_a_connection_close_ends_only_the_sessions_it_opened():
    """A share session ends when the connection whose ShareFetch opened it closes, releasing its
    member's records with their delivery count kept; a member that opened its session again on
    another connection keeps it (and its records) when the old connection's close is reported."""
    svc, key, sp = held_service(ScriptedCoordinator())
    for connection in (1, 2):            # opened on connection 1, then again on 2 (which ends the first)
        _err, session = svc.session_for("g", "m", 0, connection=connection)
        session.partitions[(TID, 0)] = None
    again = session
    assert [r.delivery_count for r in sp.acquire("m", [(0, 9)], 10, svc.now_ms())] == [2]
    svc.connection_closed(1)
    assert svc.sessions[("g", "m")] is again
    assert sp.state_of(0) == (ACQUIRED, 2, "m")
    svc.connection_closed(2)
    assert ("g", "m") not in svc.sessions
    assert [sp.state_of(o) for o in range(10)] == [(AVAILABLE, 2, None)] * 10

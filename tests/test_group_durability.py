"""Group coordinator writes are answered only once replicated (the
durability callback, GroupStateMachine.append_done), as Kafka's coordinator
appends with acks=all: an offset commit is not visible to OffsetFetch before
its record is replicated and is dropped if the append fails; a SyncGroup
leader's assignment is handed out only once the group record is replicated,
and a failed one makes the group rebalance. Errors as Kafka maps them."""
from __future__ import annotations

from kproto.errors import ErrorCode as E

from broker.groups.append_errors import commit_error, fail_answer, operation_error, store_group_error
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

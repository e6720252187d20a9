"""The group state machine driven directly, with simulated time.

Rows of /work/shared/kafka-observations/error-cases.csv and the timings of
group-flow.json are cited where a test asserts them."""
from __future__ import annotations

import itertools
import struct

import pytest

from kproto.errors import ErrorCode as E

from broker.groups import records as rec
from broker.config.groups import GroupConfig
from broker.groups.model import COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE
from broker.groups.placement import java_string_hashcode, partition_for
from broker.groups.state import GroupStateMachine

TOPIC = "t"


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


SUB = subscription(TOPIC)
RANGE = [("range", SUB)]


class Ticket:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"Ticket({self.name})"


class Harness:
    """A state machine plus a clock, the answers it gave and the batches it wrote."""

    def __init__(self, **config):
        config.setdefault("initial_rebalance_delay_ms", 3000)
        ids = itertools.count(1)
        self.sm = GroupStateMachine(GroupConfig(**config), member_id_factory=lambda p: f"{p}-{next(ids)}")
        self.now = 0
        self.answers: dict = {}
        self.appends: list = []
        self.held: list | None = None
        self.apply(self.sm.activate(50, now_ms=0))
        self.apply(self.sm.tick(0))

    def apply(self, fx):
        for ticket, result in fx.responses:
            assert ticket not in self.answers, f"{ticket} answered twice"
            self.answers[ticket] = (self.now, result)
        self.appends.extend(fx.appends)
        if self.held is not None:   # replicated later: the test calls replicated() / failed()
            self.held.extend(fx.appends)
            return fx
        for append in fx.appends:   # every batch replicated at once (the shell's durability callback)
            self.apply(self.sm.append_done(append, E.NONE, self.now))
        return fx

    def advance(self, ms: int) -> None:
        target = self.now + ms
        while True:
            deadline = self.sm.next_deadline()
            if deadline is None or deadline > target:
                break
            self.now = max(self.now, deadline)
            self.apply(self.sm.tick(self.now))
        self.now = target

    def answer(self, ticket):
        entry = self.answers.get(ticket)
        return None if entry is None else entry[1]

    def answered_at(self, ticket):
        return self.answers[ticket][0]

    # -- requests ------------------------------------------------------------

    def join(self, group="g", member_id="", client="c", protocols=None, session=10000, rebalance=30000,
             instance_id=None, protocol_type="consumer", version=9, name=None):
        t = Ticket(name or f"join-{client}")
        self.apply(self.sm.join_group(
            t, self.now, group, member_id, instance_id, protocol_type, RANGE if protocols is None else protocols,
            session, rebalance, client_id=client, client_host="/127.0.0.1",
            require_known_member_id=version >= 4 and instance_id is None, support_skip_assignment=version >= 9))
        return t

    def join_new(self, group="g", client="c", **kw):
        """MEMBER_ID_REQUIRED round trip, then the real join: the ticket of the second."""
        first = self.join(group, client=client, **kw)
        res = self.answer(first)
        assert res.error == E.MEMBER_ID_REQUIRED
        return self.join(group, member_id=res.member_id, client=client, **kw)

    def sync(self, group, member_id, generation, assignments=None, instance_id=None, name=None,
             protocol_type=None, protocol_name=None):
        t = Ticket(name or f"sync-{member_id}")
        self.apply(self.sm.sync_group(t, self.now, group, generation, member_id, instance_id, protocol_type,
                                      protocol_name, assignments or {}))
        return t

    def heartbeat(self, group, member_id, generation, instance_id=None):
        t = Ticket("hb")
        self.apply(self.sm.heartbeat(t, self.now, group, member_id, generation, instance_id))
        return self.answers.pop(t)[1]

    def commit(self, group, member_id, generation, offsets, instance_id=None):
        t = Ticket("commit")
        self.apply(self.sm.commit_offsets(t, self.now, group, member_id, generation,
                                          [(TOPIC, p, o, 0, m, -1) for p, o, m in offsets], instance_id))
        return self.answers.pop(t)[1].errors

    def leave(self, group, *members):
        t = Ticket("leave")
        self.apply(self.sm.leave_group(t, self.now, group, [(m, i, None) for m, i in members]))
        return self.answers.pop(t)[1]

    def state(self, group="g"):
        return self.sm.groups[group].state

    def stable_group(self, group="g", n=1, **kw):
        """n members through join and sync: their member ids and the generation."""
        tickets = [self.join_new(group, client=f"c{i}", **kw) for i in range(n)]
        self.advance(self.sm.config.initial_rebalance_delay_ms * (2 if n > 1 else 1))
        results = [self.answer(t) for t in tickets]
        assert all(r is not None and r.error == E.NONE for r in results), results
        gen = results[0].generation_id
        leader = results[0].leader
        ids = [r.member_id for r in results]
        self.sync(group, leader, gen, {m: f"assign-{m}".encode() for m in ids})
        for m in ids:
            if m != leader:
                self.sync(group, m, gen)
        assert self.state(group) == STABLE
        return ids, gen


# ============================================================================ placement and records

def test_java_hashcode_and_partition_choice():
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("hello") == 99162322
    # its hash is Integer.MIN_VALUE, which Utils.abs maps to 0
    assert java_string_hashcode("polygenelubricants") == -(1 << 31)
    assert partition_for("polygenelubricants", 50) == 0
    assert java_string_hashcode("\U0001F600") == 0xD83D * 31 + 0xDE00   # UTF-16 code units
    assert partition_for("hello", 50) == 99162322 % 50


def test_record_layouts_are_kafkas():
    # OffsetCommitKey v1: int16 version, group, topic, partition
    assert rec.offset_commit_key("g", "t", 3) == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    # GroupMetadataKey v2
    assert rec.group_metadata_key("grp") == b"\x00\x02\x00\x03grp"
    # OffsetCommitValue v3: offset, leader epoch, metadata, commit timestamp
    v = rec.offset_commit_value(42, 7, "m", 1000)
    assert v == b"\x00\x03" + struct.pack(">qi", 42, 7) + b"\x00\x01m" + struct.pack(">q", 1000)
    # with an explicit expiry (OffsetCommit v2-v4 retention) it is v1: no leader epoch, an expire timestamp
    v1 = rec.offset_commit_value(42, 7, "", 1000, 5000)
    assert v1 == b"\x00\x01" + struct.pack(">q", 42) + b"\x00\x00" + struct.pack(">qq", 1000, 5000)
    version, decoded = rec.decode_offset_value(v1)
    assert (version, decoded.offset, decoded.expire_timestamp) == (1, 42, 5000)
    key = rec.decode_key(rec.offset_commit_key("g", "t", 3))
    assert (key.group, key.topic, key.partition) == ("g", "t", 3)
    assert rec.decode_key(b"\x00\x07\x00\x00") is None    # a key version the classic coordinator skips


# ============================================================================ joining

def test_member_id_required_then_initial_delay():
    """group-flow.json steps 4-5: MEMBER_ID_REQUIRED at once with "<client id>-<uuid>",
    then the join completes after group.initial.rebalance.delay.ms (3000)."""
    h = Harness()
    first = h.join(client="obs-consumer")
    res = h.answer(first)
    assert res.error == E.MEMBER_ID_REQUIRED and res.generation_id == -1 and res.leader == ""
    assert res.member_id.startswith("obs-consumer-") and res.protocol_name is None
    t = h.join(member_id=res.member_id, client="obs-consumer")
    h.advance(2999)
    assert h.answer(t) is None and h.state() == PREPARING_REBALANCE
    h.advance(1)
    joined = h.answer(t)
    assert (joined.error, joined.generation_id, joined.leader, joined.protocol_name) == \
        (E.NONE, 1, res.member_id, "range")
    assert joined.members == [(res.member_id, None, SUB)]
    assert h.state() == COMPLETING_REBALANCE


def test_join_before_v4_gets_a_member_id_directly():
    """error-cases: join group v3 with empty member id: no MEMBER_ID_REQUIRED."""
    h = Harness()
    t = h.join(client="obs-a", version=3)
    h.advance(3000)
    res = h.answer(t)
    assert res.error == E.NONE and res.generation_id == 1 and res.member_id.startswith("obs-a-")


def test_initial_delay_extends_while_members_arrive():
    """group-flow.json initial_delay_extension: c1 at 0 s, c2 at 1 s, both answered at 6 s."""
    h = Harness()
    c1 = h.join_new(client="c1", rebalance=30000)
    h.advance(1000)
    c2 = h.join_new(client="c2", rebalance=30000)
    h.advance(4999)
    assert h.answer(c1) is None and h.answer(c2) is None
    h.advance(1)
    r1, r2 = h.answer(c1), h.answer(c2)
    assert h.answered_at(c1) == h.answered_at(c2) == 6000
    assert r1.generation_id == r2.generation_id == 1
    assert r1.leader == r2.leader == r1.member_id
    assert len(r1.members) == 2 and r2.members == []


def test_initial_delay_extension_is_capped_by_the_rebalance_timeout():
    h = Harness()
    c1 = h.join_new(client="c1", rebalance=4000)
    h.advance(1000)
    h.join_new(client="c2", rebalance=4000)
    h.advance(2999)
    assert h.answer(c1) is None   # at 3 s: extended by min(3000, 4000 - 3000)
    h.advance(1000)
    assert h.answer(c1).error == E.NONE and h.answered_at(c1) == 4000


def test_rejoin_after_the_group_emptied_waits_again_and_counts_generations():
    """group-flow.json steps 15-20: leave makes generation 2 (Empty), the next join is generation 3."""
    h = Harness()
    (m,), gen = h.stable_group()
    assert gen == 1
    res = h.leave("g", (m, None))
    assert res.error == E.NONE and res.members == [(m, None, E.NONE)]
    assert h.state() == EMPTY and h.sm.groups["g"].generation == 2
    t = h.join_new()
    h.advance(2999)
    assert h.answer(t) is None
    h.advance(1)
    assert h.answer(t).generation_id == 3


def test_protocol_is_chosen_by_votes():
    h = Harness()
    a = h.join_new(client="a", protocols=[("range", SUB), ("roundrobin", SUB)])
    b = h.join_new(client="b", protocols=[("roundrobin", SUB), ("range", SUB)])
    c = h.join_new(client="c", protocols=[("roundrobin", SUB), ("range", SUB), ("sticky", SUB)])
    h.advance(6000)
    assert {h.answer(t).protocol_name for t in (a, b, c)} == {"roundrobin"}


def test_join_errors():
    """error-cases: JoinGroup rows (session timeouts, protocols, group id, unknown member)."""
    h = Harness()
    assert h.answer(h.join(session=1000)).error == E.INVALID_SESSION_TIMEOUT
    assert h.answer(h.join(session=1800001)).error == E.INVALID_SESSION_TIMEOUT
    assert h.answer(h.join(protocol_type="")).error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.answer(h.join(protocols=[])).error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.answer(h.join(group="")).error == E.INVALID_GROUP_ID
    (m,), _ = h.stable_group("s")
    assert h.answer(h.join("s", protocol_type="connect")).error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.answer(h.join("s", protocols=[("other", SUB)])).error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.answer(h.join("s", member_id="never-issued")).error == E.UNKNOWN_MEMBER_ID
    assert h.answer(h.join("nogroup", member_id="x")).error == E.UNKNOWN_MEMBER_ID
    assert h.state("s") == STABLE   # none of it disturbed the group


def test_group_max_size():
    h = Harness(max_size=2)
    h.stable_group(n=2)
    t = h.join()
    assert h.answer(t).error == E.GROUP_MAX_SIZE_REACHED and h.answer(t).member_id == ""
    assert h.state() == STABLE and h.sm.groups["g"].size == 2


# ============================================================================ rebalances

def test_second_member_joining_a_stable_group():
    """error-cases rows from "second member B joins stable group" to "A rejoins"."""
    h = Harness()
    (a,), gen = h.stable_group()
    b = h.join_new(client="b")
    assert h.state() == PREPARING_REBALANCE
    assert h.heartbeat("g", a, gen) == E.REBALANCE_IN_PROGRESS
    assert h.commit("g", a, gen, [(0, 5, "")]) == {(TOPIC, 0): E.NONE}
    assert h.answer(h.sync("g", a, gen, name="old-sync")).error == E.REBALANCE_IN_PROGRESS
    assert h.sm.describe_group("g")[1].state == PREPARING_REBALANCE
    ra = h.join(member_id=a, client="c0")
    assert h.answer(ra).generation_id == h.answer(b).generation_id == 2
    # the follower's SyncGroup waits for the leader's
    bid = h.answer(b).member_id
    fs = h.sync("g", bid, 2)
    start = h.now
    h.advance(1000)
    assert h.answer(fs) is None
    h.sync("g", a, 2, {a: b"A", bid: b"B"})
    assert h.answer(fs).assignment == b"B" and h.answered_at(fs) == start + 1000
    assert h.state() == STABLE


def test_session_timeout_removes_a_silent_member():
    h = Harness()
    (a, b), gen = h.stable_group(n=2, session=10000)
    synced = h.now
    for _ in range(3):
        h.advance(3000)
        assert h.heartbeat("g", a, gen) == E.NONE
    assert h.state() == STABLE
    # b never heartbeats: gone 10 s after its last sign of life (its SyncGroup), the group rebalances
    h.advance(synced + 10000 - h.now - 1)
    assert h.state() == STABLE
    h.advance(1)
    assert h.state() == PREPARING_REBALANCE
    assert b not in h.sm.groups["g"].members
    assert h.heartbeat("g", a, gen) == E.REBALANCE_IN_PROGRESS
    t = h.join(member_id=a, client="c0")
    res = h.answer(t)
    assert res.generation_id == gen + 1 and [m for m, _, _ in res.members] == [a]


def test_rebalance_timeout_drops_members_that_do_not_rejoin():
    h = Harness()
    (a, b), gen = h.stable_group(n=2, session=60000, rebalance=20000)
    ta = h.join(member_id=a, client="c0", session=60000, rebalance=20000)   # leader rejoin forces a rebalance
    h.advance(10000)
    assert h.heartbeat("g", b, gen) == E.REBALANCE_IN_PROGRESS   # b stays alive but never rejoins
    h.advance(10000)
    res = h.answer(ta)
    assert res.error == E.NONE and [m for m, _, _ in res.members] == [a]
    assert h.heartbeat("g", b, gen) == E.UNKNOWN_MEMBER_ID


def test_follower_sync_waits_until_the_silent_leader_is_expired():
    """error-cases: follower SyncGroup while the leader never sends its SyncGroup: held until the
    leader's session timeout (10000 ms), then REBALANCE_IN_PROGRESS."""
    h = Harness()
    ta = h.join_new(client="a", session=10000)
    tb = h.join_new(client="b", session=10000)
    h.advance(6000)
    leader = h.answer(ta).member_id
    follower = h.answer(tb).member_id
    assert h.answer(ta).leader == leader
    fs = h.sync("g", follower, 1)
    h.advance(9999)
    assert h.answer(fs) is None
    h.advance(1)
    assert h.answer(fs).error == E.REBALANCE_IN_PROGRESS
    assert leader not in h.sm.groups["g"].members and h.state() == PREPARING_REBALANCE


def test_pending_member_expires():
    h = Harness()
    (a,), gen = h.stable_group()
    first = h.join(client="b", session=6000)
    pending = h.answer(first).member_id
    assert pending in h.sm.groups["g"].pending_members
    h.advance(6000)
    assert pending not in h.sm.groups["g"].pending_members
    assert h.answer(h.join(member_id=pending, client="b")).error == E.UNKNOWN_MEMBER_ID


def test_heartbeat_and_sync_errors():
    """error-cases: Heartbeat and SyncGroup rows."""
    h = Harness()
    assert h.heartbeat("nope", "x", 1) == E.UNKNOWN_MEMBER_ID
    ta = h.join_new(client="a")
    h.advance(3000)
    a, gen = h.answer(ta).member_id, 1
    assert h.answer(h.sync("g", a, gen + 5, name="s1")).error == E.ILLEGAL_GENERATION
    h.sync("g", a, gen, {a: b"x"})
    assert h.answer(h.sync("g", a, gen + 1, name="s2")).error == E.ILLEGAL_GENERATION
    assert h.answer(h.sync("g", "who", gen, name="s3")).error == E.UNKNOWN_MEMBER_ID
    assert h.answer(h.sync("g", a, gen, protocol_type="other", name="s4")).error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.answer(h.sync("g", a, gen, name="s5")).assignment == b"x"    # Stable: the stored assignment
    assert h.heartbeat("g", a, gen) == E.NONE
    assert h.heartbeat("g", a, gen + 1) == E.ILLEGAL_GENERATION
    assert h.heartbeat("g", "who", gen) == E.UNKNOWN_MEMBER_ID


def test_leave_group_errors():
    """error-cases: LeaveGroup rows."""
    h = Harness()
    (a, b), _ = h.stable_group(n=2)
    assert h.leave("nope", ("x", None)).members == [("x", None, E.UNKNOWN_MEMBER_ID)]
    assert h.leave("g", ("x", None)).members == [("x", None, E.UNKNOWN_MEMBER_ID)]
    assert h.leave("g", (a, None), (b, None)).members == [(a, None, E.NONE), (b, None, E.NONE)]
    assert h.state() == EMPTY


# ============================================================================ static membership

def test_static_member_restart_keeps_its_assignment_without_rebalance():
    h = Harness()
    ta = h.join(client="a", instance_id="i-a")
    tb = h.join(client="b", instance_id="i-b")
    h.advance(6000)
    a, b = h.answer(ta).member_id, h.answer(tb).member_id
    assert a.startswith("i-a-")   # static member ids start with the instance id
    h.sync("g", a, 1, {a: b"A", b: b"B"}, instance_id="i-a")
    h.sync("g", b, 1, instance_id="i-b")
    writes = len(h.appends)
    # b restarts: a new JoinGroup without member id but with its instance id
    t = h.join(client="b", instance_id="i-b", name="b-again")
    res = h.answer(t)
    assert res.error == E.NONE and res.generation_id == 1 and res.member_id != b
    assert h.state() == STABLE
    assert len(h.appends) == writes + 1            # the new member id is persisted
    assert h.answer(h.sync("g", res.member_id, 1, instance_id="i-b", name="b-sync")).assignment == b"B"
    # the old incarnation is fenced
    assert h.heartbeat("g", b, 1, "i-b") == E.FENCED_INSTANCE_ID
    assert h.heartbeat("g", res.member_id, 1, "i-b") == E.NONE
    assert h.heartbeat("g", a, 1, "i-a") == E.NONE


def test_static_leader_restart_skip_assignment_and_old_leader_id():
    h = Harness()
    ta = h.join(client="a", instance_id="i-a")
    h.advance(3000)
    a = h.answer(ta).member_id
    h.sync("g", a, 1, {a: b"A"}, instance_id="i-a")
    v9 = h.answer(h.join(client="a", instance_id="i-a", version=9, name="v9"))
    assert v9.leader == v9.member_id and v9.skip_assignment and len(v9.members) == 1
    v5 = h.answer(h.join(client="a", instance_id="i-a", version=5, name="v5"))
    # before v9 the old leader id comes back, so the member does not run the assignor
    assert v5.leader == v9.member_id != v5.member_id and not v5.skip_assignment


def test_static_member_session_expiry_and_admin_removal():
    h = Harness()
    ta = h.join(client="a", instance_id="i-a", session=6000)
    tb = h.join(client="b", instance_id="i-b", session=6000)
    h.advance(6000)
    a, b = h.answer(ta).member_id, h.answer(tb).member_id
    h.sync("g", a, 1, {}, instance_id="i-a")
    h.sync("g", b, 1, instance_id="i-b")
    res = h.leave("g", ("", "i-b"))
    assert res.members == [("", "i-b", E.NONE)] and h.state() == PREPARING_REBALANCE
    assert h.leave("g", ("", "i-zzz")).members == [("", "i-zzz", E.UNKNOWN_MEMBER_ID)]


# ============================================================================ offsets

def test_offset_commit_validation():
    """error-cases: OffsetCommit rows."""
    h = Harness()
    (a,), gen = h.stable_group()
    assert h.commit("g", a, gen, [(0, 2, "meta-p0")]) == {(TOPIC, 0): E.NONE}
    assert h.commit("g", "who", gen, [(0, 1, "")]) == {(TOPIC, 0): E.UNKNOWN_MEMBER_ID}
    assert h.commit("g", a, gen + 1, [(0, 1, "")]) == {(TOPIC, 0): E.ILLEGAL_GENERATION}
    assert h.commit("g", a, gen - 1, [(0, 1, "")]) == {(TOPIC, 0): E.ILLEGAL_GENERATION}
    assert h.commit("g", "", -1, [(0, 1, "")]) == {(TOPIC, 0): E.UNKNOWN_MEMBER_ID}
    # standalone commits create an Empty group; members that do not exist are refused
    assert h.commit("solo", "", -1, [(0, 9, "")]) == {(TOPIC, 0): E.NONE}
    assert h.state("solo") == EMPTY
    assert h.commit("solo", "x", 3, [(0, 1, "")]) == {(TOPIC, 0): E.UNKNOWN_MEMBER_ID}
    assert h.commit("never-seen", "x", 3, [(0, 1, "")]) == {(TOPIC, 0): E.ILLEGAL_GENERATION}
    # offset.metadata.max.bytes (4096 UTF-16 units)
    errors = h.commit("g", a, gen, [(0, 3, "x" * 4097), (1, 3, "ok")])
    assert errors == {(TOPIC, 0): E.OFFSET_METADATA_TOO_LARGE, (TOPIC, 1): E.NONE}
    err, fetched = h.sm.fetch_offsets("g", [(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)])
    assert err == E.NONE
    assert [(p, f.offset, f.metadata) for _, p, f in fetched] == [(0, 2, "meta-p0"), (1, 3, "ok"), (2, -1, "")]
    assert h.sm.fetch_offsets("missing", [(TOPIC, 0)])[1][0][2].offset == -1


def test_commit_during_completing_rebalance_is_refused():
    h = Harness()
    t = h.join_new()
    h.advance(3000)
    m = h.answer(t).member_id
    assert h.commit("g", m, 1, [(0, 1, "")]) == {(TOPIC, 0): E.REBALANCE_IN_PROGRESS}


def test_offsets_expire_after_the_group_is_empty():
    h = Harness(offsets_retention_ms=60000, offsets_retention_check_interval_ms=1000)
    (a,), gen = h.stable_group()
    h.commit("g", a, gen, [(0, 5, "")])
    for _ in range(40):                    # a live group keeps the offsets it is subscribed to
        h.advance(3000)
        assert h.heartbeat("g", a, gen) == E.NONE
    assert h.sm.fetch_offsets("g", None)[1][0][2].offset == 5
    h.leave("g", (a, None))
    h.advance(59000)
    assert "g" in h.sm.groups
    before = len(h.appends)
    h.advance(2000)
    assert "g" not in h.sm.groups
    tombstones = [r for ap in h.appends[before:] for r in ap.records]
    assert (rec.offset_commit_key("g", TOPIC, 0), None) in tombstones
    assert (rec.group_metadata_key("g"), None) in tombstones


def test_transactional_offsets_wait_for_the_commit_marker():
    h = Harness()
    t = Ticket("txn")
    h.apply(h.sm.txn_commit_offsets(t, h.now, "tg", 77, 0, [(TOPIC, 0, 11, 0, "", -1)]))
    assert h.answer(t).errors == {(TOPIC, 0): E.NONE}
    assert h.appends[-1].transactional and h.appends[-1].producer_id == 77
    err, fetched = h.sm.fetch_offsets("tg", [(TOPIC, 0)], require_stable=True)
    assert fetched[0][2].error == E.UNSTABLE_OFFSET_COMMIT
    assert h.sm.fetch_offsets("tg", [(TOPIC, 0)])[1][0][2].offset == -1
    h.apply(h.sm.complete_transaction(h.now, 77, commit=True))
    assert h.sm.fetch_offsets("tg", [(TOPIC, 0)], require_stable=True)[1][0][2].offset == 11
    t2 = Ticket("txn2")
    h.apply(h.sm.txn_commit_offsets(t2, h.now, "tg", 78, 0, [(TOPIC, 0, 99, 0, "", -1)]))
    h.apply(h.sm.complete_transaction(h.now, 78, commit=False))
    assert h.sm.fetch_offsets("tg", [(TOPIC, 0)])[1][0][2].offset == 11


def test_delete_groups_and_offsets():
    h = Harness()
    (a,), gen = h.stable_group()
    h.commit("g", a, gen, [(0, 5, ""), (1, 6, "")])
    t = Ticket("del")
    h.apply(h.sm.delete_groups(t, h.now, ["g", "nope"]))
    assert h.answer(t).errors == {"g": E.NON_EMPTY_GROUP, "nope": E.GROUP_ID_NOT_FOUND}
    t = Ticket("deloff")
    h.apply(h.sm.delete_offsets(t, h.now, "g", [(TOPIC, 0), ("other", 0)]))
    assert h.answer(t).errors == {(TOPIC, 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("other", 0): E.NONE}
    h.leave("g", (a, None))
    t = Ticket("deloff2")
    h.apply(h.sm.delete_offsets(t, h.now, "g", [(TOPIC, 0)]))
    assert h.answer(t).errors == {(TOPIC, 0): E.NONE}
    assert [p for _, p, _ in h.sm.fetch_offsets("g", None)[1]] == [1]
    t = Ticket("del2")
    h.apply(h.sm.delete_groups(t, h.now, ["g"]))
    assert h.answer(t).errors == {"g": E.NONE}
    assert h.sm.describe_group("g")[1].state == "Dead"
    t = Ticket("deloff3")
    h.apply(h.sm.delete_offsets(t, h.now, "g", [(TOPIC, 0)]))
    assert h.answer(t).error == E.GROUP_ID_NOT_FOUND


def test_list_and_describe():
    h = Harness()
    h.stable_group("a")
    h.commit("b", "", -1, [(0, 1, "")])
    err, groups = h.sm.list_groups()
    assert err == E.NONE and {(g.group_id, g.state, g.protocol_type) for g in groups} == \
        {("a", STABLE, "consumer"), ("b", EMPTY, "")}
    assert [g.group_id for g in h.sm.list_groups(states=["stable"])[1]] == ["a"]
    assert h.sm.list_groups(types=["consumer"])[1] == []
    assert len(h.sm.list_groups(types=["Classic"])[1]) == 2
    err, summary = h.sm.describe_group("a")
    assert summary.protocol == "range" and summary.members[0].metadata == SUB
    assert summary.members[0].client_host == "/127.0.0.1"
    assert h.sm.describe_group("zzz")[1].state == "Dead"   # error-cases: describe a group that does not exist


# ============================================================================ replay

def _replay_into(h: Harness, sm: GroupStateMachine, now: int) -> None:
    """Feed everything h wrote to a fresh state machine, as a broker restart would."""
    partitions = sorted({a.partition for a in h.appends})
    sm.activate(50, loading=partitions, now_ms=now)
    offsets = {}
    for a in h.appends:
        base = offsets.get(a.partition, 0)
        sm.replay_batch(a.partition, base, a.producer_id, a.transactional, False, a.records)
        offsets[a.partition] = base + len(a.records)
    for p in partitions:
        sm.finish_load(p, now)


def test_replay_restores_groups_and_offsets():
    h = Harness()
    (a, b), gen = h.stable_group(n=2)
    h.commit("g", a, gen, [(0, 5, "m0"), (1, 6, "")])
    h.commit("g", b, gen, [(1, 7, "")])
    h.commit("solo", "", -1, [(2, 3, "")])
    sm = GroupStateMachine(GroupConfig())
    _replay_into(h, sm, h.now)
    g = sm.groups["g"]
    assert g.state == STABLE and g.generation == gen and set(g.members) == {a, b}
    assert g.members[a].assignment == f"assign-{a}".encode() and g.leader_id == a
    assert g.subscribed_topics == {TOPIC}
    assert [(p, f.offset) for _, p, f in sm.fetch_offsets("g", None)[1]] == [(0, 5), (1, 7)]
    assert sm.groups["solo"].state == EMPTY
    # the loaded members must heartbeat within their session timeout
    assert sm.next_deadline() is not None


def test_requests_while_loading():
    h = Harness()
    (a,), gen = h.stable_group()
    sm = GroupStateMachine(GroupConfig())
    p = partition_for("g", 50)
    sm.activate(50, loading=[p], now_ms=0)
    t = Ticket("j")
    assert sm.join_group(t, 0, "g", "", None, "consumer", RANGE, 10000, 10000).result_for(t).error == \
        E.COORDINATOR_LOAD_IN_PROGRESS
    t = Ticket("h")
    assert sm.heartbeat(t, 0, "g", a, gen).result_for(t) == E.NONE     # answered blindly
    t = Ticket("s")
    assert sm.sync_group(t, 0, "g", gen, a).result_for(t).error == E.REBALANCE_IN_PROGRESS
    assert sm.fetch_offsets("g", [(TOPIC, 0)])[0] == E.COORDINATOR_LOAD_IN_PROGRESS
    assert sm.list_groups()[0] == E.COORDINATOR_LOAD_IN_PROGRESS
    other = next(gid for gid in (f"x{i}" for i in range(100)) if partition_for(gid, 50) != p)
    assert sm.fetch_offsets(other, [(TOPIC, 0)])[0] == E.NONE


def test_no_offsets_topic_means_not_coordinator():
    sm = GroupStateMachine(GroupConfig())
    t = Ticket("j")
    assert sm.join_group(t, 0, "g", "", None, "consumer", RANGE, 10000, 10000).result_for(t).error == \
        E.NOT_COORDINATOR


@pytest.mark.parametrize("n", [3, 10])
def test_many_members_all_get_answers(n):
    h = Harness(initial_rebalance_delay_ms=100)
    tickets = [h.join_new(client=f"m{i}") for i in range(n)]
    h.advance(1000)
    results = [h.answer(t) for t in tickets]
    assert all(r.error == E.NONE and r.generation_id == 1 for r in results)
    assert sum(1 for r in results if r.members) == 1


def test_deleted_topics_take_their_offsets_along():
    h = Harness()
    (a,), gen = h.stable_group()
    t = Ticket("c")
    h.apply(h.sm.commit_offsets(t, h.now, "g", a, gen, [(TOPIC, 0, 5, 0, "", -1), ("gone", 0, 7, 0, "", -1)]))
    h.commit("solo", "", -1, [(0, 1, "")])
    t2 = Ticket("c2")
    h.apply(h.sm.commit_offsets(t2, h.now, "solo-gone", "", -1, [("gone", 1, 1, 0, "", -1)]))
    before = len(h.appends)
    h.apply(h.sm.topics_deleted(h.now, {"gone"}))
    assert [(t, p) for t, p, _ in h.sm.fetch_offsets("g", None)[1]] == [(TOPIC, 0)]
    assert "solo-gone" not in h.sm.groups and "solo" in h.sm.groups
    tombstones = {k for ap in h.appends[before:] for k, v in ap.records if v is None}
    assert tombstones == {rec.offset_commit_key("g", "gone", 0), rec.offset_commit_key("solo-gone", "gone", 1)}


def test_group_metadata_too_large_fails_the_sync_and_rebalances():
    """A group metadata record over max.message.bytes: Kafka maps the append's
    MESSAGE_TOO_LARGE to UNKNOWN_SERVER_ERROR for the members and rebalances."""
    h = Harness(max_batch_bytes=2000)
    t = h.join_new()
    h.advance(3000)
    m = h.answer(t).member_id
    s = h.sync("g", m, 1, {m: b"x" * 5000})
    assert h.answer(s).error == E.UNKNOWN_SERVER_ERROR
    assert h.state() == PREPARING_REBALANCE
    # the member rejoins and, with a sane assignment, the group becomes stable
    t = h.join(member_id=m)
    assert h.answer(t).generation_id == 2
    assert h.answer(h.sync("g", m, 2, {m: b"ok"}, name="s2")).error == E.NONE and h.state() == STABLE


def test_static_member_rejoining_during_completing_rebalance_forces_a_rebalance():
    h = Harness()
    ta = h.join(client="a", instance_id="i-a")
    tb = h.join(client="b", instance_id="i-b")
    h.advance(6000)
    a, b = h.answer(ta).member_id, h.answer(tb).member_id
    assert h.answer(ta).leader == a
    parked = h.sync("g", b, 1, instance_id="i-b")          # the follower waits for the leader
    assert h.answer(parked) is None and h.state() == COMPLETING_REBALANCE
    t = h.join(client="b", instance_id="i-b", name="b-again")
    # the old incarnation's SyncGroup is fenced and the generation is redone
    assert h.answer(parked).error == E.FENCED_INSTANCE_ID
    assert h.answer(t) is None and h.state() == PREPARING_REBALANCE
    ra = h.join(member_id=a, client="a", instance_id="i-a", name="a-again")
    assert h.answer(ra).generation_id == h.answer(t).generation_id == 2
    assert h.answer(t).member_id != b


def test_replay_honours_tombstones_and_transaction_markers():
    load_sm = GroupStateMachine(GroupConfig())
    load_sm.activate(50, loading=[7], now_ms=0)
    key = rec.offset_commit_key("g", TOPIC, 0)
    value = rec.offset_commit_value(5, 0, "", 1)
    load_sm.replay_batch(7, 0, -1, False, False, [(key, value)])
    load_sm.replay_batch(7, 1, 9, True, False, [(key, rec.offset_commit_value(8, 0, "", 2))])
    load_sm.replay_batch(7, 2, 9, True, True, [(struct.pack(">hh", 0, 1), b"\x00" * 6)])    # COMMIT marker
    load_sm.replay_batch(7, 3, 10, True, False, [(rec.offset_commit_key("g", TOPIC, 1),
                                                  rec.offset_commit_value(3, 0, "", 2))])
    load_sm.replay_batch(7, 4, 10, True, True, [(struct.pack(">hh", 0, 0), b"\x00" * 6)])   # ABORT marker
    load_sm.replay_batch(7, 5, -1, False, False, [(rec.offset_commit_key("h", TOPIC, 0), value)])
    load_sm.replay_batch(7, 6, -1, False, False, [(rec.offset_commit_key("h", TOPIC, 0), None)])
    load_sm.finish_load(7, 0)
    assert [(p, f.offset) for _, p, f in load_sm.fetch_offsets("g", None)[1]] == [(0, 8)]
    assert "h" not in load_sm.groups


def test_a_resigned_coordinator_answers_the_joins_and_syncs_it_holds():
    """Kafka's onGroupUnloaded: when another broker takes the group's __consumer_offsets
    partition, parked JoinGroup and SyncGroup requests get NOT_COORDINATOR at once, so the
    clients look the coordinator up again instead of waiting out their request timeout."""
    h = Harness()
    (a, b), gen = h.stable_group("s", n=2)
    joining = h.join_new("g")                          # parked in the initial rebalance delay
    h.join(group="s", member_id=a, client="c0")       # a rebalance: a's join is parked...
    rb = h.join(group="s", member_id=b, client="c1")   # ...and completes with b's
    follower = a if h.answer(rb).leader != a else b
    parked_sync = h.sync("s", follower, h.answer(rb).generation_id, name="parked-sync")
    assert h.answer(joining) is None and h.answer(parked_sync) is None
    h.apply(h.sm.resign(partition_for("g", 50), h.now))
    if partition_for("s", 50) != partition_for("g", 50):
        h.apply(h.sm.resign(partition_for("s", 50), h.now))
    assert h.answer(joining).error == E.NOT_COORDINATOR
    assert h.answer(parked_sync).error == E.NOT_COORDINATOR
    assert h.heartbeat("s", a, gen) == E.NOT_COORDINATOR

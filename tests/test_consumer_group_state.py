"""KIP-848 consumer groups in the group state machine, driven directly with
simulated time: epochs, target assignment, reconciliation (revocation
before assignment), fencing, static members, regex subscriptions, timeouts,
records and their replay, and a seeded churn simulation that checks no
partition is ever owned by two members."""
from __future__ import annotations

import itertools
import random
import struct
import uuid

import pytest

from kproto.errors import ErrorCode as E

from broker.groups import assignors
from broker.config.groups import GroupConfig
from broker.groups.consumer_classic import decode_assignment, encode_assignment
from broker.groups.consumer_model import (
    MEMBER_STABLE, MEMBER_UNRELEASED_PARTITIONS, MEMBER_UNREVOKED_PARTITIONS, ConsumerGroup, compile_regex,
    InvalidRegex,
)
from broker.groups.state import GroupStateMachine

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
T3 = uuid.UUID(int=3)
TOPICS = {"orders": (T1, 6), "payments": (T2, 3)}


class Harness:
    def __init__(self, topics=None, **config):
        ids = itertools.count(1)
        config.setdefault("consumer_session_timeout_ms", 45000)
        config.setdefault("consumer_heartbeat_interval_ms", 5000)
        self.sm = GroupStateMachine(GroupConfig(**config), member_id_factory=lambda p: f"m{next(ids)}")
        self.now = 0
        self.topics = dict(TOPICS if topics is None else topics)
        self.appends = []
        self.answers = {}
        self.apply(self.sm.activate(1, now_ms=0))

    def apply(self, fx):
        self.appends.extend(fx.appends)
        self.answers.update({t: r for t, r in fx.responses})
        for append in fx.appends:   # every batch replicated at once (the shell's durability callback)
            self.apply(self.sm.append_done(append, 0, self.now))
        return fx

    def hb(self, member_id="", epoch=0, group="g", names=None, regex=None, owned=None, instance_id=None,
           rebalance_timeout_ms=None, assignor=None):
        if epoch == 0:
            owned = [] if owned is None else owned
            if names is None and regex is None:
                names = ["orders"]
            rebalance_timeout_ms = 60000 if rebalance_timeout_ms is None else rebalance_timeout_ms
        ticket = object()
        fx = self.apply(self.sm.consumer_group_heartbeat(
            ticket, self.now, group, member_id, epoch, self.topics, instance_id=instance_id,
            rebalance_timeout_ms=-1 if rebalance_timeout_ms is None else rebalance_timeout_ms,
            subscribed_topic_names=names, subscribed_topic_regex=regex, server_assignor=assignor, owned=owned))
        return fx.result_for(ticket)

    def advance(self, ms):
        self.now += ms
        return self.apply(self.sm.tick(self.now))

    def group(self, group_id="g") -> ConsumerGroup:
        return self.sm.groups[group_id]

    def member(self, member_id, group_id="g"):
        return self.group(group_id).members[member_id]

    def owned(self, member_id, group_id="g"):
        """What a well-behaved client owns after applying its last answer."""
        m = self.member(member_id, group_id)
        return [(t, p) for t, ps in m.assigned.items() for p in ps]

    def settle(self, member_ids, group_id="g", rounds=10):
        for _ in range(rounds):
            for mid in member_ids:
                m = self.member(mid, group_id)
                self.hb(mid, m.member_epoch, group_id, owned=self.owned(mid, group_id))
            assert_single_owner(self.group(group_id))
            if self.group(group_id).state == "Stable":
                return
        raise AssertionError(f"group did not stabilise: {self.group(group_id).members}")


def assert_single_owner(group):
    seen = {}
    for mid, m in group.members.items():
        for tp in m.owned():
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {mid}"
            seen[tp] = mid


def parts(result, topic=T1):
    return sorted((result.assignment or {}).get(topic, []))


# ------------------------------------------------------------------ joining and reconciliation

def test_first_member_gets_every_partition():
    h = Harness()
    r = h.hb()
    assert r.error == E.NONE and r.member_id == "m1" and r.member_epoch == 1
    assert r.heartbeat_interval_ms == 5000
    assert parts(r) == [0, 1, 2, 3, 4, 5]
    assert h.group().state == "Stable" and h.group().group_epoch == 1


def test_second_member_waits_for_revocation_before_assignment():
    h = Harness()
    h.hb()
    r2 = h.hb()
    assert r2.member_epoch == 2 and parts(r2) == []       # its partitions are still m1's
    assert h.member("m2").state == MEMBER_UNRELEASED_PARTITIONS
    # m1 is told to give three up; its epoch stays until it confirms
    r1 = h.hb("m1", 1)
    assert r1.member_epoch == 1 and len(parts(r1)) == 3
    assert h.member("m1").state == MEMBER_UNREVOKED_PARTITIONS
    assert h.group().state == "Reconciling"
    # a heartbeat still owning them changes nothing
    r1 = h.hb("m1", 1, owned=[(T1, p) for p in range(6)])
    assert r1.member_epoch == 1 and h.member("m1").state == MEMBER_UNREVOKED_PARTITIONS
    r2 = h.hb("m2", 2, owned=[])
    assert parts(r2) == []
    r1 = h.hb("m1", 1, owned=h.owned("m1"))
    assert r1.member_epoch == 2 and h.member("m1").state == MEMBER_STABLE
    r2 = h.hb("m2", 2, owned=[])
    assert len(parts(r2)) == 3 and set(parts(r1)).isdisjoint(parts(r2))
    assert h.group().state == "Stable"
    assert_single_owner(h.group())


def test_assignment_only_sent_when_it_changes():
    h = Harness()
    h.hb()
    r = h.hb("m1", 1)
    assert r.assignment is None and r.member_epoch == 1


def test_three_members_six_partitions_balanced():
    h = Harness()
    for _ in range(3):
        h.hb()
    h.settle(["m1", "m2", "m3"])
    sizes = [len(h.member(m).assigned.get(T1, ())) for m in ("m1", "m2", "m3")]
    assert sizes == [2, 2, 2]


def test_leave_frees_partitions_and_bumps_epoch():
    h = Harness()
    h.hb()
    h.hb()
    h.settle(["m1", "m2"])
    epoch = h.group().group_epoch
    r = h.hb("m2", -1)
    assert r.error == E.NONE and r.member_epoch == -1
    assert "m2" not in h.group().members and h.group().group_epoch == epoch + 1
    h.settle(["m1"])
    assert sorted(h.member("m1").assigned[T1]) == [0, 1, 2, 3, 4, 5]


def test_session_timeout_removes_member():
    h = Harness()
    h.hb()
    h.hb()
    h.settle(["m1", "m2"])
    h.advance(40000)
    h.hb("m1", h.member("m1").member_epoch, owned=h.owned("m1"))
    h.advance(6000)                  # m2 silent for 46 s
    assert "m2" not in h.group().members and "m1" in h.group().members
    h.settle(["m1"])
    assert len(h.member("m1").assigned[T1]) == 6


def test_rebalance_timeout_removes_member_that_never_revokes():
    h = Harness()
    h.hb(rebalance_timeout_ms=10000)
    h.hb()
    h.hb("m1", 1)                    # told to revoke
    assert h.member("m1").state == MEMBER_UNREVOKED_PARTITIONS
    h.advance(5000)
    h.hb("m1", 1, owned=[(T1, p) for p in range(6)])   # still holding on
    h.advance(5001)
    assert "m1" not in h.group().members
    h.settle(["m2"])
    assert len(h.member("m2").assigned[T1]) == 6


def test_fenced_member_epochs():
    h = Harness()
    h.hb()
    assert h.hb("m1", 5).error == E.FENCED_MEMBER_EPOCH
    h.hb()
    h.settle(["m1", "m2"])
    assert h.member("m1").member_epoch == 2
    # an older epoch with nothing it should not own is a lost answer: accepted
    assert h.hb("m1", 1, owned=h.owned("m1")).error == E.NONE
    # an older epoch claiming partitions it no longer has is fenced
    assert h.hb("m1", 1, owned=[(T1, p) for p in range(6)]).error == E.FENCED_MEMBER_EPOCH
    assert h.hb("m1", 1, owned=None).error == E.FENCED_MEMBER_EPOCH


def test_fenced_member_rejoins_with_epoch_zero_and_same_id():
    h = Harness()
    h.hb()
    r = h.hb("m1", 0)
    assert r.error == E.NONE and r.member_id == "m1" and parts(r) == [0, 1, 2, 3, 4, 5]
    assert len(h.group().members) == 1


def test_unknown_member_and_group():
    h = Harness()
    assert h.hb("nobody", 3).error == E.GROUP_ID_NOT_FOUND
    h.hb()
    assert h.hb("nobody", 1).error == E.UNKNOWN_MEMBER_ID
    assert h.hb("nobody", -1).error == E.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("kwargs, error", [
    (dict(group=""), E.INVALID_REQUEST),
    (dict(epoch=0, rebalance_timeout_ms=-1), E.INVALID_REQUEST),
    (dict(epoch=0, owned=[(T1, 0)]), E.INVALID_REQUEST),
    (dict(member_id="m", epoch=-3), E.INVALID_REQUEST),
    (dict(member_id="", epoch=4), E.INVALID_REQUEST),
    (dict(member_id="m", epoch=-2), E.INVALID_REQUEST),        # -2 needs an instance id
    (dict(assignor="sticky"), E.UNSUPPORTED_ASSIGNOR),
    (dict(regex="orders(?=x)"), E.INVALID_REGULAR_EXPRESSION),
    (dict(regex="orders["), E.INVALID_REGULAR_EXPRESSION),
    (dict(instance_id=""), E.INVALID_REQUEST),
])
def test_invalid_requests(kwargs, error):
    h = Harness()
    r = h.hb(**kwargs)
    assert r.error == error and r.message


def test_max_size():
    h = Harness(consumer_max_size=1)
    h.hb()
    assert h.hb().error == E.GROUP_MAX_SIZE_REACHED


# ------------------------------------------------------------------ subscriptions and assignors

def test_regex_subscription_picks_up_new_topic():
    h = Harness()
    r = h.hb(regex="pay.*|ord.*")
    assert parts(r, T1) == [0, 1, 2, 3, 4, 5] and parts(r, T2) == [0, 1, 2]
    epoch = h.group().group_epoch
    h.topics["payroll"] = (T3, 2)
    h.topics["__consumer_offsets"] = (uuid.UUID(int=9), 1)
    r = h.hb("m1", r.member_epoch)
    assert h.group().group_epoch == epoch + 1
    assert parts(r, T3) == [0, 1] and uuid.UUID(int=9) not in r.assignment


def test_regex_is_a_full_match():
    assert compile_regex("ord").fullmatch("orders") is None
    assert compile_regex("ord.*").fullmatch("orders")
    with pytest.raises(InvalidRegex):
        compile_regex(r"(a)\1")


def test_subscription_change_moves_partitions():
    h = Harness()
    r = h.hb(names=["orders", "payments"])
    assert parts(r, T2) == [0, 1, 2]
    r = h.hb("m1", 1, names=["payments"], owned=h.owned("m1"))
    # orders is revoked first, then the member moves to the new epoch
    assert parts(r, T1) == [] and h.member("m1").state == MEMBER_UNREVOKED_PARTITIONS
    r = h.hb("m1", 1, owned=h.owned("m1"))
    assert r.member_epoch == 2 and h.member("m1").state == MEMBER_STABLE


def test_deleted_topic_leaves_assignment():
    h = Harness()
    h.hb(names=["orders", "payments"])
    del h.topics["payments"]
    r = h.hb("m1", 1, owned=h.owned("m1"))
    r = h.hb("m1", r.member_epoch, owned=h.owned("m1"))
    assert T2 not in h.member("m1").assigned and h.member("m1").state == MEMBER_STABLE


def test_uniform_assignor_is_balanced_and_sticky():
    members = {f"m{i}": {T1, T2} for i in range(4)}
    topics = {T1: 6, T2: 3}
    first = assignors.uniform(members, topics, {})
    counts = sorted(sum(len(ps) for ps in a.values()) for a in first.values())
    assert counts == [2, 2, 2, 3]
    members["m4"] = {T1, T2}
    second = assignors.uniform(members, topics, first)
    counts = sorted(sum(len(ps) for ps in a.values()) for a in second.values())
    assert counts == [1, 2, 2, 2, 2]
    moved = sum(len(first[m].get(t, set()) - second[m].get(t, set())) for m in first for t in first[m])
    assert moved == 1    # only what the new member needs moves


def test_uniform_assignor_heterogeneous_subscriptions():
    members = {"a": {T1}, "b": {T1, T2}, "c": {T2}}
    out = assignors.uniform(members, {T1: 4, T2: 4}, {})
    assert out["a"].get(T2) is None and out["c"].get(T1) is None
    everything = sorted((t, p) for a in out.values() for t, ps in a.items() for p in ps)
    assert everything == sorted([(T1, p) for p in range(4)] + [(T2, p) for p in range(4)])
    assert sorted(sum(len(ps) for ps in a.values()) for a in out.values()) == [2, 3, 3]


def test_range_assignor_contiguous():
    out = assignors.range_({"b": {T1}, "a": {T1}, "c": {T1}}, {T1: 7}, {})
    assert out["a"][T1] == {0, 1, 2} and out["b"][T1] == {3, 4} and out["c"][T1] == {5, 6}


def test_server_assignor_range_selected_by_members():
    h = Harness()
    h.hb(assignor="range")
    h.hb(assignor="range")
    h.settle(["m1", "m2"])
    assert h.group().assignor == "range"
    assert sorted(h.member("m1").assigned[T1]) == [0, 1, 2]
    assert h.sm.consumer_group_describe("g").assignor == "range"


def test_assignor_names_from_config():
    assert assignors.assignor_names(["org.apache.kafka.coordinator.group.assignor.RangeAssignor"]) == ["range"]
    assert assignors.assignor_names([]) == ["uniform", "range"]


# ------------------------------------------------------------------ static membership

def test_static_member_leaves_and_rejoins_without_rebalance():
    h = Harness()
    h.hb(instance_id="i1")
    h.hb(instance_id="i2")
    h.settle(["m1", "m2"])
    epoch = h.group().group_epoch
    kept = h.owned("m2")
    r = h.hb("m2", h.member("m2").member_epoch, instance_id="i2", owned=kept)
    r = h.hb("m2", -2, instance_id="i2")
    assert r.member_epoch == -2 and h.member("m2").member_epoch == -2
    # m1 does not get m2's partitions while m2 may come back
    r1 = h.hb("m1", h.member("m1").member_epoch, owned=h.owned("m1"))
    assert h.group().group_epoch == epoch and len(h.member("m1").assigned[T1]) == 3
    r = h.hb("", 0, instance_id="i2")
    assert r.error == E.NONE and r.member_id == "m3" and sorted(set(kept)) == sorted((T1, p) for p in parts(r))
    assert h.group().group_epoch == epoch and "m2" not in h.group().members
    assert_single_owner(h.group())


def test_static_instance_still_active_is_unreleased():
    h = Harness()
    h.hb(instance_id="i1")
    assert h.hb("", 0, instance_id="i1").error == E.UNRELEASED_INSTANCE_ID


def test_static_member_fenced_by_other_id():
    h = Harness()
    h.hb(instance_id="i1")
    h.hb()
    assert h.hb("m2", 1, instance_id="i1").error == E.FENCED_INSTANCE_ID


def test_static_member_session_expires_after_temporary_leave():
    h = Harness()
    h.hb(instance_id="i1")
    h.hb()
    h.settle(["m1", "m2"])
    h.hb("m1", -2, instance_id="i1")
    h.advance(30000)
    h.hb("m2", h.member("m2").member_epoch, owned=h.owned("m2"))
    h.advance(16000)
    assert "m1" not in h.group().members
    h.advance(0)
    h.settle(["m2"])
    assert len(h.member("m2").assigned[T1]) == 6


# ------------------------------------------------------------------ mixing with the classic protocol, offsets

def sub(*topics, owned=()):
    """A ConsumerProtocolSubscription v1, as a classic consumer sends it."""
    from kproto.messages.consumer_protocol_subscription import ConsumerProtocolSubscription, TopicPartition
    value = ConsumerProtocolSubscription(topics=list(topics), user_data=None, owned_partitions=[
        TopicPartition(topic=t, partitions=list(ps)) for t, ps in owned])
    out = bytearray(struct.pack(">h", 1))
    value.encode_into(out, 1)
    return bytes(out)


def classic_join(h, member_id="", owned=(), group="g"):
    t = object()
    h.apply(h.sm.join_group(t, h.now, group, member_id, None, "consumer", [("range", sub("orders", owned=owned))],
                            10000, 10000, require_known_member_id=False, topics=h.topics))
    return t


def classic_stable_group(h):
    """Two classic members with orders 0-2 and 3-5."""
    t1, t2 = classic_join(h), classic_join(h)
    for _ in range(20):                    # group.initial.rebalance.delay.ms, extended by each join
        if t2 in h.answers:
            break
        h.advance(1000)
    j1, j2 = h.answers[t1], h.answers[t2]
    assert j1.error == j2.error == E.NONE and j1.generation_id == 1
    leader = j1 if j1.leader == j1.member_id else j2
    other = j2 if leader is j1 else j1
    plan = {leader.member_id: encode_assignment(1, {"orders": {0, 1, 2}}),
            other.member_id: encode_assignment(1, {"orders": {3, 4, 5}})}
    s1, s2 = object(), object()
    h.apply(h.sm.sync_group(s1, h.now, "g", 1, leader.member_id, assignments=plan))
    h.apply(h.sm.sync_group(s2, h.now, "g", 1, other.member_id))
    assert h.answers[s1].error == h.answers[s2].error == E.NONE
    return leader.member_id, other.member_id


def test_classic_group_of_another_protocol_type_is_not_a_consumer_group():
    h = Harness()
    t = object()
    h.apply(h.sm.join_group(t, 0, "g", "", None, "connect", [("v0", b"")], 10000, 10000,
                            require_known_member_id=False))
    r = h.hb()
    assert r.error == E.GROUP_ID_NOT_FOUND and "not a consumer group" in r.message


def test_migration_disabled():
    h = Harness(consumer_migration_policy="disabled")
    classic_stable_group(h)
    assert h.hb().error == E.GROUP_ID_NOT_FOUND          # no upgrade
    h.sm.groups.clear()
    h.hb()
    # a classic member may still join a consumer group (Kafka 3.9 with the policy disabled: MEMBER_ID_REQUIRED)
    t = object()
    h.apply(h.sm.join_group(t, h.now, "g", "", None, "consumer", [("range", sub("orders"))], 10000, 10000,
                            require_known_member_id=True, topics=h.topics))
    assert h.answers[t].error == E.MEMBER_ID_REQUIRED


def test_online_upgrade_then_downgrade():
    h = Harness()
    c1, c2 = classic_stable_group(h)
    r = h.hb()                             # a consumer-protocol member joins the classic group
    assert r.error == E.NONE and isinstance(h.group(), ConsumerGroup)
    group = h.group()
    assert group.members[c1].assigned == {T1: {0, 1, 2}} and group.members[c1].member_epoch == 1
    assert r.member_epoch == 2 and parts(r) == []          # everything is still owned by the classic members
    assert_single_owner(group)
    # the classic members are told to rejoin; eager clients give up everything first
    for cid in (c1, c2):
        t = object()
        h.apply(h.sm.heartbeat(t, h.now, "g", cid, 1))
        assert h.answers[t] == E.REBALANCE_IN_PROGRESS
        j = h.answers[classic_join(h, cid, owned=())]
        assert j.error == E.NONE and j.generation_id == 2 and j.leader == "" and j.members == []
        s1 = object()
        h.apply(h.sm.sync_group(s1, h.now, "g", 2, cid))
        got = decode_assignment(h.answers[s1].assignment)
        assert sum(len(ps) for ps in got.values()) == 2, got
        assert_single_owner(group)
    r = h.hb(r.member_id, 2, owned=[])
    assert len(parts(r)) == 2 and h.group().state == "Stable"
    for cid in (c1, c2):
        t = object()
        h.apply(h.sm.heartbeat(t, h.now, "g", cid, 2))
        assert h.answers[t] == E.NONE
    # classic members commit with their generation (= member epoch)
    t = object()
    h.apply(h.sm.commit_offsets(t, h.now, "g", c1, 2, [("orders", 0, 5, -1, "", -1)], api_version=7))
    assert h.answers[t].errors[("orders", 0)] == E.NONE
    # the last consumer-protocol member leaves: back to a classic group that rebalances
    h.hb(r.member_id, -1)
    group = h.sm.groups["g"]
    assert not isinstance(group, ConsumerGroup) and group.state == "PreparingRebalance"
    assert set(group.members) == {c1, c2} and group.generation == 3
    t = object()
    h.apply(h.sm.heartbeat(t, h.now, "g", c1, 3))
    assert h.answers[t] == E.REBALANCE_IN_PROGRESS
    assert h.sm.fetch_offsets("g", [("orders", 0)])[1][0][2].offset == 5


def test_classic_member_joins_consumer_group():
    h = Harness()
    h.hb()
    t = object()
    h.apply(h.sm.join_group(t, h.now, "g", "", None, "consumer", [("range", sub("orders"))], 10000, 10000,
                            require_known_member_id=True, topics=h.topics))
    assert h.answers[t].error == E.MEMBER_ID_REQUIRED
    mid = h.answers[t].member_id
    j = h.answers[classic_join(h, mid)]
    assert j.error == E.NONE and j.generation_id == 2
    s1 = object()
    h.apply(h.sm.sync_group(s1, h.now, "g", 2, mid))
    assert decode_assignment(h.answers[s1].assignment) == {}    # m1 still owns them
    h.hb("m1", 1)                                               # told to revoke 3
    h.hb("m1", 1, owned=h.owned("m1"))                          # revoked
    assert h.member("m1").member_epoch == 2
    t = object()
    h.apply(h.sm.heartbeat(t, h.now, "g", mid, 2))
    assert h.answers[t] == E.REBALANCE_IN_PROGRESS              # now it can have them
    j = h.answers[classic_join(h, mid)]
    s1 = object()
    h.apply(h.sm.sync_group(s1, h.now, "g", j.generation_id, mid))
    assert sum(len(p) for p in decode_assignment(h.answers[s1].assignment).values()) == 3
    assert_single_owner(h.group())
    # a classic member's session is its own session timeout (10 s here)
    h.advance(10001)
    assert mid not in h.group().members or h.group().members[mid].classic is None


def test_empty_classic_group_converts_and_keeps_offsets():
    h = Harness()
    t = object()
    fx = h.apply(h.sm.commit_offsets(t, 0, "g", "", -1, [("orders", 0, 42, -1, "", -1)]))
    assert fx.result_for(t).errors[("orders", 0)] == E.NONE
    r = h.hb()
    assert r.error == E.NONE and isinstance(h.group(), ConsumerGroup)
    assert h.sm.fetch_offsets("g", [("orders", 0)])[1][0][2].offset == 42


def test_join_group_into_consumer_group():
    h = Harness()
    h.hb()
    t = object()
    fx = h.apply(h.sm.join_group(t, 0, "g", "", None, "consumer", [("range", b"")], 10000, 10000,
                                 require_known_member_id=False))
    assert fx.result_for(t).error == E.INCONSISTENT_GROUP_PROTOCOL   # an unreadable subscription
    h.hb("m1", -1)
    t = object()
    fx = h.apply(h.sm.join_group(t, 0, "g", "", None, "consumer", [("range", b"")], 10000, 10000,
                                 require_known_member_id=False))
    assert h.sm.groups["g"].__class__.__name__ == "Group"


def test_offset_commit_member_epochs():
    h = Harness()
    h.hb()

    def commit(member_id, epoch, version=9):
        t = object()
        fx = h.apply(h.sm.commit_offsets(t, 0, "g", member_id, epoch, [("orders", 0, 7, -1, "", -1)],
                                         api_version=version))
        return fx.result_for(t).errors[("orders", 0)]

    assert commit("m1", 1) == E.NONE
    assert commit("m1", 0) == E.STALE_MEMBER_EPOCH
    assert commit("m1", 1, version=8) == E.UNSUPPORTED_VERSION   # as Kafka 3.9 answers
    assert commit("zz", 1) == E.UNKNOWN_MEMBER_ID
    assert commit("", -1) == E.UNKNOWN_MEMBER_ID         # only members commit into an active group
    h.hb("m1", -1)
    assert commit("", -1) == E.NONE


def test_list_describe_and_delete():
    h = Harness()
    h.hb()
    err, groups = h.sm.list_groups()
    assert [(g.group_id, g.group_type, g.state, g.protocol_type) for g in groups] == [
        ("g", "consumer", "Stable", "consumer")]
    assert h.sm.list_groups(types=["classic"])[1] == []
    d = h.sm.consumer_group_describe("g")
    assert d.error == E.NONE and d.state == "Stable" and d.group_epoch == 1 and d.assignor == "uniform"
    assert d.members[0].assignment == {T1: set(range(6))} and d.members[0].target == {T1: set(range(6))}
    assert h.sm.consumer_group_describe("nope").error == E.GROUP_ID_NOT_FOUND
    assert h.sm.describe_group("g")[1].state == "Dead"     # DescribeGroups: classic groups only
    t = object()
    assert h.apply(h.sm.delete_groups(t, 0, ["g"])).result_for(t).errors["g"] == E.NON_EMPTY_GROUP
    h.hb("m1", -1)
    t = object()
    assert h.apply(h.sm.delete_groups(t, 0, ["g"])).result_for(t).errors["g"] == E.NONE
    assert "g" not in h.sm.groups


# ------------------------------------------------------------------ records

def replay(h: Harness) -> GroupStateMachine:
    sm = GroupStateMachine(GroupConfig())
    sm.activate(1, loading=[0], now_ms=0)
    for offset, append in enumerate(h.appends):
        sm.replay_batch(append.partition, offset, -1, False, False, append.records)
    sm.finish_load(0, h.now)
    return sm


def test_records_replay_to_the_same_group():
    h = Harness()
    h.hb(instance_id="i1", regex="orders|pay.*")
    h.hb(assignor="uniform")
    h.hb("m1", 1)                          # m1 in the middle of revoking
    before = h.group()
    sm = replay(h)
    after = sm.groups["g"]
    assert isinstance(after, ConsumerGroup)
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
    assert after.subscription_metadata == before.subscription_metadata
    for mid, m in before.members.items():
        n = after.members[mid]
        assert (n.member_epoch, n.state, n.assigned, n.pending_revocation, n.instance_id,
                n.subscribed_topic_regex, n.subscribed_topic_names) == (
            m.member_epoch, m.state, m.assigned, m.pending_revocation, m.instance_id, m.subscribed_topic_regex,
            m.subscribed_topic_names)
    assert after.target == before.target
    # the reloaded group gives its members a session to come back
    assert sm.timer_deadline(("consumer-session", "g", "m1")) == h.now + 45000


def test_tombstones_remove_left_members_and_deleted_groups():
    h = Harness()
    h.hb()
    h.hb()
    h.hb("m2", -1)
    assert set(replay(h).groups["g"].members) == {"m1"}
    h.hb("m1", -1)
    t = object()
    h.apply(h.sm.delete_groups(t, 0, ["g"]))
    assert "g" not in replay(h).groups


# ------------------------------------------------------------------ churn simulation

def churn(seed: int, steps: int = 150) -> None:
    rng = random.Random(seed)
    topics = {"a": (T1, rng.randint(1, 8)), "b": (T2, rng.randint(1, 5))}
    h = Harness(topics=topics)
    clients: dict[str, list] = {}       # member id -> what the client owns
    epochs: dict[str, int] = {}
    for _ in range(steps):
        action = rng.random()
        if action < 0.15 or not clients:
            names = rng.choice([["a"], ["b"], ["a", "b"]])
            r = h.hb(names=names, assignor=rng.choice([None, "range", "uniform"]))
            if r.error == E.NONE:
                clients[r.member_id] = [(t, p) for t, ps in r.assignment.items() for p in ps]
                epochs[r.member_id] = r.member_epoch
        elif action < 0.22:
            mid = rng.choice(sorted(clients))
            h.hb(mid, -1)
            clients.pop(mid)
        elif action < 0.26:
            h.advance(rng.choice([1000, 20000, 50000]))
        elif action < 0.30 and "c" not in h.topics:
            h.topics["c"] = (T3, rng.randint(1, 4))
        else:
            mid = rng.choice(sorted(clients))
            # a client may hold on to revoked partitions for a while
            lazy = rng.random() < 0.3
            r = h.hb(mid, epochs[mid], owned=list(clients[mid]) if rng.random() < 0.9 else None,
                     names=rng.choice([None, None, None, ["a", "b"], ["a"]]) if not lazy else None)
            if r.error in (E.UNKNOWN_MEMBER_ID, E.FENCED_MEMBER_EPOCH):
                clients.pop(mid)
                continue
            assert r.error == E.NONE, r
            epochs[mid] = r.member_epoch
            if r.assignment is not None:
                new = [(t, p) for t, ps in r.assignment.items() for p in ps]
                if not lazy:
                    clients[mid] = new
                else:
                    # revoke late: keep the intersection now, the rest on a later heartbeat
                    clients[mid] = [tp for tp in clients[mid] if tp in set(new)]
        group = h.sm.groups.get("g")
        if group is not None:
            assert_single_owner(group)
            # what clients consume is also never shared
            consumed = [tp for mid in clients for tp in clients[mid] if mid in group.members]
            assert len(consumed) == len(set(consumed)), (seed, clients)
    # with everyone heartbeating, the group converges
    group = h.sm.groups.get("g")
    if group is not None and group.members:
        for mid in list(group.members):
            if mid not in clients:
                h.hb(mid, -1)
        live = list(group.members)
        if live:
            h.settle(live, rounds=20)
            assigned = sorted(tp for m in group.members.values() for tp in m.owned())
            expected = sorted((tid, p) for name, (tid, n) in group.subscription_metadata.items() for p in range(n))
            assert assigned == expected


def test_churn_never_double_ownership():
    for seed in range(60):
        churn(seed)


def churn_many(seeds: int = 1000) -> None:
    """The long version: `python3 -c 'from tests.test_consumer_group_state import churn_many; churn_many()'`."""
    for seed in range(seeds):
        churn(seed)


# ------------------------------------------------------------------ config

def test_consumer_group_config_bounds_checked_at_start():
    from broker.config.broker_config import BrokerConfig
    from broker.config.types import ConfigError
    with pytest.raises(ConfigError, match="group.consumer.session.timeout.ms must be greater than or equals to "
                                          "group.consumer.min.session.timeout.ms"):
        BrokerConfig({"group.consumer.session.timeout.ms": "6000"})
    with pytest.raises(ConfigError, match="heartbeat.interval.ms must be less than"):
        BrokerConfig({"group.consumer.session.timeout.ms": "6000", "group.consumer.min.session.timeout.ms": "6000",
                      "group.consumer.heartbeat.interval.ms": "6000", "group.consumer.max.heartbeat.interval.ms":
                      "15000", "group.consumer.min.heartbeat.interval.ms": "5000"})
    cfg = GroupConfig.from_broker_config(BrokerConfig({
        "group.consumer.session.timeout.ms": "6000", "group.consumer.min.session.timeout.ms": "6000",
        "group.consumer.assignors": "range"}))
    assert (cfg.consumer_session_timeout_ms, cfg.consumer_assignors, cfg.consumer_protocol_enabled) == (
        6000, ["range"], True)
    assert not GroupConfig.from_broker_config(BrokerConfig(
        {"group.coordinator.rebalance.protocols": "classic"})).consumer_protocol_enabled


# ------------------------------------------------------------------ churn with classic members

def churn_mixed(seed: int, steps: int = 150) -> None:
    """Consumer-protocol and classic (eager) members in one group, through
    upgrades and downgrades: neither the coordinator nor the clients ever
    have a partition in two members' hands."""
    rng = random.Random(seed)
    h = Harness(topics={"orders": (T1, rng.randint(2, 8))}, initial_rebalance_delay_ms=0)
    consumers: dict[str, list] = {}     # consumer-protocol member -> what it consumes
    epochs: dict[str, int] = {}
    classics: dict[str, list] = {}      # classic member -> what it consumes
    generations: dict[str, int] = {}

    def classic_rejoin(mid):
        classics[mid] = []              # eager: revoke everything, then rejoin
        t = classic_join(h, mid)
        if t not in h.answers:          # an empty consumer group became a classic group: its join waits
            generations[mid] = None
            return
        j = h.answers[t]
        if j.error != E.NONE:
            classics.pop(mid)
            return
        if not isinstance(h.sm.groups.get("g"), ConsumerGroup):
            generations[mid] = None     # a classic group: the classic protocol's own tests cover it
            return
        s1 = object()
        h.apply(h.sm.sync_group(s1, h.now, "g", j.generation_id, mid))
        r = h.answers[s1]
        if r.error == E.NONE:
            generations[mid] = j.generation_id
            classics[mid] = [(T1, p) for p in decode_assignment(r.assignment).get("orders", ())]

    for _ in range(steps):
        group = h.sm.groups.get("g")
        a = rng.random()
        if a < 0.12 or (not consumers and not classics):
            r = h.hb()
            if r.error == E.NONE:
                consumers[r.member_id] = [(t, p) for t, ps in (r.assignment or {}).items() for p in ps]
                epochs[r.member_id] = r.member_epoch
        elif a < 0.2 and isinstance(group, ConsumerGroup):
            t = object()
            h.apply(h.sm.join_group(t, h.now, "g", "", None, "consumer", [("range", sub("orders"))], 10000,
                                    10000, require_known_member_id=True, topics=h.topics))
            if h.answers[t].error == E.MEMBER_ID_REQUIRED:
                classic_rejoin(h.answers[t].member_id)
        elif a < 0.27 and consumers:
            mid = rng.choice(sorted(consumers))
            h.hb(mid, -1)
            consumers.pop(mid)
        elif a < 0.32 and classics:
            mid = rng.choice(sorted(classics))
            t = object()
            h.apply(h.sm.leave_group(t, h.now, "g", [(mid, None, None)]))
            classics.pop(mid)
        elif a < 0.35:
            h.advance(rng.choice([500, 4000, 12000]))
        elif a < 0.7 and consumers:
            mid = rng.choice(sorted(consumers))
            r = h.hb(mid, epochs[mid], owned=list(consumers[mid]))
            if r.error != E.NONE:
                consumers.pop(mid)
                continue
            epochs[mid] = r.member_epoch
            if r.assignment is not None:
                consumers[mid] = [(t, p) for t, ps in r.assignment.items() for p in ps]
        elif classics:
            mid = rng.choice(sorted(classics))
            if generations.get(mid) is None:
                continue
            t = object()
            h.apply(h.sm.heartbeat(t, h.now, "g", mid, generations[mid]))
            if h.answers[t] == E.REBALANCE_IN_PROGRESS:
                classic_rejoin(mid)
            elif h.answers[t] != E.NONE:
                classics.pop(mid)
        group = h.sm.groups.get("g")
        if isinstance(group, ConsumerGroup):
            assert_single_owner(group)
            live = [tp for mid, tps in list(consumers.items()) + list(classics.items())
                    if mid in group.members for tp in tps]
            assert len(live) == len(set(live)), (seed, consumers, classics)
        else:
            for mid in list(consumers):
                consumers.pop(mid)      # fenced by the downgrade: they rejoin as new members
            for mid in list(classics):
                generations[mid] = None


def test_churn_with_classic_members_never_double_ownership():
    for seed in range(40):
        churn_mixed(seed)


def churn_mixed_many(seeds: int = 1000) -> None:
    for seed in range(seeds):
        churn_mixed(seed)

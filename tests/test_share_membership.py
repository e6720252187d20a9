"""Share-group membership (broker/share/membership.py): joining, epochs, fencing, leaving, session
expiry, and the simple assignor sharing one partition between several members."""
from __future__ import annotations

from kproto.errors import ErrorCode as E

from broker.share.membership import ShareGroups, simple_assign, ShareMember

TOPICS = {"t": ("id-t", 1), "u": ("id-u", 4)}


def test_several_members_share_one_partition():
    g = ShareGroups(session_timeout_ms=1000)
    a = g.heartbeat("g", "a", 0, None, ["t"], TOPICS, 0)
    assert (a.error, a.member_epoch, a.assignment) == (E.NONE, 1, {"id-t": [0]})
    b = g.heartbeat("g", "b", 0, None, ["t"], TOPICS, 0)
    assert (b.member_epoch, b.assignment) == (2, {"id-t": [0]})
    a2 = g.heartbeat("g", "a", 1, None, None, TOPICS, 10)
    assert (a2.member_epoch, a2.assignment) == (2, {"id-t": [0]})   # moves to the group epoch
    a3 = g.heartbeat("g", "a", 2, None, None, TOPICS, 20)
    assert a3.assignment is None                                   # unchanged: not repeated


def test_partitions_spread_when_fewer_members():
    assignable = {"u": ("id-u", (0, 1, 2, 3))}
    members = {m: ShareMember(m, subscribed=("u",)) for m in ("a", "b")}
    assert simple_assign(members, assignable) == {"a": {"id-u": [0, 2]}, "b": {"id-u": [1, 3]}}
    members = {m: ShareMember(m, subscribed=("u",)) for m in "abcdef"}
    got = simple_assign(members, assignable)
    assert all(len(a["id-u"]) == 1 for a in got.values())
    assert sorted(p for a in got.values() for p in a["id-u"]) == [0, 0, 1, 1, 2, 3]


def test_epoch_rules_and_leave():
    g = ShareGroups()
    assert g.heartbeat("g", "", 0, None, ["t"], TOPICS, 0).error == E.INVALID_REQUEST
    assert g.heartbeat("g", "a", 0, None, None, TOPICS, 0).error == E.INVALID_REQUEST
    assert g.heartbeat("g", "a", 3, None, None, TOPICS, 0).error == E.UNKNOWN_MEMBER_ID
    g.heartbeat("g", "a", 0, None, ["t"], TOPICS, 0)
    assert g.heartbeat("g", "a", 7, None, None, TOPICS, 0).error == E.FENCED_MEMBER_EPOCH
    left = g.heartbeat("g", "a", -1, None, None, TOPICS, 0)
    assert (left.error, left.member_epoch) == (E.NONE, -1)
    assert g.groups["g"].state == "Empty" and g.groups["g"].group_epoch == 2


def test_session_expiry_removes_the_member():
    g = ShareGroups(session_timeout_ms=100)
    g.heartbeat("g", "a", 0, None, ["t"], TOPICS, 0)
    g.heartbeat("g", "b", 0, None, ["t"], TOPICS, 50)
    assert g.next_deadline() == 100
    assert g.expire(100, TOPICS) == [("g", "a")]
    assert list(g.groups["g"].members) == ["b"]


def test_new_partitions_reassign():
    g = ShareGroups()
    g.heartbeat("g", "a", 0, None, ["t"], TOPICS, 0)
    r = g.heartbeat("g", "a", 1, None, None, {"t": ("id-t", 3)}, 1)
    assert (r.member_epoch, r.assignment) == (2, {"id-t": [0, 1, 2]})


def test_group_max_size():
    g = ShareGroups(max_size=1)
    g.heartbeat("g", "a", 0, None, ["t"], TOPICS, 0)
    assert g.heartbeat("g", "b", 0, None, ["t"], TOPICS, 0).error == E.GROUP_MAX_SIZE_REACHED


def test_only_initialised_partitions_are_assigned():
    """Kafka 4.3: a heartbeat assigns only partitions with share state and names the others to
    initialise; once they are initialised, the next heartbeat bumps the group epoch and assigns them."""
    g = ShareGroups()
    a = g.heartbeat("g", "a", 0, None, ["u"], TOPICS, 0, initialized={})
    assert (a.member_epoch, a.assignment, a.initialize) == (1, {}, {"id-u": ("u", frozenset({0, 1, 2, 3}))})
    a = g.heartbeat("g", "a", 1, None, None, TOPICS, 1, initialized={"id-u": {0, 1}})     # two initialised
    assert (a.member_epoch, a.assignment, a.initialize) == (2, {"id-u": [0, 1]}, {"id-u": ("u", frozenset({2, 3}))})
    a = g.heartbeat("g", "a", 2, None, None, TOPICS, 2, initialized={"id-u": {0, 1}})     # nothing new
    assert (a.member_epoch, a.assignment) == (2, None)
    a = g.heartbeat("g", "a", 2, None, None, TOPICS, 3, initialized={"id-u": {0, 1, 2, 3}})
    assert (a.member_epoch, a.assignment, a.initialize) == (3, {"id-u": [0, 1, 2, 3]}, {})


def test_a_member_is_described_with_what_it_was_told():
    """ShareGroupDescribe shows a member's assignment as of its last heartbeat (Kafka's assigned
    partitions), not a target it has not heartbeated for yet."""
    g = ShareGroups()
    g.heartbeat("g", "a", 0, None, ["t"], TOPICS, 0, initialized={})
    g.heartbeat("g", "b", 0, None, ["t"], TOPICS, 0, initialized={})
    g.heartbeat("g", "a", 1, None, None, TOPICS, 1, initialized={"id-t": {0}})      # a's bumps and assigns
    a, b = g.groups["g"].members["a"], g.groups["g"].members["b"]
    assert (a.current, b.assignment, b.current) == ({"id-t": [0]}, {"id-t": [0]}, {})
    assert g.heartbeat("g", "b", 2, None, None, TOPICS, 2, initialized={"id-t": {0}}).assignment == {"id-t": [0]}
    assert b.current == {"id-t": [0]}


def test_assignment_waits_for_the_assignment_interval():
    """KIP-1263: a join bumps the group epoch at once, the assignment epoch and target only once the
    interval has passed since the last target; a group's first target is immediate."""
    g = ShareGroups(assignment_interval_ms=1000)
    a = g.heartbeat("g", "a", 0, None, ["u"], TOPICS, 10_000)
    assert (a.member_epoch, a.assignment) == (1, {"id-u": [0, 1, 2, 3]})      # first: at once
    b = g.heartbeat("g", "b", 0, None, ["u"], TOPICS, 10_400)
    group = g.groups["g"]
    assert (group.group_epoch, group.assignment_epoch) == (2, 1)
    assert (b.member_epoch, b.assignment) == (1, {})                         # waits, with nothing
    a2 = g.heartbeat("g", "a", 1, None, None, TOPICS, 10_900)
    assert (a2.member_epoch, a2.assignment) == (1, None)                     # keeps what it has
    b2 = g.heartbeat("g", "b", 1, None, None, TOPICS, 11_000)                # the interval passed
    assert (b2.member_epoch, b2.assignment) == (2, {"id-u": [1, 3]})
    assert group.assignment_epoch == 2
    a3 = g.heartbeat("g", "a", 1, None, None, TOPICS, 11_100)
    assert (a3.member_epoch, a3.assignment) == (2, {"id-u": [0, 2]})
    # a leave within the interval: the epoch moves, the leaver's partitions wait for the interval
    assert g.heartbeat("g", "b", -1, None, None, TOPICS, 11_500).member_epoch == -1
    assert (group.group_epoch, group.assignment_epoch) == (3, 2)
    assert g.heartbeat("g", "a", 2, None, None, TOPICS, 11_600).assignment is None
    assert g.heartbeat("g", "a", 2, None, None, TOPICS, 12_000).assignment == {"id-u": [0, 1, 2, 3]}


def test_assignment_interval_zero_assigns_at_once():
    g = ShareGroups(assignment_interval_ms=0)
    g.heartbeat("g", "a", 0, None, ["u"], TOPICS, 5)
    b = g.heartbeat("g", "b", 0, None, ["u"], TOPICS, 5)
    assert (b.member_epoch, b.assignment) == (2, {"id-u": [1, 3]})
    assert g.groups["g"].assignment_epoch == 2


def test_assignment_interval_is_the_groups_own():
    intervals = {"slow": 5000, "fast": 0}
    g = ShareGroups(interval_of=intervals.get)
    for gid in intervals:
        g.heartbeat(gid, "a", 0, None, ["u"], TOPICS, 100)
        g.heartbeat(gid, "b", 0, None, ["u"], TOPICS, 200)
    assert g.groups["slow"].assignment_epoch == 1 and g.groups["fast"].assignment_epoch == 2

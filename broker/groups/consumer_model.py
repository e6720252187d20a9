"""Group and member state of KIP-848 consumer groups (`group.protocol=consumer`),
after Kafka's ConsumerGroup, ConsumerGroupMember and CurrentAssignmentBuilder.

The coordinator owns the assignment: the group has an epoch, bumped when its
members or their subscriptions change; a target assignment computed by a
server-side assignor at an assignment epoch; and each member converges to
its target through its heartbeats. A member gives up partitions that move
away before the member that is to receive them gets them: a partition is in
at most one member's assigned or pending-revocation set at any time.

Assignments are dicts of topic id (uuid.UUID) -> set of partition indexes.
"""
from __future__ import annotations

import re

from broker.groups.model import DEAD, EMPTY, STABLE, Group, IllegalStateTransition

ASSIGNING = "Assigning"
RECONCILING = "Reconciling"
CONSUMER_STATES = (EMPTY, ASSIGNING, RECONCILING, STABLE, DEAD)

# MemberState of Kafka, with the int8 codes of ConsumerGroupCurrentMemberAssignmentValue.State
MEMBER_STABLE = 0
MEMBER_UNREVOKED_PARTITIONS = 1
MEMBER_UNRELEASED_PARTITIONS = 2
MEMBER_UNKNOWN = 3
MEMBER_STATE_NAMES = {0: "stable", 1: "unrevoked_partitions", 2: "unreleased_partitions", 3: "unknown"}

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

# Topic.isInternal: a regular expression never matches these
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


class InvalidRegex(ValueError):
    pass


_UNSUPPORTED_RE2 = re.compile(r"\(\?[=!]|\(\?<[=!]|\\[1-9]|\(\?P=|\(\?\(")


def compile_regex(pattern: str) -> "re.Pattern":
    """A subscription regex, RE2/J syntax as Kafka (KIP-848 uses RE2J), run
    with Python's re: the common syntax is the same; what RE2 refuses
    (lookaround, backreferences, conditionals) is refused here too. A topic
    matches when the whole name matches (Matcher.matches)."""
    if _UNSUPPORTED_RE2.search(pattern):
        raise InvalidRegex(f"Invalid regular expression: {pattern} (lookaround and backreferences are not RE2)")
    try:
        # RE2's \pN / \p{L} classes have no Python equivalent: re refuses them
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidRegex(f"Invalid regular expression {pattern}: {exc}") from None


def copy_assignment(a: dict) -> dict:
    return {t: set(ps) for t, ps in a.items() if ps}


def same_assignment(a: dict, b: dict) -> bool:
    return copy_assignment(a) == copy_assignment(b)


def assignment_size(a: dict) -> int:
    return sum(len(ps) for ps in a.values())


class ClassicInfo:
    """What a classic-protocol member of a consumer group joined with."""
    __slots__ = ("session_timeout_ms", "protocols")

    def __init__(self, session_timeout_ms: int, protocols: list):
        self.session_timeout_ms = session_timeout_ms
        self.protocols = protocols          # (name, metadata), the member's order of preference


class ConsumerMember:
    __slots__ = ("member_id", "instance_id", "rack_id", "client_id", "client_host", "rebalance_timeout_ms",
                 "subscribed_topic_names", "subscribed_topic_regex", "server_assignor", "member_epoch",
                 "previous_member_epoch", "state", "assigned", "pending_revocation", "classic")

    def __init__(self, member_id: str, instance_id: str | None = None, rack_id: str | None = None,
                 client_id: str = "", client_host: str = "", rebalance_timeout_ms: int = 300000,
                 subscribed_topic_names: list | None = None, subscribed_topic_regex: str | None = None,
                 server_assignor: str | None = None):
        self.member_id = member_id
        self.instance_id = instance_id
        self.rack_id = rack_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.subscribed_topic_names = list(subscribed_topic_names or [])
        self.subscribed_topic_regex = subscribed_topic_regex
        self.server_assignor = server_assignor
        self.member_epoch = 0
        self.previous_member_epoch = -1
        self.state = MEMBER_STABLE
        self.assigned: dict = {}              # topic id -> set: the member may consume these
        self.pending_revocation: dict = {}    # topic id -> set: still owned until the member revokes them
        self.classic: ClassicInfo | None = None   # set for a member that speaks the classic protocol

    def owned(self):
        for t, ps in self.assigned.items():
            for p in ps:
                yield t, p
        for t, ps in self.pending_revocation.items():
            for p in ps:
                yield t, p

    def subscribes(self, topic: str, regex_cache: dict) -> bool:
        if topic in self.subscribed_topic_names:
            return True
        if self.subscribed_topic_regex and topic not in INTERNAL_TOPICS:
            pattern = regex_cache.get(self.subscribed_topic_regex)
            if pattern is None:
                try:
                    pattern = regex_cache[self.subscribed_topic_regex] = compile_regex(self.subscribed_topic_regex)
                except InvalidRegex:
                    return False
            return pattern.fullmatch(topic) is not None
        return False

    def __repr__(self) -> str:
        return (f"ConsumerMember({self.member_id!r}, epoch={self.member_epoch}, "
                f"state={MEMBER_STATE_NAMES.get(self.state)}, assigned={self.assigned}, "
                f"revoking={self.pending_revocation})")


class ConsumerGroup(Group):
    """A KIP-848 group. Subclasses the classic Group for what both kinds share
    (committed offsets, their expiry and deletion, pending transactional
    commits); the membership and its state are the consumer protocol's."""

    def __init__(self, group_id: str, now_ms: int | None):
        super().__init__(group_id, EMPTY, now_ms)
        self.protocol_type = "consumer"
        self.dead = False
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.assignor: str | None = None
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, dict] = {}                # member id -> target assignment
        # topic name -> (topic id, partition count) of every subscribed topic, when last computed
        self.subscription_metadata: dict[str, tuple] = {}

    # Group stores its state in an attribute; a consumer group derives it
    @property
    def state(self) -> str:
        if getattr(self, "dead", False):
            return DEAD
        members = getattr(self, "members", None)
        if not members:
            return EMPTY
        if self.group_epoch != self.assignment_epoch:
            return ASSIGNING
        for m in members.values():
            if m.state != MEMBER_STABLE or m.member_epoch != self.assignment_epoch:
                return RECONCILING
        return STABLE

    @state.setter
    def state(self, value: str) -> None:
        if value == DEAD:
            self.dead = True

    @property
    def generation(self) -> int:
        return self.group_epoch

    @generation.setter
    def generation(self, value: int) -> None:
        pass   # Group.__init__ sets it

    def transition(self, state: str, now_ms: int) -> None:
        if state != DEAD:
            raise IllegalStateTransition(f"consumer group {self.group_id} cannot be moved to {state}")
        self.dead = True
        self.state_timestamp = now_ms

    def is_subscribed_to(self, topic: str) -> bool:
        return topic in self.subscription_metadata

    def remove_expired_offsets(self, now_ms: int, retention_ms: int) -> dict:
        """Offsets of topics no member subscribes to expire `retention_ms`
        after their commit (OffsetExpirationConditionImpl)."""
        found = {}
        for tp, e in self.offsets.items():
            if self.members and tp[0] in self.subscription_metadata:
                continue
            if e.expire_timestamp is None:
                if now_ms - e.commit_timestamp >= retention_ms:
                    found[tp] = e
            elif now_ms >= e.expire_timestamp:
                found[tp] = e
        for tp in found:
            del self.offsets[tp]
        return found

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        if instance_id is None:
            return None
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None

    def owner_map(self, exclude: str | None = None) -> dict:
        """(topic id, partition) -> member id, over assigned and pending revocation."""
        owners = {}
        for mid, m in self.members.items():
            if mid == exclude:
                continue
            for tp in m.owned():
                owners[tp] = mid
        return owners

    def preferred_assignor(self, default: str) -> str:
        """The assignor most members ask for (ConsumerGroup.computePreferredServerAssignor);
        the configured default when none asks."""
        counts: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return default
        best = max(counts.values())
        return sorted(name for name, c in counts.items() if c == best)[0]


def reconcile(member: ConsumerMember, target_epoch: int, target: dict, owners: dict,
              owned_reported: list | None) -> None:
    """Kafka's CurrentAssignmentBuilder: move the member one step towards its
    target. `owners` maps partitions to the other members that still hold
    them; `owned_reported` is what the member's heartbeat says it owns
    ((topic id, partition) list) or None when the heartbeat did not say."""
    if member.state == MEMBER_UNREVOKED_PARTITIONS:
        if owned_reported is not None:
            reported = set(owned_reported)
            if not any((t, p) in reported for t, ps in member.pending_revocation.items() for p in ps):
                member.pending_revocation = {}
                _next_assignment(member, member.member_epoch, target_epoch, target, owners)
            # else: still owns partitions it has to give up
        return
    if member.state == MEMBER_STABLE and member.member_epoch == target_epoch:
        return
    _next_assignment(member, member.member_epoch, target_epoch, target, owners)


def _next_assignment(member: ConsumerMember, member_epoch: int, target_epoch: int, target: dict,
                     owners: dict) -> None:
    kept, revoke, new_ok = {}, {}, {}
    unreleased = False
    for t in set(target) | set(member.assigned):
        want = target.get(t, set())
        have = member.assigned.get(t, set())
        k = have & want
        if k:
            kept[t] = set(k)
        r = have - want
        if r:
            revoke[t] = set(r)
        for p in want - have:
            if (t, p) in owners:
                unreleased = True
            else:
                new_ok.setdefault(t, set()).add(p)
    if revoke:
        # give up first; the epoch stays until the member confirms
        member.assigned = kept
        member.pending_revocation = revoke
        member.state = MEMBER_UNREVOKED_PARTITIONS
        return
    for t, ps in new_ok.items():
        kept.setdefault(t, set()).update(ps)
    if member.member_epoch != target_epoch:
        member.previous_member_epoch = member.member_epoch
    member.member_epoch = target_epoch
    member.assigned = kept
    member.pending_revocation = {}
    member.state = MEMBER_UNRELEASED_PARTITIONS if unreleased else MEMBER_STABLE

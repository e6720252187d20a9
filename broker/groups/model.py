"""Group and member state of the classic protocol, after Kafka's
GroupMetadata and MemberMetadata. Plain data plus the bookkeeping that goes
with it; the decisions live in `state.py`."""
from __future__ import annotations

from broker.groups.subscription import SubscriptionError, subscribed_topics

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

ALL_STATES = (EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD)

_VALID_PREVIOUS = {
    PREPARING_REBALANCE: {STABLE, COMPLETING_REBALANCE, EMPTY},
    COMPLETING_REBALANCE: {PREPARING_REBALANCE},
    STABLE: {COMPLETING_REBALANCE},
    DEAD: set(ALL_STATES),
    EMPTY: {PREPARING_REBALANCE},
}

# JoinGroupRequest.UNKNOWN_MEMBER_ID: a member's first JoinGroup, before it has an id
UNKNOWN_MEMBER_ID = ""
CONSUMER_PROTOCOL_TYPE = "consumer"


class IllegalStateTransition(RuntimeError):
    pass


class OffsetEntry:
    """One committed offset. `order` is the position of its commit record in
    the log (or a later-than-any-log position for commits made since the
    load): with transactional commits in the mix, the newer record wins."""

    __slots__ = ("offset", "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp", "order")

    def __init__(self, offset: int, leader_epoch: int, metadata: str, commit_timestamp: int,
                 expire_timestamp: int | None = None, order: int = -1):
        self.offset = offset
        self.leader_epoch = leader_epoch
        self.metadata = metadata
        self.commit_timestamp = commit_timestamp
        self.expire_timestamp = expire_timestamp
        self.order = order

    def __repr__(self) -> str:
        return f"OffsetEntry({self.offset}, epoch={self.leader_epoch}, metadata={self.metadata!r})"


class Member:
    __slots__ = ("member_id", "instance_id", "client_id", "client_host", "rebalance_timeout_ms",
                 "session_timeout_ms", "protocol_type", "protocols", "assignment", "awaiting_join",
                 "awaiting_sync", "is_new")

    def __init__(self, member_id: str, instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 protocols: list[tuple[str, bytes]], assignment: bytes = b""):
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols          # (name, metadata) in the member's order of preference
        self.assignment = assignment
        self.awaiting_join = None           # ticket of a parked JoinGroup
        self.awaiting_sync = None           # ticket of a parked SyncGroup
        self.is_new = False

    @property
    def is_static(self) -> bool:
        return self.instance_id is not None

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise ValueError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        if len(protocols) != len(self.protocols):
            return False
        return all(a[0] == b[0] and bytes(a[1]) == bytes(b[1]) for a, b in zip(protocols, self.protocols))

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {candidates}")

    def has_satisfied_heartbeat(self) -> bool:
        """At a heartbeat deadline: new members must have been answered, others
        are excused while they wait for a join or sync answer."""
        if self.is_new:
            return False
        return self.awaiting_join is not None or self.awaiting_sync is not None

    def __repr__(self) -> str:
        return (f"Member({self.member_id!r}, instance={self.instance_id!r}, session={self.session_timeout_ms}, "
                f"rebalance={self.rebalance_timeout_ms}, protocols={[p for p, _ in self.protocols]})")


class Group:
    def __init__(self, group_id: str, state: str, now_ms: int | None):
        self.group_id = group_id
        self.state = state
        self.state_timestamp = now_ms     # None when loaded from an old record without one
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}          # insertion order: join order
        self.static_members: dict[str, str] = {}      # group.instance.id -> member id
        self.pending_members: set[str] = set()        # ids handed out with MEMBER_ID_REQUIRED
        self.pending_sync: set[str] = set()
        self.offsets: dict[tuple[str, int], OffsetEntry] = {}
        self.pending_txn: dict[int, dict[tuple[str, int], OffsetEntry]] = {}
        # OffsetCommits appended but not yet replicated (count per partition): not visible to
        # OffsetFetch until the high watermark passes them (GroupMetadata.pendingOffsetCommits)
        self.pending_offsets: dict[tuple[str, int], int] = {}
        self.subscribed_topics: set[str] | None = None
        self.new_member_added = False
        # the delayed join in flight: None, "initial" (group.initial.rebalance.delay.ms) or "normal"
        self.join_kind: str | None = None
        self.initial_delay: tuple[int, int, int] = (0, 0, 0)   # configured, this delay, remaining
        self.sync_generation: int | None = None                # generation the sync timer watches
        self.received_consumer_commits = False
        self.received_txn_commits = False

    # -- queries -----------------------------------------------------------------

    def is_(self, state: str) -> bool:
        return self.state == state

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def has_all_members_joined(self) -> bool:
        return self.num_awaiting_join == len(self.members) and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[PREPARING_REBALANCE]

    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def _protocol_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for m in self.members.values():
            for name, _ in m.protocols:
                counts[name] = counts.get(name, 0) + 1
        return counts

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, c in self._protocol_counts().items() if c == n}

    def supports_protocols(self, protocol_type: str, protocols: set[str]) -> bool:
        if self.state == EMPTY:
            return bool(protocol_type) and bool(protocols)
        counts = self._protocol_counts()
        n = len(self.members)
        return self.protocol_type == protocol_type and any(counts.get(p, 0) == n for p in protocols)

    def select_protocol(self) -> str:
        """The protocol all members support with the most first-choice votes;
        a tie goes to the one the earliest member prefers."""
        if not self.members:
            raise IllegalStateTransition("cannot select a protocol for an empty group")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        first = next(iter(self.members.values()))
        for name, _ in first.protocols:
            if votes.get(name) == best:
                return name
        return max(votes, key=votes.get)

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        return [(m.member_id, m.instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]

    def is_subscribed_to(self, topic: str) -> bool:
        return True if self.subscribed_topics is None else topic in self.subscribed_topics

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics.update(subscribed_topics(m.metadata(self.protocol_name)))
        except (SubscriptionError, ValueError):
            return None
        return topics

    def has_offsets(self) -> bool:
        return bool(self.offsets) or bool(self.pending_txn) or bool(self.pending_offsets)

    def has_pending_commit(self, tp: tuple[str, int]) -> bool:
        return tp in self.pending_offsets or any(tp in offsets for offsets in self.pending_txn.values())

    # -- changes -----------------------------------------------------------------

    def transition(self, state: str, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalStateTransition(f"group {self.group_id} cannot move from {self.state} to {state}")
        self.state = state
        self.state_timestamp = now_ms

    def add(self, member: Member, ticket=None) -> None:
        if member.instance_id is not None:
            if member.instance_id in self.static_members:
                raise IllegalStateTransition(f"static member {member.instance_id} is already in the group")
            self.static_members[member.instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        member.awaiting_join = ticket
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.instance_id is not None:
            self.static_members.pop(member.instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync.discard(member_id)
        return member

    def update_member(self, member: Member, protocols, rebalance_timeout_ms: int, session_timeout_ms: int,
                      ticket) -> None:
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        member.awaiting_join = ticket

    def init_next_generation(self, now_ms: int) -> None:
        self.state_timestamp = now_ms
        self.generation += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.state = COMPLETING_REBALANCE
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.state = EMPTY
        self.received_consumer_commits = False
        self.received_txn_commits = False
        self.pending_sync.clear()

    def remove_offsets(self, tps) -> dict[tuple[str, int], OffsetEntry]:
        removed = {}
        for tp in tps:
            for offsets in self.pending_txn.values():
                offsets.pop(tp, None)
            self.pending_offsets.pop(tp, None)   # an in-flight commit stays deleted
            entry = self.offsets.pop(tp, None)
            if entry is not None:
                removed[tp] = entry
        return removed

    def remove_expired_offsets(self, now_ms: int, retention_ms: int) -> dict[tuple[str, int], OffsetEntry]:
        """Kafka's GroupMetadata.removeExpiredOffsets."""
        def expired(base_of, subscribed=frozenset()):
            out = {}
            for tp, e in self.offsets.items():
                if tp[0] in subscribed:
                    continue
                if e.expire_timestamp is None:
                    if now_ms - base_of(e) >= retention_ms:
                        out[tp] = e
                elif now_ms >= e.expire_timestamp:
                    out[tp] = e
            return out

        if self.protocol_type is not None and self.state == EMPTY:
            # retention runs from the moment the group became empty
            found = expired(lambda e: self.state_timestamp if self.state_timestamp is not None
                            else e.commit_timestamp)
        elif (self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.subscribed_topics is not None
              and self.state == STABLE):
            found = expired(lambda e: e.commit_timestamp, self.subscribed_topics)
        elif self.protocol_type is None:
            found = expired(lambda e: e.commit_timestamp)
        else:
            found = {}
        for tp in found:
            del self.offsets[tp]
        return found


def java_string_length(s: str) -> int:
    """String#length: UTF-16 code units (offset metadata is limited in them)."""
    return len(s.encode("utf-16-le")) // 2

"""Share-group membership (KIP-932): ShareGroupHeartbeat, the simple assignor, session expiry and what
ShareGroupDescribe / ListGroups / DescribeGroups tell about a share group. Pure: every input carries
`now_ms` and the topic metadata it needs (name -> (topic id, partition count)).

After Kafka 4.3's GroupMetadataManager.shareGroupHeartbeat: the client makes its own member id; epoch
0 joins (with a subscription), -1 leaves, any other epoch must be the member's current one. A join,
a leave, a changed subscription or changed partition counts of the subscribed topics bump the group
epoch at once. The target assignment follows it at the first heartbeat once the group's assignment
interval (Kafka 4.3's KIP-1263: `share.assignment.interval.ms`, the broker's
`group.share.assignment.interval.ms`, 1 s) has passed since the last one was computed, so a burst of
joins is assigned once; a group's first assignment is immediate (as Kafka's, whose timestamp starts
at 0). Share groups have no revocation step (a partition may be read by several members at the same
time), so a member moves straight to the assignment epoch and its target on its next heartbeat; a
member heartbeating before the target is recomputed keeps what it has (a new one: nothing).

Only partitions whose share state is initialised are assigned (Kafka 4.3's assignable partitions,
`initialized`: topic id -> partitions, from the group coordinator's ShareGroupStatePartitionMetadata).
A heartbeat answers at once; its `initialize` output names the subscribed partitions without state,
which the shell has the share coordinators initialise in the background. Once they are recorded
initialised, the next heartbeat sees more assignable partitions, bumps the group epoch and assigns
them (Kafka's initializedAssignmentPending), so a new member's first answer may assign nothing.

Every change is written to `__consumer_offsets` as Kafka 4.3 writes it (broker/groups/share_records.py,
record types 10-14): the shell takes a `view` of a group before a change and writes `records(view,
group)` after it, the difference; a load replays them (`restore`), so a restart or a failover keeps
the group epoch, the members with their epochs and assignments, and the time of the last target
assignment (its interval still counts from it). Kafka's metadata hash is a kproto hash here (of the
subscribed topics and their assignable partitions): a coordinator that computes another one bumps the
group epoch once at the next heartbeat, as for a changed topic.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from kproto.errors import ErrorCode as E

from broker.groups import consumer_results
from broker.groups import share_records as srec

EMPTY, STABLE, DEAD = "Empty", "Stable", "Dead"
LEAVE_EPOCH = -1


@dataclass
class ShareMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed: tuple = ()
    assignment: dict = field(default_factory=dict)      # topic id -> sorted partitions (the target)
    # what the member was last told (its heartbeat at the group epoch): ShareGroupDescribe's, as
    # Kafka describes a member's assigned partitions, not the target it has not heartbeated for yet
    current: dict = field(default_factory=dict)
    deadline: int = 0                                    # session expiry


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    # when the target assignment was last computed (ms), None: never (the next one is immediate);
    # written as the record's AssignmentTimestamp (KIP-1263)
    assignment_ms: int | None = None
    members: dict = field(default_factory=dict)         # member id -> ShareMember
    # subscribed topic name -> (id, partitions), and -> (id, initialised partitions), at the last bump;
    # None after a restore (not recorded: the metadata hash stands for them until the next heartbeat)
    topics_seen: dict | None = field(default_factory=dict)
    assignable_seen: dict | None = field(default_factory=dict)
    metadata_hash: int = 0                               # of topics_seen and assignable_seen

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY


@dataclass
class HeartbeatResult(consumer_results.HeartbeatResult):
    """The answer to a heartbeat, as a consumer group's (assignment None: unchanged since the last
    answer), and the subscribed partitions whose state is to be initialised: topic id -> (topic
    name, partitions)."""
    initialize: dict = field(default_factory=dict)


def simple_assign(members: dict, topics: dict) -> dict:
    """Kafka's share SimpleAssignor in spirit: every partition of a subscribed topic goes to at least
    one of its subscribers; with more subscribers than partitions, partitions are shared so that
    every subscriber gets one. topics: name -> (topic id, the assignable partitions). member id ->
    {topic id: sorted partitions}."""
    out = {m: {} for m in members}
    for name in sorted({t for m in members.values() for t in m.subscribed}):
        if name not in topics:
            continue
        tid, partitions = topics[name]
        parts = sorted(partitions)
        count = len(parts)
        subs = sorted(m for m, mem in members.items() if name in mem.subscribed)
        if not subs or count <= 0:
            continue
        pairs = ([(parts[i], subs[i % len(subs)]) for i in range(count)] if len(subs) <= count
                 else [(parts[j % count], m) for j, m in enumerate(subs)])
        for p, m in pairs:
            out[m].setdefault(tid, []).append(p)
    for a in out.values():
        for ps in a.values():
            ps.sort()
    return out


class ShareGroups:
    """Every share group of one coordinator."""

    def __init__(self, *, session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 5000, max_size: int = 200,
                 assignment_interval_ms: int = 0, interval_of=None):
        """interval_of: group id -> its assignment interval (ms), the group's config; None: every group
        has assignment_interval_ms (0: the target is recomputed at every change)."""
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        self.interval_of = interval_of or (lambda _group_id: assignment_interval_ms)
        self.groups: dict[str, ShareGroup] = {}

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id, subscribed, topics: dict,
                  now_ms: int, client_id: str = "", client_host: str = "",
                  initialized: dict | None = None) -> HeartbeatResult:
        """initialized: topic id -> the group's partitions with share state (None: every partition)."""
        if not group_id:
            return HeartbeatResult(E.INVALID_REQUEST, "GroupId can't be empty.")
        if not member_id:
            return HeartbeatResult(E.INVALID_REQUEST, "MemberId can't be empty.")
        if member_epoch < LEAVE_EPOCH:
            return HeartbeatResult(E.INVALID_REQUEST, f"MemberEpoch is {member_epoch}, but must be greater than or equal to -1.")
        if member_epoch == 0 and not subscribed:
            return HeartbeatResult(E.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
        group = self.groups.get(group_id)
        if member_epoch == LEAVE_EPOCH:
            if group is None or member_id not in group.members:
                return HeartbeatResult(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
            self.remove_member(group_id, member_id, topics, initialized, now_ms)
            return HeartbeatResult(E.NONE, member_id=member_id, member_epoch=LEAVE_EPOCH)
        if group is None:
            if member_epoch != 0:
                return HeartbeatResult(E.UNKNOWN_MEMBER_ID, f"Group {group_id} has no member {member_id}.")
            group = self.groups[group_id] = ShareGroup(group_id)
        member = group.members.get(member_id)
        if member is None:
            if member_epoch != 0:
                return HeartbeatResult(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
            if len(group.members) >= self.max_size:
                return HeartbeatResult(E.GROUP_MAX_SIZE_REACHED,
                                       f"The share group has reached its maximum capacity of {self.max_size} members.")
            member = group.members[member_id] = ShareMember(member_id)
            changed = True
        else:
            if member_epoch not in (0, member.member_epoch):
                return HeartbeatResult(E.FENCED_MEMBER_EPOCH,
                                       f"The share group member has a smaller member epoch ({member_epoch}) than the one "
                                       f"known by the group coordinator ({member.member_epoch}).")
            changed = False
        member.deadline = now_ms + self.session_timeout_ms
        member.client_id, member.client_host = client_id, client_host
        if rack_id is not None:
            member.rack_id = rack_id
        if subscribed is not None and tuple(sorted(subscribed)) != member.subscribed:
            member.subscribed = tuple(sorted(subscribed))
            changed = True
        if changed or self._topics_changed(group, topics, initialized):
            self._bump(group, topics, initialized)
        self._maybe_assign(group, now_ms)
        full = member_epoch == 0 or member.member_epoch != group.assignment_epoch
        if member.member_epoch != group.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch
        member.current = dict(member.assignment)
        return HeartbeatResult(E.NONE, member_id=member_id, member_epoch=member.member_epoch,
                               heartbeat_interval_ms=self.heartbeat_interval_ms,
                               assignment=dict(member.assignment) if full else None,
                               initialize=self._uninitialized(group, initialized))

    def ensure(self, group_id: str) -> ShareGroup:
        """The group, created empty if it does not exist (AlterShareGroupOffsets creates it, as
        Kafka's coordinator does)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id)
        return group

    def remove_member(self, group_id: str, member_id: str, topics: dict, initialized: dict | None = None,
                      now_ms: int | None = None) -> None:
        """now_ms None: the target is recomputed at once (no interval)."""
        group = self.groups[group_id]
        del group.members[member_id]
        self._bump(group, topics, initialized)
        self._maybe_assign(group, now_ms)

    def expire(self, now_ms: int, topics: dict, initialized_of=None) -> list[tuple[str, str]]:
        """Remove the members whose session ended; (group id, member id) of each. initialized_of:
        group id -> its `initialized` (see heartbeat), None: every partition."""
        gone = [(g.group_id, m.member_id) for g in self.groups.values() for m in g.members.values()
                if m.deadline <= now_ms]
        for gid, mid in gone:
            self.remove_member(gid, mid, topics, None if initialized_of is None else initialized_of(gid), now_ms)
        return gone

    def next_deadline(self) -> int | None:
        return min((m.deadline for g in self.groups.values() for m in g.members.values()), default=None)

    def assigned(self, group_id: str, member_id: str) -> dict | None:
        """The member's assignment (topic id -> partitions), None if it is not a member."""
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        return None if member is None else member.assignment

    # -- internals --------------------------------------------------------------------------------

    def _subscribed_topics(self, group: ShareGroup, topics: dict) -> dict:
        names = {t for m in group.members.values() for t in m.subscribed}
        return {n: topics[n] for n in names if n in topics}

    def _assignable(self, subscribed: dict, initialized: dict | None) -> dict:
        """name -> (topic id, the partitions that may be assigned: those with share state)."""
        if initialized is None:
            return {n: (tid, tuple(range(count))) for n, (tid, count) in subscribed.items()}
        return {n: (tid, tuple(sorted(p for p in initialized.get(tid, ()) if 0 <= p < count)))
                for n, (tid, count) in subscribed.items()}

    def restore(self, group_id: str, load: srec.ShareGroupLoad, now_ms: int) -> ShareGroup | None:
        """The group its replayed records describe (None without a group metadata record); each
        member's session starts again now, as Kafka's coordinator schedules them on a load."""
        if load.epoch is None:
            return None
        group = ShareGroup(group_id, group_epoch=load.epoch, assignment_epoch=load.assignment_epoch,
                           assignment_ms=load.assignment_timestamp or None, topics_seen=None, assignable_seen=None,
                           metadata_hash=load.metadata_hash)
        for member_id, v in load.members.items():
            m = group.members[member_id] = ShareMember(
                member_id, rack_id=v.rack_id, client_id=v.client_id, client_host=v.client_host,
                subscribed=tuple(sorted(v.subscribed_topic_names)), deadline=now_ms + self.session_timeout_ms)
            target = load.targets.get(member_id)
            if target is not None:
                m.assignment = srec.partitions_of(target.topic_partitions)
            current = load.current.get(member_id)
            if current is not None:
                m.member_epoch, m.previous_member_epoch = current.member_epoch, current.previous_member_epoch
                m.current = srec.partitions_of(current.assigned_partitions)
        return group

    def _uninitialized(self, group: ShareGroup, initialized: dict | None) -> dict:
        if initialized is None or group.topics_seen is None:
            return {}
        out = {}
        for name, (tid, count) in group.topics_seen.items():
            missing = frozenset(range(count)) - frozenset(initialized.get(tid, ()))
            if missing:
                out[tid] = (name, missing)
        return out

    def _topics_changed(self, group: ShareGroup, topics: dict, initialized: dict | None) -> bool:
        subscribed = self._subscribed_topics(group, topics)
        assignable = self._assignable(subscribed, initialized)
        if group.topics_seen is None and metadata_hash(subscribed, assignable) == group.metadata_hash:
            group.topics_seen, group.assignable_seen = subscribed, assignable   # restored, unchanged
        return subscribed != group.topics_seen or assignable != group.assignable_seen

    def _bump(self, group: ShareGroup, topics: dict, initialized: dict | None = None) -> None:
        """A change of members, subscriptions or assignable partitions: a new group epoch, at once."""
        group.group_epoch += 1
        group.topics_seen = self._subscribed_topics(group, topics)
        group.assignable_seen = self._assignable(group.topics_seen, initialized)
        group.metadata_hash = metadata_hash(group.topics_seen, group.assignable_seen)

    def _maybe_assign(self, group: ShareGroup, now_ms: int | None) -> None:
        """Recompute the target assignment if the group epoch moved on and the group's assignment
        interval has passed since the last computation (KIP-1263); else it waits for a later heartbeat."""
        if group.assignment_epoch >= group.group_epoch:
            return
        if (now_ms is not None and group.assignment_ms is not None
                and now_ms - group.assignment_ms < self.interval_of(group.group_id)):
            return
        for mid, a in simple_assign(group.members, group.assignable_seen).items():
            group.members[mid].assignment = a
        group.assignment_epoch = group.group_epoch
        group.assignment_ms = now_ms


def metadata_hash(subscribed: dict, assignable: dict) -> int:
    """A signed 64-bit hash of the subscribed topics (name -> (id, partition count)) and their
    assignable partitions, 0 without topics (as Kafka's for none); stable across processes."""
    if not subscribed:
        return 0
    text = repr((sorted((n, str(tid), c) for n, (tid, c) in subscribed.items()),
                 sorted((n, str(tid), tuple(ps)) for n, (tid, ps) in assignable.items())))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True)


# -- the records of a change (broker/groups/share_records.py) ----------------------------------------
#
# A heartbeat changes the group's fields, its members (one joins or leaves), the heartbeating member's
# metadata and current assignment, and, when the target is recomputed, every member's target (each a
# new dict: fields are replaced, never changed in place). A view keeps what may change, by
# reference, so taking one costs a copy of the members table and of their targets, not of each member.

@dataclass
class View:
    fields: tuple                 # group epoch, metadata hash, assignment epoch and time, topics/assignable seen
    members: dict                 # member id -> the member object
    targets: dict                 # member id -> its target assignment (the dict itself)
    watched: dict                 # member id -> (metadata, (member epoch, previous epoch, current assignment))


def _meta(m: ShareMember) -> tuple:
    return (m.rack_id, m.client_id, m.client_host, m.subscribed)


def _current(m: ShareMember) -> tuple:
    return (m.member_epoch, m.previous_member_epoch, m.current)


def view(group: ShareGroup | None, member_ids=None) -> View | None:
    """The group before a change that may change the metadata and current assignment of `member_ids`
    only (None: of any member); None without a group."""
    if group is None:
        return None
    members = dict(group.members)
    watched = members if member_ids is None else [mid for mid in member_ids if mid in members]
    return View((group.group_epoch, group.metadata_hash, group.assignment_epoch, group.assignment_ms,
                 group.topics_seen, group.assignable_seen),
                members, {mid: m.assignment for mid, m in members.items()},
                {mid: (_meta(members[mid]), _current(members[mid])) for mid in watched})


def records(group: ShareGroup, before: View | None, member_ids=None) -> list:
    """The records of the change from `before` (a view taken with the same `member_ids`) to the group
    now, in Kafka's order: removed members' tombstones, members' metadata, the group epoch, the target
    assignment, the members' current assignments."""
    gid = group.group_id
    if before is None:
        before = View((0, 0, 0, None, None, None), {}, {}, {})
    epoch, mhash, a_epoch, a_ms = before.fields[:4]
    old, now = before.members, group.members
    same = old.keys() == now.keys()
    new = [] if same else [mid for mid in now if mid not in old]
    watched = [mid for mid in (now if member_ids is None else member_ids) if mid in now and mid in old]
    out = []
    for mid in () if same else old:
        if mid not in now:
            out += srec.member_tombstones(gid, mid)
    for mid in new + [mid for mid in watched if before.watched[mid][0] != _meta(now[mid])]:
        out.append(srec.member_metadata_record(gid, now[mid]))
    if (group.group_epoch, group.metadata_hash) != (epoch, mhash):
        out.append(srec.group_epoch_record(gid, group.group_epoch, group.metadata_hash))
    recomputed = (group.assignment_epoch, group.assignment_ms) != (a_epoch, a_ms)
    for mid in (now if recomputed else new):        # targets change with a recomputation only
        target, m = before.targets.get(mid), now[mid]
        if mid in new or (target is not m.assignment and target != m.assignment):
            out.append(srec.target_member_record(gid, mid, m.assignment))
    if recomputed:
        out.append(srec.target_metadata_record(gid, group.assignment_epoch, group.assignment_ms))
    for mid in new + [mid for mid in watched if before.watched[mid][1] != _current(now[mid])]:
        out.append(srec.current_assignment_record(gid, now[mid]))
    return out


def revert(group: ShareGroup, before: View) -> None:
    """Put the group back as `before` saw it (the change's records could not be written)."""
    (group.group_epoch, group.metadata_hash, group.assignment_epoch, group.assignment_ms,
     group.topics_seen, group.assignable_seen) = before.fields
    group.members = dict(before.members)
    for mid, m in group.members.items():
        m.assignment = before.targets[mid]
    for mid, (meta, current) in before.watched.items():
        m = group.members[mid]
        m.rack_id, m.client_id, m.client_host, m.subscribed = meta
        m.member_epoch, m.previous_member_epoch, m.current = current


def tombstones(group: ShareGroup) -> list:
    """Every record of the group: DeleteGroups."""
    return srec.group_tombstones(group.group_id, group.members)

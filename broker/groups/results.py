"""What the group state machine hands back: answers to requests (possibly
for a request parked earlier), records to append to `__consumer_offsets`,
and the timers it has set."""
from __future__ import annotations

from dataclasses import dataclass, field

from kproto.errors import ErrorCode


@dataclass
class JoinResult:
    """JoinGroup's answer to one member."""
    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: list = field(default_factory=list)   # (member id, group instance id, metadata)


@dataclass
class SyncResult:
    """SyncGroup's answer to one member."""
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class LeaveResult:
    """LeaveGroup's answer."""
    error: int
    members: list = field(default_factory=list)   # (member id, group instance id, error)


@dataclass
class OffsetCommitResult:
    """OffsetCommit's answer: an error per partition."""
    errors: dict                                  # (topic, partition) -> error code


@dataclass
class DeleteGroupsResult:
    """DeleteGroups' answer: an error per group."""
    errors: dict                                  # group id -> error code


@dataclass
class DeleteOffsetsResult:
    """OffsetDelete's answer: the group's error and one per partition."""
    error: int
    errors: dict = field(default_factory=dict)    # (topic, partition) -> error code


@dataclass
class MemberSummary:
    """One member as DescribeGroups describes it."""
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass
class GroupSummary:
    """One group as DescribeGroups describes it."""
    state: str
    protocol_type: str
    protocol: str
    members: list


EMPTY_SUMMARY = GroupSummary("", "", "", [])
DEAD_SUMMARY = GroupSummary("Dead", "", "", [])


@dataclass
class GroupOverview:
    """One group as ListGroups lists it."""
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass
class FetchedOffset:
    """One partition's committed offset as OffsetFetch answers it."""
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: int = ErrorCode.NONE


@dataclass
class Append:
    """One batch for one `__consumer_offsets` partition; value None is a tombstone."""
    partition: int
    records: list                                  # (key bytes, value bytes | None)
    timestamp: int
    producer_id: int = -1
    producer_epoch: int = -1
    transactional: bool = False
    # what becomes visible (or is undone) once the batch is replicated or has failed:
    # offsets (group, (topic, partition), OffsetEntry) committed by it, and for the
    # assignment of a SyncGroup leader (group, generation, assignment)
    offsets: list = field(default_factory=list)
    sync: tuple | None = None
    share_metadata: tuple | None = None            # (group, ShareStateMetadata) it stores


class Effects:
    """The output of one step of the state machine."""

    __slots__ = ("responses", "appends", "timers")

    def __init__(self):
        self.responses: list[tuple[object, object]] = []   # (ticket, result)
        self.appends: list[Append] = []
        self.timers: list[tuple[tuple, int]] = []          # (timer key, deadline ms) set in this step

    def result_for(self, ticket):
        for t, result in self.responses:
            if t is ticket:
                return result
        raise KeyError(f"no answer for {ticket!r} in this step")

    def answered(self, ticket) -> bool:
        return any(t is ticket for t, _ in self.responses)

    def __repr__(self) -> str:
        return f"Effects(responses={self.responses!r}, appends={len(self.appends)}, timers={self.timers!r})"

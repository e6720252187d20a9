"""The KRaft RPCs as plain values, and the state the node asks its shell to
keep. raft/convert.py turns them into kproto's generated codecs and back;
the state machine itself never sees bytes on the wire.

Offsets are Kafka's: an entry's offset is its position in the log, a log
"end offset" is one past the last entry, and a snapshot id (end_offset,
epoch) names the state after every entry below end_offset, the last of which
has that epoch."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

# Kafka's error codes (kproto/errors.py has them all; raft/ stays standalone)
NONE = 0
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
INVALID_REQUEST = 42
UNSUPPORTED_VERSION = 35
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
SNAPSHOT_NOT_FOUND = 98
POSITION_OUT_OF_RANGE = 99
INCONSISTENT_CLUSTER_ID = 104
DUPLICATE_VOTER = 126
VOTER_NOT_FOUND = 127

NO_LEADER = -1


@dataclass(frozen=True)
class SnapshotId:
    end_offset: int
    epoch: int


@dataclass(frozen=True)
class Entry:
    """One record of the replicated log. control entries (the LeaderChange
    record a leader writes at the start of its epoch) are replicated and
    committed like the others but are not handed to the state machine.

    batch_end is False on every entry of a proposal but its last: a proposal
    is one atomic batch (Kafka's scheduleAtomicAppend, one record batch), so
    a fetch never ends inside it and the high watermark never stops in it;
    the deposed leader's uncommitted tail is then truncated whole."""
    offset: int
    epoch: int
    data: bytes
    control: bool = False
    batch_end: bool = True


@dataclass(frozen=True)
class VoterInfo:
    """One voter of a dynamic quorum (KIP-853), as a VotersRecord names it:
    its id, its metadata directory id (Kafka's Uuid text; "" when unknown)
    and its controller endpoints ((listener name, host, port), ...)."""
    node_id: int
    directory_id: str = ""
    endpoints: tuple = ()

    def key(self) -> str:
        return f"ReplicaKey(id={self.node_id}, directoryId=" + \
            (f"Optional[{self.directory_id}]" if self.directory_id else "Optional.empty") + ")"


# a control entry whose data starts with this holds a voter set (Kafka's
# VotersRecord): from the moment it is appended, the node's voters are these
VOTERS_PREFIX = b"voters:"


def voters_data(voters) -> bytes:
    import json
    return VOTERS_PREFIX + json.dumps(
        [[v.node_id, v.directory_id, [list(e) for e in v.endpoints]] for v in voters]).encode()


def parse_voters(data: bytes):
    """The voter set of a voters entry, or None for another control entry."""
    if not data.startswith(VOTERS_PREFIX):
        return None
    import json
    return tuple(VoterInfo(i, d, tuple(tuple(e) for e in eps))
                 for i, d, eps in json.loads(data[len(VOTERS_PREFIX):]))


# a control entry whose data starts with this holds the kraft.version (Kafka's KRaftVersionRecord):
# the first leader of a dynamic quorum writes it, with the bootstrap voter set, after its
# LeaderChange (the voter set then is in the log, as Kafka's leader does)
KRAFT_VERSION_PREFIX = b"kraft.version:"


def kraft_version_data(version: int) -> bytes:
    return KRAFT_VERSION_PREFIX + str(version).encode()


@dataclass(frozen=True)
class VoterChangeRefused:
    """add_voter / remove_voter refused, with Kafka's error code and message."""
    error: int
    message: str


@dataclass(frozen=True)
class QuorumState:
    """What Kafka keeps in the quorum-state file. It must be durable before
    any message that depends on it leaves the node (a vote, a claim to be
    leader)."""
    leader_id: int = NO_LEADER
    leader_epoch: int = 0
    voted_id: int = NO_LEADER


# ---------------------------------------------------------------- requests

@dataclass(frozen=True)
class VoteRequest:
    candidate_epoch: int
    candidate_id: int
    last_offset_epoch: int
    last_offset: int  # the candidate's log end offset
    pre_vote: bool = False


@dataclass(frozen=True)
class VoteResponse:
    error: int
    leader_epoch: int
    leader_id: int
    vote_granted: bool
    pre_vote: bool = False


@dataclass(frozen=True)
class BeginQuorumEpochRequest:
    leader_epoch: int
    leader_id: int


@dataclass(frozen=True)
class BeginQuorumEpochResponse:
    error: int
    leader_epoch: int
    leader_id: int


@dataclass(frozen=True)
class EndQuorumEpochRequest:
    leader_epoch: int
    leader_id: int
    preferred_successors: tuple = ()


@dataclass(frozen=True)
class EndQuorumEpochResponse:
    error: int
    leader_epoch: int
    leader_id: int


@dataclass(frozen=True)
class FetchRequest:
    replica_id: int
    leader_epoch: int       # the epoch the fetcher believes current
    fetch_offset: int       # its durable log end offset
    last_fetched_epoch: int  # epoch of the entry just below fetch_offset


@dataclass(frozen=True)
class FetchResponse:
    error: int
    leader_epoch: int
    leader_id: int
    high_watermark: int = -1
    fetch_offset: int = 0   # the offset the entries start at (the request's)
    entries: tuple = ()
    log_start_offset: int = 0
    diverging: Optional[tuple] = None      # (epoch, end_offset)
    snapshot_id: Optional[SnapshotId] = None


@dataclass(frozen=True)
class FetchSnapshotRequest:
    replica_id: int
    leader_epoch: int
    snapshot_id: SnapshotId
    position: int


@dataclass(frozen=True)
class FetchSnapshotResponse:
    error: int
    leader_epoch: int
    leader_id: int
    snapshot_id: Optional[SnapshotId] = None
    size: int = 0
    position: int = 0
    data: bytes = b""


@dataclass(frozen=True)
class Envelope:
    """A message between nodes. A response carries the correlation id of
    its request; the node ignores responses to requests it no longer
    waits for (duplicates, late arrivals)."""
    src: int
    dst: int
    correlation_id: int
    msg: Any


REQUESTS = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest,
            FetchRequest, FetchSnapshotRequest)


# ------------------------------------------------------------ log operations

@dataclass(frozen=True)
class Append:
    entries: tuple


@dataclass(frozen=True)
class Truncate:
    """Remove every entry at or above end_offset. Must be durable before the
    node's next messages leave (a fetch that follows it reports the new
    end)."""
    end_offset: int


@dataclass(frozen=True)
class InstallSnapshot:
    """Replace the whole log with this snapshot (the log restarts empty at
    its end offset). Durable before the next messages, like Truncate."""
    snapshot_id: SnapshotId
    data: bytes


@dataclass(frozen=True)
class DeleteBefore:
    """Entries below offset are covered by a snapshot and may be deleted."""
    offset: int


# ----------------------------------------------------------- node outputs

@dataclass(frozen=True)
class Proposal:
    """Where proposed entries went. They are committed when an entry with
    this offset and epoch is committed; if that offset commits with another
    epoch, they were lost (a leader change) and must be proposed again."""
    base_offset: int
    last_offset: int
    epoch: int


@dataclass(frozen=True)
class NotLeader:
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True)
class LeaderChange:
    leader_id: int  # NO_LEADER while there is none
    epoch: int


@dataclass
class Ready:
    """What the shell must do, in this order: write and fsync quorum_state;
    apply log_ops (Truncate and InstallSnapshot durably); start an fsync up
    to sync_to and call node.durable(offset, generation) when it is done;
    send messages; then report leader, high_watermark, load_snapshot (the
    state machine restarts from it), committed entries, snapshot_due (take a
    snapshot at that id and call node.snapshot_taken) and leader_epochs
    (the leader-epoch-checkpoint content)."""
    quorum_state: Optional[QuorumState] = None
    log_ops: list = field(default_factory=list)
    sync_to: Optional[tuple] = None  # (offset, generation)
    messages: list = field(default_factory=list)
    leader: Optional[LeaderChange] = None
    high_watermark: Optional[int] = None
    load_snapshot: Optional[tuple] = None  # (SnapshotId, bytes)
    committed: list = field(default_factory=list)
    snapshot_due: Optional[SnapshotId] = None
    leader_epochs: Optional[list] = None  # [(epoch, start_offset)]
    voters: Optional[tuple] = None   # the voter set changed: (VoterInfo, ...) (peers to reach)

    def empty(self) -> bool:
        return not (self.quorum_state or self.log_ops or self.sync_to or self.messages
                    or self.leader or self.high_watermark is not None
                    or self.load_snapshot or self.committed or self.snapshot_due
                    or self.leader_epochs is not None or self.voters is not None)

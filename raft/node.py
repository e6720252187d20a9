"""KRaft consensus as a pure state machine.

A RaftNode does no I/O and reads no clock: the shell hands it messages
(step), the time (tick, at next_deadline_ms()), proposals, and "these bytes
are now durable" (durable); it answers with a Ready (see raft/messages.py)
that says what to persist, what to send and what was committed, in the order
the shell must do it. etcd's raft library is the model; the rules are
Kafka's KRaft (KIP-595, KIP-630):

- terms are leader epochs; a voter grants one vote per epoch, and only to a
  candidate whose log is at least as up to date (last epoch, end offset);
- a new leader writes a LeaderChange control entry at the start of its epoch
  and the high watermark only moves once an entry of its own epoch is on a
  majority, so older entries are committed by it and never on their own;
- followers pull with Fetch: the leader checks the fetcher's (offset, last
  epoch) against its own epochs and answers with a diverging epoch (the
  follower truncates) or, below its log start, with a snapshot id (the
  follower fetches it with FetchSnapshot);
- a follower that hears nothing from the leader for fetch_timeout_ms stands
  for election; a candidate that does not win in election_timeout_ms (plus a
  random part) backs off a random time up to election_backoff_max_ms;
- a leader that gets no fetch from a majority for 1.5 x fetch_timeout_ms
  resigns (check quorum), and resign() hands over with EndQuorumEpoch;
- the high watermark is the majority of the voters' durable end offsets (a
  follower's fetch offset is its durable end: it fetches again only after
  its appends are fsynced); observers fetch too and do not count;
- dynamic voters (KIP-853, kraft.version 1): the voter set is the last one in
  the log (a voters control entry, committed or not; else the snapshot's,
  else the configured bootstrap set), so a truncation takes a change back.
  The leader changes it one voter at a time (add_voter, remove_voter), only
  once it has committed an entry of its own epoch and the previous change
  is committed, and adds only an observer that is caught up; these are
  Kafka's rules, which keep every majority of the new set overlapping every
  majority of the old. A leader that removed itself leads until the change
  commits, then resigns.
"""
from __future__ import annotations

import random
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Optional

from raft.messages import (
    Append, BeginQuorumEpochRequest, BeginQuorumEpochResponse, DeleteBefore,
    EndQuorumEpochRequest, EndQuorumEpochResponse, Entry, Envelope,
    FENCED_LEADER_EPOCH, FetchRequest, FetchResponse, FetchSnapshotRequest,
    FetchSnapshotResponse, InstallSnapshot, LeaderChange, NO_LEADER, NONE,
    NOT_LEADER_OR_FOLLOWER, NotLeader, POSITION_OUT_OF_RANGE, Proposal,
    QuorumState, Ready, SNAPSHOT_NOT_FOUND, SnapshotId, Truncate,
    UNKNOWN_LEADER_EPOCH, VoteRequest, VoteResponse,
    DUPLICATE_VOTER, REQUEST_TIMED_OUT, UNSUPPORTED_VERSION, VOTER_NOT_FOUND,
    VoterChangeRefused, VoterInfo, kraft_version_data, parse_voters, voters_data,
)
# (callers name the roles as raft.node's)
from raft.roles import CANDIDATE, FOLLOWER, LEADER, PROSPECTIVE, RESIGNED, UNATTACHED  # noqa: F401


def _epoch_of(entry) -> int:
    return entry.epoch

RETRY_BACKOFF_BASE_MS = 100  # Kafka's RaftUtil/KafkaRaftClient constant


class SafetyError(AssertionError):
    """A rule of the protocol was broken by another node (two leaders in one
    epoch, an order to truncate committed entries). The simulator reports it
    as a violation; a real node must stop rather than continue."""


@dataclass
class RaftConfig:
    node_id: int
    voters: tuple
    election_timeout_ms: int = 1000        # controller.quorum.election.timeout.ms
    fetch_timeout_ms: int = 2000           # controller.quorum.fetch.timeout.ms
    election_backoff_max_ms: int = 1000    # controller.quorum.election.backoff.max.ms
    request_timeout_ms: int = 2000         # controller.quorum.request.timeout.ms
    retry_backoff_ms: int = 20             # controller.quorum.retry.backoff.ms
    fetch_max_wait_ms: int = 500           # how long the leader holds an empty fetch
    max_fetch_entries: int = 500
    snapshot_chunk_bytes: int = 1 << 20
    max_bytes_between_snapshots: int = 20 * 1024 * 1024  # metadata.log.max.record.bytes.between.snapshots
    # metadata.log.max.snapshot.interval.ms (KIP-876): a snapshot is also due once this long has
    # passed since the last with records applied meanwhile, so a quiet cluster's in-memory log
    # does not wait for 20 MiB of records; 0 turns the time trigger off, as in Kafka
    max_interval_ms_between_snapshots: int = 3600 * 1000
    pre_vote: bool = False
    # kraft.version: 1 for a dynamic quorum (voters changed through the log)
    kraft_version: int = 0
    # the bootstrap voter set with directory ids and endpoints (VoterInfo, ...); default: voters
    voter_set: tuple = ()
    # the voter set a snapshot's data holds (the shell's format), for snapshots fetched from the
    # leader; None keeps the current set
    snapshot_voters: Optional[object] = None
    # controller.quorum.bootstrap.servers (KIP-853), as the shell's ids for them (Kafka's are
    # negative: -2, -3, ...): an observer that knows no leader asks one of them who leads
    bootstrap: tuple = ()


@dataclass
class Persisted:
    """What the shell read back from disk at start: the quorum state, the
    latest snapshot and the entries after it (only the durable ones)."""
    quorum_state: QuorumState = field(default_factory=QuorumState)
    snapshot_id: Optional[SnapshotId] = None
    snapshot_data: bytes = b""
    entries: tuple = ()
    snapshot_voters: Optional[tuple] = None   # the voter set at the snapshot (VoterInfo, ...)


@dataclass
class ReplicaState:
    end_offset: int = -1        # durable end offset, from its last valid fetch
    last_fetch_ms: Optional[int] = None
    last_caught_up_ms: Optional[int] = None
    hwm_sent: int = -1


def leader_change_data(leader_id: int, voters) -> bytes:
    """Payload of the LeaderChange control entry (convert.py turns it into
    Kafka's LeaderChangeMessage when it is written as a record)."""
    return ("%d:%s" % (leader_id, ",".join(str(v) for v in voters))).encode()


class RaftNode:
    def __init__(self, config: RaftConfig, rng: random.Random, now_ms: int,
                 persisted: Optional[Persisted] = None):
        self.config = config
        self.id = config.node_id
        self.voters = tuple(sorted(config.voters))
        self.is_voter = self.id in self.voters
        self.kraft_version = config.kraft_version
        self.voter_infos = tuple(config.voter_set) or tuple(VoterInfo(v) for v in self.voters)
        self.voters_offset = -1      # offset of the voters entry in force (-1: snapshot/bootstrap)
        self.voter_change = None     # the leader's change awaiting commit: its offset
        self.rng = rng
        self.now = now_ms
        p = persisted or Persisted()
        self.snapshot_id = p.snapshot_id
        self.snapshot_data = p.snapshot_data
        self.log_start = p.snapshot_id.end_offset if p.snapshot_id else 0
        self.entries = list(p.entries)
        assert all(e.offset == self.log_start + i for i, e in enumerate(self.entries))
        snap_voters = p.snapshot_voters
        if snap_voters is None and p.snapshot_data and config.snapshot_voters is not None:
            snap_voters = config.snapshot_voters(p.snapshot_data)
        self.snapshot_voters = tuple(snap_voters) if snap_voters else self.voter_infos
        self._refresh_voters(report=False)
        self.durable_end = self.end_offset
        self.generation = 0
        self.hwm = self.log_start
        self.applied = self.log_start
        self._corr = 0
        self._out = Ready()
        self._epochs_dirty = False
        self._snapshot_pending = False
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = now_ms

        qs = p.quorum_state
        self.epoch = qs.leader_epoch
        self.leader_id = NO_LEADER
        self.voted_id = qs.voted_id
        self.role = UNATTACHED
        self.election_deadline: Optional[int] = None
        self.fetch_deadline: Optional[int] = None      # follower: stand for election
        self.fetch_inflight: Optional[int] = None      # correlation id
        self.fetch_retry_at: Optional[int] = None
        self.fetch_target: int = NO_LEADER
        self.votes: set = set()
        self.rejections: set = set()
        self.vote_retry_at: Optional[int] = None
        self.backoff_until: Optional[int] = None
        self.replicas: dict = {}
        self.begin_pending: set = set()
        self.begin_retry_at: Optional[int] = None
        self.end_pending: set = set()
        self.end_retry_at: Optional[int] = None
        self.pending_fetches: dict = {}   # replica -> (src, corr, req, deadline)
        self.epoch_start_offset = 0
        self.retries = 0          # elections lost in a row (sets the backoff)
        self.left_leader = NO_LEADER
        self.snapshot_fetch: Optional[tuple] = None   # (SnapshotId, bytearray, corr)
        self.leader_gone = False
        self.yield_until = 0

        if self.snapshot_id is not None:
            self._out.load_snapshot = (self.snapshot_id, self.snapshot_data)
        if qs.leader_id == self.id:
            # A leader that restarts may not lead its old epoch again: it
            # lost its in-memory state (Kafka starts it as Resigned).
            self.role = RESIGNED
            self.leader_id = self.id
            self.election_deadline = now_ms + self._election_timeout()
            self.end_pending = set(v for v in self.voters if v != self.id)
            self.end_retry_at = now_ms
        elif qs.leader_id != NO_LEADER:
            self._become_follower(qs.leader_id, persist=False)
        else:
            self._become_unattached(persist=False)
        if self.is_voter and len(self.voters) == 1 and self.role != LEADER:
            # a single voter elects itself at once
            self.election_deadline = now_ms

    # ------------------------------------------------------------- log view

    @property
    def end_offset(self) -> int:
        return self.log_start + len(self.entries)

    @property
    def last_epoch(self) -> int:
        if self.entries:
            return self.entries[-1].epoch
        return self.snapshot_id.epoch if self.snapshot_id else 0

    def entry(self, offset: int) -> Entry:
        return self.entries[offset - self.log_start]

    def epoch_at(self, offset: int) -> int:
        """Epoch of the entry at offset (offset == log_start - 1: the
        snapshot's epoch)."""
        if offset < 0:
            return 0
        if offset >= self.log_start:
            return self.entries[offset - self.log_start].epoch
        if self.snapshot_id and offset == self.log_start - 1:
            return self.snapshot_id.epoch
        raise IndexError(offset)

    def leader_epochs(self) -> list:
        """[(epoch, start offset)] as in leader-epoch-checkpoint."""
        out = []
        if self.snapshot_id is not None:
            out.append((self.snapshot_id.epoch, self.snapshot_id.end_offset))
        for e in self.entries:
            if not out or out[-1][0] != e.epoch:
                out.append((e.epoch, e.offset))
        return out

    def end_offset_for_epoch(self, epoch: int):
        """(largest local epoch <= epoch, the offset where it ends), as
        Kafka's endOffsetForEpoch; None if every local epoch is larger
        (or the log is empty after a snapshot of a larger epoch)."""
        found = None
        if self.snapshot_id is not None and self.snapshot_id.epoch <= epoch:
            found = (self.snapshot_id.epoch, self.log_start)
        elif self.snapshot_id is None and not self.entries:
            return (0, 0) if epoch >= 0 else None
        elif self.snapshot_id is None and self.entries and self.entries[0].epoch > epoch:
            return (0, 0)
        # the entries' epochs never go down: the last one at or below ``epoch``, found by bisection
        # (this answers every follower fetch; a walk was O(log length), 10,000s of metadata records)
        i = bisect_right(self.entries, epoch, key=_epoch_of)
        if i:
            e = self.entries[i - 1]
            found = (e.epoch, e.offset + 1)
        return found

    # ------------------------------------------------------------- outputs

    def has_ready(self) -> bool:
        self._collect()
        return not self._out.empty()

    def ready(self) -> Ready:
        self._collect()
        out, self._out = self._out, Ready()
        return out

    def _collect(self):
        if self._epochs_dirty:
            self._out.leader_epochs = self.leader_epochs()
            self._epochs_dirty = False
        self._apply_committed()

    def _send(self, dst: int, msg, corr: Optional[int] = None) -> int:
        if corr is None:
            self._corr += 1
            corr = self._corr
        self._out.messages.append(Envelope(self.id, dst, corr, msg))
        return corr

    def _persist(self):
        self._out.quorum_state = QuorumState(
            self.leader_id if self.role in (LEADER, FOLLOWER, RESIGNED) else NO_LEADER,
            self.epoch, self.voted_id)

    def _notify_leader(self):
        # a resigned leader no longer leads, though quorum-state names it
        lid = self.leader_id if self.role in (LEADER, FOLLOWER) else NO_LEADER
        self._out.leader = LeaderChange(lid, self.epoch)

    def _append_local(self, entries):
        self.entries.extend(entries)
        self._out.log_ops.append(Append(tuple(entries)))
        self._out.sync_to = (self.end_offset, self.generation)
        self._epochs_dirty = True
        if any(e.control and parse_voters(e.data) is not None for e in entries):
            self._refresh_voters()

    # --------------------------------------------------------- voter set

    def voters_at(self, end_offset: int) -> tuple:
        """The voter set in force after the entries below end_offset."""
        for e in reversed(self.entries[:max(0, end_offset - self.log_start)]):
            if e.control:
                vs = parse_voters(e.data)
                if vs is not None:
                    return vs
        return self.snapshot_voters

    def _refresh_voters(self, report=True):
        infos, off = self.snapshot_voters, -1
        for e in reversed(self.entries):
            if e.control:
                vs = parse_voters(e.data)
                if vs is not None:
                    infos, off = vs, e.offset
                    break
        self.voters_offset = off
        if off >= 0:
            self.kraft_version = max(self.kraft_version, 1)
        if infos == self.voter_infos:
            return
        self.voter_infos = infos
        self.voters = tuple(sorted(v.node_id for v in infos))
        self.is_voter = self.id in self.voters
        if report:
            self._out.voters = infos
        if getattr(self, "role", None) == LEADER:
            for v in self.voters:
                if v != self.id:
                    self.replicas.setdefault(v, ReplicaState(last_fetch_ms=self.now))
            self.begin_pending &= set(self.voters)

    def _truncate(self, end_offset: int):
        if end_offset >= self.end_offset:
            return
        if end_offset < self.hwm:
            raise SafetyError(f"node {self.id}: truncate to {end_offset} below the "
                              f"high watermark {self.hwm}")
        del self.entries[end_offset - self.log_start:]
        self.generation += 1
        self.durable_end = min(self.durable_end, end_offset)
        self._out.log_ops.append(Truncate(end_offset))
        self._out.sync_to = None
        self._epochs_dirty = True
        self._refresh_voters()

    def _apply_committed(self):
        if self.applied < self.log_start:
            # the state machine is behind the log start: it restarts from
            # the snapshot
            self._out.load_snapshot = (self.snapshot_id, self.snapshot_data)
            self._out.committed = []
            self.applied = self.log_start
            self._bytes_since_snapshot = 0
        upto = min(self.hwm, self.end_offset)
        while self.applied < upto:
            e = self.entry(self.applied)
            if not e.control:
                self._out.committed.append(e)
                self._bytes_since_snapshot += len(e.data)
            self.applied += 1
        interval = self.config.max_interval_ms_between_snapshots
        if (not self._snapshot_pending and self.applied > self.log_start
                and (self._bytes_since_snapshot >= self.config.max_bytes_between_snapshots
                     or (interval > 0 and self._bytes_since_snapshot > 0
                         and self.now - self._last_snapshot_ms >= interval))):
            self._snapshot_pending = True
            self._out.snapshot_due = SnapshotId(self.applied, self.epoch_at(self.applied - 1))

    # ---------------------------------------------------------- transitions

    def _election_timeout(self) -> int:
        t = self.config.election_timeout_ms
        return t + self.rng.randrange(t + 1)

    def _clear_role_state(self):
        self.votes = set()
        self.rejections = set()
        self.vote_retry_at = None
        self.backoff_until = None
        self.replicas = {}
        self.begin_pending = set()
        self.begin_retry_at = None
        self.end_pending = set()
        self.end_retry_at = None
        self.pending_fetches = {}
        self.leader_gone = False     # its connection to the leader was refused (peer_unreachable)
        self.yield_until = 0         # a candidate lets a better one stand first until then
        self.voter_change = None
        self.fetch_inflight = None
        self.fetch_retry_at = None
        self.fetch_deadline = None
        self.election_deadline = None
        self.snapshot_fetch = None

    def _become_unattached(self, persist=True):
        was_leader = self.leader_id
        # as Kafka's QuorumState: a node with no leader (candidate or
        # unattached) keeps its running election timer when it moves to a
        # later epoch, so a candidate that cannot win (stale log) does not
        # keep the others from standing by bumping the epoch
        keep = self.election_deadline if self.role in (UNATTACHED, CANDIDATE, PROSPECTIVE) \
            else None
        self._clear_role_state()
        self.role = UNATTACHED
        self.leader_id = NO_LEADER
        if self.is_voter:
            self.election_deadline = keep if keep is not None else \
                self.now + self._election_timeout()
        else:
            self.fetch_target = NO_LEADER
            self.fetch_retry_at = self.now + self.config.retry_backoff_ms
        if persist:
            self._persist()
        if was_leader != NO_LEADER or persist:
            self._notify_leader()

    def _new_epoch(self, epoch: int, leader_id: int):
        """A message told of a later epoch."""
        self.epoch = epoch
        self.voted_id = NO_LEADER
        if leader_id != NO_LEADER and leader_id != self.id:
            self._become_follower(leader_id)
        else:
            self._become_unattached()

    def _become_follower(self, leader_id: int, persist=True):
        self._clear_role_state()
        self.role = FOLLOWER
        self.retries = 0
        self.leader_id = leader_id
        self.fetch_target = leader_id
        self.fetch_deadline = self.now + self.config.fetch_timeout_ms
        if persist:
            self._persist()
        self._notify_leader()
        self._send_fetch()

    def _stand(self):
        """The election timer fired: stand for election, after a pre-vote
        round when pre_vote is on."""
        if not self.is_voter:
            # removed from the voters (e.g. a leader that removed itself): an observer now
            self._become_unattached()
            return
        if self.config.pre_vote and len(self.voters) > 1:
            self._become_prospective()
        else:
            self._become_candidate()

    def _become_prospective(self):
        was_following = self.role == FOLLOWER
        # the leader it stopped hearing from: other followers may still
        # name it; that must not pull this node back to it (KIP-996)
        self.left_leader = self.leader_id if self.role in (FOLLOWER, RESIGNED) else NO_LEADER
        self._clear_role_state()
        self.role = PROSPECTIVE
        self.leader_id = NO_LEADER
        self.votes = {self.id}
        if was_following:
            self._notify_leader()
        self.election_deadline = self.now + self._election_timeout()
        self._send_votes()

    def _pre_vote_failed(self):
        self.retries += 1
        self._clear_role_state()
        self.role = UNATTACHED
        self.election_deadline = self.now + self._election_timeout() + self._backoff_ms()

    def _become_candidate(self):
        self._clear_role_state()
        self.role = CANDIDATE
        self.retries += 1
        self.epoch += 1
        self.leader_id = NO_LEADER
        self.voted_id = self.id
        self.votes = {self.id}
        self._persist()
        self._notify_leader()
        self.election_deadline = self.now + self._election_timeout()
        if self._has_majority(self.votes):
            self._become_leader()
            return
        self._send_votes()

    def _send_votes(self):
        if self.role == PROSPECTIVE:
            req = VoteRequest(self.epoch + 1, self.id, self.last_epoch, self.end_offset,
                              pre_vote=True)
        else:
            req = VoteRequest(self.epoch, self.id, self.last_epoch, self.end_offset)
        for v in self.voters:
            if v != self.id and v not in self.votes and v not in self.rejections:
                self._send(v, req)
        self.vote_retry_at = self.now + self.config.request_timeout_ms

    def _backoff_ms(self) -> int:
        # Kafka's binaryExponentialElectionBackoffMs
        r = max(1, self.retries)
        return min(RETRY_BACKOFF_BASE_MS * self.rng.randrange(2 << min(r - 1, 20)),
                   self.config.election_backoff_max_ms)

    def _has_majority(self, ids) -> bool:
        return len(set(ids) & set(self.voters)) * 2 > len(self.voters)

    def _become_leader(self):
        self._clear_role_state()
        self.role = LEADER
        self.retries = 0
        self.leader_id = self.id
        self._persist()
        self._notify_leader()
        self.epoch_start_offset = self.end_offset
        for v in self.voters:
            if v != self.id:
                self.replicas[v] = ReplicaState(last_fetch_ms=self.now)
        start = [Entry(self.end_offset, self.epoch, leader_change_data(self.id, self.voters), control=True)]
        if self.kraft_version >= 1 and self.voters_offset < 0 and (
                self.snapshot_id is None or self.snapshot_id.end_offset == 0):
            # the voter set comes from the bootstrap checkpoint (storage format --standalone /
            # --initial-controllers), not the log: the first leader writes it there, with the
            # kraft.version, after its LeaderChange (Kafka's appendStartOfEpochControlRecords)
            start.append(Entry(self.end_offset + 1, self.epoch, kraft_version_data(self.kraft_version),
                               control=True))
            start.append(Entry(self.end_offset + 2, self.epoch, voters_data(self.voter_infos), control=True))
        self._append_local(start)
        self.begin_pending = set(v for v in self.voters if v != self.id)
        self._send_begin()
        self._update_hwm()

    def _send_begin(self):
        for v in sorted(self.begin_pending):
            self._send(v, BeginQuorumEpochRequest(self.epoch, self.id))
        self.begin_retry_at = self.now + self.config.request_timeout_ms if self.begin_pending else None

    def _become_resigned(self):
        """Leader steps down in its own epoch and asks the others to elect
        the most up-to-date of them soon."""
        self._clear_role_state()
        self.role = RESIGNED
        self.leader_id = self.id
        self.election_deadline = self.now + self._election_timeout()
        self.end_pending = set(v for v in self.voters if v != self.id)
        self._send_end()

    def _send_end(self):
        succ = tuple(self._preferred_successors())
        for v in sorted(self.end_pending):
            self._send(v, EndQuorumEpochRequest(self.epoch, self.id, succ))
        self.end_retry_at = self.now + self.config.request_timeout_ms if self.end_pending else None

    def _preferred_successors(self):
        known = getattr(self, "_last_replicas", {})
        others = [v for v in self.voters if v != self.id]
        return sorted(others, key=lambda v: -known.get(v, -1))

    # ---------------------------------------------------------------- inputs

    def next_deadline_ms(self) -> Optional[int]:
        ds = [d for d in (self.election_deadline, self.fetch_deadline, self.vote_retry_at,
                          self.backoff_until, self.begin_retry_at, self.end_retry_at,
                          self.fetch_retry_at) if d is not None]
        ds.extend(p[3] for p in self.pending_fetches.values())
        if self.role == LEADER:
            ds.append(self.now if self._removed_itself() else self._check_quorum_deadline())
        return min(ds) if ds else None

    def _removed_itself(self) -> bool:
        """A leader no longer in the voter set, the change committed: it hands over at the next
        tick (Kafka resigns)."""
        return not self.is_voter and self.hwm > self.voters_offset

    def _check_quorum_deadline(self) -> int:
        # with the leader itself, a majority needs (n//2) others (n//2 + 1 when it removed itself)
        need = len(self.voters) // 2 + (0 if self.is_voter else 1)
        if need == 0:
            return self.now + 10 ** 9
        times = sorted((self.replicas[v].last_fetch_ms or 0 if v in self.replicas else 0
                        for v in self.voters if v != self.id), reverse=True)
        return times[need - 1] + self.config.fetch_timeout_ms * 3 // 2

    def tick(self, now_ms: int):
        self.now = max(self.now, now_ms)
        now = self.now
        if self.role == LEADER:
            if self._removed_itself() or now >= self._check_quorum_deadline():
                self._last_replicas = {v: r.end_offset for v, r in self.replicas.items()}
                self._become_resigned()
                self._notify_leader()
                return
            if self.begin_retry_at is not None and now >= self.begin_retry_at:
                self._send_begin()
            for rid, (src, corr, req, deadline) in list(self.pending_fetches.items()):
                if now >= deadline:
                    del self.pending_fetches[rid]
                    self._answer_fetch(src, corr, req)
            return
        if self.role == RESIGNED:
            if self.end_retry_at is not None and now >= self.end_retry_at:
                self._send_end()
            if now >= self.election_deadline:
                self._stand()
            return
        if self.role == PROSPECTIVE:
            if now >= self.election_deadline:
                self._pre_vote_failed()
            elif self.vote_retry_at is not None and now >= self.vote_retry_at:
                self._send_votes()
            return
        if self.role == CANDIDATE:
            if self.backoff_until is not None:
                if now >= self.backoff_until:
                    self._stand()
                return
            if now >= self.election_deadline:
                self.election_deadline = None
                self.vote_retry_at = None
                self.backoff_until = max(now + self._backoff_ms(), self.yield_until)
                return
            if self.vote_retry_at is not None and now >= self.vote_retry_at:
                self._send_votes()
            return
        if self.role == FOLLOWER and now >= self.fetch_deadline:
            if self.is_voter:
                self._stand()
            else:
                self._become_unattached()
            return
        if self.role == UNATTACHED and self.is_voter and now >= self.election_deadline:
            self._stand()
            return
        if self.fetch_retry_at is not None and now >= self.fetch_retry_at:
            self._send_fetch()

    def _send_fetch(self):
        target = self.fetch_target
        if target == NO_LEADER:
            if self.is_voter:
                self.fetch_retry_at = None
                return
            # an observer asks a bootstrap server (or, with none configured, any voter) who leads
            choices = [v for v in (self.config.bootstrap or self.voters) if v != self.id]
            if not choices:
                self.fetch_retry_at = self.now + self.config.request_timeout_ms
                return
            target = self.rng.choice(choices)
        elif self.durable_end < self.end_offset:
            # the fetch offset tells the leader what we hold durably: wait
            # for the fsync (durable() fetches again)
            self.fetch_retry_at = self.now + self.config.request_timeout_ms
            return
        if self.snapshot_fetch is not None:
            sid, buf, _ = self.snapshot_fetch
            corr = self._send(target, FetchSnapshotRequest(self.id, self.epoch, sid, len(buf)))
            self.snapshot_fetch = (sid, buf, corr)
        else:
            corr = self._send(target, FetchRequest(self.id, self.epoch, self.end_offset,
                                                   self.last_epoch))
        self.fetch_inflight = corr
        self.fetch_retry_at = self.now + self.config.request_timeout_ms + self.config.fetch_max_wait_ms

    def peer_unreachable(self, peer: int):
        """The shell's connection to peer was refused: no process listens there. If it is the
        leader this voter follows, the leader is gone (a kill -9 closes its sockets at once):
        stand after a short random delay (spread so the voters do not split the vote) instead of
        waiting out the fetch timeout. Kafka waits for controller.quorum.fetch.timeout.ms; an
        early election is always safe (votes and epochs decide), it only costs the old leader its
        epoch, and a process that refuses connections leads no one."""
        if self.role == FOLLOWER and self.leader_id == peer and self.is_voter:
            # the remaining voters stand one after the other (by id, a quarter of the election
            # timeout apart, with a little jitter), so the first one's election is not split
            others = [v for v in self.voters if v != peer]
            slot = max(1, self.config.election_timeout_ms // 4)
            d = self.now + others.index(self.id) * slot + self.rng.randrange(slot // 2 + 1)
            if d < self.fetch_deadline:
                self.fetch_deadline = d
                self.leader_gone = True

    def durable(self, offset: int, generation: int):
        """The shell fsynced the log up to offset (for the sync_to of that
        generation)."""
        if generation != self.generation:
            return
        new = min(offset, self.end_offset)
        if new <= self.durable_end:
            return
        self.durable_end = new
        if self.role == LEADER:
            self._update_hwm()
        elif (self.fetch_inflight is None and self.fetch_target != NO_LEADER
              and self.durable_end == self.end_offset and self.role == FOLLOWER):
            self._send_fetch()

    def propose(self, datas) -> Proposal | NotLeader:
        if self.role != LEADER:
            # a hint only when another node leads (quorum-state names a
            # resigned leader itself)
            return NotLeader(self.leader_id if self.role == FOLLOWER else NO_LEADER, self.epoch)
        base = self.end_offset
        last = len(datas) - 1
        # one atomic batch: see Entry.batch_end
        self._append_local([Entry(base + i, self.epoch, bytes(d), batch_end=i == last)
                            for i, d in enumerate(datas)])
        self._wake_fetches()
        return Proposal(base, self.end_offset - 1, self.epoch)

    def resign(self):
        """Graceful hand-over (controlled shutdown)."""
        if self.role == LEADER:
            self._last_replicas = {v: r.end_offset for v, r in self.replicas.items()}
            self._become_resigned()
            self._notify_leader()

    def _voter_change_refusal(self, verb: str):
        if self.role != LEADER:
            return VoterChangeRefused(NOT_LEADER_OR_FOLLOWER, "")
        if self.voter_change is not None:
            return VoterChangeRefused(REQUEST_TIMED_OUT, "Request timed out waiting for leader "
                                      "to handle previous voter change request")
        if self.hwm <= self.epoch_start_offset:
            return VoterChangeRefused(REQUEST_TIMED_OUT, "Request cannot be handled because the "
                                      "leader has not established a high-watermark")
        if self.kraft_version < 1:
            return VoterChangeRefused(UNSUPPORTED_VERSION, f"Cluster doesn't support {verb} voter "
                                      f"because the kraft.version feature is {self.kraft_version}")
        if self.voters_offset >= self.hwm:
            return VoterChangeRefused(REQUEST_TIMED_OUT, "Request cannot be handled because there "
                                      "is a pending voters record at offset "
                                      f"{self.voters_offset}")
        return None

    def replica_caught_up(self, node_id: int) -> bool:
        """Kafka's isReplicaCaughtUp: it fetched up to the leader's end within the fetch timeout."""
        r = self.replicas.get(node_id)
        return (r is not None and r.last_caught_up_ms is not None
                and r.last_caught_up_ms >= self.now - self.config.fetch_timeout_ms)

    def add_voter(self, voter: VoterInfo):
        """AddRaftVoter on the leader: a Proposal (answer once it is committed) or a refusal."""
        refused = self._voter_change_refusal("adding")
        if refused:
            return refused
        if voter.node_id in self.voters:
            ids = ", ".join(v.key() for v in self.voter_infos)
            return VoterChangeRefused(DUPLICATE_VOTER, f"The voter id for {voter.key()} is already "
                                      f"part of the set of voters [{ids}].")
        if not self.replica_caught_up(voter.node_id):
            return VoterChangeRefused(REQUEST_TIMED_OUT, "Request cannot be handled because the "
                                      f"new voter {voter.key()} is not caught up")
        return self._append_voters(self.voter_infos + (voter,))

    def remove_voter(self, node_id: int, directory_id: str = ""):
        """RemoveRaftVoter on the leader: a Proposal or a refusal."""
        refused = self._voter_change_refusal("removing")
        if refused:
            return refused
        left = tuple(v for v in self.voter_infos
                     if not (v.node_id == node_id and (v.directory_id == directory_id
                                                       or not directory_id or not v.directory_id)))
        if len(left) == len(self.voter_infos) or not left:
            key = VoterInfo(node_id, directory_id).key()
            ids = ", ".join(v.key() for v in self.voter_infos)
            return VoterChangeRefused(VOTER_NOT_FOUND, f"Cannot remove voter {key} from the set "
                                      f"of voters [{ids}]")
        return self._append_voters(left)

    def _append_voters(self, infos) -> Proposal:
        off = self.end_offset
        self._append_local([Entry(off, self.epoch, voters_data(infos), control=True)])
        self.voter_change = off
        self._wake_fetches()
        self._update_hwm()
        return Proposal(off, off, self.epoch)

    def snapshot_taken(self, snapshot_id: SnapshotId, data: bytes):
        """The shell wrote a snapshot of the state machine at snapshot_id."""
        self._snapshot_pending = False
        if snapshot_id.end_offset > self.applied or snapshot_id.end_offset <= self.log_start:
            return
        if self.epoch_at(snapshot_id.end_offset - 1) != snapshot_id.epoch:
            return
        self.snapshot_id = snapshot_id
        self.snapshot_data = data
        self.snapshot_voters = self.voters_at(snapshot_id.end_offset)
        del self.entries[:snapshot_id.end_offset - self.log_start]
        self.log_start = snapshot_id.end_offset
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = self.now
        self._out.log_ops.append(DeleteBefore(self.log_start))
        self._epochs_dirty = True

    # ------------------------------------------------------------ messages

    def step(self, env: Envelope, now_ms: int):
        self.now = max(self.now, now_ms)
        msg = env.msg
        handler = _HANDLERS.get(type(msg))
        if handler is not None:
            handler(self, env, msg)

    def _observe_epoch(self, epoch: int, leader_id: int) -> None:
        """Any message carrying a later epoch moves us to it; one naming the
        leader of our epoch makes us follow it."""
        if epoch > self.epoch:
            self._new_epoch(epoch, leader_id)
        elif epoch == self.epoch and leader_id not in (NO_LEADER, self.id):
            if self.role == PROSPECTIVE and leader_id == self.left_leader:
                return
            if self.role == LEADER or (self.role == RESIGNED):
                raise SafetyError(f"epoch {epoch}: node {leader_id} claims to lead, "
                                  f"and so does {self.id}")
            if self.role != FOLLOWER or self.leader_id != leader_id:
                if self.role == FOLLOWER and self.leader_id != leader_id:
                    raise SafetyError(f"epoch {epoch}: leaders {self.leader_id} and {leader_id}")
                self._become_follower(leader_id)

    def _reject(self, env, cls, err, **kw):
        self._send(env.src, cls(err, self.epoch, self.leader_id, **kw), env.correlation_id)

    # Vote
    def _on_vote_request(self, env, req: VoteRequest):
        if req.pre_vote:
            # a pre-vote changes nothing here: no epoch bump, no vote kept.
            # Granted only if we would vote and have no live leader.
            granted = (req.candidate_epoch > self.epoch
                       and self.role != LEADER
                       and not (self.role == FOLLOWER and self.now < self.fetch_deadline)
                       and (req.last_offset_epoch, req.last_offset)
                       >= (self.last_epoch, self.end_offset))
            self._send(env.src, VoteResponse(NONE, self.epoch, self.leader_id, granted,
                                             pre_vote=True), env.correlation_id)
            return
        if req.candidate_epoch < self.epoch:
            self._reject(env, VoteResponse, FENCED_LEADER_EPOCH, vote_granted=False)
            return
        if (self.kraft_version >= 1 and self.role == FOLLOWER and not self.leader_gone
                and self.now < self.fetch_deadline and req.candidate_id not in self.voters):
            # a dynamic quorum: a candidate outside this follower's voter set (a node removed
            # while it was cut off, whose stale set still names this one) while the leader is
            # heard from: turned down without moving to its epoch, or it would keep this node
            # from following the leader, election after election (the Raft dissertation's
            # disruptive removed server, 4.2.3; found by the simulation with --reconfig)
            self._send(env.src, VoteResponse(NONE, self.epoch, self.leader_id, False), env.correlation_id)
            return
        # a follower that knows its leader is gone keeps its early election time if it turns this
        # candidate down (a stale log): it must not wait a whole election timeout on its account
        early = self.fetch_deadline if self.role == FOLLOWER and self.leader_gone else None
        if req.candidate_epoch > self.epoch:
            self._new_epoch(req.candidate_epoch, NO_LEADER)
        granted = False
        # a node grants its vote even when its own (maybe stale) voter set leaves it out: the
        # candidate counts only its voters' votes, and a node whose log holds an uncommitted
        # removal of itself must still help the others elect (Raft dissertation 4.2.3; KIP-853)
        if (self.role == UNATTACHED
                and self.voted_id in (NO_LEADER, req.candidate_id)
                and (req.last_offset_epoch, req.last_offset) >= (self.last_epoch, self.end_offset)):
            granted = True
            if self.voted_id != req.candidate_id:
                self.voted_id = req.candidate_id
                self._persist()
            if self.is_voter:
                self.election_deadline = self.now + self._election_timeout()
        elif (early is not None and self.role == UNATTACHED and self.is_voter
              and self.election_deadline is not None):
            self.election_deadline = min(self.election_deadline, max(early, self.now))
        elif (self.role == CANDIDATE and req.candidate_epoch == self.epoch
              and (req.last_offset_epoch, req.last_offset) > (self.last_epoch, self.end_offset)):
            # a candidate of our epoch with a better log: we cannot vote twice, but we let it have
            # the next epoch (without this a stale candidate whose voter set leaves the other out
            # can bump every epoch first, forever: found by the simulation with --reconfig)
            self.yield_until = self.now + self._election_timeout()
            if self.backoff_until is not None:
                self.backoff_until = max(self.backoff_until, self.yield_until)
        self._send(env.src, VoteResponse(NONE, self.epoch, self.leader_id, granted),
                   env.correlation_id)

    def _on_vote_response(self, env, resp: VoteResponse):
        if resp.leader_epoch > self.epoch or (resp.leader_epoch == self.epoch
                                              and resp.leader_id not in (NO_LEADER, self.id)):
            self._observe_epoch(resp.leader_epoch, resp.leader_id)
            return
        if resp.pre_vote:
            if self.role != PROSPECTIVE or resp.leader_epoch != self.epoch or resp.error:
                return
            if resp.vote_granted:
                self.votes.add(env.src)
                if self._has_majority(self.votes):
                    self._become_candidate()
            else:
                self.rejections.add(env.src)
                if len(self.rejections & set(self.voters)) * 2 >= len(self.voters):
                    self._pre_vote_failed()
            return
        if self.role != CANDIDATE or resp.leader_epoch != self.epoch or resp.error:
            return
        if resp.vote_granted:
            self.votes.add(env.src)
            if self._has_majority(self.votes):
                self._become_leader()
        else:
            self.rejections.add(env.src)
            if len(self.rejections & set(self.voters)) * 2 >= len(self.voters) \
                    and self.backoff_until is None:
                # lost: back off before the next attempt
                self.election_deadline = None
                self.vote_retry_at = None
                self.backoff_until = max(self.now + self._backoff_ms(), self.yield_until)

    # BeginQuorumEpoch
    def _on_begin_request(self, env, req: BeginQuorumEpochRequest):
        if req.leader_epoch < self.epoch:
            self._reject(env, BeginQuorumEpochResponse, FENCED_LEADER_EPOCH)
            return
        self._observe_epoch(req.leader_epoch, req.leader_id)
        self._send(env.src, BeginQuorumEpochResponse(NONE, self.epoch, self.leader_id),
                   env.correlation_id)

    def _on_begin_response(self, env, resp: BeginQuorumEpochResponse):
        if resp.leader_epoch > self.epoch:
            self._observe_epoch(resp.leader_epoch, resp.leader_id)
            return
        if self.role == LEADER and resp.leader_epoch == self.epoch and not resp.error:
            self.begin_pending.discard(env.src)

    # EndQuorumEpoch
    def _on_end_request(self, env, req: EndQuorumEpochRequest):
        if req.leader_epoch < self.epoch:
            self._reject(env, EndQuorumEpochResponse, FENCED_LEADER_EPOCH)
            return
        if req.leader_epoch > self.epoch:
            self._new_epoch(req.leader_epoch, NO_LEADER)
        if (self.role in (FOLLOWER, UNATTACHED) and self.leader_id in (req.leader_id, NO_LEADER)
                and self.is_voter and req.leader_id != self.id):
            # the leader is gone: stand soon, the better-placed successors first
            succ = list(req.preferred_successors)
            pos = succ.index(self.id) if self.id in succ else len(self.voters)
            if self.role == FOLLOWER:
                self._clear_role_state()
                self.role = UNATTACHED
                self.leader_id = NO_LEADER
                self._notify_leader()
            delay = 0 if pos == 0 else min(self.config.election_backoff_max_ms,
                                           self.rng.randrange(1, 50 * (2 ** pos) + 1))
            d = self.now + delay
            if self.election_deadline is None or d < self.election_deadline:
                self.election_deadline = d
        self._send(env.src, EndQuorumEpochResponse(NONE, self.epoch, self.leader_id),
                   env.correlation_id)

    def _on_end_response(self, env, resp: EndQuorumEpochResponse):
        if resp.leader_epoch > self.epoch:
            self._observe_epoch(resp.leader_epoch, resp.leader_id)
            return
        if self.role == RESIGNED and resp.leader_epoch == self.epoch:
            self.end_pending.discard(env.src)

    # Fetch (leader side)
    def _on_fetch_request(self, env, req: FetchRequest):
        if self.role != LEADER:
            err = FENCED_LEADER_EPOCH if req.leader_epoch < self.epoch else (
                UNKNOWN_LEADER_EPOCH if req.leader_epoch > self.epoch else NOT_LEADER_OR_FOLLOWER)
            self._reject(env, FetchResponse, err)
            return
        if req.leader_epoch != self.epoch:
            err = FENCED_LEADER_EPOCH if req.leader_epoch < self.epoch else UNKNOWN_LEADER_EPOCH
            self._reject(env, FetchResponse, err)
            return
        # a voter that fetches knows the leader: no need to tell it again
        self.begin_pending.discard(req.replica_id)
        self.pending_fetches.pop(req.replica_id, None)
        valid = self._fetch_position_valid(req)
        if valid is True:
            r = self.replicas.setdefault(req.replica_id, ReplicaState())
            r.last_fetch_ms = self.now
            if req.fetch_offset > r.end_offset:
                r.end_offset = req.fetch_offset
            if req.fetch_offset >= self.end_offset:
                r.last_caught_up_ms = self.now
            if req.replica_id in self.voters:
                self._update_hwm()
            if req.fetch_offset >= self.end_offset and r.hwm_sent >= self.hwm:
                # nothing to send: hold the fetch until there is
                self.pending_fetches[req.replica_id] = (
                    env.src, env.correlation_id, req, self.now + self.config.fetch_max_wait_ms)
                return
        elif req.replica_id in self.replicas:
            self.replicas[req.replica_id].last_fetch_ms = self.now
        self._answer_fetch(env.src, env.correlation_id, req)

    def _fetch_position_valid(self, req: FetchRequest):
        """True, or ("diverging", epoch, end) or ("snapshot",)."""
        off, last = req.fetch_offset, req.last_fetched_epoch
        if off > self.end_offset:
            # fetcher claims more than we have: find where it diverges
            eo = self.end_offset_for_epoch(last)
            if eo is None:
                return ("snapshot",)
            return ("diverging", eo[0], eo[1])
        if off == 0:
            return True if self.log_start == 0 else ("snapshot",)
        if off < self.log_start:
            return ("snapshot",)
        eo = self.end_offset_for_epoch(last)
        if eo is None:
            return ("snapshot",)
        if eo[0] == last and off <= eo[1]:
            return True
        if eo[1] < self.log_start or (eo[1] == self.log_start and self.log_start > 0
                                      and eo[0] != last):
            return ("snapshot",)
        return ("diverging", eo[0], eo[1])

    def _answer_fetch(self, dst, corr, req: FetchRequest):
        valid = self._fetch_position_valid(req)
        if valid is True:
            start = req.fetch_offset
            stop = self._fetch_stop(start, min(self.end_offset, start + self.config.max_fetch_entries))
            entries = tuple(self.entries[start - self.log_start:stop - self.log_start])
            r = self.replicas.get(req.replica_id)
            if r is not None:
                r.hwm_sent = self.hwm
            resp = FetchResponse(NONE, self.epoch, self.id, self.hwm, start, entries,
                                 self.log_start)
        elif valid[0] == "snapshot":
            resp = FetchResponse(NONE, self.epoch, self.id, self.hwm, req.fetch_offset, (),
                                 self.log_start, snapshot_id=self.snapshot_id)
        else:
            resp = FetchResponse(NONE, self.epoch, self.id, self.hwm, req.fetch_offset, (),
                                 self.log_start, diverging=(valid[1], valid[2]))
        self._send(dst, resp, corr)

    def _fetch_stop(self, start: int, stop: int) -> int:
        """Where a fetch answer from start ends: at stop, or back at the end of the batch stop
        falls into, so that a follower (and, through its fetch offset, the high watermark) never
        holds part of a proposal; a batch larger than max_fetch_entries goes whole, as Kafka
        sends at least one whole record batch."""
        lo, i = start - self.log_start, stop - self.log_start
        while i > lo and not self.entries[i - 1].batch_end:
            i -= 1
        if i == lo:
            i = stop - self.log_start
            while i < len(self.entries) and not self.entries[i - 1].batch_end:
                i += 1
        return i + self.log_start

    def _wake_fetches(self):
        for rid, (src, corr, req, _) in list(self.pending_fetches.items()):
            del self.pending_fetches[rid]
            self._answer_fetch(src, corr, req)

    def _update_hwm(self):
        if self.role != LEADER:
            return
        # the voters in force (the last voter set in the log), the leader counted only if one
        ends = sorted([self.durable_end if v == self.id else
                       (self.replicas[v].end_offset if v in self.replicas else -1)
                       for v in self.voters], reverse=True)
        majority = ends[len(self.voters) // 2]
        # only an entry of the leader's own epoch commits (and, with it,
        # everything before it)
        if majority > self.hwm and majority > self.epoch_start_offset:
            self.hwm = majority
            self._out.high_watermark = self.hwm
            self._wake_fetches()
            if self.voter_change is not None and self.hwm > self.voter_change:
                self.voter_change = None

    # Fetch (follower side)
    def _on_fetch_response(self, env, resp: FetchResponse):
        if resp.leader_epoch > self.epoch or (resp.leader_epoch == self.epoch
                                              and resp.leader_id not in (NO_LEADER, self.id)
                                              and self.role != FOLLOWER):
            self._observe_epoch(resp.leader_epoch, resp.leader_id)
            if self.role == FOLLOWER and self.fetch_inflight is None:
                self._send_fetch()
            return
        if env.correlation_id != self.fetch_inflight:
            return
        self.fetch_inflight = None
        if resp.error or self.role != FOLLOWER or resp.leader_epoch != self.epoch:
            self.fetch_retry_at = self.now + self.config.retry_backoff_ms
            return
        self.fetch_deadline = self.now + self.config.fetch_timeout_ms
        if resp.snapshot_id is not None:
            self.snapshot_fetch = (resp.snapshot_id, bytearray(), None)
            self._send_fetch()
            return
        if resp.diverging is not None:
            div_epoch, div_end = resp.diverging
            local = self.end_offset_for_epoch(div_epoch)
            if local is None:
                target = self.log_start
            elif local[0] == div_epoch:
                target = min(local[1], div_end)
            else:
                target = local[1]
            self._truncate(max(target, self.log_start))
            self._send_fetch()
            return
        if resp.fetch_offset != self.end_offset:
            self._send_fetch()
            return
        if resp.entries:
            self._append_local(list(resp.entries))
        new_hwm = min(resp.high_watermark, self.end_offset)
        if new_hwm > self.hwm:
            self.hwm = new_hwm
            self._out.high_watermark = self.hwm
        if self.durable_end == self.end_offset:
            self._send_fetch()
        else:
            # fetch again once the appended entries are durable
            self.fetch_retry_at = self.now + self.config.request_timeout_ms

    # FetchSnapshot
    def _on_fetch_snapshot_request(self, env, req: FetchSnapshotRequest):
        if self.role != LEADER or req.leader_epoch != self.epoch:
            err = FENCED_LEADER_EPOCH if req.leader_epoch < self.epoch else (
                UNKNOWN_LEADER_EPOCH if req.leader_epoch > self.epoch else NOT_LEADER_OR_FOLLOWER)
            self._reject(env, FetchSnapshotResponse, err)
            return
        if req.replica_id in self.replicas:
            self.replicas[req.replica_id].last_fetch_ms = self.now
        if self.snapshot_id != req.snapshot_id:
            self._reject(env, FetchSnapshotResponse, SNAPSHOT_NOT_FOUND,
                         snapshot_id=req.snapshot_id)
            return
        size = len(self.snapshot_data)
        if req.position > size:
            self._reject(env, FetchSnapshotResponse, POSITION_OUT_OF_RANGE,
                         snapshot_id=req.snapshot_id)
            return
        chunk = self.snapshot_data[req.position:req.position + self.config.snapshot_chunk_bytes]
        self._send(env.src, FetchSnapshotResponse(NONE, self.epoch, self.id, self.snapshot_id,
                                                  size, req.position, bytes(chunk)),
                   env.correlation_id)

    def _on_fetch_snapshot_response(self, env, resp: FetchSnapshotResponse):
        if resp.leader_epoch > self.epoch:
            self._observe_epoch(resp.leader_epoch, resp.leader_id)
            return
        if (self.snapshot_fetch is None or env.correlation_id != self.snapshot_fetch[2]
                or env.correlation_id != self.fetch_inflight):
            return
        self.fetch_inflight = None
        if resp.error or self.role != FOLLOWER:
            # the leader has a newer snapshot (or none): start over with Fetch
            self.snapshot_fetch = None
            self.fetch_retry_at = self.now + self.config.retry_backoff_ms
            return
        self.fetch_deadline = self.now + self.config.fetch_timeout_ms
        sid, buf, _ = self.snapshot_fetch
        if resp.snapshot_id != sid or resp.position != len(buf):
            self.snapshot_fetch = None
            self._send_fetch()
            return
        buf += resp.data
        if len(buf) < resp.size:
            self.snapshot_fetch = (sid, buf, None)
            self._send_fetch()
            return
        self.snapshot_fetch = None
        self._install_snapshot(sid, bytes(buf))
        self._send_fetch()

    def _install_snapshot(self, sid: SnapshotId, data: bytes):
        if sid.end_offset < self.hwm:
            return  # older than what we have committed: keep our log
        self.snapshot_id = sid
        self.snapshot_data = data
        self.entries = []
        self.log_start = sid.end_offset
        self.generation += 1
        self.durable_end = self.log_start
        self.hwm = max(self.hwm, self.log_start)
        self._out.high_watermark = self.hwm
        self._out.log_ops.append(InstallSnapshot(sid, data))
        self._out.sync_to = None
        self._epochs_dirty = True
        self._snapshot_pending = False
        self.applied = min(self.applied, self.log_start - 1)
        if self.config.snapshot_voters is not None:
            vs = self.config.snapshot_voters(data)
            if vs:
                self.snapshot_voters = tuple(vs)
        self._refresh_voters()

    # ------------------------------------------------------------- queries

    def describe_quorum(self) -> dict:
        """DescribeQuorum's answer as the leader knows it."""
        def row(rid, r):
            return {"replica_id": rid, "log_end_offset": r.end_offset,
                    "last_fetch_timestamp": -1 if r.last_fetch_ms is None else r.last_fetch_ms,
                    "last_caught_up_timestamp":
                        -1 if r.last_caught_up_ms is None else r.last_caught_up_ms}
        me = {"replica_id": self.id, "log_end_offset": self.end_offset,
              "last_fetch_timestamp": self.now, "last_caught_up_timestamp": self.now}
        voters, observers = [], []
        for v in self.voters:
            if v == self.id:
                voters.append(me)
            elif self.role == LEADER:
                voters.append(row(v, self.replicas.get(v, ReplicaState())))
            else:
                voters.append(row(v, ReplicaState()))
        if self.role == LEADER:
            for rid, r in sorted(self.replicas.items()):
                if rid not in self.voters:
                    observers.append(row(rid, r))
        return {"leader_id": self.leader_id, "leader_epoch": self.epoch,
                "high_watermark": self.hwm, "current_voters": voters, "observers": observers}


_HANDLERS = {
    VoteRequest: RaftNode._on_vote_request,
    VoteResponse: RaftNode._on_vote_response,
    BeginQuorumEpochRequest: RaftNode._on_begin_request,
    BeginQuorumEpochResponse: RaftNode._on_begin_response,
    EndQuorumEpochRequest: RaftNode._on_end_request,
    EndQuorumEpochResponse: RaftNode._on_end_response,
    FetchRequest: RaftNode._on_fetch_request,
    FetchResponse: RaftNode._on_fetch_response,
    FetchSnapshotRequest: RaftNode._on_fetch_snapshot_request,
    FetchSnapshotResponse: RaftNode._on_fetch_snapshot_response,
}

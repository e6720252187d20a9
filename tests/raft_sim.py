"""Deterministic simulation of a KRaft quorum (raft/node.py).

N RaftNodes run in one process under a seeded scheduler that owns time, the
network and the disks. Faults: message loss, delay (so reordering),
duplication, symmetric and one-way partitions, crashes that lose every write
not yet fsynced, restarts, and clock jumps on one node. After every step the
invariants are checked:

- election safety: at most one leader per epoch;
- log matching: two entries with the same offset and epoch are the same and
  sit on the same history (same epoch just below);
- leader completeness: a new leader's log holds every committed entry;
- committed entries are never lost or changed (and, after every crash, each
  is still durable on a majority of voters);
- state machine safety: what each node applied is a prefix of the committed
  log;
- atomicity: a high watermark never stops inside a proposal (with
  batch_every, some proposals are batches larger than a fetch);
- liveness: once the faults stop, a leader is elected and a write commits
  within a bound.

With reconfig_every_ms (--reconfig), the quorum is dynamic (kraft.version 1)
and the leader keeps adding observers as voters and removing voters (itself
too) under the same faults; "durable on a majority" is then checked against
the last committed voter set.

Everything comes from the seed, so a failing seed replays exactly:

    python3 -m tests.raft_sim --seed 1234 --voters 5          # one run
    python3 -m tests.raft_sim --minutes 10 --first 400000      # long run
"""
from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
import time

from raft.messages import (
    Append, DeleteBefore, InstallSnapshot, QuorumState, Truncate, VoterChangeRefused, VoterInfo,
    parse_voters)
from raft.node import LEADER, Persisted, RaftConfig, RaftNode, SafetyError


class Violation(AssertionError):
    def __init__(self, seed, message):
        super().__init__(f"seed {seed}: {message}")
        self.seed = seed
        self.message = message


class Faults:
    """Probabilities and sizes of the injected faults (all on by default)."""

    def __init__(self, drop=0.05, duplicate=0.03, max_delay_ms=40, crash=True,
                 partition=True, one_way=True, clock_jump=True, fault_every_ms=400,
                 max_fsync_ms=15, crash_new_leader=0.15):
        self.drop = drop
        self.duplicate = duplicate
        self.max_delay_ms = max_delay_ms
        self.crash = crash
        self.partition = partition
        self.one_way = one_way
        self.clock_jump = clock_jump
        self.fault_every_ms = fault_every_ms
        self.max_fsync_ms = max_fsync_ms
        # probability that a new leader crashes within 60 ms of its election
        # (before its LeaderChange entry is everywhere: the classic traps)
        self.crash_new_leader = crash_new_leader


NO_FAULTS = Faults(drop=0, duplicate=0, max_delay_ms=2, crash=False, partition=False,
                   one_way=False, clock_jump=False, crash_new_leader=0)


class Disk:
    def __init__(self):
        self.qs = QuorumState()
        self.snapshot = None          # (SnapshotId, bytes), durable when written
        self.log = []                 # what the process wrote (page cache)
        self.durable = []             # what survives a crash
        self.gen = 0                  # bumped by truncations (void pending fsyncs)
        self.base = 0                 # offset of log[0]

    def log_start(self):
        return self.snapshot[0].end_offset if self.snapshot else 0

    def end(self):
        return self.log[-1].offset + 1 if self.log else self.base


def encode_state(items, voters=None) -> bytes:
    if voters is None:
        return json.dumps([x.decode() for x in items]).encode()
    # a dynamic quorum's snapshot holds its voter set too (Kafka's holds a VotersRecord)
    return json.dumps({"applied": [x.decode() for x in items],
                       "voters": [v.node_id for v in voters]}).encode()


def decode_state(data: bytes):
    if not data:
        return []
    state = json.loads(data.decode())
    if isinstance(state, dict):
        state = state["applied"]
    return [x.encode() for x in state]


def snapshot_voters(data: bytes):
    state = json.loads(data.decode()) if data else None
    if isinstance(state, dict):
        return tuple(VoterInfo(v) for v in state["voters"])
    return None


class Sim:
    def __init__(self, seed, voters=3, observers=0, faults=None, config=None,
                 duration_ms=6000, heal_bound_ms=10000, snapshot_bytes=60,
                 propose_every_ms=60, disks=None, blocked=(), reconfig_every_ms=None,
                 batch_every=0, batch_entries=25):
        self.seed = seed
        self.rng = random.Random(seed)
        self.faults = faults or Faults()
        self.voter_ids = tuple(range(1, voters + 1))
        self.ids = self.voter_ids + tuple(range(100, 100 + observers))
        self.config = config or {}
        self.duration_ms = duration_ms
        self.heal_bound_ms = heal_bound_ms
        self.snapshot_bytes = snapshot_bytes
        self.propose_every_ms = propose_every_ms
        self.reconfig_every_ms = reconfig_every_ms
        # every batch_every-th proposal is one batch of batch_entries entries (0: single entries)
        self.batch_every, self.batch_entries = batch_every, batch_entries
        self.committed_voters = self.voter_ids   # the last committed voter set
        self.committed_under = []                # by offset: the voters that committed it
        self.now = 0
        self.seq = 0
        self.queue = []
        self.nodes = {}
        self.disks = {i: Disk() for i in self.ids}
        # a scripted start: {node: (QuorumState, entries)} already on disk
        for i, (qs, entries) in (disks or {}).items():
            self.disks[i].qs = qs
            self.disks[i].log = list(entries)
            self.disks[i].durable = list(entries)
        self.incarnation = {i: 0 for i in self.ids}
        self.skew = {i: 0 for i in self.ids}
        self.apps = {}                # node -> list of applied data
        self.tick_at = {}
        self.blocked = set()          # (src, dst) pairs that drop messages
        self.healed = False
        # invariant bookkeeping
        self.epoch_leader = {}
        self.committed = []           # [(epoch, data, control)] by offset
        self.committed_data = []      # the state machine's view: data entries
        self.seen = {}                # (offset, epoch) -> (data, prev epoch)
        self.proposed = 0
        self.stats = dict(events=0, faults=0, elections=0, crashes=0, messages=0,
                          committed=0, snapshots=0, snapshot_installs=0)
        if reconfig_every_ms:
            self.stats.update(voters_added=0, voters_removed=0, voter_changes_refused=0)
        self.blocked = set(blocked)
        for i in self.ids:
            self._start(i)
        self._schedule(self.rng.randrange(self.faults.fault_every_ms + 1), "fault", None)
        self._schedule(self.propose_every_ms, "propose", None)
        if reconfig_every_ms:
            self._schedule(reconfig_every_ms, "reconfig", None)

    # ------------------------------------------------------------ plumbing

    def fail(self, message):
        raise Violation(self.seed, f"t={self.now}ms: {message}")

    def _schedule(self, at, kind, payload):
        self.seq += 1
        heapq.heappush(self.queue, (at, self.seq, kind, payload))

    def node_time(self, i):
        return self.now + self.skew[i]

    def _cfg(self, i):
        kw = dict(election_timeout_ms=300, fetch_timeout_ms=600, election_backoff_max_ms=300,
                  request_timeout_ms=300, retry_backoff_ms=20, fetch_max_wait_ms=150,
                  max_fetch_entries=20, snapshot_chunk_bytes=50,
                  max_bytes_between_snapshots=self.snapshot_bytes)
        if self.reconfig_every_ms:
            kw.update(kraft_version=1, snapshot_voters=snapshot_voters)
        kw.update(self.config)
        return RaftConfig(node_id=i, voters=self.voter_ids, **kw)

    def _start(self, i):
        d = self.disks[i]
        # as a shell reading its files: entries below the snapshot are gone
        d.durable = [e for e in d.durable if e.offset >= d.log_start()]
        d.log = list(d.durable)
        d.base = d.log_start()
        p = Persisted(d.qs, d.snapshot[0] if d.snapshot else None,
                      d.snapshot[1] if d.snapshot else b"", tuple(d.durable))
        self.incarnation[i] += 1
        self.apps[i] = None
        self.nodes[i] = RaftNode(self._cfg(i), random.Random(self.rng.getrandbits(64)),
                                 self.node_time(i), p)
        self.tick_at[i] = None
        self._process(i)

    def _crash(self, i):
        self.nodes[i] = None
        self.apps[i] = None
        d = self.disks[i]
        d.log = list(d.durable)
        self.incarnation[i] += 1
        self.stats["crashes"] += 1
        self._check_durable_majority()
        # the others' connections to it are refused from now on (a shell tells its node)
        for j in self.ids:
            if j != i:
                self._schedule(self.now + 1 + self.rng.randrange(60), "refused", (j, i))

    # --------------------------------------------------------------- output

    def _process(self, i):
        node = self.nodes[i]
        if node is None:
            return
        for _ in range(100):
            if not node.has_ready():
                break
            self._apply_ready(i, node, node.ready())
        else:
            self.fail(f"node {i} never settles")
        nd = node.next_deadline_ms()
        if nd is not None:
            at = max(self.now, nd - self.skew[i])
            if self.tick_at[i] is None or at < self.tick_at[i] or self.tick_at[i] < self.now:
                self.tick_at[i] = at
                self._schedule(at, "tick", (i, self.incarnation[i]))

    def _apply_ready(self, i, node, r):
        d = self.disks[i]
        if r.quorum_state is not None:
            d.qs = r.quorum_state
        for op in r.log_ops:
            if isinstance(op, Append):
                self._check_append(i, d, op.entries)
                d.log.extend(op.entries)
            elif isinstance(op, Truncate):
                d.log = [e for e in d.log if e.offset < op.end_offset]
                d.durable = [e for e in d.durable if e.offset < op.end_offset]
                d.gen += 1
            elif isinstance(op, InstallSnapshot):
                d.snapshot = (op.snapshot_id, op.data)
                d.log, d.durable = [], []
                d.base = op.snapshot_id.end_offset
                d.gen += 1
                self.stats["snapshot_installs"] += 1
            elif isinstance(op, DeleteBefore):
                if not d.snapshot or d.snapshot[0].end_offset < op.offset:
                    self.fail(f"node {i} deletes below {op.offset} without a snapshot there")
                d.log = [e for e in d.log if e.offset >= op.offset]
                d.durable = [e for e in d.durable if e.offset >= op.offset]
                d.base = op.offset
        if r.sync_to is not None:
            off, gen = r.sync_to
            self._schedule(self.now + self.rng.randrange(self.faults.max_fsync_ms + 1), "fsync",
                           (i, self.incarnation[i], d.gen,
                            [e for e in d.log if e.offset < off], off, gen))
        for env in r.messages:
            self._send(env)
        if r.leader is not None and r.leader.leader_id == i:
            self._on_new_leader(i, node, r.leader.epoch)
        if r.high_watermark is not None:
            self._check_hwm(i, node, r.high_watermark)
        if r.load_snapshot is not None:
            sid, data = r.load_snapshot
            self.apps[i] = decode_state(data)
            self._check_app(i)
        if r.committed:
            if self.apps[i] is None:
                self.apps[i] = []
            self.apps[i].extend(e.data for e in r.committed)
            self._check_app(i)
        if r.snapshot_due is not None:
            sid = r.snapshot_due
            if node.applied == sid.end_offset:
                data = encode_state(self.apps[i] or [], node.voters_at(sid.end_offset)
                                    if self.reconfig_every_ms else None)
                # write the snapshot file durably before the log may shrink
                node.snapshot_taken(sid, data)
                if node.snapshot_id == sid:
                    d.snapshot = (sid, data)
                    self.stats["snapshots"] += 1

    def _send(self, env):
        f = self.faults
        self.stats["messages"] += 1
        if not self.healed and self.rng.random() < f.drop:
            return
        copies = 2 if (not self.healed and self.rng.random() < f.duplicate) else 1
        for _ in range(copies):
            delay = 1 + self.rng.randrange(f.max_delay_ms + 1)
            self._schedule(self.now + delay, "deliver", (env, self.incarnation[env.dst],
                                                          self.incarnation[env.src]))

    # ------------------------------------------------------------ invariants

    def _check_append(self, i, d, entries):
        if not entries:
            return
        first = entries[0].offset
        end = d.end()
        if first != end:
            self.fail(f"node {i} appends at {first}, its log ends at {end}")
        if d.log:
            prev = d.log[-1].epoch
        elif d.snapshot and first == d.snapshot[0].end_offset:
            prev = d.snapshot[0].epoch
        else:
            prev = 0
        for e in entries:
            key = (e.offset, e.epoch)
            val = (e.data, e.control, prev)
            old = self.seen.get(key)
            if old is None:
                self.seen[key] = val
            elif old != val:
                self.fail(f"log matching: node {i} has {key} = {val}, elsewhere {old}")
            if e.epoch < prev:
                self.fail(f"node {i}: epochs go down at offset {e.offset}")
            prev = e.epoch

    def _local_entry(self, node, off):
        if off < node.log_start or off >= node.end_offset:
            return None
        return node.entry(off)

    def _on_new_leader(self, i, node, epoch):
        if node.role != LEADER:
            return
        self.stats["elections"] += 1
        other = self.epoch_leader.setdefault(epoch, i)
        if other != i:
            self.fail(f"election safety: epoch {epoch} has leaders {other} and {i}")
        # leader completeness: every committed entry is in the new log
        if node.end_offset < len(self.committed) + 1:  # +1: its LeaderChange entry
            self.fail(f"leader completeness: node {i} leads epoch {epoch} with log end "
                      f"{node.end_offset - 1}, {len(self.committed)} entries committed")
        for off in range(node.log_start, len(self.committed)):
            e = node.entry(off)
            if (e.epoch, e.data, e.control) != self.committed[off]:
                self.fail(f"leader completeness: node {i} epoch {epoch} offset {off} differs")
        if not self.healed and self.rng.random() < self.faults.crash_new_leader:
            self.stats["faults"] += 1
            self._schedule(self.now + self.rng.randrange(60), "crash", (i, self.incarnation[i]))

    def _check_hwm(self, i, node, hwm):
        # everything below the node's high watermark is committed: it must
        # agree with what was committed before, and extends it
        last = self._local_entry(node, hwm - 1)
        if last is not None and not last.batch_end:
            self.fail(f"atomicity: node {i} commits part of a batch (high watermark {hwm})")
        for off in range(max(node.log_start, 0), hwm):
            e = self._local_entry(node, off)
            if e is None:
                self.fail(f"node {i} reports high watermark {hwm} without entry {off}")
            val = (e.epoch, e.data, e.control)
            if off < len(self.committed):
                if self.committed[off] != val:
                    self.fail(f"committed entry {off} changed: {self.committed[off]} -> {val} "
                              f"on node {i}")
            elif off == len(self.committed):
                self.committed.append(val)
                self.committed_under.append(tuple(node.voters))
                if not e.control:
                    self.committed_data.append(e.data)
                elif parse_voters(e.data) is not None:
                    self.committed_voters = tuple(v.node_id for v in parse_voters(e.data))
                self.stats["committed"] += 1
            else:
                self.fail(f"node {i} commits {off} past the committed end {len(self.committed)}")

    def _check_app(self, i):
        app = self.apps[i]
        n = len(app)
        if n > len(self.committed_data) or app != self.committed_data[:n]:
            self.fail(f"state machine safety: node {i} applied {n} entries that are not "
                      f"a prefix of the committed log")

    def _check_durable_majority(self):
        """Every committed entry is durable on a majority of the voters that committed it (with
        dynamic voters, later sets overlap it: one change at a time)."""
        if not self.committed:
            return
        counts = {}
        for v in set(x for s in set(self.committed_under) for x in s):
            counts[v] = [0] * len(self.committed)
            d = self.disks[v]
            start = d.log_start()
            if d.snapshot:
                upto = min(start, len(self.committed))
                for off in range(upto):
                    counts[v][off] += 1
            for e in d.durable:
                if e.offset < len(self.committed) and \
                        self.committed[e.offset] == (e.epoch, e.data, e.control):
                    counts[v][e.offset] += 1
        for off, under in enumerate(self.committed_under):
            c = sum(counts[v][off] for v in under)
            if c < len(under) // 2 + 1:
                self.fail(f"committed entry {off} is durable on {c} of its voters {under} only")

    # --------------------------------------------------------------- faults

    def _fault(self):
        f = self.faults
        kinds = []
        if f.crash:
            kinds.append("crash")
        if f.partition:
            kinds += ["partition", "heal"]
        if f.one_way:
            kinds.append("one_way")
        if f.clock_jump:
            kinds.append("clock")
        if f.crash:
            kinds.append("refused")
        if not kinds:
            return
        kind = self.rng.choice(kinds)
        self.stats["faults"] += 1
        ids = list(self.ids)
        if kind == "crash":
            i = self.rng.choice(ids)
            if self.nodes[i] is not None:
                self._crash(i)
                self._schedule(self.now + self.rng.randrange(50, 1500), "restart", i)
        elif kind == "partition":
            self.rng.shuffle(ids)
            cut = self.rng.randrange(1, len(ids))
            a, b = set(ids[:cut]), set(ids[cut:])
            self.blocked = {(x, y) for x in a for y in b} | {(y, x) for x in a for y in b}
        elif kind == "heal":
            self.blocked = set()
        elif kind == "one_way":
            x, y = self.rng.sample(ids, 2)
            self.blocked.add((x, y))
        elif kind == "refused":
            # a refused connection to a live node (its listener restarting): a spurious signal
            x, y = self.rng.sample(ids, 2)
            self._schedule(self.now, "refused", (x, y))
        elif kind == "clock":
            i = self.rng.choice(ids)
            # a forward jump: the node sees time pass all at once (a pause)
            self.skew[i] += self.rng.randrange(100, 3000)

    # ------------------------------------------------------------------ run

    def _leader(self):
        for i in self.ids:
            n = self.nodes[i]
            if n is not None and n.role == LEADER:
                return i
        return None

    def step(self):
        at, _, kind, payload = heapq.heappop(self.queue)
        self.now = max(self.now, at)
        self.stats["events"] += 1
        if kind == "deliver":
            env, dst_inc, src_inc = payload
            if (self.nodes.get(env.dst) is None or self.incarnation[env.dst] != dst_inc
                    or (env.src, env.dst) in self.blocked):
                return
            try:
                self.nodes[env.dst].step(env, self.node_time(env.dst))
            except SafetyError as exc:
                self.fail(str(exc))
            self._process(env.dst)
        elif kind == "tick":
            i, inc = payload
            if self.nodes[i] is None or self.incarnation[i] != inc:
                return
            if self.tick_at[i] == at:
                self.tick_at[i] = None
            try:
                self.nodes[i].tick(self.node_time(i))
            except SafetyError as exc:
                self.fail(str(exc))
            self._process(i)
        elif kind == "fsync":
            i, inc, dgen, entries, off, gen = payload
            d = self.disks[i]
            if self.nodes[i] is None or self.incarnation[i] != inc or d.gen != dgen:
                return
            new = [e for e in entries if e.offset >= d.base]
            old_end = d.durable[-1].offset + 1 if d.durable else d.base
            if new and new[-1].offset + 1 > old_end:
                d.durable = new
            self.nodes[i].durable(off, gen)
            self._process(i)
        elif kind == "crash":
            i, inc = payload
            if self.nodes[i] is not None and self.incarnation[i] == inc:
                self._crash(i)
                self._schedule(self.now + self.rng.randrange(50, 1500), "restart", i)
        elif kind == "refused":
            i, peer = payload
            if self.nodes[i] is not None and not self.healed:
                self.nodes[i].peer_unreachable(peer)
                self._process(i)
        elif kind == "restart":
            if self.nodes[payload] is None:
                self._start(payload)
        elif kind == "fault":
            if not self.healed:
                self._fault()
                self._schedule(self.now + 1 + self.rng.randrange(2 * self.faults.fault_every_ms),
                               "fault", None)
        elif kind == "reconfig":
            self._reconfig()
            self._schedule(self.now + 1 + self.rng.randrange(2 * self.reconfig_every_ms),
                           "reconfig", None)
        elif kind == "propose":
            lead = self._leader()
            if lead is not None:
                self.proposed += 1
                n = self.batch_entries if self.batch_every and self.proposed % self.batch_every == 0 else 1
                self.nodes[lead].propose([b"w%d" % self.proposed] * n)
                self._process(lead)
            self._schedule(self.now + 1 + self.rng.randrange(2 * self.propose_every_ms),
                           "propose", None)

    def _reconfig(self):
        """The leader adds a node that is not a voter, or removes a voter (maybe itself), keeping
        2 to 5 voters; refusals (a change pending, a new voter not caught up) are counted."""
        lead = self._leader()
        if lead is None:
            return
        node = self.nodes[lead]
        others = [i for i in self.ids if i not in node.voters]
        if others and (len(node.voters) <= 2 or (len(node.voters) < 5 and self.rng.random() < 0.5)):
            res = node.add_voter(VoterInfo(self.rng.choice(others)))
            kind = "voters_added"
        else:
            res = node.remove_voter(self.rng.choice(node.voters))
            kind = "voters_removed"
        self.stats[kind if not isinstance(res, VoterChangeRefused) else "voter_changes_refused"] += 1
        self._process(lead)

    def heal(self):
        self.healed = True
        self.blocked = set()
        for i in self.ids:
            if self.nodes[i] is None:
                self._start(i)

    def run(self):
        while self.queue and self.queue[0][0] <= self.duration_ms:
            self.step()
        self.heal()
        healed_at = self.now
        committed_at_heal = len(self.committed)
        deadline = healed_at + self.heal_bound_ms
        while self.queue and self.now <= deadline:
            self.step()
            lead = self._leader()
            if lead is not None and len(self.committed) > committed_at_heal + 1:
                # a write proposed after the heal committed: check it is everywhere
                self.stats["recovery_ms"] = self.now - healed_at
                break
        else:
            self.fail(f"no write committed within {self.heal_bound_ms} ms after the faults "
                      f"healed (leader {self._leader()})")
        # let every node catch up, then they must all agree
        end = self.now + 3000
        while self.queue and self.now <= end:
            self.step()
        self._check_durable_majority()
        for i in self.ids:
            if self.apps[i] is not None:
                self._check_app(i)
        return self.stats


# Rules to break on purpose, to show the invariants catch a broken node:
# name -> (method of RaftNode, source text, replacement).
MUTATIONS = {
    "vote_without_log_check": (
        "_on_vote_request",
        "and (req.last_offset_epoch, req.last_offset) >= (self.last_epoch, self.end_offset)", ""),
    "vote_twice_in_an_epoch": (
        "_on_vote_request", "and self.voted_id in (NO_LEADER, req.candidate_id)", ""),
    "commit_older_epoch": ("_update_hwm", "and majority > self.epoch_start_offset", ""),
    "fetch_before_fsync": [("_on_fetch_response", "if self.durable_end == self.end_offset:",
                            "if True:"),
                           ("_send_fetch", "elif self.durable_end < self.end_offset:",
                            "elif False:")],
    # dynamic voters: a second change before the first is committed (run with --reconfig)
    "two_voter_changes_at_once": ("_voter_change_refusal",
                                  ["if self.voter_change is not None:",
                                   "if self.voters_offset >= self.hwm:"], "if False:"),
    "ignore_diverging_epoch": ("_on_fetch_response",
                               "self._truncate(max(target, self.log_start))", "pass"),
}


def mutate(name):
    """Replace methods of RaftNode by broken copies; returns an undo."""
    spec = MUTATIONS[name]
    undos = [_mutate_one(name, *one) for one in (spec if isinstance(spec, list) else [spec])]

    def undo():
        for u in reversed(undos):
            u()
    return undo


def _mutate_one(name, method, old, new):
    import inspect
    import textwrap
    import raft.node as node_mod
    orig = getattr(RaftNode, method)
    src = textwrap.dedent(inspect.getsource(orig))
    for one in (old if isinstance(old, list) else [old]):
        if src.count(one) != 1:
            raise ValueError(f"mutation {name}: text not found in {method}")
        src = src.replace(one, new)
    ns = {}
    exec(compile(src, f"<mutation {name}>", "exec"), vars(node_mod), ns)
    setattr(RaftNode, method, ns[method])
    handlers = {k for k, v in node_mod._HANDLERS.items() if v is orig}
    for k in handlers:
        node_mod._HANDLERS[k] = ns[method]

    def undo():
        setattr(RaftNode, method, orig)
        for k in handlers:
            node_mod._HANDLERS[k] = orig
    return undo


def run_seed(seed, voters=3, observers=0, **kw):
    return Sim(seed, voters=voters, observers=observers, **kw).run()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, help="replay one seed")
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--count", type=int, default=None)
    ap.add_argument("--minutes", type=float, default=None)
    ap.add_argument("--voters", type=int, default=None, help="default: 3 and 5 alternately")
    ap.add_argument("--observers", type=int, default=1)
    ap.add_argument("--pre-vote", choices=("on", "off", "mixed"), default="mixed",
                    help="KIP-996 pre-vote (mixed: every other pair of seeds)")
    ap.add_argument("--churn", action="store_true",
                    help="leader churn: half the new leaders crash at once, writes every 20 ms")
    ap.add_argument("--reconfig", action="store_true",
                    help="dynamic voters: the leader adds and removes a voter every ~300 ms")
    ap.add_argument("--mutate", choices=sorted(MUTATIONS),
                    help="break one rule of the node first (the run must then find violations)")
    args = ap.parse_args(argv)
    undo = mutate(args.mutate) if args.mutate else None
    try:
        return _main(args)
    finally:
        if undo:
            undo()


def _profile(args):
    out = {}
    if args.churn:
        out.update({"faults": Faults(crash_new_leader=0.5), "propose_every_ms": 20})
    if args.reconfig:
        out["reconfig_every_ms"] = 300
    return out


def _pre_vote(args, seed):
    if args.pre_vote == "mixed":
        return {"pre_vote": (seed // 2) % 2 == 1}
    return {"pre_vote": args.pre_vote == "on"}


def _main(args):
    if args.seed is not None:
        v = args.voters or 3
        try:
            stats = run_seed(args.seed, voters=v, observers=args.observers,
                             config=_pre_vote(args, args.seed), **_profile(args))
        except Violation as exc:
            print(f"VIOLATION {exc}")
            return 1
        print(f"seed {args.seed} voters {v}: ok {stats}")
        return 0
    t0 = time.monotonic()
    stop = t0 + args.minutes * 60 if args.minutes else None
    count = args.count if args.count is not None else (None if stop else 1000)
    totals = {}
    runs = violations = 0
    seed = args.first
    last_print = t0
    while (count is None or runs < count) and (stop is None or time.monotonic() < stop):
        v = args.voters or (3 if seed % 2 == 0 else 5)
        try:
            stats = run_seed(seed, voters=v, observers=args.observers,
                             config=_pre_vote(args, seed), **_profile(args))
            for k, val in stats.items():
                totals[k] = totals.get(k, 0) + val
        except Exception as exc:  # a crash of the node code is a finding too
            violations += 1
            pv = "on" if _pre_vote(args, seed)["pre_vote"] else "off"
            print(f"VIOLATION {type(exc).__name__} {exc} (replay: python3 -m tests.raft_sim "
                  f"--seed {seed} --voters {v} --observers {args.observers} --pre-vote {pv}"
                  f"{' --churn' if args.churn else ''}{' --reconfig' if args.reconfig else ''})",
                  flush=True)
        runs += 1
        seed += 1
        if time.monotonic() - last_print > 30:
            last_print = time.monotonic()
            print(f"[{last_print - t0:6.0f}s] {runs} runs, next seed {seed}, {violations} "
                  f"violations, {totals}", flush=True)
    print(f"{runs} runs (seeds {args.first}..{seed - 1}) in {time.monotonic() - t0:.0f}s: "
          f"{violations} violations; totals {totals}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())

"""Kafka's raft-metrics of a quorum node (KafkaRaftMetrics), kept by the QuorumShell: the
commit latency of the leader's appends and the election latency, as windowed averages and
maxima (Kafka's Avg/Max sensors over `metrics.sample.window.ms` 30 s x 2 samples), plus the
node's state name. Read at scrape time by broker/metrics/cluster.py.

Everything is updated once per QuorumShell._pump (not per request); a pump that changed
nothing costs two comparisons."""
from __future__ import annotations

import math
from collections import deque

from raft.roles import CANDIDATE, FOLLOWER, LEADER, PROSPECTIVE, RESIGNED, UNATTACHED

SAMPLE_WINDOW_S = 30.0   # Kafka's metrics.sample.window.ms
SAMPLES = 2              # Kafka's metrics.num.samples

# Kafka's current-state values (KafkaRaftMetrics): what the node's role reads as
STATES = ("leader", "resigned", "candidate", "prospective", "voted", "follower", "observer", "unattached")


class WindowedStat:
    """Average and maximum of the values recorded in the last SAMPLES windows (NaN without any,
    as Kafka's Avg and Max report)."""
    __slots__ = ("_samples",)

    def __init__(self):
        self._samples: deque = deque()   # [window start, count, total, max]

    def record(self, value: float, now: float) -> None:
        s = self._samples
        if not s or now - s[-1][0] >= SAMPLE_WINDOW_S:
            s.append([now, 0, 0.0, -math.inf])
            while len(s) > SAMPLES:
                s.popleft()
        cur = s[-1]
        cur[1] += 1
        cur[2] += value
        if value > cur[3]:
            cur[3] = value

    def _live(self, now: float):
        return [x for x in self._samples if now - x[0] < SAMPLE_WINDOW_S * SAMPLES]

    def avg(self, now: float) -> float:
        live = self._live(now)
        n = sum(x[1] for x in live)
        return sum(x[2] for x in live) / n if n else math.nan

    def max(self, now: float) -> float:
        live = self._live(now)
        return max((x[3] for x in live), default=math.nan)


def state_name(node) -> str:
    """Kafka's current-state of a RaftNode: an observer is a non-voter following the leader; an
    unattached voter that voted this epoch is `voted`."""
    role = node.role
    if role == FOLLOWER:
        return "follower" if node.is_voter else "observer"
    if role == UNATTACHED:
        if node.is_voter and node.voted_id >= 0:
            return "voted"
        return "unattached" if node.is_voter else "observer"
    return {LEADER: "leader", RESIGNED: "resigned", CANDIDATE: "candidate",
            PROSPECTIVE: "prospective"}.get(role, str(role))


class RaftMetrics:
    def __init__(self):
        self.commit_latency = WindowedStat()    # ms from the leader's append to the commit
        self.election_latency = WindowedStat()  # ms from standing for election to a known leader
        self._appended: deque = deque()         # (end offset after an append, time) on the leader
        self._end = -1
        self._election_started: float | None = None

    def after_pump(self, node, now: float) -> None:
        """Called by the shell after it did what the node asked (now: trio time, seconds)."""
        role = node.role
        if role == LEADER:
            end = node.end_offset
            if end > self._end >= 0:
                self._appended.append((end, now))
            self._end = end
            appended = self._appended
            hwm = node.hwm
            while appended and appended[0][0] <= hwm:
                self.commit_latency.record((now - appended.popleft()[1]) * 1000.0, now)
        elif self._end >= 0:
            self._end = -1
            self._appended.clear()   # no longer the leader: those appends commit (or not) elsewhere
        if role in (CANDIDATE, PROSPECTIVE):
            if self._election_started is None:
                self._election_started = now
        elif role in (LEADER, FOLLOWER) and self._election_started is not None:
            self.election_latency.record((now - self._election_started) * 1000.0, now)
            self._election_started = None

"""A partition leader's view of its followers, as Kafka's Partition keeps it:
each follower's log end offset (from its fetches) and when it was last caught
up; the high watermark, which moves only when every ISR member has the
records; and the ISR changes to ask the controller for (AlterPartition):
shrink a follower that has not caught up for replica.lag.time.max.ms, expand
one that reached the high watermark and this leader's epoch start offset; each
follower's log start offset (from its fetches) for the low watermark that
DeleteRecords waits for.

While an expansion is in flight the high watermark already counts the new
member (Kafka's maximal ISR: the more conservative set); a shrink counts
only once the controller committed it. Pure: the caller passes the clock."""
from __future__ import annotations


class FollowerState:
    __slots__ = ("leo", "last_caught_up_ms", "last_fetch_ms", "leo_at_last_fetch", "log_start", "idle")

    def __init__(self, now_ms: int):
        self.leo = -1                    # unknown until it fetches
        self.last_caught_up_ms = now_ms  # a new leader gives every follower the full lag time
        self.last_fetch_ms = now_ms
        self.leo_at_last_fetch = -1      # the leader's LEO when that fetch came
        self.log_start = -1              # its log start offset, unknown until it fetches
        # the fetch session that found this follower caught up and leaves the partition out of its
        # fetches until the partition changes (replica_fetch.py): each of its fetches since counts
        # as a caught-up fetch, at its ``answer_ms``, without the partition being visited
        self.idle = None

    @property
    def caught_up_ms(self) -> int:
        """When it was last caught up (Kafka's lastCaughtUpTimeMs)."""
        idle = self.idle
        return self.last_caught_up_ms if idle is None else max(self.last_caught_up_ms, idle.answer_ms)

    def settle(self) -> None:
        """The fetches its idle session made without visiting the partition, recorded now."""
        idle = self.idle
        if idle is not None:
            self.idle = None
            if idle.answer_ms > self.last_fetch_ms:
                self.last_fetch_ms = self.last_caught_up_ms = idle.answer_ms


class LeaderState:
    def __init__(self, node_id: int, replicas: list[int], isr: list[int], leader_epoch: int,
                 partition_epoch: int, epoch_start_offset: int, high_watermark: int, now_ms: int):
        self.node_id = node_id
        self.replicas = list(replicas)
        self.isr = list(isr)
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.epoch_start_offset = epoch_start_offset
        self.hw = high_watermark
        self.followers = {r: FollowerState(now_ms) for r in replicas if r != node_id}
        self.pending_isr: list[int] | None = None   # an AlterPartition in flight

    # -- the ISR ----------------------------------------------------------------------

    def update_isr(self, isr: list[int], partition_epoch: int) -> None:
        """The controller's view changed (a committed PartitionChangeRecord)."""
        self.isr = list(isr)
        self.partition_epoch = partition_epoch
        self.pending_isr = None

    def update_replicas(self, replicas: list[int], now_ms: int) -> None:
        """The replica set changed within this leader epoch (a reassignment adds replicas): new
        followers are tracked from now, removed ones forgotten."""
        self.replicas = list(replicas)
        self.followers = {r: self.followers.get(r) or FollowerState(now_ms) for r in replicas if r != self.node_id}

    @property
    def maximal_isr(self) -> list[int]:
        if self.pending_isr is None:
            return self.isr
        return self.isr + [b for b in self.pending_isr if b not in self.isr]

    # -- followers' fetches -------------------------------------------------------------

    def follower_fetched(self, replica: int, fetch_offset: int, leader_leo: int, now_ms: int,
                         log_start: int | None = None) -> None:
        """A follower fetched at fetch_offset: its log ends there (Kafka's
        updateFollowerFetchState). Caught up if it reached our LEO, or the LEO
        we had at its previous fetch (it was caught up then). ``log_start``:
        the log start offset its fetch said (None: not said, unchanged)."""
        f = self.followers.get(replica)
        if f is None:
            return
        f.settle()
        if log_start is not None:
            f.log_start = log_start
        if fetch_offset >= leader_leo:
            f.last_caught_up_ms = now_ms
        elif fetch_offset >= f.leo_at_last_fetch >= 0:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.leo = fetch_offset
        f.leo_at_last_fetch = leader_leo
        f.last_fetch_ms = now_ms

    def advance_high_watermark(self, leader_leo: int) -> bool:
        """Move the high watermark to the smallest LEO of the (maximal) ISR;
        never backwards. True if it moved."""
        low = leader_leo
        for b in self.maximal_isr:
            if b == self.node_id:
                continue
            f = self.followers.get(b)
            low = min(low, f.leo if f is not None and f.leo >= 0 else self.hw)
        if low > self.hw:
            self.hw = low
            return True
        return False

    def low_watermark(self, leader_log_start: int, alive) -> int:
        """Kafka's Partition.lowWatermarkIfLeader: the smallest log start offset of
        this leader and its followers on live brokers (``alive(broker id)``), ISR
        or not; a follower that has not fetched under this leader counts as -1."""
        low = leader_log_start
        for b, f in self.followers.items():
            if f.log_start < low and alive(b):
                low = f.log_start
        return low

    def isr_to_shrink(self, now_ms: int, lag_max_ms: int, leader_leo: int) -> list[int] | None:
        """The ISR without the followers that have not caught up for lag_max_ms; None if unchanged."""
        if self.pending_isr is not None:
            return None
        out = [b for b in self.isr if b == self.node_id or not self._lagging(b, now_ms, lag_max_ms, leader_leo)]
        return out if out != self.isr else None

    def _lagging(self, b: int, now_ms: int, lag_max_ms: int, leader_leo: int) -> bool:
        f = self.followers.get(b)
        if f is None:
            return True
        return f.leo < leader_leo and now_ms - f.caught_up_ms > lag_max_ms

    def isr_to_expand(self, leader_leo: int) -> list[int] | None:
        """The ISR plus the followers that caught up (LEO >= high watermark and
        >= this epoch's start offset); None if none did."""
        if self.pending_isr is not None:
            return None
        add = [b for b, f in self.followers.items()
               if b not in self.isr and f.leo >= 0 and f.leo >= self.hw and f.leo >= self.epoch_start_offset]
        if not add:
            return None
        return self.isr + sorted(add)

    def in_sync_count(self) -> int:
        return len(self.isr)

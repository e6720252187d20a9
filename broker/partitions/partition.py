"""A partition this broker leads: its log plus the replication-facing state
(leader epoch, high watermark, last stable offset) and the fetchers waiting
for its next append.

With one replica the high watermark is the log end offset; the fields are
kept separate so replication can move them independently later.
"""
from __future__ import annotations

import logging

from broker.storage.errors import OffsetOutOfRange  # noqa: F401  (re-exported for handlers)
from broker.storage.txnindex import PartitionTxnIndex

log = logging.getLogger("kproto.partition")


class AppendResult:
    __slots__ = ("base_offset", "last_offset", "log_append_time", "log_start_offset")

    def __init__(self, base_offset, last_offset, log_append_time, log_start_offset):
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset


class Partition:
    def __init__(self, topic: str, index: int, topic_id, log, leader_epoch: int, config: dict):
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.leader_epoch = leader_epoch
        self.config = config
        self._waiters: set = set()
        # followers' long polls: woken by new records and the other changes, not by the high
        # watermark alone (notify_high_watermark)
        self._follower_waiters: set = set()
        # (sink, key) of the follower fetch sessions that found this partition caught up and left
        # it out of their fetches (broker/replication/replica_fetch.py): the next change names it
        # to them again, so an idle session's fetch visits only what changed
        self._sinks: list = []
        # transactions in flight: producer id -> first offset (for the LSO)
        self.open_transactions: dict[int, int] = {}
        # aborted transactions (.txnindex), for read_committed fetches
        self.txn_index = PartitionTxnIndex(log)
        self.on_append = None  # hook for producer state / transactions
        self.fsync_before_ack = False
        self._read_flush_config()
        # replication (broker/replication/manager.py): whether this broker leads the partition,
        # and the high watermark when replicas other than this one must have the records first
        self.is_leader = True
        self.replication = None
        self.replicated_hw: int | None = None
        # tiered storage (broker/tiered): the first offset in remote storage, None when nothing
        # is there; the log start offset is then below the local log's (Kafka's
        # logStartOffset vs localLogStartOffset)
        self.remote_log_start: int | None = None
        # a log start moved by retention, DeleteRecords, the cleaner or a truncation: followers
        # are told (an idle follower session looks at this partition again only when notified)
        self.log.on_log_start_offset_change = self._log_start_moved

    # -- configuration -------------------------------------------------------

    @property
    def compacted(self) -> bool:
        return "compact" in str(self.config.get("cleanup.policy", "delete"))

    @property
    def max_message_bytes(self) -> int:
        return int(self.config.get("max.message.bytes", 1048588))

    @property
    def log_append_time(self) -> bool:
        return self.config.get("message.timestamp.type", "CreateTime") == "LogAppendTime"

    def update_config(self, config: dict) -> None:
        self.config = config
        self.log.update_config(config)
        self._read_flush_config()

    def _read_flush_config(self) -> None:
        # flush.messages=1 is how Kafka users ask for an fsync before the ack:
        # an acks=-1 produce then waits for the flusher (broker/storage/flusher.py)
        self.fsync_before_ack = self.log.config.flush_messages <= 1

    # -- offsets ---------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        remote = self.remote_log_start
        local = self.log.log_start_offset
        start = local if remote is None or remote > local else remote
        # DeleteRecords may have moved it into the remote records (above the first remote
        # segment's start, below the local log start): Kafka's logStartOffset
        return max(start, self.log.deleted_below)

    @property
    def replication_log_start_offset(self) -> int:
        """The log start offset replicas tell each other (a leader in its fetch answers, a
        follower in its fetches), which a follower adopts: Kafka's logStartOffset where this
        broker is sure of it. A tiered log whose remote segments are not known here (its
        __remote_log_metadata view not read yet, or nothing copied) says the start DeleteRecords
        last moved it to (checkpointed), not its local log start: a follower adopting the local
        start and later leading would delete the remote records in between."""
        if self.remote_log_start is None and self.log.config.remote_storage_enable == "true":
            return self.log.checkpoint_log_start
        return self.log_start_offset

    @property
    def local_log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        hw = self.replicated_hw
        return self.log.log_end_offset if hw is None else min(hw, self.log.log_end_offset)

    @property
    def last_stable_offset(self) -> int:
        if self.open_transactions:
            return min(min(self.open_transactions.values()), self.high_watermark)
        return self.high_watermark

    # -- appends and reads -----------------------------------------------------

    def append(self, data, header, now_ms: int) -> AppendResult:
        """Append one validated batch (writable buffer): offsets are assigned
        by rewriting the batch header in place."""
        info = self.log.append(data, self.leader_epoch, now_ms, log_append_time=self.log_append_time)
        result = AppendResult(info.base_offset, info.last_offset,
                              info.log_append_time if self.log_append_time else -1,
                              self.log.log_start_offset)
        if self.on_append is not None:
            self.on_append(self, header, result)
        if self.replication is not None:
            self.replication.appended(self)
        self.notify()
        return result

    def read(self, offset: int, max_bytes: int, isolation: int, must_return_one: bool = True):
        """(FileRegion or None, upper bound offset) for a fetch at offset."""
        upper = self.last_stable_offset if isolation == 1 else self.high_watermark
        if offset < self.log.log_start_offset or offset > self.log.log_end_offset:
            raise OffsetOutOfRange(f"offset {offset} is out of range", self.log.log_start_offset,
                                   self.log.log_end_offset)
        if offset >= upper or (max_bytes <= 0 and not must_return_one):
            return None, upper
        sl = self.log.read(offset, max_bytes, upper, min_one_batch=must_return_one)
        if not sl.length:
            return None, upper
        return sl.region(), upper

    def fetch_read(self, offset: int, max_bytes: int, isolation: int, min_one_batch: bool):
        """(record bytes or None, upper bound offset, first batch incomplete)
        for a Fetch, cut as Kafka cuts it (PartitionLog.fetch_slice)."""
        upper = self.last_stable_offset if isolation == 1 else self.high_watermark
        sl, incomplete = self.log.fetch_slice(offset, max_bytes, upper, min_one_batch=min_one_batch)
        return (sl.region() if sl.length else None), upper, incomplete

    def aborted_transactions(self, start: int, upper: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions that
        overlap [start, upper): what a read_committed fetch reports so the
        client drops their records."""
        return [(t.producer_id, t.first_offset) for t in self.txn_index.collect(start, upper)]

    def offset_for_timestamp(self, ts: int):
        return self.log.offset_for_timestamp(ts)

    def max_timestamp_offset(self):
        return self.log.max_timestamp_offset()

    def end_offset_for_epoch(self, epoch: int):
        return self.log.end_offset_for_epoch(epoch)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords on the leader, or a follower adopting its leader's log start."""
        if offset > self.high_watermark or offset < 0:
            raise OffsetOutOfRange(f"offset {offset} is beyond the high watermark {self.high_watermark}")
        self.log.delete_records_before(offset, self.high_watermark)
        return self.log_start_offset   # (below the local log start for a tiered log)

    # -- long-poll wake-ups ----------------------------------------------------

    def _log_start_moved(self, _offset: int) -> None:
        self.notify()
        if self.replication is not None:
            self.replication.log_start_moved(self)

    def add_waiter(self, event, follower: bool = False) -> None:
        (self._follower_waiters if follower else self._waiters).add(event)

    def remove_waiter(self, event) -> None:
        self._waiters.discard(event)
        self._follower_waiters.discard(event)

    def watch(self, sink, key) -> None:
        """``sink.mark(key)`` at the next notify() (once), unless ``sink.closed``; a high
        watermark move alone marks it without waking it, and it stays watching."""
        if len(self._sinks) >= 4:   # sessions closed meanwhile go now and then
            self._sinks = [s for s in self._sinks if not s[0].closed]
        self._sinks.append((sink, key))

    def notify(self) -> None:
        """Something a reader waits for or was told changed: the log end (an append), the high
        watermark with something else, the log start (DeleteRecords) or this broker's role."""
        _wake(self._follower_waiters)
        _wake(self._waiters)
        if self._sinks:
            for sink, key in self._sinks:
                if not sink.closed:
                    sink.mark(key)
            self._sinks = []

    def notify_high_watermark(self) -> None:
        """The high watermark moved, nothing else: what waits for it (consumers, commits) wakes.
        A follower's long poll does not (Kafka's DelayedFetch completes a follower's fetch on new
        records, not on the high watermark): the follower learns it with the next records or when
        its wait ends (replica.fetch.wait.max.ms), as with Kafka. With acks=all the high watermark
        moves at the last follower's fetch after each produce, and waking the other follower cost
        a fetch and its answer more per produce."""
        _wake(self._waiters)
        # a follower session that left the partition out looks at it again at its next fetch or
        # when its long poll ends; it stays watching, so the next notify() still wakes it
        for sink, key in self._sinks:
            if not sink.closed:
                sink.mark(key, wake=False)


def _wake(events: set) -> None:
    """Set and forget the long polls' events."""
    if events:
        for ev in events:
            ev.set()
        events.clear()

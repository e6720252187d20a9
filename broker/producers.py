"""Producer state per partition: the sequence numbers of each idempotent
producer's last five batches, so a retried batch is answered with its
original offsets instead of being written twice, and a gap is refused.

The state outlives restarts as Kafka's does: the log writes it into a
`<offset>.snapshot` at every segment roll and at close, and a partition
that opens loads its newest snapshot and replays the batch headers stored
after it (a crash leaves everything since the last roll to replay)."""
from __future__ import annotations

import logging
from collections import deque

from kproto.errors import ErrorCode

from broker.storage import ProducerSnapshotEntry

log = logging.getLogger("kproto.producers")

BATCHES_KEPT = 5  # Kafka keeps the metadata of a producer's last 5 batches


class ProducerEntry:
    __slots__ = ("epoch", "batches", "coordinator_epoch", "txn_first_offset", "last_timestamp")

    def __init__(self, epoch: int):
        self.epoch = epoch
        # (first sequence, last sequence, base offset, last offset)
        self.batches: deque = deque(maxlen=BATCHES_KEPT)
        self.coordinator_epoch = -1
        self.txn_first_offset = -1
        self.last_timestamp = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else -1


class PartitionProducers:
    def __init__(self, partition=None):
        self.partition = partition
        self.producers: dict[int, ProducerEntry] = {}


def _next_seq(seq: int) -> int:
    return 0 if seq == 0x7FFFFFFF else seq + 1


def _seq_span(first: int, last: int) -> int:
    """last - first with sequence wrap-around at 2^31."""
    return last - first if last >= first else last + 0x80000000 - first


def _seq_sub(seq: int, delta: int) -> int:
    r = seq - delta
    return r if r >= 0 else r + 0x80000000


class ProducerStateManager:
    def __init__(self):
        self._by_partition: dict[tuple[str, int], PartitionProducers] = {}

    def attach(self, partition) -> None:
        state = PartitionProducers(partition)
        self._by_partition[(partition.topic, partition.index)] = state
        partition.on_append = self._record
        self._load(partition, state)

    # -- persistence -------------------------------------------------------------

    def snapshot_entries(self, topic: str, index: int, _offset: int) -> list[ProducerSnapshotEntry]:
        """The partition's producers as snapshot entries (Kafka keeps the last
        batch of each); the log calls this when it writes `<offset>.snapshot`."""
        state = self._by_partition.get((topic, index))
        if state is None:
            return []
        open_txns = state.partition.open_transactions if state.partition is not None else {}
        out = []
        for pid, e in state.producers.items():
            txn_first = open_txns.get(pid, -1)
            if e.batches:
                first, last, _base, last_offset = e.batches[-1]
                out.append(ProducerSnapshotEntry(pid, e.epoch, last, last_offset, _seq_span(first, last),
                                                 e.last_timestamp, e.coordinator_epoch, txn_first))
            elif txn_first >= 0:
                out.append(ProducerSnapshotEntry(pid, e.epoch, -1, -1, 0, e.last_timestamp,
                                                 e.coordinator_epoch, txn_first))
        return out

    def _load(self, partition, state: PartitionProducers) -> None:
        plog = partition.log
        start = plog.log_start_offset
        snap = plog.latest_snapshot()
        if snap is not None and start <= snap[0] <= plog.log_end_offset:
            start = snap[0]
            for e in snap[1]:
                entry = ProducerEntry(e.producer_epoch)
                entry.coordinator_epoch = e.coordinator_epoch
                entry.last_timestamp = e.timestamp
                if e.last_offset >= 0:
                    entry.batches.append((_seq_sub(e.last_sequence, e.offset_delta), e.last_sequence,
                                          e.last_offset - e.offset_delta, e.last_offset))
                if e.current_txn_first_offset >= 0:
                    partition.open_transactions[e.producer_id] = e.current_txn_first_offset
                state.producers[e.producer_id] = entry
        if start >= plog.log_end_offset:
            return
        # batch headers only: no record is decoded
        replayed = 0
        for header in plog.iter_batches(start):
            if header.base_offset + header.last_offset_delta < start:
                continue
            if header.producer_id >= 0:
                self._replay(partition, state, header)
            replayed += 1
        if replayed:
            log.info("%s-%d: producer state rebuilt from offset %d (%d batches)",
                     partition.topic, partition.index, start, replayed)

    def _replay(self, partition, state: PartitionProducers, header) -> None:
        pid = header.producer_id
        base = header.base_offset
        last_offset = base + header.last_offset_delta
        entry = state.producers.get(pid)
        if entry is None or header.producer_epoch != entry.epoch:
            entry = ProducerEntry(header.producer_epoch)
            state.producers[pid] = entry
        entry.last_timestamp = header.max_timestamp
        if header.is_control:
            # a transaction marker ends the producer's open transaction
            partition.open_transactions.pop(pid, None)
            return
        if header.base_sequence >= 0:
            entry.batches.append((header.base_sequence, header.last_sequence, base, last_offset))
        if header.is_transactional:
            partition.open_transactions.setdefault(pid, base)

    def state(self, partition) -> PartitionProducers:
        return self._by_partition.setdefault((partition.topic, partition.index), PartitionProducers())

    def check_append(self, transactional_id, partition, header):
        """None to append; an ErrorCode to refuse; (base offset, log start)
        for a duplicate of a batch already in the log."""
        if header.is_transactional and (transactional_id is None or header.producer_id < 0):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if header.producer_id < 0:
            return None
        entry = self.state(partition).producers.get(header.producer_id)
        if entry is None:
            return None
        epoch = header.producer_epoch
        if epoch < entry.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        seq = header.base_sequence
        if epoch > entry.epoch:
            return None if seq == 0 else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        last_seq = header.last_sequence
        for first, last, base_offset, _last_offset in entry.batches:
            if first == seq and last == last_seq:
                return base_offset, partition.log_start_offset
        if entry.batches and seq != _next_seq(entry.last_sequence):
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        return None

    def _record(self, partition, header, result) -> None:
        pid = header.producer_id
        if pid < 0:
            return
        producers = self.state(partition).producers
        entry = producers.get(pid)
        if entry is None or header.producer_epoch != entry.epoch:
            entry = ProducerEntry(header.producer_epoch)
            producers[pid] = entry
        entry.batches.append((header.base_sequence, header.last_sequence, result.base_offset, result.last_offset))
        entry.last_timestamp = header.max_timestamp
        if header.is_transactional and pid not in partition.open_transactions:
            partition.open_transactions[pid] = result.base_offset

"""Producer state per partition: the sequence numbers of each idempotent
producer's last five batches, so a retried batch is answered with its
original offsets instead of being written twice, and a gap is refused; the
open transaction of each transactional producer (its first offset holds the
last stable offset back) and the transaction markers that end them.

The checks follow Kafka 3.9's ProducerStateEntry / ProducerAppendInfo: a
duplicate (same epoch, same sequence range as a retained batch) is found
first; then an older epoch is INVALID_PRODUCER_EPOCH, a new epoch must start
at sequence 0, the same epoch must continue the last sequence; a producer the
partition has never seen is accepted at any sequence. A non-transactional
batch while the producer's transaction is open is INVALID_TXN_STATE.

The state outlives restarts as Kafka's does: the log writes it into a
`<offset>.snapshot` at every segment roll and at close, and a partition
that opens loads its newest snapshot and replays the batch headers stored
after it (a crash leaves everything since the last roll to replay). The
replay also rebuilds the aborted-transaction index entries of the markers
it passes."""
from __future__ import annotations

import logging
from collections import deque

from kproto import records as rec
from kproto.errors import ErrorCode

from broker.storage import ProducerSnapshotEntry
from broker.storage.txnindex import AbortedTxn

log = logging.getLogger("kproto.producers")

BATCHES_KEPT = 5  # Kafka keeps the metadata of a producer's last 5 batches
NO_EPOCH = -1
MAX_EPOCH = 32767   # Short.MAX_VALUE


class ProducerEntry:
    __slots__ = ("epoch", "batches", "coordinator_epoch", "last_timestamp")

    def __init__(self, epoch: int):
        self.epoch = epoch
        # (first sequence, last sequence, base offset, last offset)
        self.batches: deque = deque(maxlen=BATCHES_KEPT)
        self.coordinator_epoch = -1
        self.last_timestamp = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else -1

    def set_epoch(self, epoch: int) -> None:
        # ProducerStateEntry.maybeUpdateProducerEpoch: a new epoch forgets the batches
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch


class PartitionProducers:
    def __init__(self, partition=None):
        self.partition = partition
        self.producers: dict[int, ProducerEntry] = {}


def _in_sequence(last: int, nxt: int) -> bool:
    return nxt == last + 1 or (nxt == 0 and last == 0x7FFFFFFF)


def _seq_span(first: int, last: int) -> int:
    """last - first with sequence wrap-around at 2^31."""
    return last - first if last >= first else last + 0x80000000 - first


def _seq_sub(seq: int, delta: int) -> int:
    r = seq - delta
    return r if r >= 0 else r + 0x80000000


class MarkerRefused(Exception):
    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


class ProducerStateManager:
    def __init__(self):
        self._by_partition: dict[tuple[str, int], PartitionProducers] = {}

    def attach(self, partition) -> None:
        state = PartitionProducers(partition)
        self._by_partition[(partition.topic, partition.index)] = state
        partition.on_append = self._record
        self._load(partition, state)

    def forget(self, topic: str, index: int) -> None:
        """A partition no longer hosted here (its topic deleted, its replica moved away): its state
        goes, and with it the partition and log it holds."""
        self._by_partition.pop((topic, index), None)

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
            else:
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
        # the aborted-transaction entries of markers after the snapshot are
        # rebuilt below, as Kafka rebuilds the indexes of recovered segments
        partition.txn_index.truncate_to(start)
        if start >= plog.log_end_offset:
            return
        # batch headers only: no record is decoded, except transaction markers
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
        if entry is None:
            entry = state.producers[pid] = ProducerEntry(header.producer_epoch)
        if header.is_control:
            marker = _read_marker(partition.log, header)
            if marker is None:
                return
            kind, coordinator_epoch = marker
            self._end_transaction(partition, entry, pid, kind == rec.COMMIT, base)
            entry.set_epoch(header.producer_epoch)
            entry.coordinator_epoch = coordinator_epoch
            entry.last_timestamp = header.max_timestamp
            return
        entry.set_epoch(header.producer_epoch)
        entry.last_timestamp = header.max_timestamp
        if header.base_sequence >= 0:
            entry.batches.append((header.base_sequence, header.last_sequence, base, last_offset))
        if header.is_transactional:
            partition.open_transactions.setdefault(pid, base)

    def state(self, partition) -> PartitionProducers:
        return self._by_partition.setdefault((partition.topic, partition.index), PartitionProducers(partition))

    # -- appends -----------------------------------------------------------------

    def check_append(self, transactional_id, partition, header):
        """None to append; an ErrorCode to refuse; (base offset, log start)
        for a duplicate of a batch already in the log."""
        if header.is_transactional and (transactional_id is None or header.producer_id < 0):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        pid = header.producer_id
        if pid < 0:
            return None
        entry = self.state(partition).producers.get(pid)
        if entry is None:
            # Kafka 3.9 accepts a producer it has no state for at any sequence
            return None
        epoch = header.producer_epoch
        seq = header.base_sequence
        if epoch == entry.epoch:
            last_seq = header.last_sequence
            for first, last, base_offset, _last_offset in entry.batches:
                if first == seq and last == last_seq:
                    return base_offset, partition.log_start_offset
        if epoch < entry.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if epoch != entry.epoch:
            if seq != 0 and entry.epoch != NO_EPOCH:
                return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        elif entry.epoch != NO_EPOCH and not _in_sequence(entry.last_sequence, seq):
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        if not header.is_transactional and pid in partition.open_transactions:
            # "Expected transactional write from producer"
            return ErrorCode.INVALID_TXN_STATE
        return None

    def _record(self, partition, header, result) -> None:
        pid = header.producer_id
        if pid < 0 or header.is_control:
            return   # markers are recorded by write_marker
        producers = self.state(partition).producers
        entry = producers.get(pid)
        if entry is None:
            entry = producers[pid] = ProducerEntry(header.producer_epoch)
        entry.set_epoch(header.producer_epoch)
        entry.batches.append((header.base_sequence, header.last_sequence, result.base_offset, result.last_offset))
        entry.last_timestamp = header.max_timestamp
        if header.is_transactional and pid not in partition.open_transactions:
            partition.open_transactions[pid] = result.base_offset

    # -- transaction markers ------------------------------------------------------

    def write_marker(self, partition, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                     commit: bool, now_ms: int, transaction_version: int = 0) -> int:
        """Append a COMMIT or ABORT marker for producer_id and end its open
        transaction (the LSO moves; an abort gets a .txnindex entry).
        Returns the marker's offset; MarkerRefused with Kafka's error when the
        producer has a newer epoch or a newer coordinator wrote before.

        transaction_version is the transaction's (WriteTxnMarkers v2, KIP-1228): a transactions
        v2 marker carries the epoch the coordinator bumped at the end of the transaction, so it
        must be newer than the epoch of the records it ends (Kafka 4.3's
        ProducerAppendInfo.checkProducerEpoch); the same epoch again is a retry of a marker
        already written, accepted while no transaction of the producer is open."""
        producers = self.state(partition).producers
        entry = producers.get(producer_id)
        if entry is not None:
            v2 = transaction_version >= 2
            if producer_epoch < entry.epoch or (v2 and producer_epoch == entry.epoch and not (
                    producer_id not in partition.open_transactions or producer_epoch == MAX_EPOCH)):
                raise MarkerRefused(ErrorCode.INVALID_PRODUCER_EPOCH,
                                    f"Epoch of producer {producer_id} at offset {partition.log_end_offset} in "
                                    f"{partition.topic}-{partition.index} is {producer_epoch}, which is "
                                    f"{'<=' if v2 else '<'} the last seen epoch {entry.epoch} "
                                    f"(TV{transaction_version})")
            if entry.coordinator_epoch > coordinator_epoch:
                raise MarkerRefused(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                                    f"Invalid coordinator epoch for producerId {producer_id}: {coordinator_epoch} "
                                    f"(zombie), {entry.coordinator_epoch} (current)")
        batch = bytearray(rec.build_control_batch("commit" if commit else "abort", producer_id, producer_epoch,
                                                  coordinator_epoch, timestamp=now_ms))
        result = partition.append(batch, rec.BatchHeader(batch), now_ms)
        if entry is None:
            entry = producers[producer_id] = ProducerEntry(producer_epoch)
        self._end_transaction(partition, entry, producer_id, commit, result.base_offset)
        entry.set_epoch(producer_epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = now_ms
        return result.base_offset

    @staticmethod
    def _end_transaction(partition, entry, producer_id: int, commit: bool, marker_offset: int) -> None:
        first = partition.open_transactions.pop(producer_id, None)
        if first is None or commit:
            return   # a marker without data of this producer changes nothing else
        # Kafka's ProducerStateManager.lastStableOffset(completedTxn)
        lso = min(partition.open_transactions.values(), default=marker_offset + 1)
        partition.txn_index.append(AbortedTxn(producer_id, first, marker_offset, lso))

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """ProducerStateManager.removeExpiredProducers: forget producers idle
        for producer.id.expiration.ms (by their last batch's timestamp) that
        have no open transaction. Returns how many went."""
        removed = 0
        for state in self._by_partition.values():
            open_txns = state.partition.open_transactions if state.partition is not None else {}
            idle = [pid for pid, e in state.producers.items()
                    if pid not in open_txns and now_ms - e.last_timestamp >= expiration_ms]
            for pid in idle:
                del state.producers[pid]
            removed += len(idle)
        return removed

    # -- inspection ----------------------------------------------------------------

    def in_transaction(self, partition, producer_id: int, producer_epoch: int) -> bool:
        """Whether the producer has a transaction open here at that epoch (Kafka's
        hasOngoingTransaction with the epoch, KIP-890 part 2): a transactions v2 producer's next
        transaction has a newer epoch, so it is not taken for the one whose marker is in flight."""
        return (producer_id in partition.open_transactions
                and self.producer_epoch(partition, producer_id) == producer_epoch)

    def producer_epoch(self, partition, producer_id: int) -> int | None:
        state = self._by_partition.get((partition.topic, partition.index))
        entry = state.producers.get(producer_id) if state is not None else None
        return entry.epoch if entry is not None else None

    def active_producers(self, partition) -> list[tuple[int, int, int, int, int, int]]:
        """DescribeProducers: (producer id, epoch, last sequence, last
        timestamp, coordinator epoch, current transaction start offset)."""
        state = self._by_partition.get((partition.topic, partition.index))
        if state is None:
            return []
        return [(pid, e.epoch, e.last_sequence, e.last_timestamp, e.coordinator_epoch,
                 partition.open_transactions.get(pid, -1))
                for pid, e in state.producers.items()]


def _read_marker(plog, header) -> tuple[int, int] | None:
    """(type, coordinator epoch) of the control batch whose header this is."""
    try:
        data = plog.read_bytes(header.base_offset, header.size)
        for record in rec.iter_records(memoryview(data)[:header.size]):
            kind = rec.control_record_type(record)
            if kind not in (rec.ABORT, rec.COMMIT):
                return None
            return kind, rec.parse_control_value(record)[1]
    except (rec.CorruptRecordError, ValueError) as exc:
        log.warning("unreadable control batch at %d in %s: %s", header.base_offset, plog.dir, exc)
    return None

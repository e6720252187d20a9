"""Producer state per partition: the sequence numbers of each idempotent
producer's last five batches, so a retried batch is answered with its
original offsets instead of being written twice, and a gap is refused."""
from __future__ import annotations

from collections import deque

from kproto.errors import ErrorCode

BATCHES_KEPT = 5  # Kafka keeps the metadata of a producer's last 5 batches


class ProducerEntry:
    __slots__ = ("epoch", "batches", "coordinator_epoch", "txn_first_offset")

    def __init__(self, epoch: int):
        self.epoch = epoch
        # (first sequence, last sequence, base offset, last offset)
        self.batches: deque = deque(maxlen=BATCHES_KEPT)
        self.coordinator_epoch = -1
        self.txn_first_offset = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else -1


class PartitionProducers:
    def __init__(self):
        self.producers: dict[int, ProducerEntry] = {}


def _next_seq(seq: int) -> int:
    return 0 if seq == 0x7FFFFFFF else seq + 1


class ProducerStateManager:
    def __init__(self):
        self._by_partition: dict[tuple[str, int], PartitionProducers] = {}

    def attach(self, partition) -> None:
        state = PartitionProducers()
        self._by_partition[(partition.topic, partition.index)] = state
        partition.on_append = self._record

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
        if header.is_transactional and pid not in partition.open_transactions:
            partition.open_transactions[pid] = result.base_offset

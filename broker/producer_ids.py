"""Producer id allocation: the controller hands out blocks of ids through
ProducerIdsRecord in the metadata log, so an id is never given twice, not
even across restarts (a restart starts from the next unallocated block)."""
from __future__ import annotations

from kproto.metadata.producer_ids_record import ProducerIdsRecord

BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


class ProducerIdManager:
    def __init__(self, node_id: int, metadata_log, image):
        self.node_id = node_id
        self.log = metadata_log
        self.image = image
        self._next = 0
        self._end = 0  # exclusive
        # blocks fetched ahead from the active controller (AllocateProducerIds) by a node that is
        # not the controller of a multi-node cluster (broker/replication/manager.py)
        self.prefetched: list[tuple[int, int]] = []

    def next_id(self) -> int:
        if self._next >= self._end:
            if self.prefetched:
                self._next, self._end = self.prefetched.pop(0)
            else:
                start = self.allocate_block(self.node_id)
                self._next, self._end = start, start + BLOCK_SIZE
        pid = self._next
        self._next += 1
        return pid

    def allocate_block(self, broker_id: int) -> int:
        """The controller's side: the next block of ids, written to the metadata log; its first id."""
        start = self.image.next_producer_id
        self.log.append([ProducerIdsRecord(broker_id=broker_id, broker_epoch=0,
                                           next_producer_id=start + BLOCK_SIZE)])
        return start

    def needs_block(self) -> bool:
        return not self.prefetched and self._end - self._next < BLOCK_SIZE // 10

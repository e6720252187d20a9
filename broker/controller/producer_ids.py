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

    def next_id(self) -> int:
        if self._next >= self._end:
            start = self.image.next_producer_id
            self.log.append([ProducerIdsRecord(broker_id=self.node_id, broker_epoch=0,
                                               next_producer_id=start + BLOCK_SIZE)])
            self._next, self._end = start, start + BLOCK_SIZE
        pid = self._next
        self._next += 1
        return pid

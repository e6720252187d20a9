"""The active controller's side of ongoing reassignments: once the ISR of a
reassigning partition holds every replica being added (its leader expanded the
ISR through AlterPartition), the completion record is written at once
(broker/replication/reassignment.py builds it). Checked after every metadata
change and once a second, so a controller failover misses nothing."""
from __future__ import annotations

import logging
import time


from kproto.errors import KafkaError

from broker.replication import reassignment

log = logging.getLogger("kproto.reassignment")


async def run(manager) -> None:
    broker = manager.broker
    last_offset = None
    last_check = 0.0
    # the partitions under reassignment, found by a scan of the image only when it changed: the
    # once-a-second look (broker liveness moves without a metadata record) checks just these
    candidates: list = []
    changed = manager._changed
    while True:
        await manager.tick(0.05, changed)
        changed = manager._changed   # a change from here on wakes the next pause
        if not manager._is_controller():
            continue
        image = broker.image
        now = time.monotonic()
        if image.offset == last_offset and now - last_check < 1.0:
            continue
        if image.offset != last_offset:
            candidates = reassignment.in_progress_partitions(image)
        last_offset, last_check = image.offset, now
        if not candidates:
            continue
        records = reassignment.completions(image, broker.controller.brokers(), candidates)
        if not records:
            continue
        try:
            broker.controller.log.append(records)
            log.info("reassignments completed: %s", ", ".join(
                f"{r.partition_id}:replicas={r.replicas},isr={r.isr},leader={r.leader}" for r in records))
        except KafkaError as exc:
            log.info("reassignment completion not written: %s", exc)

"""The metadata log: KRaft metadata records appended as record batches to
the `__cluster_metadata-0` partition and replayed into the image at start.

Narrow on purpose (append, replay, subscribe), so that a Raft quorum can
replicate it later without the rest of the broker noticing.
"""
from __future__ import annotations

import logging
import os
import time

from kproto import records as rec

from broker.metadata import serde
from broker.metadata.raft_metrics import WindowedStat
from broker.storage.replay import stored_batches

log = logging.getLogger("kproto.metadata")

METADATA_TOPIC = "__cluster_metadata"


class MetadataLog:
    def __init__(self, partition_log, image):
        self.plog = partition_log
        self.image = image
        self._listeners = []
        # the quorum epoch this node leads: stamped on every batch it appends
        self.leader_epoch = 0
        self.snapshotter = None   # takes snapshots of the image when due (set by the broker)
        self.commit_latency = WindowedStat()   # ms from an append to its flush (monotonic clock)

    def subscribe(self, listener) -> None:
        """listener(records) is called after each append, once applied."""
        self._listeners.append(listener)

    def unsubscribe(self, listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def replay(self) -> int:
        """Apply the newest snapshot (broker/metadata/snapshotter.py), then every stored record
        after it, to the image; returns the record count."""
        from broker.metadata import snapshotter as metadata_snapshots
        count = 0
        start = 0
        found = metadata_snapshots.latest(self.plog.dir) if self.plog.dir else None
        if found is not None:
            start, snap = found
            for r in snap.records:
                self.image.apply(r)
            count += len(snap.records)
            self.image.offset = start - 1
        for chunk in stored_batches(self.plog):
            for header, batch in chunk:
                # LeaderChange and other KRaft control records carry no metadata; a snapshot covers
                # what lies before its end offset
                if header.is_control or header.last_offset < start:
                    continue
                for r in rec.iter_records(batch):
                    self.image.apply(serde.decode(r.value))
                    count += 1
                self.image.offset = header.last_offset
        return count

    def append(self, records: list) -> int:
        """Durably append records as one batch (all or nothing), then apply
        them and tell the listeners. Returns the batch's last offset."""
        started = time.monotonic()
        now = int(time.time() * 1000)
        batch = bytearray(rec.build_batch([(None, serde.encode(r), [], now) for r in records]))
        info = self.plog.append(batch, self.leader_epoch, now)
        self.plog.flush()
        # a sole voter commits what it has written and flushed: raft-metrics' commit latency
        self.commit_latency.record((time.monotonic() - started) * 1000.0, started)
        for r in records:
            self.image.apply(r)
        self.image.offset = info.last_offset
        if self.snapshotter is not None:
            self.snapshotter.appended(len(batch))
        for listener in self._listeners:
            listener(records)
        return info.last_offset


def metadata_dir(log_dir: str) -> str:
    return os.path.join(log_dir, f"{METADATA_TOPIC}-0")

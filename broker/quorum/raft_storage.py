"""The QuorumShell's storage over a node's real metadata files: the `__cluster_metadata-0`
partition log (Kafka's segment layout, leader-epoch-checkpoint), the `quorum-state` file and the
`<end offset>-<epoch>.checkpoint` snapshots in that directory. What broker/quorum/shell.py's
MemoryStorage keeps in memory, this keeps on disk, so a restarted node comes back with its vote,
its log and its latest snapshot (load() gives the raft node what it needs to start).

Entries are written as Kafka record batches (raft/convert.py: one batch per run of data entries of
one epoch, the LeaderChange entry as a control batch) with their own offsets; appends stay in the
page cache until fsync(); truncations and installed snapshots are made durable at once."""
from __future__ import annotations

import logging
import os
import time

from broker.metadata import retention as metadata_retention, snapshots
from broker.quorum import state_file
from broker.storage.replay import stored_batches
from raft import convert
from raft import messages as m
from raft.node import Persisted

log = logging.getLogger("kproto.quorum")
KEEP_SNAPSHOTS = 2


class LogStorage:
    def __init__(self, plog, voters=(), dynamic: bool = False, retention_bytes: int = 104857600,
                 retention_ms: int = 604800000):
        self.plog = plog
        self.dir = plog.dir
        self.voters = sorted(voters)
        self.dynamic = dynamic   # KIP-853: quorum-state data_version 1 (no voter list, a directory id)
        # metadata.max.retention.bytes / .ms (broker/metadata/retention.py)
        self.retention_bytes, self.retention_ms = retention_bytes, retention_ms

    # ------------------------------------------------------------- start

    def load(self) -> Persisted:
        """The quorum state, newest snapshot and the entries after it, as stored."""
        stored = state_file.read(self.dir)
        qs = m.QuorumState()
        if stored is not None and stored.leader_epoch > 0:
            qs = m.QuorumState(stored.leader_id, stored.leader_epoch, stored.voted_id)
        sid, data = None, b""
        found = snapshots.list_snapshots(self.dir)
        if found:
            end, epoch = found[-1]
            with open(os.path.join(self.dir, snapshots.file_name(end, epoch)), "rb") as f:
                data = f.read()
            sid = m.SnapshotId(end, epoch)
        start = sid.end_offset if sid else 0
        entries = []
        for chunk in stored_batches(self.plog):
            for header, batch in chunk:
                if header.last_offset < start:
                    continue
                entries.extend(e for e in convert.records_to_entries(bytes(batch)) if e.offset >= start)
        if entries and entries[0].offset != start:
            # the log does not continue the snapshot (a gap): keep only the snapshot
            log.warning("metadata log starts at %d, after the snapshot end %d: log ignored",
                        entries[0].offset, start)
            entries = []
        if sid is not None and self.plog.log_end_offset < start:
            self.plog.truncate_fully_and_start_at(start)
        return Persisted(qs, sid, data, tuple(entries))

    # ----------------------------------------------------------- the shell

    def write_quorum_state(self, qs: m.QuorumState) -> None:
        if self.dynamic:
            # Kafka's ElectionState: a vote is kept until a leader is known, then only the leader
            state_file.write(self.dir, state_file.QuorumState(
                leader_id=qs.leader_id, leader_epoch=qs.leader_epoch,
                voted_id=qs.voted_id if qs.leader_id < 0 else -1, data_version=1), sync=True)
            return
        state_file.write(self.dir, state_file.QuorumState(
            leader_id=qs.leader_id, leader_epoch=qs.leader_epoch, voted_id=qs.voted_id,
            current_voters=list(self.voters)), sync=True)

    def apply(self, op) -> None:
        plog = self.plog
        if isinstance(op, m.Append):
            if not op.entries:
                return
            first = op.entries[0].offset
            if first < plog.log_end_offset:
                plog.truncate_to(first)
            elif first > plog.log_end_offset:
                plog.truncate_fully_and_start_at(first)
            now = int(time.time() * 1000)
            plog.append(bytearray(convert.entries_to_records(op.entries, now)), None, now,
                        assign_offsets=False)
        elif isinstance(op, m.Truncate):
            plog.truncate_to(op.end_offset)
            plog.flush()
        elif isinstance(op, m.InstallSnapshot):
            self.write_snapshot(op.snapshot_id, op.data)
            plog.truncate_fully_and_start_at(op.snapshot_id.end_offset)
            plog.flush()
        elif isinstance(op, m.DeleteBefore):
            # a new snapshot (the raft node dropped the entries before it): the segments below the
            # snapshots go by metadata.max.retention.bytes / .ms; load() skips what is still there
            metadata_retention.maybe_clean(plog, self.retention_bytes, self.retention_ms)

    def fsync(self) -> None:
        self.plog.flush()

    def write_snapshot(self, sid: m.SnapshotId, data: bytes) -> None:
        path = os.path.join(self.dir, snapshots.file_name(sid.end_offset, sid.epoch))
        if os.path.exists(path):
            return
        snapshots.write_file(path, data, read_only=True, sync=True)
        for end, epoch in snapshots.list_snapshots(self.dir)[:-KEEP_SNAPSHOTS]:
            try:
                os.unlink(os.path.join(self.dir, snapshots.file_name(end, epoch)))
            except OSError:
                pass
        log.info("metadata snapshot %d-%d written", sid.end_offset, sid.epoch)

"""KRaft snapshot files, as Kafka's RecordsSnapshotWriter/FileRawSnapshotWriter write them.

A snapshot `<offset:020d>-<epoch:010d>.checkpoint` in `__cluster_metadata-0/` holds the metadata
state up to (not including) `offset`: a control batch opening with a SnapshotHeaderRecord (followed,
when kraft.version >= 1, by KRaftVersionRecord and VotersRecord in the same batch), batches of
metadata records, and a control batch with a SnapshotFooterRecord. Record offsets count from 0
inside the file and every batch carries partition leader epoch 0. The file is written as
`<name>.checkpoint.part`, then made read-only and renamed (Kafka freezes it the same way).

`bootstrap.checkpoint` in the metadata log directory (written by `kafka-storage.sh format`) has the
same layout, with lastContainedLogTimestamp 0 and the bootstrap records (metadata.version).
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field

from kproto import records as rec
from kproto.messages.k_raft_version_record import KRaftVersionRecord
from kproto.messages.snapshot_footer_record import SnapshotFooterRecord
from kproto.messages.snapshot_header_record import SnapshotHeaderRecord

from broker.metadata import serde
from broker.metadata import control
from broker.storage.checkpoints import atomic_write

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
BOOTSTRAP_FILE = "bootstrap.checkpoint"
_NAME = re.compile(r"(\d{20})-(\d{10})\.checkpoint\Z")
# KafkaRaftClient.MAX_BATCH_SIZE_BYTES: the snapshot writer starts a new batch past this size
MAX_BATCH_BYTES = 8 * 1024 * 1024


class SnapshotError(ValueError):
    pass


def file_name(offset: int, epoch: int) -> str:
    return f"{offset:020d}-{epoch:010d}{SUFFIX}"


def parse_file_name(name: str) -> tuple[int, int] | None:
    """(end offset, epoch) of a snapshot file name, None for other files."""
    m = _NAME.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def encode(records, *, last_contained_timestamp: int, voters=None, kraft_version: int = 0,
           now_ms: int | None = None) -> bytes:
    """The bytes of a snapshot: header [+ kraft.version and voters], metadata records, footer.
    `records` are metadata record objects (serialised with the metadata serde). `now_ms` stamps
    the records (an int, or (header, records, footer) times as Kafka takes the clock for each)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    head_ts, data_ts, foot_ts = now if isinstance(now, tuple) else (now, now, now)
    head = [SnapshotHeaderRecord(version=0, last_contained_log_timestamp=last_contained_timestamp)]
    if kraft_version >= 1:
        head.append(KRaftVersionRecord(version=0, k_raft_version=kraft_version))
        if voters is not None:
            head.append(voters)
    out = bytearray(control.control_batch(head, base_offset=0, leader_epoch=0, timestamp=head_ts))
    offset = len(head)
    batch: list = []
    size = 0
    for r in records:
        value = serde.encode(r)
        if batch and size + len(value) > MAX_BATCH_BYTES:
            out += rec.build_batch(batch, base_offset=offset, partition_leader_epoch=0)
            offset += len(batch)
            batch, size = [], 0
        batch.append((None, value, [], data_ts))
        size += len(value)
    if batch:
        out += rec.build_batch(batch, base_offset=offset, partition_leader_epoch=0)
        offset += len(batch)
    out += control.control_batch([SnapshotFooterRecord(version=0)], base_offset=offset, leader_epoch=0,
                                 timestamp=foot_ts)
    return bytes(out)


def write_file(path: str, data: bytes, *, read_only: bool, sync: bool = True) -> None:
    """Write through `<path>.part` (or `.tmp`), then rename into place, as Kafka freezes a snapshot."""
    tmp = path + (".part" if path.endswith(SUFFIX) and read_only else ".tmp")
    atomic_write(path, data, sync, tmp=tmp, read_only=read_only)


def write_snapshot(directory: str, offset: int, epoch: int, records, *, last_contained_timestamp: int,
                   voters=None, kraft_version: int = 0, sync: bool = True) -> str:
    path = os.path.join(directory, file_name(offset, epoch))
    write_file(path, encode(records, last_contained_timestamp=last_contained_timestamp, voters=voters,
                            kraft_version=kraft_version), read_only=True, sync=sync)
    return path


def bootstrap_bytes(records, now_ms: int | None = None) -> bytes:
    """bootstrap.checkpoint: the bootstrap records (FeatureLevelRecords) as a snapshot at 0-0."""
    return encode(records, last_contained_timestamp=0, now_ms=now_ms)


def write_bootstrap(log_dir: str, records, sync: bool = True) -> str:
    path = os.path.join(log_dir, BOOTSTRAP_FILE)
    write_file(path, bootstrap_bytes(records), read_only=False, sync=sync)
    return path


@dataclass
class Snapshot:
    """A metadata snapshot file read back: header, records, kraft version and voters."""
    header: SnapshotHeaderRecord
    records: list = field(default_factory=list)     # metadata records
    kraft_version: int = 0
    voters: object = None                             # VotersRecord or None
    end_offset: int = 0                               # records in the file, control records included


def decode(data: bytes, name: str = "snapshot") -> Snapshot:
    """Parse and check a snapshot: header first, footer last, nothing after it."""
    header = None
    footer = False
    snap = Snapshot(header=None)
    pos = 0
    count = 0
    try:
        for _pos, batch_header in rec.iter_batch_headers(data, validate=True):
            batch = memoryview(data)[pos:pos + batch_header.size]
            pos += batch_header.size
            for r in rec.iter_records(batch):
                count += 1
                if footer:
                    raise SnapshotError(f"{name}: records after the SnapshotFooterRecord")
                if batch_header.is_control:
                    type_, message = control.decode_control(r)
                    if type_ == control.SNAPSHOT_HEADER:
                        if header is not None or count != 1:
                            raise SnapshotError(f"{name}: SnapshotHeaderRecord is not the first record")
                        header = message
                    elif header is None:
                        raise SnapshotError(f"{name}: does not start with a SnapshotHeaderRecord")
                    elif type_ == control.SNAPSHOT_FOOTER:
                        footer = True
                    elif type_ == control.KRAFT_VERSION:
                        snap.kraft_version = message.k_raft_version
                    elif type_ == control.KRAFT_VOTERS:
                        snap.voters = message
                else:
                    if header is None:
                        raise SnapshotError(f"{name}: does not start with a SnapshotHeaderRecord")
                    snap.records.append(serde.decode(r.value))
    except rec.CorruptRecordError as exc:
        raise SnapshotError(f"{name}: {exc}") from None
    if pos != len(data):
        raise SnapshotError(f"{name}: {len(data) - pos} trailing bytes")
    if header is None:
        raise SnapshotError(f"{name}: does not start with a SnapshotHeaderRecord")
    if not footer:
        raise SnapshotError(f"{name}: no SnapshotFooterRecord (incomplete snapshot)")
    snap.header = header
    snap.end_offset = count
    return snap


def read(path: str) -> Snapshot:
    with open(path, "rb") as f:
        return decode(f.read(), path)


def list_snapshots(directory: str) -> list[tuple[int, int]]:
    """(end offset, epoch) of the complete snapshots in a metadata partition directory, oldest first."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(p for p in map(parse_file_name, names) if p is not None)

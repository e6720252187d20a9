"""Producer-state snapshot files (``<offset>.snapshot``), Kafka's version 1.

Layout: int16 version, uint32 CRC-32C of everything after the CRC, then an
int32 count and that many 46-byte entries. A snapshot is written each time a
segment is rolled (named after the new segment's base offset) and at close
(named after the log end offset). What goes in the entries is the
idempotence/transaction layer's business; the store only frames them.
"""
from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from typing import NamedTuple

from kproto.crc import crc32c

from .checkpoints import atomic_write
from .files import SNAPSHOT_SUFFIX, offset_from_name, segment_path

VERSION = 1
_HEAD = struct.Struct(">hI")  # version, crc
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")


class ProducerSnapshotEntry(NamedTuple):
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1 without an ongoing transaction


class CorruptSnapshotError(ValueError):
    pass


def encode_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    entries = list(entries)
    body = bytearray(_COUNT.pack(len(entries)))
    for e in entries:
        body += _ENTRY.pack(*e)
    return _HEAD.pack(VERSION, crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerSnapshotEntry]:
    if len(data) < _HEAD.size + _COUNT.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is too short")
    version, crc = _HEAD.unpack_from(data)
    if version != VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    body = memoryview(data)[_HEAD.size:]
    if crc32c(body) != crc:
        raise CorruptSnapshotError("snapshot CRC mismatch")
    (count,) = _COUNT.unpack_from(body)
    if count < 0 or _COUNT.size + count * _ENTRY.size != len(body):
        raise CorruptSnapshotError(f"snapshot declares {count} entries in {len(body)} bytes")
    return [ProducerSnapshotEntry(*_ENTRY.unpack_from(body, _COUNT.size + i * _ENTRY.size))
            for i in range(count)]


def snapshot_path(dir: str, offset: int) -> str:
    return segment_path(dir, offset, SNAPSHOT_SUFFIX)


def write_snapshot(dir: str, offset: int, entries: Iterable[ProducerSnapshotEntry],
                   sync: bool = False) -> str:
    path = snapshot_path(dir, offset)
    atomic_write(path, encode_snapshot(entries), sync)
    return path


def read_snapshot(path: str) -> list[ProducerSnapshotEntry]:
    with open(path, "rb") as f:
        return decode_snapshot(f.read())


def list_snapshots(dir: str) -> list[int]:
    """Offsets of the ``.snapshot`` files in ``dir``, ascending."""
    out = []
    for name in os.listdir(dir):
        if name.endswith(SNAPSHOT_SUFFIX) and name[:-len(SNAPSHOT_SUFFIX)].isdigit():
            out.append(offset_from_name(name))
    return sorted(out)

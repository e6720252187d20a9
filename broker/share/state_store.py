"""Share-partition state in `__share_group_state`, with Kafka 4.3's record layouts: a ShareSnapshot
record (key: record type 0 as int16, then ShareSnapshotKey v0 {GroupId, TopicId, Partition}; value:
version 0 as int16, then ShareSnapshotValue v0 {SnapshotEpoch, StateEpoch, LeaderEpoch, StartOffset,
CreateTimestamp, WriteTimestamp, StateBatches}) holds a share-partition's whole state; a ShareUpdate
record (key type 1, ShareUpdateKey v0; ShareUpdateValue v0 {SnapshotEpoch, LeaderEpoch,
StartOffset, StateBatches}) only what one write changed, laid over the state before it. The partition of a key is Kafka's:
abs(Java hashCode of "group:topicId:partition") % partitions. Pure encoding and decoding; the
service appends and replays.
"""
from __future__ import annotations

import base64
import struct

from kproto.coordinator.share_snapshot_key import ShareSnapshotKey
from kproto.coordinator.share_snapshot_value import ShareSnapshotValue
from kproto.coordinator.share_update_key import ShareUpdateKey
from kproto.coordinator.share_update_value import ShareUpdateValue

from broker.metadata.internal_topics import SHARE_STATE_TOPIC

TOPIC = SHARE_STATE_TOPIC
SNAPSHOT = 0                       # ShareSnapshotKey apiKey: the key's int16 prefix
UPDATE = 1                         # ShareUpdateKey apiKey
_SHORT = struct.Struct(">h")

_Batch = ShareSnapshotValue.StateBatch


def java_string_hash(s: str) -> int:
    h = 0
    for ch in s.encode("utf-16-be").decode("utf-16-be"):
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, topic_id, partition: int, partitions: int) -> int:
    """SharePartitionKey.asCoordinatorKey() hashed as Kafka's share coordinator does."""
    # Kafka's Uuid.toString(): URL-safe base64 without padding
    tid = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
    h = java_string_hash(f"{group_id}:{tid}:{partition}")
    return (abs(h) if h != -(1 << 31) else 0) % partitions


def snapshot_key(group_id: str, topic_id, partition: int) -> bytes:
    out = bytearray(_SHORT.pack(SNAPSHOT))
    ShareSnapshotKey(group_id=group_id, topic_id=topic_id, partition=partition).encode_into(out, 0)
    return bytes(out)


def snapshot_value(snapshot_epoch: int, leader_epoch: int, start_offset: int, batches, complete: int,
                   created_ms: int, now_ms: int, state_epoch: int = 0) -> bytes:
    out = bytearray(_SHORT.pack(0))
    ShareSnapshotValue(
        snapshot_epoch=snapshot_epoch, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
        delivery_complete_count=complete, create_timestamp=created_ms, write_timestamp=now_ms,
        state_batches=[_Batch(first_offset=f, last_offset=last, delivery_state=s, delivery_count=c)
                       for f, last, s, c in batches]).encode_into(out, 0)
    return bytes(out)


def update_key(group_id: str, topic_id, partition: int) -> bytes:
    out = bytearray(_SHORT.pack(UPDATE))
    ShareUpdateKey(group_id=group_id, topic_id=topic_id, partition=partition).encode_into(out, 0)
    return bytes(out)


def update_value(snapshot_epoch: int, leader_epoch: int, start_offset: int, batches, complete: int) -> bytes:
    out = bytearray(_SHORT.pack(0))
    ShareUpdateValue(
        snapshot_epoch=snapshot_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
        delivery_complete_count=complete,
        state_batches=[ShareUpdateValue.StateBatch(first_offset=f, last_offset=last, delivery_state=s, delivery_count=c)
                       for f, last, s, c in batches]).encode_into(out, 0)
    return bytes(out)


def decode(key: bytes, value: bytes | None):
    """((group, topic id, partition), None for a tombstone or (snapshot epoch, start offset, batches))
    of a ShareSnapshot record, or None for a record of another type (ShareUpdate included)."""
    full = decode_full(key, value)
    if full is None or full[2] != SNAPSHOT:
        return None
    ident, v, _kind = full
    if v is None:
        return ident, None
    return ident, (v.snapshot_epoch, v.start_offset,
                   [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in v.state_batches])


def decode_full(key: bytes, value: bytes | None):
    """((group, topic id, partition), the value (ShareSnapshotValue or ShareUpdateValue; None for a
    tombstone), SNAPSHOT or UPDATE) of a share-state record, or None for a record of another type."""
    key = bytes(key)
    kind = _SHORT.unpack_from(key)[0] if len(key) >= 2 else -1
    if kind not in (SNAPSHOT, UPDATE):
        return None
    k = (ShareSnapshotKey if kind == SNAPSHOT else ShareUpdateKey).decode(memoryview(key)[2:], 0)
    ident = (k.group_id, k.topic_id, k.partition)
    if value is None:
        return ident, None, kind
    return ident, (ShareSnapshotValue if kind == SNAPSHOT else ShareUpdateValue).decode(
        memoryview(bytes(value))[2:], 0), kind


def parse_coordinator_key(key: str):
    """(group, topic id, partition) of a FindCoordinator share key "group:topicId:partition" (parsed
    from the right: the group id may hold colons), or None when it is malformed (Kafka's
    SharePartitionKey.getInstance(String))."""
    import uuid
    tokens = (key or "").split(":")
    if len(tokens) < 3 or not tokens[-2]:
        return None
    try:
        raw = base64.urlsafe_b64decode(tokens[-2] + "=" * (-len(tokens[-2]) % 4))
        partition = int(tokens[-1])
    except (ValueError, TypeError):
        return None
    if len(raw) != 16:
        return None
    return ":".join(tokens[:-2]), uuid.UUID(bytes=raw), partition

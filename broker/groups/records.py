"""Keys and values of `__consumer_offsets` records, as Kafka's classic
coordinator writes them: a big-endian int16 version, then the struct encoded
at that version (MessageUtil.toVersionPrefixedBytes). The key version tells
the record type: 0-1 offset commit, 2 group metadata."""
from __future__ import annotations

import functools
import struct

from kproto.coordinator.group_metadata_key import GroupMetadataKey
from kproto.coordinator.group_metadata_value import GroupMetadataValue
from kproto.coordinator.legacy_offset_commit_key import LegacyOffsetCommitKey
from kproto.coordinator.offset_commit_key import OffsetCommitKey
from kproto.coordinator.offset_commit_value import OffsetCommitValue

# Bytes a batch of one record adds around key and value (batch header, record framing).
BATCH_OVERHEAD = 61 + 24

_VERSION = struct.Struct(">h")

OFFSET_COMMIT_KEY_TYPE = OffsetCommitKey.API_KEY          # 1: what Kafka writes (0 is the legacy type)
GROUP_METADATA_KEY_TYPE = GroupMetadataKey.API_KEY        # 2
_OFFSET_KEYS = {LegacyOffsetCommitKey.API_KEY: LegacyOffsetCommitKey, OffsetCommitKey.API_KEY: OffsetCommitKey}
# Kafka 3.9 writes the highest non-flexible versions (metadata.version >= 2.3)
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3

MemberMetadata = GroupMetadataValue.MemberMetadata


def _prefixed(version: int, struct_obj) -> bytes:
    out = bytearray(_VERSION.pack(version))
    struct_obj.encode_into(out, version)
    return bytes(out)


def _typed_key(record_type: int, key) -> bytes:
    out = bytearray(_VERSION.pack(record_type))
    key.encode_into(out, 0)
    return bytes(out)


# a member commits the same partitions again and again: the key's bytes are made once
@functools.lru_cache(maxsize=16384)
def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return _typed_key(OFFSET_COMMIT_KEY_TYPE, OffsetCommitKey(group=group, topic=topic, partition=partition))


def group_metadata_key(group: str) -> bytes:
    return _typed_key(GROUP_METADATA_KEY_TYPE, GroupMetadataKey(group=group))


def offset_commit_value(offset: int, leader_epoch: int, metadata: str, commit_timestamp: int,
                        expire_timestamp: int | None = None) -> bytes:
    # version 1 is the only one that carries an explicit expiry (OffsetCommit v2-v4 retention)
    version = OFFSET_COMMIT_VALUE_VERSION if expire_timestamp is None else OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY
    value = OffsetCommitValue(offset=offset, leader_epoch=leader_epoch, metadata=metadata,
                              commit_timestamp=commit_timestamp,
                              expire_timestamp=-1 if expire_timestamp is None else expire_timestamp)
    return _prefixed(version, value)


def group_metadata_value(protocol_type: str, generation: int, protocol: str | None, leader: str | None,
                         current_state_timestamp: int, members: list) -> bytes:
    value = GroupMetadataValue(protocol_type=protocol_type, generation=generation, protocol=protocol,
                               leader=leader, current_state_timestamp=current_state_timestamp,
                               members=members)
    return _prefixed(GROUP_METADATA_VALUE_VERSION, value)


class OffsetKey:
    __slots__ = ("group", "topic", "partition")

    def __init__(self, group: str, topic: str, partition: int):
        self.group = group
        self.topic = topic
        self.partition = partition


class GroupKey:
    __slots__ = ("group",)

    def __init__(self, group: str):
        self.group = group


def decode_key(data) -> OffsetKey | GroupKey | None:
    """The record's key, or None for a key version this coordinator does not
    know (records of the KIP-848 coordinator, for one): Kafka skips those."""
    mv = memoryview(data)
    record_type, = _VERSION.unpack_from(mv, 0)
    if record_type in _OFFSET_KEYS:
        k = _OFFSET_KEYS[record_type].decode(mv, 0, 2)
        return OffsetKey(k.group, k.topic, k.partition)
    if record_type == GROUP_METADATA_KEY_TYPE:
        return GroupKey(GroupMetadataKey.decode(mv, 0, 2).group)
    return None


def decode_offset_value(data) -> tuple[int, OffsetCommitValue]:
    mv = memoryview(data)
    version, = _VERSION.unpack_from(mv, 0)
    return version, OffsetCommitValue.decode(mv, version, 2)


def decode_group_value(data) -> tuple[int, GroupMetadataValue]:
    mv = memoryview(data)
    version, = _VERSION.unpack_from(mv, 0)
    return version, GroupMetadataValue.decode(mv, version, 2)

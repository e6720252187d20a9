"""Replaying one `__consumer_offsets` partition into groups and offsets, as
Kafka's GroupMetadataManager.doLoadGroupsAndOffsets does: the last record
per key wins, tombstones delete, transactional offset commits wait for the
COMMIT marker of their producer."""
from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

from broker.groups import consumer_records as crec
from broker.groups.model import EMPTY, STABLE, Group, Member, OffsetEntry
from broker.groups.records import GroupKey, OffsetKey, decode_group_value, decode_key, decode_offset_value

if TYPE_CHECKING:
    from broker.groups.share_metadata import ShareStateMetadata
    from broker.groups.share_records import ShareGroupLoad

log = logging.getLogger("kproto.groups")

_CONTROL_KEY = struct.Struct(">hh")   # version, type
_RECORD_TYPE = struct.Struct(">h")
# share groups' records are types 10-15 (broker/groups/share_records.py, share_metadata.py)
_FIRST_SHARE_TYPE = 10
_COMMIT = 1


class PartitionLoad:
    """The state read so far from one partition."""

    def __init__(self, partition: int):
        self.partition = partition
        self.offsets: dict[tuple[str, str, int], OffsetEntry] = {}
        self.pending: dict[int, dict[tuple[str, str, int], OffsetEntry]] = {}
        self.groups: dict[str, object] = {}          # group id -> (value version, GroupMetadataValue)
        self.removed_groups: set[str] = set()
        self.consumer_groups: dict[str, crec.ConsumerGroupLoad] = {}
        self.share_metadata: dict[str, ShareStateMetadata] = {}
        self.share_groups: dict[str, ShareGroupLoad] = {}
        self.records = 0

    def replay_batch(self, base_offset: int, producer_id: int, transactional: bool, control: bool,
                     records) -> None:
        """records: (key, value) pairs of one batch, value None for a tombstone."""
        if control:
            for key, _value in records:
                if key is None or len(key) < 4:
                    continue
                _version, kind = _CONTROL_KEY.unpack_from(key, 0)
                if kind == _COMMIT:
                    for gtp, entry in self.pending.get(producer_id, {}).items():
                        current = self.offsets.get(gtp)
                        if current is None or current.order < entry.order:
                            self.offsets[gtp] = entry
                self.pending.pop(producer_id, None)
                break
            return
        for key, value in records:
            self.records += 1
            if key is None:
                log.warning("record without a key in __consumer_offsets-%d at %d", self.partition, base_offset)
                continue
            k = decode_key(key)
            if isinstance(k, OffsetKey):
                gtp = (k.group, k.topic, k.partition)
                target = self.pending.setdefault(producer_id, {}) if transactional else self.offsets
                if value is None:
                    target.pop(gtp, None)
                    continue
                _v, ov = decode_offset_value(value)
                target[gtp] = OffsetEntry(ov.offset, ov.leader_epoch, ov.metadata, ov.commit_timestamp,
                                          None if ov.expire_timestamp == -1 else ov.expire_timestamp,
                                          base_offset)
            elif isinstance(k, GroupKey):
                if value is None:
                    self.groups.pop(k.group, None)
                    self.removed_groups.add(k.group)
                else:
                    self.groups[k.group] = decode_group_value(value)
                    self.removed_groups.discard(k.group)
            elif len(key) >= 2 and _RECORD_TYPE.unpack_from(key, 0)[0] >= _FIRST_SHARE_TYPE:
                self._replay_share_record(base_offset, key, value)
            elif (ck := crec.decode_key(key)) is not None:
                load = self.consumer_groups.get(ck.group)
                if load is None:
                    load = self.consumer_groups[ck.group] = crec.ConsumerGroupLoad()
                load.apply(ck, None if value is None else crec.decode_value(ck.kind, value))
            else:
                log.warning("unknown record key version in __consumer_offsets-%d at %d: ignored",
                            self.partition, base_offset)

    def _replay_share_record(self, base_offset: int, key, value) -> None:
        # imported at the first share-group record: a node without share groups never meets one (issue 26)
        from broker.groups import share_metadata
        from broker.groups import share_records as srec
        if (share_group := share_metadata.decode_key(key)) is not None:
            if value is None:
                self.share_metadata.pop(share_group, None)
            else:
                self.share_metadata[share_group] = share_metadata.decode_value(value)
        elif (sk := srec.decode_key(key)) is not None:
            load = self.share_groups.get(sk.group)
            if load is None:
                load = self.share_groups[sk.group] = srec.ShareGroupLoad()
            load.apply(sk, None if value is None else srec.decode_value(sk.kind, value))
        else:
            log.warning("unknown record key version in __consumer_offsets-%d at %d: ignored",
                        self.partition, base_offset)

    def build_groups(self) -> list[Group]:
        """The groups this partition holds (metadata and/or offsets)."""
        out: dict[str, Group] = {}
        for group_id, (version, value) in self.groups.items():
            out[group_id] = _group_from_value(group_id, version, value)
        for group_id, load in self.consumer_groups.items():
            group = load.build(group_id)
            if group is not None:
                out[group_id] = group   # a group is of one kind: the conversion wrote the other's tombstones
        for (group_id, topic, partition), entry in self.offsets.items():
            group = out.get(group_id)
            if group is None:
                group = out[group_id] = Group(group_id, EMPTY, None)
            group.offsets[(topic, partition)] = entry
        for producer_id, offsets in self.pending.items():
            for (group_id, topic, partition), entry in offsets.items():
                group = out.get(group_id)
                if group is None:
                    group = out[group_id] = Group(group_id, EMPTY, None)
                group.pending_txn.setdefault(producer_id, {})[(topic, partition)] = entry
        return list(out.values())


def _group_from_value(group_id: str, version: int, value) -> Group:
    members = value.members or []
    group = Group(group_id, STABLE if members else EMPTY,
                  None if value.current_state_timestamp == -1 else value.current_state_timestamp)
    group.generation = value.generation
    group.protocol_type = value.protocol_type or None
    group.protocol_name = value.protocol
    group.leader_id = value.leader
    for m in members:
        member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                        m.session_timeout if version == 0 else m.rebalance_timeout, m.session_timeout,
                        value.protocol_type, [(value.protocol, bytes(m.subscription))], bytes(m.assignment))
        group.members[member.member_id] = member
        if member.instance_id is not None:
            group.static_members[member.instance_id] = member.member_id
    if group.leader_id is not None and group.leader_id not in group.members:
        group.leader_id = next(iter(group.members), None)
    group.subscribed_topics = group.compute_subscribed_topics()
    return group

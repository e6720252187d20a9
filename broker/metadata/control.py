"""KRaft control records: a control batch's records carry a key (version int16, type int16) and a
value that is the control message itself (with its own leading Version field), as Kafka's
ControlRecordUtils writes them."""
from __future__ import annotations

import struct

from kproto import records as rec
from kproto.messages.k_raft_version_record import KRaftVersionRecord
from kproto.messages.leader_change_message import LeaderChangeMessage
from kproto.messages.snapshot_footer_record import SnapshotFooterRecord
from kproto.messages.snapshot_header_record import SnapshotHeaderRecord
from kproto.messages.voters_record import VotersRecord

# ControlRecordType ids
ABORT, COMMIT, LEADER_CHANGE, SNAPSHOT_HEADER, SNAPSHOT_FOOTER, KRAFT_VERSION, KRAFT_VOTERS = range(7)

MESSAGE_TYPES = {
    LEADER_CHANGE: LeaderChangeMessage,
    SNAPSHOT_HEADER: SnapshotHeaderRecord,
    SNAPSHOT_FOOTER: SnapshotFooterRecord,
    KRAFT_VERSION: KRaftVersionRecord,
    KRAFT_VOTERS: VotersRecord,
}
TYPE_OF = {cls: t for t, cls in MESSAGE_TYPES.items()}
_KEY = struct.Struct(">hh")


def control_record(message, timestamp: int) -> rec.Record:
    """One control record for a LeaderChangeMessage, SnapshotHeaderRecord, ... (version 0 each)."""
    return rec.Record(_KEY.pack(0, TYPE_OF[type(message)]), message.encode(0), [], timestamp)


def control_batch(messages, *, base_offset: int, leader_epoch: int, timestamp: int) -> bytes:
    """A control batch (not transactional, no producer) holding the given control messages."""
    return rec.build_batch([control_record(m, timestamp) for m in messages], base_offset=base_offset,
                           control=True, partition_leader_epoch=leader_epoch)


def decode_control(record: rec.Record):
    """(type, message) of a control record; message is None for a type this module doesn't know."""
    _version, type_ = _KEY.unpack_from(record.key, 0)
    cls = MESSAGE_TYPES.get(type_)
    return type_, (cls.decode(record.value, 0) if cls is not None else None)

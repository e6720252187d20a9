"""__share_group_state records (broker/share/state_store.py): Kafka 4.3's ShareSnapshot layout round
trips, and a key's partition is Kafka's (Java String.hashCode of "group:topicId:partition")."""
from __future__ import annotations

import uuid

from broker.share import state_store as s


def test_snapshot_round_trip_with_kafka_prefixes():
    tid = uuid.UUID(int=12345)
    key = s.snapshot_key("g", tid, 3)
    value = s.snapshot_value(7, 2, 10, [(10, 12, 0, 1), (13, 13, 2, 1), (14, 20, 4, 5)], 2, 5, 6)
    assert key[:2] == b"\x00\x00" and value[:2] == b"\x00\x00"     # record type 0 (snapshot), value version 0
    assert s.decode(key, value) == (("g", tid, 3), (7, 10, [(10, 12, 0, 1), (13, 13, 2, 1), (14, 20, 4, 5)]))
    assert s.decode(key, None) == (("g", tid, 3), None)              # a tombstone
    assert s.decode(b"\x00\x05" + key[2:], value) is None            # a record of another type


def test_update_round_trip():
    tid = uuid.UUID(int=12345)
    key, value = s.update_key("g", tid, 3), s.update_value(7, 2, -1, [(13, 13, 2, 1)], 4)
    assert key[:2] == b"\x00\x01" and value[:2] == b"\x00\x00"     # record type 1 (update), value version 0
    ident, v, kind = s.decode_full(key, value)
    assert (ident, kind) == (("g", tid, 3), s.UPDATE)
    assert (v.snapshot_epoch, v.leader_epoch, v.start_offset, v.delivery_complete_count) == (7, 2, -1, 4)
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in v.state_batches] == [
        (13, 13, 2, 1)]
    assert s.decode(key, value) is None                              # decode: snapshots only
    assert s.decode_full(key, None) == (("g", tid, 3), None, s.UPDATE)


def test_partition_is_javas_string_hash():
    assert s.java_string_hash("hello") == 99162322                   # "hello".hashCode()
    assert s.java_string_hash("polygenelubricants") == -(1 << 31)    # Integer.MIN_VALUE
    tid = uuid.UUID(int=1)
    key = "g:AAAAAAAAAAAAAAAAAAAAAQ:0"                                # Uuid.toString(): URL-safe base64
    assert s.partition_for("g", tid, 0, 50) == abs(s.java_string_hash(key)) % 50

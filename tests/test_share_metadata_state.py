"""The group state machine's part of a share group's ShareGroupStatePartitionMetadata record
(broker/groups/share_metadata.py): Kafka's record layout, the value becoming the group's only once
its record is replicated, replay on load, and the record rewritten without a deleted topic."""
from __future__ import annotations

import uuid

from kproto.errors import ErrorCode as E

from broker.groups import share_metadata as sm
from broker.groups.state import GroupStateMachine

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def _machine():
    m = GroupStateMachine()
    m.activate(1)
    return m


def _put(m, group, meta, error=E.NONE, now_ms=0):
    fx = m.put_share_metadata(object(), now_ms, group, meta)
    assert [r.error for _t, r in fx.responses] == [E.NONE]
    (append,) = fx.appends
    m.append_done(append, error, now_ms)
    return append


def test_record_layout_is_kafkas():
    # key: record type 15 (int16), then the group id (int16 length + bytes, version 0)
    assert sm.key_bytes("g") == b"\x00\x0f\x00\x01g"
    meta = sm.ShareStateMetadata({T1: ("a", frozenset({1}))}, {T2: ("b", frozenset({0, 2}))}, {})
    value = sm.value_bytes(meta)
    assert value[:2] == b"\x00\x00"                    # value version 0, flexible
    assert sm.decode_value(value) == meta


def test_value_is_the_groups_once_replicated_and_a_tombstone_removes_it():
    m = _machine()
    meta = sm.initializing(sm.EMPTY_METADATA, {T1: ("a", {0, 1})})
    failed = _put(m, "g", meta, error=E.NOT_LEADER_OR_FOLLOWER)
    assert "g" not in m.share_metadata                 # the append failed: nothing changed
    _put(m, "g", meta)
    assert m.share_metadata["g"] == meta
    # those recorded initializing are initialised again only once their record is old (the caller's
    # group.share.initialize.retry.interval.ms since share_metadata_at)
    assert sm.uninitialized(meta, {"a": (T1, 3)}) == {T1: ("a", frozenset({0, 1, 2}))}
    assert sm.uninitialized(meta, {"a": (T1, 3)}, retry_initializing=False) == {T1: ("a", frozenset({2}))}
    done = sm.initialized(meta, {T1: ("a", {0, 1})})
    _put(m, "g", done, now_ms=700)
    assert m.share_metadata_at["g"] == 700              # replicated at that step's clock
    assert sm.uninitialized(done, {"a": (T1, 3)}) == {T1: ("a", frozenset({2}))}
    tomb = _put(m, "g", sm.EMPTY_METADATA)
    assert tomb.records == [(sm.key_bytes("g"), None)] and "g" not in m.share_metadata
    assert "g" not in m.share_metadata_at
    assert failed.records[0][1] == sm.value_bytes(meta)


def test_replayed_on_load_last_record_wins():
    m = GroupStateMachine()
    m.activate(1, loading=[0])
    one = sm.ShareStateMetadata({}, {T1: ("a", frozenset({0}))}, {})
    two = sm.initialized(one, {T2: ("b", {0})})
    m.replay_batch(0, 0, -1, False, False, [(sm.key_bytes("g"), sm.value_bytes(one)),
                                           (sm.key_bytes("h"), sm.value_bytes(one))])
    m.replay_batch(0, 2, -1, False, False, [(sm.key_bytes("g"), sm.value_bytes(two)), (sm.key_bytes("h"), None)])
    m.finish_load(0, 900)
    assert m.share_metadata == {"g": two}
    assert m.share_metadata_at == {"g": 900}            # loaded: stamped at the load, as Kafka's replay


def test_deleted_topic_leaves_the_record():
    m = _machine()
    _put(m, "g", sm.ShareStateMetadata({}, {T1: ("a", frozenset({0})), T2: ("b", frozenset({0}))}, {}))
    _put(m, "h", sm.ShareStateMetadata({}, {T1: ("a", frozenset({0}))}, {}))
    fx = m.share_topics_deleted(0, {T1})
    assert len(fx.appends) == 2
    for a in fx.appends:
        m.append_done(a, E.NONE, 0)
    assert m.share_metadata == {"g": sm.ShareStateMetadata({}, {T2: ("b", frozenset({0}))}, {})}

"""Where a share group's share-partition state is, as the group coordinator records it (Kafka 4.3's
ShareGroupStatePartitionMetadata, `__consumer_offsets` record type 15): the topic-partitions whose
state is being initialised at the share coordinators (InitializeShareGroupState sent, answer not yet
in), those initialised, and the topics whose state is being deleted (DeleteShareGroupState sent).

The group coordinator writes the record before it asks the share coordinators and again once they
answered, so after a restart or a failover the new coordinator knows every share-partition the group
may have state of: DescribeShareGroupOffsets of all topics lists them, DeleteGroups deletes them.

Pure: the record's codec and the transitions of the value; the state machine's part (the last
record per group wins; an answer waits until its record is replicated) is ShareMetadataMixin in
broker/groups/share_mixins.py.
"""
from __future__ import annotations

import functools
import struct
from dataclasses import dataclass, field

KEY_TYPE = 15      # ShareGroupStatePartitionMetadataKey.API_KEY
_VERSION = struct.Struct(">h")


@functools.cache
def _codecs():
    # imported at the first type-15 record written or replayed: a single node without share groups
    # never loads them (issue 26)
    from kproto.coordinator.share_group_state_partition_metadata_key import ShareGroupStatePartitionMetadataKey
    from kproto.coordinator.share_group_state_partition_metadata_value import ShareGroupStatePartitionMetadataValue
    return ShareGroupStatePartitionMetadataKey, ShareGroupStatePartitionMetadataValue


@dataclass(frozen=True)
class ShareStateMetadata:
    """Where a share group's share-partition state is: initializing, initialized, deleting."""
    initializing: dict = field(default_factory=dict)     # topic id -> (name, frozenset of partitions)
    initialized: dict = field(default_factory=dict)      # topic id -> (name, frozenset of partitions)
    deleting: dict = field(default_factory=dict)         # topic id -> name

    def empty(self) -> bool:
        return not (self.initializing or self.initialized or self.deleting)

    def known(self) -> dict:
        """topic id -> partitions initialised or being initialised."""
        out = {tid: set(ps) for tid, (_n, ps) in self.initialized.items()}
        for tid, (_n, ps) in self.initializing.items():
            out.setdefault(tid, set()).update(ps)
        return out

    def names(self) -> dict:
        out = {tid: n for tid, (n, _ps) in self.initializing.items()}
        out.update({tid: n for tid, (n, _ps) in self.initialized.items()})
        return out


EMPTY_METADATA = ShareStateMetadata()


def _merge(into: dict, add: dict) -> dict:
    out = dict(into)
    for tid, (name, ps) in add.items():
        old = out.get(tid)
        out[tid] = (name, frozenset(ps) | (old[1] if old else frozenset()))
    return out


def _minus(from_: dict, remove: dict) -> dict:
    out = {}
    for tid, (name, ps) in from_.items():
        left = frozenset(ps) - frozenset(remove.get(tid, (None, ()))[1])
        if left:
            out[tid] = (name, left)
    return out


def uninitialized(meta: ShareStateMetadata, subscribed: dict, retry_initializing: bool = True) -> dict:
    """The subscribed topic-partitions to initialise: topic id -> (name, partitions). subscribed:
    topic name -> (topic id, partition count). Those recorded initialised are not; those recorded
    initializing are only when `retry_initializing` (Kafka's subscribedTopicsChangeMap: their record is
    older than group.share.initialize.retry.interval.ms, so their initialisation is taken as lost)."""
    known = {tid: set(ps) for tid, (_n, ps) in meta.initialized.items()}
    if not retry_initializing:
        for tid, (_n, ps) in meta.initializing.items():
            known.setdefault(tid, set()).update(ps)
    out = {}
    for name, (tid, count) in subscribed.items():
        missing = frozenset(range(count)) - known.get(tid, set())
        if missing:
            out[tid] = (name, missing)
    return out


def initializing(meta: ShareStateMetadata, add: dict) -> ShareStateMetadata:
    """InitializeShareGroupState is about to be sent for `add` (topic id -> (name, partitions)); a
    topic being deleted and initialised again is no longer being deleted."""
    return ShareStateMetadata(_merge(meta.initializing, add), meta.initialized,
                              {t: n for t, n in meta.deleting.items() if t not in add})


def initialized(meta: ShareStateMetadata, done: dict) -> ShareStateMetadata:
    """The share coordinators initialised `done`."""
    return ShareStateMetadata(_minus(meta.initializing, done), _merge(meta.initialized, done), meta.deleting)


def uninitializing(meta: ShareStateMetadata, failed: dict) -> ShareStateMetadata:
    """Initialising `failed` did not succeed: tried again on a later heartbeat."""
    return ShareStateMetadata(_minus(meta.initializing, failed), meta.initialized, meta.deleting)


def deleting(meta: ShareStateMetadata, topic_ids) -> ShareStateMetadata:
    """DeleteShareGroupState is about to be sent for every partition of these topics."""
    names = meta.names()
    topic_ids = set(topic_ids)
    return ShareStateMetadata({t: v for t, v in meta.initializing.items() if t not in topic_ids},
                              {t: v for t, v in meta.initialized.items() if t not in topic_ids},
                              {**meta.deleting, **{t: names.get(t, meta.deleting.get(t, "")) for t in topic_ids}})


def deleted(meta: ShareStateMetadata, topic_ids) -> ShareStateMetadata:
    topic_ids = set(topic_ids)
    return ShareStateMetadata(meta.initializing, meta.initialized,
                              {t: n for t, n in meta.deleting.items() if t not in topic_ids})


def forget_topics(meta: ShareStateMetadata, topic_ids) -> ShareStateMetadata:
    """Deleted topics: their share-partitions are gone with them."""
    topic_ids = set(topic_ids)
    return ShareStateMetadata({t: v for t, v in meta.initializing.items() if t not in topic_ids},
                              {t: v for t, v in meta.initialized.items() if t not in topic_ids},
                              {t: n for t, n in meta.deleting.items() if t not in topic_ids})


# ------------------------------------------------------------------ the record

def key_bytes(group_id: str) -> bytes:
    out = bytearray(_VERSION.pack(KEY_TYPE))
    _codecs()[0](group_id=group_id).encode_into(out, 0)
    return bytes(out)


def decode_key(data) -> str | None:
    """The group id of a type-15 key, None for another record type."""
    mv = memoryview(data)
    if len(mv) < 2 or _VERSION.unpack_from(mv, 0)[0] != KEY_TYPE:
        return None
    return _codecs()[0].decode(mv, 0, 2).group_id


def _topics(cls, d: dict) -> list:
    return [cls.TopicPartitionsInfo(topic_id=tid, topic_name=name, partitions=sorted(ps))
            for tid, (name, ps) in sorted(d.items(), key=lambda kv: str(kv[0]))]


def value_bytes(meta: ShareStateMetadata) -> bytes:
    out = bytearray(_VERSION.pack(0))
    cls = _codecs()[1]
    cls(
        initializing_topics=_topics(cls, meta.initializing), initialized_topics=_topics(cls, meta.initialized),
        deleting_topics=[cls.TopicInfo(topic_id=tid, topic_name=name)
                         for tid, name in sorted(meta.deleting.items(), key=lambda kv: str(kv[0]))],
    ).encode_into(out, 0)
    return bytes(out)


def decode_value(data) -> ShareStateMetadata:
    mv = memoryview(data)
    version, = _VERSION.unpack_from(mv, 0)
    v = _codecs()[1].decode(mv, version, 2)
    return ShareStateMetadata(
        {t.topic_id: (t.topic_name, frozenset(t.partitions)) for t in v.initializing_topics},
        {t.topic_id: (t.topic_name, frozenset(t.partitions)) for t in v.initialized_topics},
        {t.topic_id: t.topic_name for t in v.deleting_topics})


# ------------------------------------------------------------------ the state machine's answer
# (its part is broker/groups/share_mixins.py)

@dataclass
class ShareMetadataResult:
    """The outcome of writing a share group's state metadata."""
    error: int

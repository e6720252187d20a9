"""How a metadata leader takes its image back to the committed state when it loses the
leadership with proposals not committed: by undoing them, newest first, instead of building a
new image from the snapshot and every committed record.

The leader applies its own proposals to its image at once (ReplicatedQuorum.propose_nowait); a
leader that loses the leadership drops what did not commit (_rebuild). Building the image again
decoded and applied every record of the metadata log: at 10,000 partitions 1.5-14 s on the event
loop, at every lost leadership, and a node whose loop stalls that long loses its leadership again
(docs/performance.md). The records a leader proposes under churn are partition changes, broker
fencing and registration changes, producer id blocks: their undo is the object they replaced. A
proposal holding any other record (a topic created or removed, configs, ACLs...) is not undone:
the image is built again as before while it is uncommitted."""
from __future__ import annotations

import copy
from collections import deque

_PARTITION = ("PartitionRecord", "PartitionChangeRecord")
_REGISTRATION = ("RegisterBrokerRecord", "FenceBrokerRecord", "UnfenceBrokerRecord",
                 "BrokerRegistrationChangeRecord")


class ImageUndo:
    def __init__(self):
        # (offset, undo) of each applied proposal not known committed, oldest first;
        # undo None: a record this module cannot undo
        self._entries: deque = deque()

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def proposed(self, image, first_offset: int, records: list, undos: list | None = None) -> None:
        """Before ``records`` (at first_offset, first_offset + 1, ...) are applied to ``image``.
        ``undos``: undo_of(image, r) of each, made by the caller earlier (a fence's, in slices),
        of an image whose partitions they name are as they were then."""
        if undos is None:
            undos = [_undo_of(image, r) for r in records]
        self._entries.extend((first_offset + i, u) for i, u in enumerate(undos))

    def committed(self, applied: int) -> None:
        """Every offset below ``applied`` is committed: nothing to undo there any more."""
        entries = self._entries
        while entries and entries[0][0] < applied:
            entries.popleft()

    def undo(self, image, applied: int) -> bool:
        """Take ``image`` back to offset ``applied`` - 1: True if done, False if an uncommitted
        record cannot be undone (the image is left as it was then)."""
        self.committed(applied)
        if any(u is None for _o, u in self._entries):
            return False
        while self._entries:
            _offset, u = self._entries.pop()
            u(image)
        image.offset = applied - 1
        return True


def _shallow(p):
    """A copy of a PartitionImage sharing its lists: applying a record gives the image new lists,
    never changes them in place (MetadataImage._apply_PartitionChangeRecord). 2 us a partition
    where copy.deepcopy took 120 (a fence moves 10,000 partitions in one proposal)."""
    c = object.__new__(type(p))
    c.__dict__.update(p.__dict__)
    return c


def _undo_of(image, r):
    kind = type(r).__name__
    if kind in _PARTITION:
        t = image.topics_by_id.get(r.topic_id)
        if t is None:
            return lambda _image: None   # (applying it changed nothing)
        old = t.partitions.get(r.partition_id)
        old = _shallow(old) if old is not None else None

        def undo_partition(_image, t=t, index=r.partition_id, old=old):
            if old is None:
                t.partitions.pop(index, None)
            else:
                t.partitions[index] = old
            t.epoch += 1   # (a newer epoch: what was derived from the undone state is stale)
        return undo_partition
    if kind in _REGISTRATION:
        broker_id = getattr(r, "broker_id", getattr(r, "id", None))
        old = image.brokers.get(broker_id)
        old = copy.copy(old) if old is not None else None   # (its apply sets fields, log_dirs a new list)

        def undo_registration(image, broker_id=broker_id, old=old):
            if old is None:
                image.brokers.pop(broker_id, None)
            else:
                image.brokers[broker_id] = old
            image.brokers_epoch += 1
        return undo_registration
    if kind == "ProducerIdsRecord":
        before = image.next_producer_id

        def undo_producer_ids(image, before=before):
            image.next_producer_id = before
        return undo_producer_ids
    if kind == "NoOpRecord":
        return lambda _image: None
    return None


def undo_of(image, record):
    """How to take ``image`` back from ``record`` applied to it (None: it cannot be)."""
    return _undo_of(image, record)

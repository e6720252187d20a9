"""The remote segments of each partition as `__remote_log_metadata` says they are: Kafka's
RemoteLogMetadataCache, pure. Records go in (`apply`), questions come out: the copied segments in
offset order, the one holding an offset, the highest copied offset, the remote log start and size,
the copies that never finished."""
from __future__ import annotations

import bisect
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .keys import uuid_to_kafka
from .segment_states import COPY_SEGMENT_FINISHED, COPY_SEGMENT_STARTED, DELETE_SEGMENT_STARTED

if TYPE_CHECKING:
    from . import metadata_records as mr


@dataclass
class RemoteSegment:
    """A segment copied to the object store, as the remote log metadata lists it."""
    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    size: int
    leader_epochs: list[tuple[int, int]]
    state: int
    broker_id: int

    @property
    def key_base(self) -> str:
        return f"{self.start_offset:020d}-{uuid_to_kafka(self.segment_id)}"


class PartitionView:
    def __init__(self):
        self.segments: dict[uuid.UUID, RemoteSegment] = {}
        self.deleted = False        # RemotePartitionDeleteMetadata seen
        self.tp: mr.TopicIdPartition | None = None
        self._sorted: list[RemoteSegment] | None = None

    def _changed(self) -> None:
        self._sorted = None

    def copied(self) -> list[RemoteSegment]:
        """COPY_SEGMENT_FINISHED segments by start offset (what reads may use)."""
        if self._sorted is None:
            self._sorted = sorted((s for s in self.segments.values() if s.state == COPY_SEGMENT_FINISHED),
                                  key=lambda s: s.start_offset)
        return self._sorted

    def unfinished(self) -> list[RemoteSegment]:
        """Copies started and never finished, and deletions started and never finished."""
        return [s for s in self.segments.values()
                if s.state in (COPY_SEGMENT_STARTED, DELETE_SEGMENT_STARTED)]

    def highest_copied_offset(self) -> int:
        """The end offset of the last copied segment, -1 with none (Kafka's
        highestOffsetInRemoteStorage)."""
        segs = self.copied()
        return max((s.end_offset for s in segs), default=-1)

    def log_start_offset(self) -> int | None:
        segs = self.copied()
        return segs[0].start_offset if segs else None

    def size(self) -> int:
        return sum(s.size for s in self.copied())

    def segment_for(self, offset: int) -> RemoteSegment | None:
        segs = self.copied()
        i = bisect.bisect_right([s.start_offset for s in segs], offset) - 1
        if i >= 0 and segs[i].start_offset <= offset <= segs[i].end_offset:
            return segs[i]
        # a gap (a segment in deletion): the next one above
        for s in segs:
            if s.start_offset > offset:
                return s
        return None

    def segment_for_timestamp(self, ts: int) -> RemoteSegment | None:
        for s in self.copied():
            if s.max_timestamp_ms >= ts:
                return s
        return None


class SegmentView:
    """Every partition's remote segments, keyed by (topic id, partition)."""

    def __init__(self):
        self.partitions: dict[tuple[uuid.UUID, int], PartitionView] = {}

    def _for(self, tp: mr.TopicIdPartition) -> PartitionView:
        view = self.partition(tp.topic_id, tp.partition)
        view.tp = tp
        return view

    def partition(self, topic_id: uuid.UUID, index: int) -> PartitionView:
        key = (topic_id, index)
        view = self.partitions.get(key)
        if view is None:
            view = self.partitions[key] = PartitionView()
        return view

    def get(self, topic_id, index: int) -> PartitionView | None:
        return self.partitions.get((topic_id, index))

    def apply(self, record) -> None:
        # (the record codecs load with tiered storage on: only then are there records to apply)
        from . import metadata_records as mr
        if isinstance(record, mr.SegmentMetadata):
            view = self._for(record.tp)
            view.segments[record.segment_id] = RemoteSegment(
                record.segment_id, record.start_offset, record.end_offset, record.max_timestamp_ms,
                record.size, list(record.leader_epochs), record.state, record.broker_id)
            view._changed()
        elif isinstance(record, mr.SegmentUpdate):
            view = self._for(record.tp)
            seg = view.segments.get(record.segment_id)
            if seg is None:
                return
            if record.state == mr.DELETE_SEGMENT_FINISHED:
                del view.segments[record.segment_id]
            else:
                seg.state = record.state
            view._changed()
        elif isinstance(record, mr.PartitionDelete):
            view = self._for(record.tp)
            view.deleted = True
            if record.state == mr.DELETE_PARTITION_FINISHED:
                view.segments.clear()
            view._changed()

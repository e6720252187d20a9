"""PartitionLog: the on-disk log of one partition (a ``<topic>-<partition>/`` directory).

Kafka's UnifiedLog/LocalLog for a single replica: offset assignment, segment
rolling, fetch reads for sendfile, timestamp lookups, the leader epoch cache,
producer snapshots on roll, retention and DeleteRecords, crash recovery.
Synchronous plain file I/O: appends land in the page cache, fsync happens in
flush() (explicitly, by ``flush.messages``/``flush.ms``, or for rolled
segments in flush_rolled()). With ``on_flush_due`` set (the broker's
flusher), due flushes are handed over instead and run in another thread
through flush_targets() / FlushTargets.sync() / flushed().

PartitionLog is one object over one directory, written in parts: this module has opening,
append, reads, timestamp and epoch lookups, truncation and the lifecycle (the paths every
produce and fetch takes); log_loading.py what open() finds on disk and recovers, log_retention.py
what deletes data, log_flush.py what makes it durable.
"""
from __future__ import annotations

import bisect
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from kproto.records import (
    HEADER, HEADER_SIZE, LOG_OVERHEAD, MIN_BATCH_LENGTH, BatchHeader, set_base_offset,
    set_log_append_time, set_partition_leader_epoch,
)

from . import checkpoints as cp
from . import chores
from .epochs import LeaderEpochCache
from .errors import InconsistentTopicId, KafkaStorageError, OffsetOutOfRange
from .files import (
    LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA, delete_dir_name,
    parse_partition_dir,
)
from .index import NO_TIMESTAMP
from .log_flush import LogFlushMixin
from .log_loading import LogLoadingMixin, ProgressCallback
from .log_retention import LogRetentionMixin
from .logconfig import LogConfig
from .open_files import FILES, SegmentFile
from .segment import LogSegment
from .snapshots import (
    CorruptSnapshotError, ProducerSnapshotEntry, list_snapshots, read_snapshot, snapshot_path,
    write_snapshot,
)

log = logging.getLogger(__name__)

def _now_ms() -> int:
    return int(time.time() * 1000)


class AppendInfo(NamedTuple):
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the batches were stamped LogAppendTime
    log_start_offset: int


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int | None


class FetchSlice(NamedTuple):
    """Whole batches of one segment file: send ``length`` bytes from ``position``.

    ``file`` stays open at least ``file.delete.delay.ms`` after its segment is
    deleted, so a slice can be sent after an await."""
    file: "SegmentFile | None"
    position: int
    length: int

    @property
    def fd(self) -> int:
        return self.file.fileno()

    def read(self) -> bytes:
        if not self.length:
            return b""
        return os.pread(self.file.fileno(), self.length, self.position)

    def region(self):
        """The slice as the protocol codec's FileRegion (sent with os.sendfile);
        empty bytes when there is nothing to send."""
        if not self.length:
            return b""
        from kproto._codec import FileRegion
        f = self.file
        if not FILES.may_pin():
            # responses in flight already hold as many files as the limit allows
            return os.pread(f.fileno(), self.length, self.position)
        # the region holds the file: open until the response is sent (open_files.py)
        return FileRegion(f.fileno(), self.position, self.length, f)


EMPTY_SLICE = FetchSlice(None, 0, 0)

SnapshotProvider = Callable[[int], Iterable[ProducerSnapshotEntry]]


class PartitionLog(LogLoadingMixin, LogRetentionMixin, LogFlushMixin):
    """The log of one partition. Use PartitionLog.open(); not thread-safe."""

    def __init__(self, dir: str, config: LogConfig, topic_id: uuid.UUID | None,
                 epochs: LeaderEpochCache, segments: list[LogSegment],
                 snapshot_provider: SnapshotProvider | None):
        parsed = parse_partition_dir(os.path.basename(os.path.normpath(dir)))
        if parsed is None:
            raise ValueError(f"not a partition directory name: {dir!r}")
        self.dir = dir
        self.topic, self.partition = parsed
        self.config = config
        self.topic_id = topic_id
        self.epochs = epochs
        self.snapshot_provider = snapshot_provider
        # called with the new log start offset whenever it moves up
        self.on_log_start_offset_change: Callable[[int], None] | None = None
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._log_start = 0
        # the offset DeleteRecords last moved the log start to: a tiered log's start may be below
        # its local one (the records between are in remote storage, broker/tiered), so this is kept
        # apart from ``_log_start`` and checkpointed (checkpoint_log_start)
        self.deleted_below = 0
        self._leo = 0
        self._recovery_point = 0
        self._pending_flush_upto: int | None = None
        self._dir_dirty = False
        # the log dir's entry for a partition directory created by open(): fsynced by the first
        # flush too (the creator's fsync of the log dir may run later, in a worker thread, and an
        # acks=all answer after an fsync of the data alone was lost with the whole directory)
        self._parent_dirty = False
        self._last_flush_ms = _now_ms()
        self._last_snap_offset = 0
        self._no_snapshots = False   # True while a directory made by open() has had none written
        self._pending_deletes: list[tuple[int, LogSegment, list[str]]] = []
        self._closed = False
        # set by the broker's flusher: called with (log, flush up to or None for
        # the log end) when a flush is due, instead of fsyncing on this thread
        self.on_flush_due: Callable[["PartitionLog", int | None], None] | None = None
        # a flush planned before a truncation must not move the recovery point
        self._truncations = 0
        # tiered storage (broker/tiered/): a log_retention.TierLimits when the topic's segments
        # are copied to remote storage; local retention then deletes only what was copied
        self.tier = None

    # ================================================================ opening

    @classmethod
    def open(cls, dir: str, config: "dict | LogConfig | None" = None, clean_shutdown: bool = True, *,
             topic_id=None, recovery_point: int = 0, log_start_offset: int = 0,
             progress: ProgressCallback | None = None,
             snapshot_provider: SnapshotProvider | None = None,
             now_ms: int | None = None, sync: bool = True, created: bool | None = None,
             fsync_later: Callable[[tuple[str, ...]], None] | None = None) -> "PartitionLog":
        """Open (or create) the partition directory ``dir``.

        ``recovery_point`` and ``log_start_offset`` come from the log dir's
        checkpoints. Without a clean shutdown, every segment from the one
        holding the recovery point onward is scanned and validated; the log is
        cut at the first invalid or partial batch. ``sync=False`` skips the
        fsyncs of checkpoint files (tests). ``fsync_later(paths)``, where given,
        takes the fsyncs of the small files written here (partition.metadata,
        leader-epoch-checkpoint, now and later) off the caller's thread.
        """
        now_ms = _now_ms() if now_ms is None else now_ms
        cfg = LogConfig.from_dict(config)
        if created is None:   # (given by a caller that made the directory itself: LogManager)
            created = not os.path.isdir(dir)
        os.makedirs(dir, exist_ok=True)
        meta_path = os.path.join(dir, PARTITION_METADATA)
        try:
            stored_id = None if created else cp.read_partition_metadata(meta_path)
        except cp.CorruptCheckpointError as exc:
            # its fsync runs after the rename, in a worker thread (fsync_later): a power loss in
            # between leaves the name with torn contents. The controller's metadata has the id.
            log.warning("%s; ignored (written again with the topic id)", exc)
            stored_id = None
        if topic_id is not None:
            topic_id = cp.as_uuid(topic_id)
            if stored_id is None:
                # a new directory's file is written in place (no rename); torn by a crash, it is
                # ignored and written again from the metadata's topic id (below)
                cp.write_partition_metadata(meta_path, topic_id, sync and fsync_later is None, in_place=created)
                if sync and fsync_later is not None:
                    fsync_later((meta_path, dir))
            elif stored_id != topic_id:
                raise InconsistentTopicId(
                    f"{dir} belongs to topic id {cp.uuid_to_str(stored_id)}, not {cp.uuid_to_str(topic_id)}")
        else:
            topic_id = stored_id
        epoch_path = os.path.join(dir, LEADER_EPOCH_CHECKPOINT)
        cp.touch(epoch_path)
        try:
            epochs = LeaderEpochCache(epoch_path, [], sync) if created else LeaderEpochCache.load(epoch_path, sync)
            epochs_lost = False
        except cp.CorruptCheckpointError as exc:
            # the same (the leader-epoch checkpoint is fsynced after its rename): rebuilt from
            # the batches of every segment
            log.warning("%s; rebuilding the leader epochs from the log", exc)
            epochs = LeaderEpochCache(epoch_path, [], sync)
            epochs_lost = True
        epochs.fsync_later = fsync_later

        bases = [] if created else cls._prepare_files(dir)
        segments = [LogSegment.load(dir, base, cfg, now_ms) for base in bases]
        plog = cls(dir, cfg, topic_id, epochs, segments, snapshot_provider)
        plog._parent_dirty = created
        plog._epochs_lost = epochs_lost
        try:
            plog._load(clean_shutdown, recovery_point, log_start_offset, progress, now_ms)
            if os.environ.get("KPROTO_TEST_FAULT") == "drop-last-acked-batch-on-restart":
                plog._test_drop_last_batch(now_ms)
        except BaseException:
            for seg in plog._segments:
                seg.offset_index._release()
                seg.time_index._release()
                seg.close_file()
            raise
        return plog

    # ============================================================ properties

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def checkpoint_log_start(self) -> int:
        """The log start offset the log-start-offset checkpoint keeps: the local one, or for a
        tiered log the lower offset DeleteRecords moved the start to (Kafka checkpoints a tiered
        log's logStartOffset, not its localLogStartOffset)."""
        if self.config.remote_storage_enable == "true":
            return min(self._log_start, self.deleted_below)
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size(self) -> int:
        """Bytes of ``.log`` data in all segments."""
        return sum(s.size for s in self._segments)

    @property
    def latest_epoch(self) -> int | None:
        return self.epochs.latest_epoch

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def has_chores(self) -> bool:
        """A rolled segment to flush or a deleted one to remove (LogManager.periodic)."""
        return self._pending_flush_upto is not None or bool(self._pending_deletes)

    def __repr__(self) -> str:
        return (f"PartitionLog({self.topic}-{self.partition}, start={self._log_start}, "
                f"end={self._leo}, segments={len(self._segments)})")

    def _add_segment(self, seg: LogSegment) -> None:
        i = bisect.bisect_left(self._bases, seg.base_offset)
        self._segments.insert(i, seg)
        self._bases.insert(i, seg.base_offset)

    def _remove_segment(self, seg: LogSegment) -> None:
        i = self._segments.index(seg)
        del self._segments[i]
        del self._bases[i]

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.topic}-{self.partition} is closed")

    def assign_topic_id(self, topic_id, sync: bool = True) -> None:
        """Record the topic id (partition.metadata) of a log that had none."""
        topic_id = cp.as_uuid(topic_id)
        if self.topic_id is not None and self.topic_id != topic_id:
            raise InconsistentTopicId(f"{self.dir} belongs to topic id {cp.uuid_to_str(self.topic_id)}")
        if self.topic_id is None:
            cp.write_partition_metadata(os.path.join(self.dir, PARTITION_METADATA), topic_id, sync)
            self.topic_id = topic_id

    def update_config(self, config: "dict | LogConfig") -> None:
        """Apply changed topic configs (index size applies to new segments)."""
        self.config = LogConfig.from_dict(config)
        for seg in self._segments:
            seg.config = self.config

    # ================================================================ append

    def append(self, records, leader_epoch: int | None, now_ms: int | None = None,
               log_append_time: bool = False, *, assign_offsets: bool = True) -> AppendInfo:
        """Append one or more validated v2 batches with a single write.

        With ``assign_offsets`` (leader appends) each batch's baseOffset is
        rewritten in place from the log end offset; otherwise the batches keep
        their offsets, which must not go below the log end (replication, raft).
        ``leader_epoch`` is stamped into partitionLeaderEpoch unless None.
        ``log_append_time`` stamps ``now_ms`` as each batch's maxTimestamp.
        """
        self._check_open()
        now_ms = _now_ms() if now_ms is None else now_ms
        view = memoryview(records).cast("B")
        if view.readonly:
            view = memoryview(bytearray(view))
        n = len(view)
        if n == 0:
            raise ValueError("nothing to append")
        next_offset = self._leo
        first_offset = None
        max_ts, offset_of_max = NO_TIMESTAMP, -1
        epoch_starts = []
        pos = 0
        unpack = HEADER.unpack_from
        while pos < n:
            if n - pos < HEADER_SIZE:
                raise ValueError(f"partial batch header at {pos}")
            (base, batch_length, stored_epoch, _magic, _crc, _attrs, last_delta,
             _base_ts, batch_max_ts, *_rest) = unpack(view, pos)
            size = batch_length + LOG_OVERHEAD
            if batch_length < MIN_BATCH_LENGTH or pos + size > n or last_delta < 0:
                raise ValueError(f"malformed batch at {pos}")
            if assign_offsets:
                base = next_offset
                set_base_offset(view, pos, base)
            elif base < next_offset:
                raise ValueError(f"batch offset {base} is below the log end offset {next_offset}")
            if leader_epoch is not None:
                set_partition_leader_epoch(view, pos, leader_epoch)
                epoch = leader_epoch
            else:
                epoch = stored_epoch
            if log_append_time:
                set_log_append_time(view, pos, now_ms)
                batch_max_ts = now_ms
            last = base + last_delta
            if batch_max_ts > max_ts:
                max_ts, offset_of_max = batch_max_ts, last
            if first_offset is None:
                first_offset = base
            if epoch >= 0 and (not epoch_starts or epoch_starts[-1][0] != epoch):
                epoch_starts.append((epoch, base))
            next_offset = last + 1
            pos += size
        last_offset = next_offset - 1
        seg = self._maybe_roll(n, max_ts, last_offset, first_offset, now_ms)
        seg.append(view, last_offset, max_ts, offset_of_max, first_offset)
        for epoch, base in epoch_starts:
            self.epochs.assign(epoch, base)
        self._leo = next_offset
        if self._leo - self._recovery_point >= self.config.flush_messages:
            if self.on_flush_due is not None:
                self.on_flush_due(self, None)
            else:
                self.flush()
        return AppendInfo(first_offset, last_offset, now_ms if log_append_time else -1,
                          self._log_start)

    def _maybe_roll(self, size: int, max_ts: int, max_offset: int, first_offset: int,
                    now_ms: int) -> LogSegment:
        seg = self._segments[-1]
        # an empty segment is never rolled: its successor would start at the same offset
        if seg.size > 0 and seg.should_roll(size, max_ts, max_offset, now_ms):
            log.debug("rolling %s-%d at offset %d", self.topic, self.partition, self._leo)
            seg = self.roll(first_offset, now_ms)
        return seg

    def roll(self, expected_next_offset: int | None = None, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (or later)."""
        self._check_open()
        now_ms = _now_ms() if now_ms is None else now_ms
        new_base = max(expected_next_offset or 0, self._leo)
        active = self._segments[-1]
        if new_base == active.base_offset:
            if active.size == 0:
                return active
            raise KafkaStorageError(f"segment {new_base} already exists and is not empty")
        if new_base < active.base_offset:
            raise KafkaStorageError(f"cannot roll to {new_base}, below the active segment {active.base_offset}")
        active.on_become_inactive()
        seg = LogSegment.create(self.dir, new_base, self.config, now_ms)
        self._add_segment(seg)
        self._dir_dirty = True
        self.take_snapshot(new_base)
        self._pending_flush_upto = new_base
        chores.note()
        return seg

    # =========================================================== snapshots

    def take_snapshot(self, offset: int | None = None) -> str | None:
        """Write ``<offset>.snapshot`` (default: the log end) from snapshot_provider,
        unless a snapshot at or after that offset exists. Returns its path."""
        offset = self._leo if offset is None else offset
        if offset <= self._last_snap_offset:
            return None
        entries = self.snapshot_provider(offset) if self.snapshot_provider is not None else ()
        self._no_snapshots = False
        path = write_snapshot(self.dir, offset, entries, sync=False)
        self._last_snap_offset = offset
        return path

    def latest_snapshot(self) -> tuple[int, list[ProducerSnapshotEntry]] | None:
        """The newest readable producer snapshot: (offset, entries)."""
        if self._no_snapshots:
            return None
        for offset in reversed(list_snapshots(self.dir)):
            try:
                return offset, read_snapshot(snapshot_path(self.dir, offset))
            except (OSError, CorruptSnapshotError) as exc:
                log.warning("skipping unreadable producer snapshot %d in %s: %s", offset, self.dir, exc)
        return None

    def iter_batches(self, from_offset: int | None = None) -> Iterator[BatchHeader]:
        """Headers of the stored batches from the one holding ``from_offset``
        (default: the log start) to the end: for rebuilding producer state."""
        start = self._log_start if from_offset is None else from_offset
        i = max(0, self._floor_segment_index(start))
        for seg in list(self._segments[i:]):
            position = 0
            if seg.base_offset <= start:
                found = seg.translate_offset(start)
                if found is None:
                    continue
                position = found[0]
            for _, header in seg.iter_batches(position):
                yield header

    # ================================================================= read

    def _floor_segment_index(self, offset: int) -> int:
        return bisect.bisect_right(self._bases, offset) - 1

    def read(self, offset: int, max_bytes: int, upper_bound_offset: int | None = None, *,
             min_one_batch: bool = True) -> FetchSlice:
        """Whole batches from the one holding ``offset``, for a fetch.

        At most ``max_bytes`` unless the first batch alone is larger (returned
        whole when ``min_one_batch``, KIP-74), never a batch whose base offset
        is >= ``upper_bound_offset`` (high watermark / last stable offset),
        never past the end of one segment. OffsetOutOfRange outside
        [log start, log end].
        """
        self._check_open()
        leo = self._leo
        if offset < self._log_start or offset > leo:
            raise OffsetOutOfRange(
                f"offset {offset} is out of range for {self.topic}-{self.partition}: "
                f"log start {self._log_start}, log end {leo}", self._log_start, leo)
        bound = leo if upper_bound_offset is None else min(upper_bound_offset, leo)
        if offset >= bound:
            return EMPTY_SLICE
        i = self._floor_segment_index(offset)
        segments = self._segments
        while 0 <= i < len(segments):
            seg = segments[i]
            found = seg.translate_offset(offset)
            if found is None:
                i += 1
                continue
            position, header = found
            if header.base_offset >= bound:
                return EMPTY_SLICE
            first_size = header.batch_length + LOG_OVERHEAD
            if first_size > max_bytes and not min_one_batch:
                return EMPTY_SLICE
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else leo
            hard_end = seg.size
            if bound < next_base:
                hard_end = seg.position_of_bound(bound, position + first_size)
            want_end = position + max(max_bytes, first_size)
            if want_end >= hard_end:
                end = hard_end
            else:
                end = seg.last_boundary_before(want_end, position)
            return FetchSlice(seg.file, position, end - position)
        return EMPTY_SLICE

    def fetch_slice(self, offset: int, max_bytes: int, upper_bound_offset: int, *,
                    min_one_batch: bool) -> tuple[FetchSlice, bool]:
        """(slice, first batch incomplete) as Kafka's LogSegment.read cuts it
        for a fetch: the bytes from the start of the batch holding ``offset``,
        ``max_bytes`` of them (raised to the first batch's size when
        ``min_one_batch``), never past ``upper_bound_offset``'s batch nor the
        end of the segment. The cut is a byte count, not a batch boundary:
        a trailing partial batch is sent as Kafka sends it (clients drop
        it); "incomplete" says the first batch itself was cut."""
        self._check_open()
        leo = self._leo
        if offset < self._log_start or offset > leo:
            raise OffsetOutOfRange(
                f"offset {offset} is out of range for {self.topic}-{self.partition}: "
                f"log start {self._log_start}, log end {leo}", self._log_start, leo)
        bound = min(upper_bound_offset, leo)
        if offset >= bound:
            return EMPTY_SLICE, False
        i = self._floor_segment_index(offset)
        segments = self._segments
        while 0 <= i < len(segments):
            seg = segments[i]
            found = seg.translate_offset(offset)
            if found is None:
                i += 1
                continue
            if max_bytes < 0:
                # (Kafka's LogSegment.read refuses it: the partition's error)
                raise ValueError(f"invalid max size {max_bytes}")
            position, header = found
            first_size = header.batch_length + LOG_OVERHEAD
            adjusted = max(max_bytes, first_size) if min_one_batch else max_bytes
            if adjusted == 0:
                return EMPTY_SLICE, False
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else leo
            max_position = seg.size
            if bound < next_base:
                max_position = seg.position_of_bound(bound, position)
            length = max(min(max_position - position, adjusted), 0)
            return FetchSlice(seg.file, position, length), adjusted < first_size
        return EMPTY_SLICE, False

    def read_bytes(self, offset: int, max_bytes: int = 2**31 - 1,
                   upper_bound_offset: int | None = None, *, min_one_batch: bool = True) -> bytes:
        """read() as bytes (tools, tests)."""
        return self.read(offset, max_bytes, upper_bound_offset, min_one_batch=min_one_batch).read()

    # ====================================================== timestamp lookups

    def offset_for_timestamp(self, timestamp: int) -> OffsetAndTimestamp | None:
        """ListOffsets by timestamp: the first record (at or after the log start)
        with timestamp >= ``timestamp``; None if there is none."""
        self._check_open()
        for seg in list(self._segments):
            if seg.largest_timestamp() >= timestamp:
                found = seg.find_offset_by_timestamp(timestamp, self._log_start)
                return OffsetAndTimestamp(*found) if found is not None else None
        return None

    def max_timestamp_offset(self) -> OffsetAndTimestamp | None:
        """ListOffsets MAX_TIMESTAMP: the first record with the largest timestamp."""
        self._check_open()
        best = None
        for seg in self._segments:
            if best is None or seg.max_timestamp > best.max_timestamp:
                best = seg
        if best is None or best.max_timestamp < 0:
            return None
        found = best.offset_of_max_timestamp()
        return OffsetAndTimestamp(*found) if found is not None else None

    # ========================================================= leader epochs

    def assign_epoch(self, epoch: int, start_offset: int | None = None) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (default: the log end),
        as a new leader does on election."""
        # an empty log's checkpoint is rewritten in place (no temporary file, no rename): a new
        # partition's first leader epoch costs no rename; torn by a crash, it is rebuilt from the
        # (empty) log and the epoch assigned again when the partition leads
        self.epochs.in_place = self._leo == 0 and self._segments[-1].size == 0
        try:
            return self.epochs.assign(epoch, self._leo if start_offset is None else start_offset)
        finally:
            self.epochs.in_place = False

    def epoch_for_offset(self, offset: int) -> int | None:
        """Leader epoch of the record at ``offset`` per the epoch cache; None if unknown."""
        return self.epochs.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset), (-1, -1) when unknown."""
        return self.epochs.end_offset_for(epoch, self._leo)

    # ============================================================ retention

    # =========================================================== truncation

    def truncate_to(self, offset: int, now_ms: int | None = None) -> bool:
        """Remove everything at and after ``offset`` (replica truncation).
        Returns False if there was nothing to remove."""
        self._check_open()
        now_ms = _now_ms() if now_ms is None else now_ms
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self._leo:
            # nothing to cut, but an epoch that starts at the log end goes (Kafka's
            # UnifiedLog.truncateTo does the same): a leader elected without appending anything
            # keeps (epoch, end) in its checkpoint, and as a follower it would ask the new leader,
            # who never had that epoch, with it again and again
            self.epochs.truncate_from_end(self._leo)
            return False
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset, now_ms)
            return True
        later = [s for s in self._segments if s.base_offset > offset]
        if later:
            self._delete_segments(later, now_ms)
        active = self._segments[-1]
        active.truncate_to(offset, now_ms)
        # the cut is made durable before anything moves on: the leader-epoch checkpoint (fsynced)
        # soon names the next epoch's start here, while the records fetched after the cut stay in
        # the page cache; a power loss would bring the cut tail back under that epoch, for good
        # (tests/test_power_loss_recovery.py). Truncations are rare: one fsync each.
        os.fsync(active.fd)
        if later:
            cp.fsync_dir(self.dir)
        self._leo = active.read_next_offset()
        self._recovery_point = min(self._recovery_point, self._leo)
        self._truncations += 1
        self.epochs.truncate_from_end(self._leo)
        self._drop_snapshots_after(self._leo)
        return True

    def truncate_fully_and_start_at(self, new_offset: int, now_ms: int | None = None) -> None:
        """Drop all data; the log continues empty at ``new_offset``."""
        self._check_open()
        now_ms = _now_ms() if now_ms is None else now_ms
        old = list(self._segments)
        for seg in old:
            self._remove_segment(seg)
            seg.mark_deleted()
            self._pending_deletes.append((now_ms + self.config.file_delete_delay_ms, seg, []))
        chores.note()
        self._add_segment(LogSegment.create(self.dir, new_offset, self.config, now_ms))
        self._dir_dirty = True
        self._leo = new_offset
        self._log_start = new_offset
        self.deleted_below = min(self.deleted_below, new_offset)
        self._recovery_point = new_offset
        self._truncations += 1
        self.epochs.clear()
        self._drop_snapshots_after(-1)
        if self.on_log_start_offset_change is not None:
            self.on_log_start_offset_change(new_offset)

    def _drop_snapshots_after(self, offset: int) -> None:
        for snap in list_snapshots(self.dir):
            if snap > offset:
                os.unlink(snapshot_path(self.dir, snap))
        remaining = list_snapshots(self.dir)
        self._last_snap_offset = remaining[-1] if remaining else 0

    # ================================================================ flush

    # ============================================================ lifecycle

    def close(self) -> None:
        """Flush, write the producer snapshot at the log end, trim the indexes."""
        if self._closed:
            return
        self.flush()
        self.take_snapshot()
        for seg in self._segments:
            seg.close()
        self.purge_deleted(force=True)
        self._closed = True

    def rename_for_deletion(self) -> str:
        """First stage of topic deletion: stop using the log and rename its
        directory to ``<topic>-<partition>.<uuid>-delete`` (files stay open so
        in-flight fetches finish). Returns the new directory."""
        self._closed = True
        for seg in self._segments + [s for _, s, _ in self._pending_deletes]:
            seg.offset_index._release()
            seg.time_index._release()
        new_dir = os.path.join(os.path.dirname(os.path.normpath(self.dir)),
                               delete_dir_name(self.topic, self.partition))
        os.rename(self.dir, new_dir)
        self.dir = new_dir
        return new_dir

    def destroy(self) -> None:
        """Second stage: close every file and remove the directory."""
        self._closed = True
        for seg in self._segments + [s for _, s, _ in self._pending_deletes]:
            seg.offset_index._release()
            seg.time_index._release()
            seg.close_file()
        self._pending_deletes = []
        shutil.rmtree(self.dir, ignore_errors=True)

    def delete(self) -> None:
        """Topic deletion, at once: rename the directory, close, remove it."""
        if not self._closed:
            self.rename_for_deletion()
        self.destroy()

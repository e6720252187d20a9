"""The partition segment store: Kafka's on-disk log layout, byte for byte.

    LogManager     every partition log of one log directory (checkpoints,
                   clean-shutdown marker, recovery at start, retention)
    PartitionLog   one ``<topic>-<partition>/`` directory: append, read for
                   sendfile, timestamp lookups, leader epochs, retention
    LogSegment     one ``.log`` with its ``.index`` / ``.timeindex``
    LogCleaner     compaction (cleaner.py schedules, compaction.py cleans, swaps.py recovers)
    Flusher        group commit: fsyncs off the trio thread (flusher.py)
    CheckpointWriter  the periodic checkpoint files, written by a worker thread

Synchronous plain file I/O; the trio server calls it directly.
"""
from .epochs import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from .errors import InconsistentTopicId, KafkaStorageError, LogDirLocked, OffsetOutOfRange
from .log import EMPTY_SLICE, AppendInfo, FetchSlice, OffsetAndTimestamp, PartitionLog
from .logconfig import LogConfig
from .logmanager import LogManager
from .segment import LogSegment
from .snapshots import ProducerSnapshotEntry

__all__ = [
    "AppendInfo", "EMPTY_SLICE", "FetchSlice", "InconsistentTopicId", "KafkaStorageError",
    "LeaderEpochCache", "LogConfig", "LogDirLocked", "LogManager", "LogSegment",
    "OffsetAndTimestamp", "OffsetOutOfRange", "PartitionLog", "ProducerSnapshotEntry",
    "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET",
]

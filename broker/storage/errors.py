"""Errors raised by the segment store.

Each carries the Kafka error code a real broker answers for it, so handlers
can turn them into responses without a mapping table.
"""
from __future__ import annotations

from kproto.errors import ErrorCode, KafkaError


class OffsetOutOfRange(KafkaError):
    """Fetch/DeleteRecords offset outside [log start, log end] (or above the HW)."""

    def __init__(self, message: str, log_start_offset: int = -1, log_end_offset: int = -1):
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class InconsistentTopicId(KafkaError):
    """partition.metadata names another topic id than the one asked for."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.INCONSISTENT_TOPIC_ID, message)


class KafkaStorageError(KafkaError):
    """The log directory failed us (I/O error, full disk, log closed)."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, message)
        self.path = path   # the file that failed, where a write did


class LogDirOffline(KafkaStorageError):
    """A new log asked of a failed log directory (Kafka's "Can not create log ... because log
    directory ... is offline")."""


class LogDirLocked(RuntimeError):
    """Another process holds the log directory's ``.lock``."""

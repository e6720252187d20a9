"""File and directory names of Kafka's log layout."""
from __future__ import annotations

import os
import uuid

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"

PARTITION_METADATA = "partition.metadata"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

# log directory root
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"

METADATA_TOPIC = "__cluster_metadata"


def offset_name(offset: int) -> str:
    """Base offset as Kafka spells it in file names: 20 digits, zero padded."""
    return f"{offset:020d}"


def segment_path(dir: str, base_offset: int, suffix: str) -> str:
    return os.path.join(dir, offset_name(base_offset) + suffix)


def offset_from_name(name: str) -> int:
    """The base offset a segment file name starts with."""
    return int(name[:name.index(".")])


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``("topic", 3)`` from ``topic-3``; None for anything else."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


def delete_dir_name(topic: str, partition: int) -> str:
    """Where a deleted partition waits for removal: ``topic-0.<uuid hex>-delete``,
    the topic cut short so the name fits in 255 bytes (as Kafka does)."""
    suffix = f"-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return topic[:255 - len(suffix)] + suffix

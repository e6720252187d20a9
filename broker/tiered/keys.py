"""Where a remote segment's objects live in the store: `<topic>-<partition>-<topic id>/` then
`<start offset, 20 digits>-<segment id>` and the file's suffix (Kafka's RemoteLogSegmentFileset
names: .log, .index, .timeindex, .txnindex, .snapshot, .leader_epoch_checkpoint)."""
from __future__ import annotations

import base64
import uuid

SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".leader_epoch_checkpoint")


def uuid_to_kafka(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode()


def partition_prefix(topic: str, index: int, topic_id: uuid.UUID) -> str:
    return f"{topic}-{index}-{uuid_to_kafka(topic_id)}/"


def segment_key(prefix: str, seg, suffix: str) -> str:
    return prefix + seg.key_base + suffix

"""The states of a remote segment and of a partition's remote deletion, as Kafka numbers them in
`__remote_log_metadata` (RemoteLogSegmentState, RemotePartitionDeleteState). A module of their own:
the segment view and the fetch path name them on every broker, the record codecs
(metadata_records.py) load only when tiered storage is on."""
from __future__ import annotations

# RemoteLogSegmentState ids
COPY_SEGMENT_STARTED = 0
COPY_SEGMENT_FINISHED = 1
DELETE_SEGMENT_STARTED = 2
DELETE_SEGMENT_FINISHED = 3
# RemotePartitionDeleteState ids
DELETE_PARTITION_MARKED = 0
DELETE_PARTITION_STARTED = 1
DELETE_PARTITION_FINISHED = 2

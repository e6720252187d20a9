"""AlterReplicaLogDirs: move a partition's log to another of this broker's
log directories (JBOD). DescribeLogDirs, which reports them, is in cluster.py.

Kafka answers at once and copies in the background (a "future" replica);
kproto moves the log before answering (broker/storage/jbod.py), so the move
is complete when the answer arrives and DescribeLogDirs never shows a future
replica."""
from __future__ import annotations

import logging

from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.alter_replica_log_dirs_response import (
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirsResponse, AlterReplicaLogDirTopicResult)

from broker.handlers import handles
from broker.storage.jbod import LogDirs, future_dir_name
from broker.storage.txnindex import PartitionTxnIndex

log = logging.getLogger("kproto.handlers.log_dirs")


def _move(broker, topic: str, index: int, path: str) -> int:
    """The error code of moving one partition to path, as Kafka's ReplicaManager.alterReplicaLogDirs."""
    if len(future_dir_name(topic, index)) > 255:
        return ErrorCode.INVALID_TOPIC_EXCEPTION       # "The topic name is too long."
    if path not in broker.log_dirs:
        return ErrorCode.LOG_DIR_NOT_FOUND             # "Failed to find the log directory for <path>"
    part = broker.partitions.get(topic, index)
    if part is None and isinstance(broker.logs, LogDirs):
        broker.logs.preferred[(topic, index)] = path     # created there if it comes
    if part is None:
        # Kafka's NotLeaderOrFollower, kept as REPLICA_NOT_AVAILABLE for this API
        return ErrorCode.REPLICA_NOT_AVAILABLE
    if not isinstance(broker.logs, LogDirs):
        return ErrorCode.NONE                          # one directory: it is there already
    try:
        new = broker.logs.move(topic, index, path)
    except OSError as exc:
        log.error("moving %s-%d to %s failed: %s", topic, index, path, exc)
        return ErrorCode.KAFKA_STORAGE_ERROR
    if new is not part.log:
        part.log = new
        part.txn_index = PartitionTxnIndex(new)
    return ErrorCode.NONE


@handles(ApiKey.ALTER_REPLICA_LOG_DIRS, 0, 2)
async def alter_replica_log_dirs(ctx, req):
    # a partition named twice goes where it is named last, as Kafka's map of the request
    destination: dict[tuple[str, int], str] = {}
    for d in req.dirs:
        for t in d.topics:
            for p in t.partitions:
                destination[(t.name, p)] = d.path
    by_topic: dict[str, list] = {}
    for (topic, index), path in destination.items():
        code = _move(ctx.broker, topic, index, path)
        by_topic.setdefault(topic, []).append(AlterReplicaLogDirPartitionResult(partition_index=index,
                                                                                 error_code=code))
    return AlterReplicaLogDirsResponse(throttle_time_ms=0, results=[
        AlterReplicaLogDirTopicResult(topic_name=t, partitions=parts) for t, parts in by_topic.items()])

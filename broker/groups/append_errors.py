"""What a failed `__consumer_offsets` append means to the client, per API, as
Kafka 3.9 maps the log's error (the replication wait included) to a
coordinator error: GroupMetadataManager.storeOffsets / storeGroup for the
classic APIs, GroupCoordinatorService.handleOperationException for the
consumer protocol. A client retries COORDINATOR_NOT_AVAILABLE where it is,
and looks the coordinator up again on NOT_COORDINATOR."""
from __future__ import annotations

from kproto.errors import ErrorCode as E

_UNAVAILABLE = {E.UNKNOWN_TOPIC_OR_PARTITION, E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND}
_MOVED = {E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR, E.FENCED_LEADER_EPOCH}
_TOO_LARGE = {E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE, E.INVALID_FETCH_SIZE}


def commit_error(error: int) -> int:
    """OffsetCommit / TxnOffsetCommit. A replication timeout is
    COORDINATOR_NOT_AVAILABLE, as the 3.9 runtime answers it (the classic
    manager passed REQUEST_TIMED_OUT through, which old clients do not retry)."""
    if error in _UNAVAILABLE or error == E.REQUEST_TIMED_OUT:
        return E.COORDINATOR_NOT_AVAILABLE
    if error in _MOVED:
        return E.NOT_COORDINATOR
    if error in _TOO_LARGE:
        return E.INVALID_COMMIT_OFFSET_SIZE
    return error


def store_group_error(error: int) -> int:
    """The group metadata record of a SyncGroup (or a static member's rejoin):
    a timeout makes the members rejoin."""
    if error in _UNAVAILABLE:
        return E.COORDINATOR_NOT_AVAILABLE
    if error in _MOVED:
        return E.NOT_COORDINATOR
    if error == E.REQUEST_TIMED_OUT:
        return E.REBALANCE_IN_PROGRESS
    if error in _TOO_LARGE:
        return E.UNKNOWN_SERVER_ERROR
    return error


def operation_error(error: int) -> int:
    """Consumer protocol records (ConsumerGroupHeartbeat and the rest)."""
    if error in _UNAVAILABLE or error == E.REQUEST_TIMED_OUT:
        return E.COORDINATOR_NOT_AVAILABLE
    if error in _MOVED:
        return E.NOT_COORDINATOR
    if error in _TOO_LARGE:
        return E.UNKNOWN_SERVER_ERROR
    return error


def fail_answer(result, error: int):
    """An answer held for an append that failed (the shell's fail_answer)."""
    from broker.groups.consumer_results import HeartbeatResult
    from broker.groups.results import JoinResult, OffsetCommitResult, SyncResult
    if isinstance(result, OffsetCommitResult):
        return OffsetCommitResult({tp: commit_error(error) if e == E.NONE else e
                                   for tp, e in result.errors.items()})
    if isinstance(result, SyncResult):
        return SyncResult(store_group_error(error)) if result.error == E.NONE else result
    if isinstance(result, JoinResult):
        if result.error != E.NONE:
            return result
        return JoinResult(store_group_error(error), result.member_id)
    if isinstance(result, HeartbeatResult):
        if result.error != E.NONE:
            return result
        return HeartbeatResult(operation_error(error), None, result.member_id)
    from broker.groups.share_metadata import ShareMetadataResult
    if isinstance(result, ShareMetadataResult):
        return ShareMetadataResult(operation_error(error))
    from broker.groups.share_records import ShareRecordsResult
    if isinstance(result, ShareRecordsResult):
        return ShareRecordsResult(operation_error(error))
    return result   # the other answers stand (Kafka logs a failed cleanup and answers)

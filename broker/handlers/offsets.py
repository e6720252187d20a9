"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords: positions in a
partition's log."""
from __future__ import annotations

import os
import time

import trio

from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.delete_records_response import DeleteRecordsResponse
from kproto.messages.list_offsets_response import ListOffsetsResponse
from kproto.messages.offset_for_leader_epoch_response import OffsetForLeaderEpochResponse

from broker.handlers import handles
from broker.partitions.partition import OffsetOutOfRange
from broker.metadata.topic_names import INTERNAL_TOPICS
from broker.tiered import offsets as tiered_offsets

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5              # Kafka 3.9's LATEST_TIERED_TIMESTAMP (v9)
EARLIEST_PENDING_UPLOAD = -6    # Kafka 4.x's (KIP-1023, v11)

_LTopic = ListOffsetsResponse.ListOffsetsTopicResponse
_LPart = ListOffsetsResponse.ListOffsetsPartitionResponse


def _epoch_error(partition, requested: int):
    if requested < 0 or requested == partition.leader_epoch:
        return None
    return ErrorCode.FENCED_LEADER_EPOCH if requested < partition.leader_epoch else ErrorCode.UNKNOWN_LEADER_EPOCH


def _epoch_of(found, partition) -> int:
    return found.leader_epoch if found.leader_epoch is not None else partition.leader_epoch


def legacy_offsets(partition, timestamp: int, max_num: int, from_consumer: bool) -> list[int]:
    """ListOffsets v0: up to max_num segment start offsets (and the log end)
    whose segment file was last modified at or before timestamp, newest first
    (Kafka's legacyFetchOffsetsBefore)."""
    log_start = partition.log_start_offset
    segments = partition.log.segments
    points = [(max(seg.base_offset, log_start), int(os.stat(seg.log_path).st_mtime * 1000)) for seg in segments]
    if segments and segments[-1].size > 0:
        points.append((partition.log_end_offset, int(time.time() * 1000)))
    if timestamp == LATEST:
        start = len(points) - 1
    elif timestamp == EARLIEST:
        start = 0
    else:
        start = len(points) - 1
        while start >= 0 and points[start][1] > timestamp:
            start -= 1
    offsets = sorted((points[i][0] for i in range(start, start - min(max_num, start + 1), -1)), reverse=True)
    hw = partition.high_watermark
    if from_consumer and any(o > hw for o in offsets):
        offsets = [hw] + [o for o in offsets if o <= hw]
    return offsets


@handles(ApiKey.LIST_OFFSETS, 0, 11)   # v10: TimeoutMs for remote lookups; v11: -6
async def list_offsets(ctx, req):
    broker = ctx.broker
    if ctx.api_version == 0:
        return _list_offsets_v0(broker, req)
    read_committed = ctx.api_version >= 2 and req.isolation_level == 1
    seen, duplicates = set(), set()
    for t in req.topics:
        for p in t.partitions:
            key = (t.name, p.partition_index)
            (duplicates if key in seen else seen).add(key)
    topics, remote_lookups = [], []
    for t in req.topics:
        parts = []
        topics.append(_LTopic(name=t.name, partitions=parts))
        for p in t.partitions:
            out = _LPart(partition_index=p.partition_index, error_code=0, timestamp=-1, offset=-1,
                         leader_epoch=-1)
            parts.append(out)
            if (t.name, p.partition_index) in duplicates:
                out.error_code = ErrorCode.INVALID_REQUEST  # Kafka refuses a partition asked twice
                continue
            partition = broker.partitions.get(t.name, p.partition_index)
            if partition is None:
                out.error_code = broker.partitions.missing_error(t.name, p.partition_index)
                continue
            err = _epoch_error(partition, p.current_leader_epoch)
            if err:
                out.error_code = err
                continue
            ts = p.timestamp
            if ts == LATEST:
                out.offset = partition.last_stable_offset if read_committed else partition.high_watermark
                out.leader_epoch = partition.leader_epoch
            elif ts == EARLIEST:
                out.offset = partition.log_start_offset
                out.leader_epoch = partition.leader_epoch
            elif ts == EARLIEST_LOCAL or (ts == LATEST_TIERED and ctx.api_version >= 9) or (
                    ts == EARLIEST_PENDING_UPLOAD and ctx.api_version >= 11):
                # the tiers' offsets (broker/tiered/offsets.py)
                out.offset, out.leader_epoch = tiered_offsets.special_offset(broker, partition, ts)
            elif ts == MAX_TIMESTAMP:
                found = partition.max_timestamp_offset()
                if found is not None:
                    out.offset, out.timestamp = found.offset, found.timestamp
                    out.leader_epoch = _epoch_of(found, partition)
            elif ts < 0:
                out.offset = -1
            elif tiered_offsets.may_be_remote(broker, partition):
                remote_lookups.append((out, partition, ts))   # below, all at once, within a time limit
            else:
                _local_lookup(out, partition, ts, read_committed)
    if remote_lookups:
        # v10's TimeoutMs, else Kafka 4's remote.list.offsets.request.timeout.ms
        timeout = (req.timeout_ms if ctx.api_version >= 10 and req.timeout_ms > 0
                   else broker.tiered.list_offsets_timeout_ms)
        await tiered_offsets.lookup_all(broker, remote_lookups, timeout,
                                        lambda out, partition, ts: _local_lookup(out, partition, ts, read_committed))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


def _local_lookup(out, partition, ts: int, read_committed: bool) -> None:
    found = partition.offset_for_timestamp(ts)
    upper = partition.last_stable_offset if read_committed else partition.high_watermark
    if found is not None and found.offset < upper:
        out.offset, out.timestamp = found.offset, found.timestamp
        out.leader_epoch = _epoch_of(found, partition)


def _list_offsets_v0(broker, req) -> ListOffsetsResponse:
    topics = []
    for t in req.topics:
        parts = []
        topics.append(_LTopic(name=t.name, partitions=parts))
        for p in t.partitions:
            out = _LPart(partition_index=p.partition_index, error_code=0, old_style_offsets=[])
            parts.append(out)
            partition = broker.partitions.get(t.name, p.partition_index)
            if partition is None:
                out.error_code = broker.partitions.missing_error(t.name, p.partition_index)
                continue
            if p.max_num_offsets < 0:
                # Kafka fails with NegativeArraySizeException (UNKNOWN_SERVER_ERROR); refuse it plainly
                out.error_code = ErrorCode.INVALID_REQUEST
                continue
            out.old_style_offsets = legacy_offsets(partition, p.timestamp, p.max_num_offsets, req.replica_id < 0)
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


_ETopic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
_EPart = OffsetForLeaderEpochResponse.EpochEndOffset


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 4)
async def offset_for_leader_epoch(ctx, req):
    broker = ctx.broker
    topics = []
    for t in req.topics:
        parts = []
        topics.append(_ETopic(topic=t.topic, partitions=parts))
        for p in t.partitions:
            out = _EPart(error_code=0, partition=p.partition, leader_epoch=-1, end_offset=-1)
            parts.append(out)
            partition = broker.partitions.get(t.topic, p.partition)
            if partition is None:
                out.error_code = broker.partitions.missing_error(t.topic, p.partition)
                continue
            err = _epoch_error(partition, p.current_leader_epoch)
            if err:
                out.error_code = err
                continue
            out.leader_epoch, out.end_offset = partition.end_offset_for_epoch(p.leader_epoch)
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)


_DTopic = DeleteRecordsResponse.DeleteRecordsTopicResult
_DPart = DeleteRecordsResponse.DeleteRecordsPartitionResult


@handles(ApiKey.DELETE_RECORDS, 0, 2)
async def delete_records(ctx, req):
    """On the leader only; the answer waits until every live replica's log starts at the
    offset (Kafka's DelayedDeleteRecords, broker/replication/low_watermark.py)."""
    broker = ctx.broker
    topics = []
    waits = []   # (answer, partition, offset) still below the low watermark
    for t in req.topics:
        parts = []
        topics.append(_DTopic(name=t.name, partitions=parts))
        for p in t.partitions:
            out = _DPart(partition_index=p.partition_index, low_watermark=-1, error_code=0)
            parts.append(out)
            partition = broker.partitions.get(t.name, p.partition_index)
            if partition is None:
                # a partition of the cluster with no replica here: ReplicaManager's
                # getPartitionOrException sends the client to look for its leader
                known = broker.image.topics.get(t.name)
                out.error_code = (ErrorCode.NOT_LEADER_OR_FOLLOWER
                                  if known is not None and p.partition_index in known.partitions
                                  else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            if t.name in INTERNAL_TOPICS:
                # ReplicaManager: "Cannot delete records of internal topic"
                out.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
                continue
            if not getattr(partition, "is_leader", True):
                out.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER   # Partition.deleteRecordsOnLeader
                continue
            if "delete" not in str(partition.config.get("cleanup.policy", "delete")).split(","):
                # Partition.deleteRecordsOnLeader: "can not be deleted due to the configured policy"
                out.error_code = ErrorCode.POLICY_VIOLATION
                continue
            offset = p.offset
            if offset == -1:  # delete everything up to the high watermark
                offset = partition.high_watermark
            try:
                partition.delete_records_before(offset)
            except OffsetOutOfRange:
                out.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                continue
            replication = partition.replication
            if replication is None:
                out.low_watermark = partition.log_start_offset
                continue
            partition.notify()   # followers in a long poll learn the new log start now
            waits.append((out, partition, offset))
    if waits:
        deadline = trio.current_time() + max(0, req.timeout_ms) / 1000

        async def wait(out, partition, offset):
            out.error_code, out.low_watermark = await partition.replication.wait_low_watermark(
                partition, offset, deadline)
        async with trio.open_nursery() as nursery:
            for item in waits:
                nursery.start_soon(wait, *item)
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)

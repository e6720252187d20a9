"""DescribeTopicPartitions (KIP-966): topic metadata in pages, what the Java
Admin client's describeTopics and `kafka-topics.sh --describe` use.

As Kafka's DescribeTopicPartitionsRequestHandler and KRaftMetadataCache:
topics are answered in name order from the cursor on, at most
min(ResponsePartitionLimit, max.request.partition.size.limit) partitions per
response (at least 1); when a page ends inside a topic or before the next
topic, NextCursor names where the next request starts.
"""
from __future__ import annotations

from kproto._codec import ZERO_UUID
from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.describe_topic_partitions_response import (
    Cursor, DescribeTopicPartitionsResponse, DescribeTopicPartitionsResponsePartition,
    DescribeTopicPartitionsResponseTopic)

from broker.handlers import handles
from broker.handlers.metadata import TOPIC_OPERATIONS_ALL
from broker.replication.leader_hint import offline_replicas, partition_error
from broker.metadata.topic_names import INTERNAL_TOPICS, invalid_reason


def _error_response(req, code: int) -> DescribeTopicPartitionsResponse:
    # DescribeTopicPartitionsRequest.getErrorResponse: every asked topic carries the error
    return DescribeTopicPartitionsResponse(throttle_time_ms=0, next_cursor=None, topics=[
        DescribeTopicPartitionsResponseTopic(error_code=code, name=t.name, topic_id=ZERO_UUID,
                                             is_internal=False, partitions=[])
        for t in req.topics])


def _partitions(topic, start: int, limit: int, broker=None) -> tuple[list, int]:
    """The partitions [start, start+limit) of a topic and the next index (-1: none left)."""
    count = len(topic.partitions)
    upper = min(count, start + limit)
    out = []
    for index in range(start, upper):
        p = topic.partitions.get(index)
        if p is None:
            continue
        out.append(DescribeTopicPartitionsResponsePartition(
            error_code=partition_error(p), partition_index=index, leader_id=p.leader, leader_epoch=p.leader_epoch,
            replica_nodes=list(p.replicas), isr_nodes=list(p.isr),
            eligible_leader_replicas=[], last_known_elr=[],
            offline_replicas=offline_replicas(broker, p) if broker is not None else []))
    return out, (upper if upper < count else -1)


@handles(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0)
async def describe_topic_partitions(ctx, req):
    image = ctx.broker.image
    cursor = req.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not req.topics
    if fetch_all:
        names = {n for n in image.topics if n >= cursor_topic}
    else:
        names = {t.name for t in req.topics if t.name >= cursor_topic}
        if cursor is not None and cursor.topic_name not in names:
            # "The topic in cursor must be included in the topic list if provided."
            return _error_response(req, ErrorCode.INVALID_REQUEST)
    if cursor is not None and cursor.partition_index < 0:
        return _error_response(req, ErrorCode.INVALID_REQUEST)
    if "" in names:
        # Kafka's authorizer check rejects an empty resource name with an unexpected
        # exception: the whole request fails with UNKNOWN_SERVER_ERROR (as a Kafka 3.9 answered)
        return _error_response(req, ErrorCode.UNKNOWN_SERVER_ERROR)
    server_limit = ctx.broker.config.get_int("max.request.partition.size.limit") or 2000
    remaining = max(min(server_limit, req.response_partition_limit), 1)
    resp = DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=[], next_cursor=None)
    for name in sorted(names):
        if remaining <= 0:
            resp.next_cursor = Cursor(topic_name=name, partition_index=0)
            break
        topic = image.topics.get(name)
        if topic is None:
            if fetch_all:
                continue
            code = ErrorCode.INVALID_TOPIC_EXCEPTION if invalid_reason(name) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            resp.topics.append(DescribeTopicPartitionsResponseTopic(
                error_code=code, name=name, topic_id=ZERO_UUID, is_internal=name in INTERNAL_TOPICS,
                partitions=[], topic_authorized_operations=TOPIC_OPERATIONS_ALL))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        parts, next_index = _partitions(topic, start, remaining, ctx.broker)
        resp.topics.append(DescribeTopicPartitionsResponseTopic(
            error_code=0, name=name, topic_id=topic.topic_id, is_internal=topic.internal,
            partitions=parts, topic_authorized_operations=TOPIC_OPERATIONS_ALL))
        if next_index != -1:
            resp.next_cursor = Cursor(topic_name=name, partition_index=next_index)
            break
        remaining -= len(parts)
    return resp

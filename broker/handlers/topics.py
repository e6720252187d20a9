"""CreateTopics, DeleteTopics and CreatePartitions: the topic administration
Kafka's controller performs, with its validation order and messages."""
from __future__ import annotations

import logging

from kproto._codec import ZERO_UUID
from kproto.api import ApiKey
from kproto.errors import ErrorCode, KafkaError
from kproto.messages.create_partitions_response import CreatePartitionsResponse, CreatePartitionsTopicResult
from kproto.messages.create_topics_response import (
    CreatableTopicConfigs, CreatableTopicResult, CreateTopicsResponse)
from kproto.messages.delete_topics_response import DeletableTopicResult, DeleteTopicsResponse

from broker.config.describe import created_topic_configs
from broker.controller.controller import TopicSpec
from broker.handlers import handles
from broker.metadata.log import METADATA_TOPIC

log = logging.getLogger("kproto.handlers.topics")

DUPLICATE_TOPIC = "Duplicate topic name."


def _duplicates(names) -> tuple[list[str], set[str]]:
    """(names seen once, in request order; names given more than once)."""
    seen: dict[str, int] = {}
    for n in names:
        seen[n] = seen.get(n, 0) + 1
    return [n for n, c in seen.items() if c == 1], {n for n, c in seen.items() if c > 1}


# -- CreateTopics ------------------------------------------------------------------------------

def _create_error(name: str, code: int, message: str | None) -> CreatableTopicResult:
    return CreatableTopicResult(name=name, topic_id=ZERO_UUID, error_code=code, error_message=message,
                                num_partitions=-1, replication_factor=-1, configs=[])


def _create_success(broker, created, creation_configs) -> CreatableTopicResult:
    configs = [CreatableTopicConfigs(name=e.name, value=None if e.is_sensitive else e.value,
                                     read_only=e.read_only, config_source=int(e.source),
                                     is_sensitive=e.is_sensitive)
               for e in created_topic_configs(broker.config, creation_configs)]
    return CreatableTopicResult(name=created.name, topic_id=created.topic_id, error_code=0, error_message=None,
                                num_partitions=created.num_partitions,
                                replication_factor=created.replication_factor, configs=configs)


@handles(ApiKey.CREATE_TOPICS, 0, 7)
async def create_topics(ctx, req):
    broker = ctx.broker
    validate_only = bool(ctx.api_version >= 1 and req.validate_only)
    unique, duplicated = _duplicates(t.name for t in req.topics)
    unique_set = set(unique)
    results = []
    prohibited = []
    specs = []
    for t in req.topics:
        if t.name not in unique_set:
            continue
        if t.name == METADATA_TOPIC:
            prohibited.append(t.name)
            continue
        configs = {}
        for c in t.configs:
            configs[c.name] = c.value
        specs.append(TopicSpec(t.name, t.num_partitions, t.replication_factor, configs,
                               [(a.partition_index, list(a.broker_ids)) for a in t.assignments] or None))
    # one metadata batch for the request's topics (Kafka's controller: one result per request)
    try:
        outcomes = broker.controller.create_topics(specs, validate_only=validate_only)
    except KafkaError as exc:
        # the controller refused the whole request (too many records): Kafka's
        # CreateTopicsRequest.getErrorResponse, every topic asked with its error
        return CreateTopicsResponse(throttle_time_ms=0, topics=[
            _create_error(t.name, exc.code, exc.message) for t in req.topics])
    for spec, created in zip(specs, outcomes):
        if isinstance(created, KafkaError):
            results.append(_create_error(spec.name, created.code, created.message))
        else:
            results.append(_create_success(broker, created, spec.configs))
    # Kafka's controller front end answers these after the controller's own results
    for name in duplicated:
        results.append(_create_error(name, ErrorCode.INVALID_REQUEST, DUPLICATE_TOPIC))
    for name in prohibited:
        results.append(_create_error(name, ErrorCode.INVALID_REQUEST,
                                     f"Creation of internal topic {METADATA_TOPIC} is prohibited."))
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


# -- DeleteTopics ------------------------------------------------------------------------------

def _deleted(name, topic_id, code=0, message=None) -> DeletableTopicResult:
    return DeletableTopicResult(name=name, topic_id=topic_id, error_code=code, error_message=message)


@handles(ApiKey.DELETE_TOPICS, 0, 6)
async def delete_topics(ctx, req):
    broker = ctx.broker
    v = ctx.api_version
    if v >= 6:
        entries = [(t.name, t.topic_id) for t in req.topics]
    else:
        entries = [(name, ZERO_UUID) for name in req.topic_names]
    if not broker.config.get_bool("delete.topic.enable"):
        # the whole request fails: INVALID_REQUEST before v3, TOPIC_DELETION_DISABLED after
        code = ErrorCode.INVALID_REQUEST if v < 3 else ErrorCode.TOPIC_DELETION_DISABLED
        return DeleteTopicsResponse(throttle_time_ms=0, responses=[_deleted(n, i, code) for n, i in entries])

    # Sort the request out as Kafka's ControllerApis.deleteTopics does: names and ids, each
    # given at most once, and never both for one entry.
    results = []
    names: list[str] = []
    ids: list = []
    for name, topic_id in entries:
        if name is None:
            if topic_id == ZERO_UUID:
                results.append(_deleted(None, ZERO_UUID, ErrorCode.INVALID_REQUEST,
                                        "Neither topic name nor id were specified."))
            else:
                ids.append(topic_id)
        elif topic_id == ZERO_UUID:
            names.append(name)
        else:
            results.append(_deleted(name, topic_id, ErrorCode.INVALID_REQUEST,
                                    "You may not specify both topic name and topic id."))
    names, dup_names = _duplicates(names)
    ids, dup_ids = _duplicates(ids)
    for name in dup_names:
        results.append(_deleted(name, ZERO_UUID, ErrorCode.INVALID_REQUEST, DUPLICATE_TOPIC))
    for topic_id in dup_ids:
        results.append(_deleted(None, topic_id, ErrorCode.INVALID_REQUEST, "Duplicate topic id."))

    image = broker.image
    to_delete: dict = {}   # topic id -> name
    for topic_id in ids:
        t = image.topics_by_id.get(topic_id)
        if t is None:
            results.append(_deleted(None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID,
                                    "This server does not host this topic ID."))
        else:
            to_delete[topic_id] = t.name
    for name in names:
        t = image.topics.get(name)
        if t is None:
            results.append(_deleted(name, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                    "This server does not host this topic-partition."))
        elif t.topic_id in to_delete:
            to_delete.pop(t.topic_id)
            results.append(_deleted(name, t.topic_id, ErrorCode.INVALID_REQUEST,
                                    "The provided topic name maps to an ID that was already supplied."))
        else:
            to_delete[t.topic_id] = name
    if to_delete:
        broker.controller.delete_topics(list(to_delete))
        for topic_id, name in to_delete.items():
            results.append(_deleted(name, topic_id))
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


# -- CreatePartitions --------------------------------------------------------------------------

@handles(ApiKey.CREATE_PARTITIONS, 0, 3)
async def create_partitions(ctx, req):
    broker = ctx.broker
    unique, duplicated = _duplicates(t.name for t in req.topics)
    unique_set = set(unique)
    results = [CreatePartitionsTopicResult(name=n, error_code=ErrorCode.INVALID_REQUEST,
                                           error_message=DUPLICATE_TOPIC) for n in duplicated]
    changes = [(t.name, t.count, None if t.assignments is None else [list(a.broker_ids) for a in t.assignments])
               for t in req.topics if t.name in unique_set]
    # one metadata batch for the request's topics, as Kafka's controller
    for (name, _, _), error in zip(changes, broker.controller.create_partitions(changes, req.validate_only)):
        results.append(CreatePartitionsTopicResult(name=name, error_code=error.code if error else 0,
                                                   error_message=error.message if error else None))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)

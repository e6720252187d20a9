"""Metadata: brokers, cluster id, controller, topics and partitions."""
from __future__ import annotations

import logging

from kproto._codec import ZERO_UUID
from kproto.api import ApiKey
from kproto.errors import ErrorCode, KafkaError
from kproto.messages.metadata_response import MetadataResponse

from broker.handlers import handles
from broker.handlers.metadata_wire import ImageTopic, MetadataAnswer
from broker.metadata.internal_topics import internal_topic_spec
from broker.metadata.topic_names import INTERNAL_TOPICS, invalid_reason

log = logging.getLogger("kproto.metadata")

AUTHORIZED_OPERATIONS_OMITTED = -2147483648
# READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS:
# what Kafka reports for a topic with no authorizer configured
TOPIC_OPERATIONS_ALL = 3576
CLUSTER_OPERATIONS_ALL = 8112

_Topic = MetadataResponse.MetadataResponseTopic
_Broker = MetadataResponse.MetadataResponseBroker


def topic_entry(broker, topic, include_ops: bool) -> _Topic:
    # its partitions are encoded from the image's, once per change (metadata_wire.py)
    return ImageTopic(broker, topic, TOPIC_OPERATIONS_ALL if include_ops else AUTHORIZED_OPERATIONS_OMITTED)


def _invalid_request(req) -> MetadataResponse:
    # Kafka's MetadataRequest.getErrorResponse: every asked topic carries the error
    return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1, topics=[
        _Topic(error_code=ErrorCode.INVALID_REQUEST, name=rt.name or "", topic_id=rt.topic_id, is_internal=False,
               partitions=[], topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
        for rt in req.topics or []])


@handles(ApiKey.METADATA, 0, 13)   # v13: a top-level ErrorCode, which Kafka leaves NONE
async def metadata(ctx, req):
    broker = ctx.broker
    image = broker.image
    v = ctx.api_version
    if v in (10, 11) and req.topics and any(rt.name is None or rt.topic_id != ZERO_UUID for rt in req.topics):
        # "Topic IDs are not supported in requests for version 10/11"
        return _invalid_request(req)
    include_ops = bool(req.include_topic_authorized_operations)
    # v0: an empty list asks for every topic; v1+: null does
    all_topics = req.topics is None or (v == 0 and not req.topics)
    auto_create = broker.config.get_bool("auto.create.topics.enable") and (
        v < 4 or req.allow_auto_topic_creation)
    topics = []
    if all_topics:
        for t in image.topics.values():
            topics.append(topic_entry(broker, t, include_ops))
    else:
        to_create = []
        for rt in req.topics:
            # a topic id names the topic, whatever the name says (the Java consumer sends "" with
            # it to resolve the ids of a KIP-848 assignment; KafkaApis uses the ids when any is set)
            if rt.name is None or (v >= 12 and rt.topic_id != ZERO_UUID):
                t = image.topics_by_id.get(rt.topic_id)
                if t is None:
                    topics.append(_Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None,
                                         topic_id=rt.topic_id, partitions=[],
                                         topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
                else:
                    topics.append(topic_entry(broker, t, include_ops))
                continue
            t = image.topics.get(rt.name)
            if t is not None:
                topics.append(topic_entry(broker, t, include_ops))
                continue
            if invalid_reason(rt.name):
                code = ErrorCode.INVALID_TOPIC_EXCEPTION
            else:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if auto_create:
                    to_create.append(rt.name)
            topics.append(_Topic(error_code=code, name=rt.name, topic_id=ZERO_UUID, partitions=[],
                                 topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
        if to_create:
            # Kafka answers UNKNOWN_TOPIC_OR_PARTITION for the request that
            # triggers creation; the topic is there for the client's retry.
            # Internal topics get their own partition count and configs.
            for name in [n for n in to_create if n in INTERNAL_TOPICS]:
                partitions, configs = internal_topic_spec(broker.config, name)
                try:
                    broker.controller.ensure_internal_topic(name, partitions, configs)
                except KafkaError as exc:
                    log.warning("auto-creation of %s failed: %s", name, exc)
            await broker.controller.auto_create_topics([n for n in to_create if n not in INTERNAL_TOPICS])
    host, port = broker.advertised_address(ctx.conn.listener if ctx.conn else None)
    brokers = [_Broker(node_id=broker.node_id, host=host, port=port, rack=broker.config.get("broker.rack") or None)]
    registered = registered_brokers(broker, ctx.conn.listener if ctx.conn else None)
    if registered:   # a multi-node cluster: every registered broker
        brokers = [_Broker(node_id=i, host=h, port=p, rack=r) for i, h, p, r in registered]
    return MetadataAnswer(
        throttle_time_ms=0,
        brokers=brokers,
        cluster_id=broker.cluster_id,
        controller_id=controller_id(broker),
        topics=topics,
        cluster_authorized_operations=(CLUSTER_OPERATIONS_ALL if req.include_cluster_authorized_operations
                                       else AUTHORIZED_OPERATIONS_OMITTED),
    )


def registered_brokers(broker, listener):
    """[(id, host, port, rack)] of the registered, unfenced brokers on `listener` (Metadata and
    DescribeCluster), or None when the cluster is a single node (the node answers for itself)."""
    if getattr(broker, "quorum", None) is None:
        return None
    out = []
    for bid, r in sorted(broker.image.brokers.items()):
        if r.fenced:
            continue
        eps = [e for e in r.end_points if listener is None or e.name == listener] or list(r.end_points)
        if eps:
            out.append((bid, eps[0].host, eps[0].port, r.rack))
    return out


def controller_id(broker) -> int:
    """The controller id Kafka reports to clients. A KRaft broker reports a random alive broker,
    since clients cannot reach the controllers and any broker forwards; kproto reports the node
    that answers (it forwards to the active controller), so a client never waits on a dead one;
    before this node's registration is committed, a registered broker (one the answer lists)."""
    q = getattr(broker, "quorum", None)
    me = broker.image.brokers.get(broker.node_id) if q is not None else None
    if q is None or (me is not None and not me.fenced):
        return broker.node_id
    live = sorted(b for b, r in broker.image.brokers.items() if not r.fenced)
    return live[0] if live else broker.node_id

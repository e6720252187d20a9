"""AlterPartitionReassignments (API 45) and ListPartitionReassignments (API 46):
the controller's partition reassignment (broker/replication/reassignment.py).
In a multi-node cluster both are forwarded to the active controller, as Kafka's
brokers forward them; authorization (CLUSTER ALTER / DESCRIBE) is in
broker/security/authz.py."""
from __future__ import annotations

import logging

from kproto.api import ApiKey
from kproto.errors import ErrorCode, KafkaError
from kproto.messages.alter_partition_reassignments_response import (
    AlterPartitionReassignmentsResponse, ReassignablePartitionResponse, ReassignableTopicResponse)
from kproto.messages.list_partition_reassignments_response import (
    ListPartitionReassignmentsResponse, OngoingPartitionReassignment, OngoingTopicReassignment)

from broker.handlers import handles
from broker.replication import reassignment

log = logging.getLogger("kproto.reassignment")

# Kafka's brokers forward both to the controller (the active one answers from its own image):
# both are in broker/handlers/__init__.py's FORWARDED


def _unclean_default(broker) -> bool:
    try:
        return str(broker.config.get("unclean.leader.election.enable")).lower() == "true"
    except KeyError:
        return False


def _replication_factor_kept(image, topic: str, index: int, target) -> tuple[int, int] | None:
    """(current, target) replication factors when a reassignment would change it, else None."""
    t = image.topics.get(topic)
    p = t.partitions.get(index) if t is not None else None
    if p is None or target is None:
        return None
    current = len([r for r in p.replicas if r not in (p.adding_replicas or ())])
    return None if current == len(target) else (current, len(target))


@handles(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 1)   # v1: AllowReplicationFactorChange
async def alter_partition_reassignments(ctx, req):
    broker = ctx.broker
    brokers = broker.controller.brokers()
    unclean = _unclean_default(broker)
    records = []
    out = []
    for rt in req.topics:
        parts = []
        out.append(ReassignableTopicResponse(name=rt.name, partitions=parts))
        for rp in rt.partitions:
            code, message = ErrorCode.NONE, None
            changed = (None if ctx.api_version < 1 or req.allow_replication_factor_change
                       else _replication_factor_kept(broker.image, rt.name, rp.partition_index, rp.replicas))
            if changed is not None:
                parts.append(ReassignablePartitionResponse(
                    partition_index=rp.partition_index, error_code=ErrorCode.INVALID_REPLICATION_FACTOR,
                    error_message=(f"The replication factor is changed from {changed[0]} to {changed[1]} "
                                   "but allowReplicationFactorChange is false")))
                continue
            try:
                r = reassignment.alter(broker.image, brokers, rt.name, rp.partition_index,
                                       None if rp.replicas is None else list(rp.replicas), unclean)
                if r is not None:
                    records.append(r)
            except KafkaError as exc:
                code, message = exc.code, exc.message
            parts.append(ReassignablePartitionResponse(partition_index=rp.partition_index, error_code=code,
                                                       error_message=message))
    if records:
        try:
            broker.controller.log.append(records)
        except KafkaError as exc:
            for t in out:
                for p in t.partitions:
                    if p.error_code == 0:
                        p.error_code, p.error_message = exc.code, exc.message
        else:
            log.info("reassignments: %s", ", ".join(
                f"{r.partition_id}:replicas={r.replicas},adding={r.adding_replicas},"
                f"removing={r.removing_replicas}" for r in records))
    return AlterPartitionReassignmentsResponse(
        throttle_time_ms=0, error_code=0, error_message=None, responses=out,
        allow_replication_factor_change=ctx.api_version < 1 or req.allow_replication_factor_change)


@handles(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0)
async def list_partition_reassignments(ctx, req):
    wanted = None if req.topics is None else [(t.name, list(t.partition_indexes)) for t in req.topics]
    topics: dict[str, list] = {}
    for name, p in reassignment.ongoing(ctx.broker.image, wanted):
        topics.setdefault(name, []).append(OngoingPartitionReassignment(
            partition_index=p.partition, replicas=list(p.replicas), adding_replicas=list(p.adding_replicas),
            removing_replicas=list(p.removing_replicas)))
    return ListPartitionReassignmentsResponse(
        throttle_time_ms=0, error_code=0, error_message=None,
        topics=[OngoingTopicReassignment(name=n, partitions=ps) for n, ps in topics.items()])

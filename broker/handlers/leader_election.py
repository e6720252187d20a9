"""ElectLeaders (API 43): preferred and unclean leader elections asked for by an operator
(`kafka-leader-election.sh`, Admin.electLeaders). Decided by the active controller
(broker/replication/preferred.py) and answered once the PartitionChangeRecords are committed; a
request that reaches another node is forwarded to it, as Kafka's brokers always forward it.
Authorized as Kafka: ALTER on the CLUSTER resource; a refusal carries
CLUSTER_AUTHORIZATION_FAILED at the top level and on every partition asked for
(ElectLeadersRequest.getErrorResponse; the rule is in broker/security/authz.py)."""
from __future__ import annotations

import logging

from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.elect_leaders_response import ElectLeadersResponse, PartitionResult, ReplicaElectionResult

from broker.handlers import handles
from broker.handlers import FORWARDED
from broker.replication import preferred

log = logging.getLogger("kproto.replication")

# metadata-changing: handled by the active controller
FORWARDED.add(ApiKey.ELECT_LEADERS)


def _asked(req):
    if req.topic_partitions is None:
        return None
    return [(tp.topic, list(tp.partitions)) for tp in req.topic_partitions]


def error_response(req, code: int, message: str | None = None) -> ElectLeadersResponse:
    return ElectLeadersResponse(throttle_time_ms=0, error_code=code, replica_election_results=[
        ReplicaElectionResult(topic=topic, partition_result=[
            PartitionResult(partition_id=i, error_code=code, error_message=message) for i in indexes])
        for topic, indexes in (_asked(req) or [])])


@handles(ApiKey.ELECT_LEADERS, 0, 2)
async def elect_leaders(ctx, req):
    broker = ctx.broker
    election_type = req.election_type if ctx.api_version >= 1 else preferred.PREFERRED
    if election_type not in (preferred.PREFERRED, preferred.UNCLEAN):
        return error_response(req, ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}")
    results, records = preferred.elect(broker.image, broker.controller.brokers(), election_type, _asked(req))
    if records:
        broker.controller.log.append(records)   # (on a quorum: proposed, the answer waits for the commit)
        log.info("ElectLeaders (%s): %s", "unclean" if election_type == preferred.UNCLEAN else "preferred",
                 ", ".join(f"{r.partition_id}:leader={r.leader}" for r in records))
    return ElectLeadersResponse(throttle_time_ms=0, error_code=0, replica_election_results=[
        ReplicaElectionResult(topic=topic, partition_result=[
            PartitionResult(partition_id=i, error_code=code, error_message=message) for i, code, message in parts])
        for topic, parts in results])

# (its ACL rule is broker/security/authz.py's elect_leaders: a broker without an authorizer loads none)

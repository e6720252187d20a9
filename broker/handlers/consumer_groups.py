"""KIP-848 consumer group APIs: ConsumerGroupHeartbeat and
ConsumerGroupDescribe. A thin adapter; the logic is in
broker/groups/consumer_state.py."""
from __future__ import annotations

from kproto.api import ApiKey
from kproto.errors import ErrorCode as E
from kproto.messages.consumer_group_describe_response import ConsumerGroupDescribeResponse
from kproto.messages.consumer_group_heartbeat_response import ConsumerGroupHeartbeatResponse

from broker.handlers import handles
from broker.handlers.groups import _NOT_REQUESTED, _client_host

# What Kafka 3.9 answers for a consumer group: READ, DELETE, DESCRIBE (bits 3, 6, 8)
_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)

_HbAssignment = ConsumerGroupHeartbeatResponse.Assignment
_HbTopicPartitions = ConsumerGroupHeartbeatResponse.TopicPartitions


def _unsupported() -> str:
    return ("The new group coordinator is not enabled: group.coordinator.rebalance.protocols does not "
            "include consumer.")


@handles(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)
async def consumer_group_heartbeat(ctx, req):
    groups = ctx.broker.groups
    if not groups.config.consumer_protocol_enabled:
        return ConsumerGroupHeartbeatResponse(throttle_time_ms=0, error_code=E.UNSUPPORTED_VERSION,
                                              error_message=_unsupported())
    owned = None
    if req.topic_partitions is not None:
        owned = [(tp.topic_id, p) for tp in req.topic_partitions for p in tp.partitions]
    res = await groups.consumer_group_heartbeat(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
        instance_id=req.instance_id, rack_id=req.rack_id, rebalance_timeout_ms=req.rebalance_timeout_ms,
        subscribed_topic_names=None if req.subscribed_topic_names is None else list(req.subscribed_topic_names),
        subscribed_topic_regex=req.subscribed_topic_regex if ctx.api_version >= 1 else None,
        server_assignor=req.server_assignor, owned=owned,
        client_id=ctx.client_id or "", client_host=_client_host(ctx))
    assignment = None
    if res.assignment is not None:
        assignment = _HbAssignment(topic_partitions=[
            _HbTopicPartitions(topic_id=t, partitions=ps) for t, ps in sorted(res.assignment.items(), key=str)])
    if res.error != E.NONE:
        return ConsumerGroupHeartbeatResponse(throttle_time_ms=0, error_code=res.error,
                                              error_message=res.message, member_id=None, member_epoch=0,
                                              heartbeat_interval_ms=0)
    return ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=E.NONE, error_message=None, member_id=res.member_id,
        member_epoch=res.member_epoch, heartbeat_interval_ms=res.heartbeat_interval_ms, assignment=assignment)


_Described = ConsumerGroupDescribeResponse.DescribedGroup
_Member = ConsumerGroupDescribeResponse.Member
_Assignment = ConsumerGroupDescribeResponse.Assignment
_TopicPartitions = ConsumerGroupDescribeResponse.TopicPartitions


def _assignment(ctx, assignment: dict):
    by_id = ctx.broker.image.topics_by_id
    out = []
    for tid, ps in assignment.items():
        topic = by_id.get(tid)
        out.append(_TopicPartitions(topic_id=tid, topic_name=topic.name if topic is not None else "",
                                    partitions=sorted(ps)))
    out.sort(key=lambda t: t.topic_name)
    return _Assignment(topic_partitions=out)


MEMBER_TYPE_CLASSIC, MEMBER_TYPE_CONSUMER = 0, 1   # ConsumerGroupDescribe v1 (KIP-1099)


@handles(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1)
async def consumer_group_describe(ctx, req):
    out = []
    for group_id in req.group_ids:
        d = ctx.broker.groups.consumer_group_describe(group_id)
        out.append(_Described(
            error_code=d.error, error_message=d.message, group_id=group_id, group_state=d.state,
            group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch, assignor_name=d.assignor,
            members=[_Member(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                             member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                             subscribed_topic_names=m.subscribed_topic_names,
                             subscribed_topic_regex=m.subscribed_topic_regex,
                             assignment=_assignment(ctx, m.assignment),
                             target_assignment=_assignment(ctx, m.target),
                             member_type=MEMBER_TYPE_CLASSIC if m.classic else MEMBER_TYPE_CONSUMER)
                     for m in d.members],
            authorized_operations=(_GROUP_OPERATIONS if req.include_authorized_operations and d.error == E.NONE
                                   else _NOT_REQUESTED)))
    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=out)

"""AlterShareGroupOffsets (API 91) and DeleteShareGroupOffsets (API 92), Kafka 4.3's v0: an
administrator resets or deletes an empty share group's share-partition start offsets. The checks
and answers of Kafka 4.3's GroupCoordinatorService / GroupMetadataManager; the state changes are in
broker/share/offsets_admin.py."""
from __future__ import annotations

from kproto.api import ApiKey
from kproto._codec import ZERO_UUID
from kproto.errors import ErrorCode as E
from kproto.messages.alter_share_group_offsets_response import AlterShareGroupOffsetsResponse
from kproto.messages.delete_share_group_offsets_response import DeleteShareGroupOffsetsResponse

from broker.handlers import handles
from broker.handlers.share_groups import UNSUPPORTED, _not_share_group, share_disabled, share_group
from broker.share import offsets_admin

UNKNOWN_PARTITION = "This server does not host this topic-partition."
NON_EMPTY = "The group is not empty."
NOT_AVAILABLE = "The coordinator is not available."
NO_OFFSETS = "There is no offset information to delete."
# Kafka's Errors messages of the top-level answers
MESSAGES = {E.NOT_COORDINATOR: "This is not the correct coordinator.",
            E.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
            E.COORDINATOR_NOT_AVAILABLE: NOT_AVAILABLE,
            E.INVALID_GROUP_ID: "The configured groupId is invalid."}

_ATopic = AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponseTopic
_APart = AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponsePartition
_DTopic = DeleteShareGroupOffsetsResponse.DeleteShareGroupOffsetsResponseTopic


def _group_error(ctx, group_id: str, must_exist: bool):
    """(error, message) of the group checks, in Kafka's order: valid id, coordinator, share type,
    exists (DeleteShareGroupOffsets; AlterShareGroupOffsets creates it), empty; then whether the state
    can be written. Share groups off (share.version 0): UNSUPPORTED_VERSION first."""
    if share_disabled(ctx):
        return E.UNSUPPORTED_VERSION, UNSUPPORTED
    err, message = _not_share_group(ctx, group_id)
    if err is not None:
        return err, message or MESSAGES.get(err)
    group = share_group(ctx, group_id)
    if group is None and must_exist:
        return E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
    if group is not None and group.members:
        return E.NON_EMPTY_GROUP, NON_EMPTY
    return None, None


@handles(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0)
async def alter_share_group_offsets(ctx, req):
    err, message = _group_error(ctx, req.group_id, must_exist=False)
    if err is not None:
        return AlterShareGroupOffsetsResponse(throttle_time_ms=0, error_code=err, error_message=message, responses=[])
    svc = ctx.broker.share
    svc.groups.ensure(req.group_id)
    out = []
    for topic in req.topics:
        t = ctx.broker.image.topics.get(topic.topic_name)
        parts = []
        for p in topic.partitions:
            code, text = E.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_PARTITION
            if t is not None and 0 <= p.partition_index < len(t.partitions):
                code = await offsets_admin.reset_start(svc, req.group_id, t.topic_id, p.partition_index,
                                                       p.start_offset)
                if code == E.NONE:      # recorded initialised, as Kafka's coordinator does
                    code = await svc.initialized.record_initialized(
                        req.group_id, {t.topic_id: (t.name, {p.partition_index})})
                text = None if code == E.NONE else MESSAGES.get(code, NOT_AVAILABLE)
            parts.append(_APart(partition_index=p.partition_index, error_code=code, error_message=text))
        out.append(_ATopic(topic_name=topic.topic_name, topic_id=t.topic_id if t is not None else ZERO_UUID,
                           partitions=parts))
    return AlterShareGroupOffsetsResponse(throttle_time_ms=0, error_code=E.NONE, error_message=None, responses=out)


@handles(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0)
async def delete_share_group_offsets(ctx, req):
    err, message = _group_error(ctx, req.group_id, must_exist=True)
    if err is not None:
        return DeleteShareGroupOffsetsResponse(throttle_time_ms=0, error_code=err, error_message=message,
                                               responses=[])
    svc = ctx.broker.share
    out = []
    for topic in req.topics:
        t = ctx.broker.image.topics.get(topic.topic_name)
        indexes = (await offsets_admin.partitions_with_state(svc, req.group_id, t.topic_id, len(t.partitions))
                   if t is not None else [])
        if t is not None and indexes is not None:   # and those recorded initialised (no fetch yet)
            recorded = svc.initialized.metadata(req.group_id).known().get(t.topic_id, set())
            indexes = sorted(set(indexes) | recorded)
        if t is None:
            code, text, tid = E.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_PARTITION, ZERO_UUID
        elif indexes is None:
            code, text, tid = E.COORDINATOR_NOT_AVAILABLE, NOT_AVAILABLE, t.topic_id
        elif not indexes:
            code, text, tid = E.UNKNOWN_TOPIC_OR_PARTITION, NO_OFFSETS, ZERO_UUID
        else:
            # recorded deleting while the share coordinators delete it (Kafka's DeletingTopics)
            code = await svc.initialized.begin_delete(req.group_id, {t.topic_id})
            if code == E.NONE:
                code = await offsets_admin.delete_topic(svc, req.group_id, t.topic_id, indexes)
            if code == E.NONE:
                code = await svc.initialized.end_delete(req.group_id, {t.topic_id})
            text, tid = (None if code == E.NONE else MESSAGES.get(code, NOT_AVAILABLE)), t.topic_id
        out.append(_DTopic(topic_name=topic.topic_name, topic_id=tid, error_code=code, error_message=text))
    return DeleteShareGroupOffsetsResponse(throttle_time_ms=0, error_code=E.NONE, error_message=None, responses=out)

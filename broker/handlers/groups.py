"""Group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups,
OffsetDelete. A thin adapter: request fields in, per-version response
shapes out (as Kafka's KafkaApis and request/response classes do); the
group logic is in broker/groups."""
from __future__ import annotations

import time

from kproto.api import ApiKey
from kproto.errors import ErrorCode as E
from kproto.messages.delete_groups_response import DeleteGroupsResponse
from kproto.messages.describe_groups_response import DescribeGroupsResponse
from kproto.messages.find_coordinator_response import FindCoordinatorResponse
from kproto.messages.heartbeat_response import HeartbeatResponse
from kproto.messages.join_group_response import JoinGroupResponse
from kproto.messages.leave_group_response import LeaveGroupResponse
from kproto.messages.list_groups_response import ListGroupsResponse
from kproto.messages.offset_commit_response import OffsetCommitResponse
from kproto.messages.offset_delete_response import OffsetDeleteResponse
from kproto.messages.offset_fetch_response import OffsetFetchResponse
from kproto.messages.sync_group_response import SyncGroupResponse

from broker.handlers import handles, topic_ids
from broker.metadata.internal_topics import OFFSETS_TOPIC, SHARE_STATE_TOPIC, TRANSACTION_STATE_TOPIC
from broker.coordination.topic import ensure_internal_topic
from broker.replication.leader_hint import coordinator_node

# Errors.message() of the errors FindCoordinator reports with a message
_MESSAGES = {
    E.NONE: "NONE",
    E.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    E.NOT_COORDINATOR: "This is not the correct coordinator.",
    E.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    E.INVALID_REQUEST: "This most likely occurs because of a request being malformed by the client library "
                       "or the message was sent to an incompatible broker. See the broker logs for more details.",
}

GROUP_KEY, TRANSACTION_KEY, SHARE_KEY = 0, 1, 2
# AclEntry.supportedOperations(GROUP) as a bit field: READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
_NOT_REQUESTED = -2147483648


def _groups(ctx):
    return ctx.broker.groups


def _client_host(ctx) -> str:
    peer = ctx.conn.peer if ctx.conn is not None else None
    return f"/{peer[0]}" if peer else ""


def _now_ms() -> int:
    return int(time.time() * 1000)


def _partition_exists(ctx, topic: str, partition: int) -> bool:
    t = ctx.broker.image.topics.get(topic)
    return t is not None and partition in t.partitions


# ======================================================================== FindCoordinator

_Coordinator = FindCoordinatorResponse.Coordinator


def share_coordinator_index(broker, key: str):
    """The __share_group_state partition of a share coordinator key (creating the topic on first
    use: None meanwhile)."""
    from broker.share import state_store   # (share groups' modules: imported at their first use)
    group_id, topic_id, partition = state_store.parse_coordinator_key(key)
    return broker.share.coordinator.index_for(group_id, topic_id, partition)


def _lookup(ctx, key_type: int, key: str) -> tuple[int, int, str, int]:
    """KafkaApis.getCoordinator: (error, node id, host, port)."""
    if key_type == GROUP_KEY:
        error = _groups(ctx).ensure_offsets_topic()
        if error != E.NONE:
            return error, -1, "", -1
    elif key_type == TRANSACTION_KEY:
        transactions = getattr(ctx.broker, "transactions", None)
        error = transactions.ensure_state_topic() if transactions is not None else E.COORDINATOR_NOT_AVAILABLE
        if error != E.NONE:
            return error, -1, "", -1
    else:
        # the share coordinator of "group:topicId:partition" (Kafka 4.x, KIP-932): the leader of the
        # key's __share_group_state partition
        from broker.share import state_store
        if ctx.api_version < 6 or state_store.parse_coordinator_key(key) is None:
            return E.INVALID_REQUEST, -1, "", -1
        share_index = share_coordinator_index(ctx.broker, key)
        if share_index is None:
            ensure_internal_topic(ctx.broker, SHARE_STATE_TOPIC, False, lambda: None)
            return E.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    listener = ctx.conn.listener if ctx.conn is not None else None
    # a multi-node cluster: the leader of the key's partition is the coordinator (broker/replication)
    if key_type == GROUP_KEY:
        found = coordinator_node(ctx.broker, OFFSETS_TOPIC, _groups(ctx).partition_for(key) or 0, listener)
    elif key_type == SHARE_KEY:
        found = coordinator_node(ctx.broker, SHARE_STATE_TOPIC, share_index, listener)
    else:
        found = coordinator_node(ctx.broker, TRANSACTION_STATE_TOPIC,
                                 ctx.broker.transactions.state.partition_for(key), listener)
    if found is None:
        return E.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    if found[1] is not None:
        return E.NONE, found[0], found[1], found[2]
    host, port = ctx.broker.advertised_address(listener)
    return E.NONE, ctx.broker.node_id, host, port


@handles(ApiKey.FIND_COORDINATOR, 0, 6)
async def find_coordinator(ctx, req):
    v = ctx.api_version
    key_type = req.key_type if v >= 1 else GROUP_KEY
    keys = list(req.coordinator_keys or []) if v >= 4 else [req.key]
    if key_type not in (GROUP_KEY, TRANSACTION_KEY, SHARE_KEY):
        # CoordinatorType.forId throws: the error response names the error's default message
        error, found = E.INVALID_REQUEST, [(E.INVALID_REQUEST, -1, "", -1)] * len(keys)
        message = _MESSAGES[error]
    else:
        found = [_lookup(ctx, key_type, key) for key in keys]
        message = None
    if v >= 4:
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
            _Coordinator(key=key, node_id=node, host=host, port=port, error_code=error,
                         error_message=message or "")
            for key, (error, node, host, port) in zip(keys, found)])
    error, node, host, port = found[0]
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=error, error_message=_MESSAGES.get(error, ""),
                                   node_id=node, host=host, port=port)


# ======================================================================== membership

_JoinMember = JoinGroupResponse.JoinGroupResponseMember


@handles(ApiKey.JOIN_GROUP, 0, 9)
async def join_group(ctx, req):
    v = ctx.api_version
    instance_id = req.group_instance_id if v >= 5 else None
    res = await _groups(ctx).join_group(
        group_id=req.group_id, member_id=req.member_id or "", instance_id=instance_id,
        protocol_type=req.protocol_type, protocols=[(p.name, p.metadata) for p in req.protocols],
        session_timeout_ms=req.session_timeout_ms,
        # version 0 has no rebalance timeout: the session timeout stands in
        rebalance_timeout_ms=req.session_timeout_ms if v == 0 else req.rebalance_timeout_ms,
        client_id=ctx.client_id or "", client_host=_client_host(ctx),
        require_known_member_id=v >= 4 and instance_id is None,
        support_skip_assignment=v >= 9, reason=req.reason if v >= 8 else None)
    protocol_name = res.protocol_name
    if v < 7 and protocol_name is None:
        protocol_name = ""
    elif v >= 7 and protocol_name == "":
        protocol_name = None
    return JoinGroupResponse(
        throttle_time_ms=0, error_code=res.error, generation_id=res.generation_id,
        protocol_type=res.protocol_type, protocol_name=protocol_name, leader=res.leader or "",
        skip_assignment=res.skip_assignment, member_id=res.member_id,
        members=[_JoinMember(member_id=m, group_instance_id=i, metadata=d) for m, i, d in res.members])


@handles(ApiKey.SYNC_GROUP, 0, 5)
async def sync_group(ctx, req):
    v = ctx.api_version
    if v >= 5 and (req.protocol_type is None or req.protocol_name is None):
        return SyncGroupResponse(throttle_time_ms=0, error_code=E.INCONSISTENT_GROUP_PROTOCOL, assignment=b"")
    res = await _groups(ctx).sync_group(
        group_id=req.group_id, generation_id=req.generation_id, member_id=req.member_id,
        instance_id=req.group_instance_id if v >= 3 else None,
        protocol_type=req.protocol_type if v >= 5 else None, protocol_name=req.protocol_name if v >= 5 else None,
        assignments={a.member_id: a.assignment for a in req.assignments})
    return SyncGroupResponse(throttle_time_ms=0, error_code=res.error, protocol_type=res.protocol_type,
                             protocol_name=res.protocol_name, assignment=res.assignment or b"")


@handles(ApiKey.HEARTBEAT, 0, 4)
async def heartbeat(ctx, req):
    error = await _groups(ctx).heartbeat(
        group_id=req.group_id, member_id=req.member_id, generation_id=req.generation_id,
        instance_id=req.group_instance_id if ctx.api_version >= 3 else None)
    return HeartbeatResponse(throttle_time_ms=0, error_code=error)


_LeaveMember = LeaveGroupResponse.MemberResponse


@handles(ApiKey.LEAVE_GROUP, 0, 5)
async def leave_group(ctx, req):
    v = ctx.api_version
    if v >= 3:
        members = [(m.member_id, m.group_instance_id, m.reason if v >= 5 else None) for m in req.members]
    else:
        members = [(req.member_id, None, None)]
    res = await _groups(ctx).leave_group(group_id=req.group_id, members=members)
    if v >= 3:
        return LeaveGroupResponse(throttle_time_ms=0, error_code=res.error, members=[
            _LeaveMember(member_id=m, group_instance_id=i, error_code=e) for m, i, e in res.members])
    # one member before v3: its error is the answer
    error = res.error if res.error != E.NONE or not res.members else res.members[0][2]
    return LeaveGroupResponse(throttle_time_ms=0, error_code=error)


# ======================================================================== offsets

_CommitTopic = OffsetCommitResponse.OffsetCommitResponseTopic
_CommitPartition = OffsetCommitResponse.OffsetCommitResponsePartition


@handles(ApiKey.OFFSET_COMMIT, 0, 10)   # v10 names topics by id (broker/handlers/topic_ids.py)
async def offset_commit(ctx, req):
    v = ctx.api_version
    # (name, id) -> {partition: error}; the id tells apart topics whose id did not resolve
    errors: dict[tuple, dict[int, int]] = {}
    valid = []
    for t in req.topics:
        out = errors.setdefault((t.name, t.topic_id), {})
        for p in t.partitions:
            if topic_ids.unknown(t):
                out[p.partition_index] = E.UNKNOWN_TOPIC_ID
            elif not _partition_exists(ctx, t.name, p.partition_index):
                out[p.partition_index] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif v == 0:
                # version 0 stored offsets in ZooKeeper: a KRaft broker refuses it
                out[p.partition_index] = E.UNSUPPORTED_VERSION
            else:
                valid.append((t.name, p.partition_index, p.committed_offset,
                              p.committed_leader_epoch if v >= 6 else -1, p.committed_metadata,
                              p.commit_timestamp if v == 1 else -1))
    if valid:
        keys = {name: (name, tid) for name, tid in errors}
        retention = req.retention_time_ms if 2 <= v <= 4 else -1
        res = await _groups(ctx).commit_offsets(
            group_id=req.group_id, member_id=req.member_id, generation_id=req.generation_id_or_member_epoch,
            offsets=valid, instance_id=req.group_instance_id if v >= 7 else None,
            expire_timestamp=None if retention == -1 else _now_ms() + retention, api_version=v)
        for (topic, partition), error in sorted(res.errors.items(), key=lambda kv: kv[0][1]):
            errors[keys[topic]][partition] = error
    return OffsetCommitResponse(throttle_time_ms=0, topics=[
        _CommitTopic(name=name, topic_id=tid, partitions=[_CommitPartition(partition_index=p, error_code=e)
                                                          for p, e in parts.items()])
        for (name, tid), parts in errors.items() if parts])


_FetchGroup = OffsetFetchResponse.OffsetFetchResponseGroup
_FetchTopics = OffsetFetchResponse.OffsetFetchResponseTopics
_FetchPartitions = OffsetFetchResponse.OffsetFetchResponsePartitions
_FetchTopic = OffsetFetchResponse.OffsetFetchResponseTopic
_FetchPartition = OffsetFetchResponse.OffsetFetchResponsePartition


def _fetch_group(ctx, group_id: str, topics, require_stable: bool) -> tuple[int, dict]:
    """(group error, {topic: [(partition, FetchedOffset)]}) in request order."""
    partitions = None
    if topics is not None:
        partitions = [(t.name, p) for t in topics if not topic_ids.unknown(t) for p in t.partition_indexes]
    error, found = _groups(ctx).fetch_offsets(group_id, partitions, require_stable)
    by_topic: dict[str, list] = {}
    for topic, partition, fetched in found:
        by_topic.setdefault(topic, []).append((partition, fetched))
    return error, by_topic


@handles(ApiKey.OFFSET_FETCH, 0, 10)   # v10 names topics by id (broker/handlers/topic_ids.py)
async def offset_fetch(ctx, req):
    v = ctx.api_version
    if v >= 8:
        groups = []
        for g in req.groups:
            error, by_topic = _fetch_group(ctx, g.group_id, g.topics, req.require_stable)
            topics = [
                _FetchTopics(name=name, partitions=[
                    _FetchPartitions(partition_index=p, committed_offset=f.offset,
                                     committed_leader_epoch=f.leader_epoch, metadata=f.metadata,
                                     error_code=f.error) for p, f in parts])
                for name, parts in by_topic.items()
                # by id, a topic no longer in the metadata cannot be named
                if v < 10 or g.topics is not None or name in ctx.broker.image.topics]
            if error == E.NONE:
                topics += [_FetchTopics(name="", topic_id=t.topic_id, partitions=[
                    _FetchPartitions(partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                                     metadata="", error_code=E.UNKNOWN_TOPIC_ID) for p in t.partition_indexes])
                    for t in g.topics or [] if topic_ids.unknown(t)]
            groups.append(_FetchGroup(group_id=g.group_id, error_code=error, topics=topics))
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    topics = req.topics if v >= 2 else (req.topics or [])
    if v == 0:
        # version 0 read offsets from ZooKeeper: a KRaft broker refuses it
        error, by_topic = E.UNSUPPORTED_VERSION, {t.name: [(p, None) for p in t.partition_indexes]
                                                  for t in topics}
    else:
        error, by_topic = _fetch_group(ctx, req.group_id, topics, v >= 7 and req.require_stable)
    out = []
    for name, parts in by_topic.items():
        rows = []
        for p, f in parts:
            if f is None or (v < 2 and error != E.NONE):
                # no top-level error before v2: the group's error goes on each partition
                rows.append(_FetchPartition(partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                                            metadata="", error_code=error))
            else:
                rows.append(_FetchPartition(partition_index=p, committed_offset=f.offset,
                                            committed_leader_epoch=f.leader_epoch, metadata=f.metadata,
                                            error_code=f.error))
        out.append(_FetchTopic(name=name, partitions=rows))
    if v < 2 and error != E.NONE and not out and topics:
        out = [_FetchTopic(name=t.name, partitions=[
            _FetchPartition(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                            error_code=error) for p in t.partition_indexes]) for t in topics]
    return OffsetFetchResponse(throttle_time_ms=0, topics=out, error_code=error)


# ======================================================================== administration

_Described = DescribeGroupsResponse.DescribedGroup
_DescribedMember = DescribeGroupsResponse.DescribedGroupMember


@handles(ApiKey.DESCRIBE_GROUPS, 0, 6)
async def describe_groups(ctx, req):
    v = ctx.api_version
    include_ops = v >= 3 and req.include_authorized_operations
    out = []
    for group_id in req.groups:
        error, summary = _groups(ctx).describe_group(group_id)
        message = None
        if v >= 6 and error == E.NONE and summary.state == "Dead":
            # KIP-1043: from v6 a group that is not there (or not a classic group) is an error
            error = E.GROUP_ID_NOT_FOUND
            other = _groups(ctx).state.groups.get(group_id)
            message = (f"Group {group_id} not found." if other is None
                       else f"Group {group_id} is not a classic group.")
        out.append(_Described(
            error_message=message,
            error_code=error, group_id=group_id, group_state=summary.state, protocol_type=summary.protocol_type,
            protocol_data=summary.protocol,
            members=[_DescribedMember(member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                                      client_host=m.client_host, member_metadata=m.metadata,
                                      member_assignment=m.assignment) for m in summary.members],
            authorized_operations=_GROUP_OPERATIONS if include_ops and error == E.NONE else _NOT_REQUESTED))
    return DescribeGroupsResponse(throttle_time_ms=0, groups=out)


_Listed = ListGroupsResponse.ListedGroup


@handles(ApiKey.LIST_GROUPS, 0, 5)
async def list_groups(ctx, req):
    v = ctx.api_version
    states, types = (req.states_filter if v >= 4 else ()), (req.types_filter if v >= 5 else ())
    error, groups = _groups(ctx).list_groups(states, types)
    # share groups (broker/share/): none before the service is built (the first share request), unless
    # the group coordinator replayed some from __consumer_offsets
    share = ctx.broker.share_if_built
    if share is None and ctx.broker.groups.has_share_loads():
        share = ctx.broker.share
    if share is not None:
        groups = groups + share.list_groups(states, types)
    return ListGroupsResponse(throttle_time_ms=0, error_code=error, groups=[
        _Listed(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state, group_type=g.group_type)
        for g in groups])


_Deletable = DeleteGroupsResponse.DeletableGroupResult


@handles(ApiKey.DELETE_GROUPS, 0, 2)
async def delete_groups(ctx, req):
    names = list(dict.fromkeys(req.groups_names))
    # share groups first, as Kafka's GroupCoordinatorService.deleteGroups: their share-partition
    # states are deleted at the share coordinators, then the group; the others as before
    errors = await _delete_share_groups(ctx, names)
    rest = [g for g in names if g not in errors]
    if rest:
        errors.update((await _groups(ctx).delete_groups(rest)).errors)
    return DeleteGroupsResponse(throttle_time_ms=0, results=[
        _Deletable(group_id=g, error_code=errors[g]) for g in names if g in errors])


async def _delete_share_groups(ctx, names) -> dict:
    """group id -> error of the share groups among `names` coordinated here."""
    state = _groups(ctx).state
    out = {}
    for group_id in names:
        if state.status_error(group_id, allow_empty=False) is not None or group_id in state.groups:
            continue
        svc = ctx.broker.share        # (built here at the latest: a group not classic or consumer)
        group = svc.groups.groups.get(group_id)
        if group is None and svc.initialized.metadata(group_id).empty() and not svc.keys_with_state(group_id):
            continue
        if group is not None and group.members:
            out[group_id] = E.NON_EMPTY_GROUP
            continue
        out[group_id] = await svc.initialized.delete_group(group_id)
    return out


_DeleteTopic = OffsetDeleteResponse.OffsetDeleteResponseTopic
_DeletePartition = OffsetDeleteResponse.OffsetDeleteResponsePartition


@handles(ApiKey.OFFSET_DELETE, 0, 0)
async def offset_delete(ctx, req):
    errors: dict[str, dict[int, int]] = {}
    valid = []
    for t in req.topics:
        out = errors.setdefault(t.name, {})
        for p in t.partitions:
            if _partition_exists(ctx, t.name, p.partition_index):
                valid.append((t.name, p.partition_index))
            else:
                out[p.partition_index] = E.UNKNOWN_TOPIC_OR_PARTITION
    res = await _groups(ctx).delete_offsets(req.group_id, valid)
    if res.error != E.NONE:
        return OffsetDeleteResponse(error_code=res.error, throttle_time_ms=0, topics=[])
    for (topic, partition), error in res.errors.items():
        errors[topic][partition] = error
    return OffsetDeleteResponse(error_code=E.NONE, throttle_time_ms=0, topics=[
        _DeleteTopic(name=name, partitions=[_DeletePartition(partition_index=p, error_code=e)
                                            for p, e in parts.items()])
        for name, parts in errors.items() if parts])

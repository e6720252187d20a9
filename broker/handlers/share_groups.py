"""Share-group APIs (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch and
ShareAcknowledge. A thin adapter over broker/share/ (`ctx.broker.share`, a ShareService)."""
from __future__ import annotations

import os

import trio

from kproto.api import ApiKey
from kproto._codec import ZERO_UUID
from kproto.errors import ErrorCode as E
from kproto.messages.describe_share_group_offsets_response import DescribeShareGroupOffsetsResponse
from kproto.messages.share_acknowledge_response import ShareAcknowledgeResponse
from kproto.messages.share_fetch_response import ShareFetchResponse
from kproto.messages.share_group_describe_response import ShareGroupDescribeResponse
from kproto.messages.share_group_heartbeat_response import ShareGroupHeartbeatResponse

from broker.controller import features
from broker.handlers import handles
from broker.handlers.groups import _NOT_REQUESTED, _client_host
from broker.replication.leader_hint import current_leader
from broker.share.service import Change

# AclEntry.supportedOperations(GROUP) for a share group: READ, DELETE, DESCRIBE (bits 3, 6, 8)
_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
_ASSIGNOR = "simple"


UNSUPPORTED = "The version of API is not supported."


def share_disabled(ctx) -> bool:
    """share.version is finalized at 0: every share-group API answers UNSUPPORTED_VERSION, as Kafka's
    KafkaApis does when isShareGroupProtocolEnabled is false (the APIs stay in ApiVersions)."""
    return not features.share_groups_enabled(ctx.broker.image)


def _not_share_group(ctx, group_id: str):
    """(error, message) when the group id is taken by a consumer/classic group or not coordinated here."""
    state = ctx.broker.groups.state
    err = state.status_error(group_id, allow_empty=False)
    if err is not None:
        return err, None
    if group_id in state.groups:
        return E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
    return None, None


def share_group(ctx, group_id: str):
    """The share group, also when only its share-partition state is left (no member since a
    restart, or made by AlterShareGroupOffsets): Kafka keeps such a group, Empty."""
    svc = ctx.broker.share
    group = svc.groups.groups.get(group_id)
    if group is None and (not svc.initialized.metadata(group_id).empty() or svc.keys_with_state(group_id)):
        group = svc.groups.ensure(group_id)
    return group



# ======================================================================== membership

_HbAssignment = ShareGroupHeartbeatResponse.Assignment
_HbTopicPartitions = ShareGroupHeartbeatResponse.TopicPartitions


@handles(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1)
async def share_group_heartbeat(ctx, req):
    if share_disabled(ctx):
        return ShareGroupHeartbeatResponse(throttle_time_ms=0, error_code=E.UNSUPPORTED_VERSION, error_message=None,
                                           member_id=None, member_epoch=0, heartbeat_interval_ms=0)
    err, message = _not_share_group(ctx, req.group_id)
    if err is not None:
        return ShareGroupHeartbeatResponse(throttle_time_ms=0, error_code=err, error_message=message,
                                           member_id=None, member_epoch=0, heartbeat_interval_ms=0)
    res = await ctx.broker.share.heartbeat(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch, rack_id=req.rack_id,
        subscribed=None if req.subscribed_topic_names is None else list(req.subscribed_topic_names),
        client_id=ctx.client_id or "", client_host=_client_host(ctx))
    if res.error != E.NONE:
        return ShareGroupHeartbeatResponse(throttle_time_ms=0, error_code=res.error, error_message=res.message,
                                           member_id=None, member_epoch=0, heartbeat_interval_ms=0)
    group = ctx.broker.share.groups.groups.get(req.group_id)
    if group is not None and req.member_epoch != -1 and res.initialize:
        # the subscribed partitions without state are initialised in the background; answered at
        # once without them, a later heartbeat assigns them (Kafka 4.3's shareGroupHeartbeat)
        ctx.broker.share.initialized.start_initialize(req.group_id, dict(group.topics_seen))
    assignment = None
    if res.assignment is not None:
        assignment = _HbAssignment(topic_partitions=[
            _HbTopicPartitions(topic_id=t, partitions=ps) for t, ps in sorted(res.assignment.items(), key=str)])
    return ShareGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=E.NONE, error_message=None, member_id=res.member_id,
        member_epoch=res.member_epoch, heartbeat_interval_ms=res.heartbeat_interval_ms, assignment=assignment)


_Described = ShareGroupDescribeResponse.DescribedGroup
_Member = ShareGroupDescribeResponse.Member
_Assignment = ShareGroupDescribeResponse.Assignment
_TopicPartitions = ShareGroupDescribeResponse.TopicPartitions


def _assignment(ctx, assignment: dict):
    by_id = ctx.broker.image.topics_by_id
    out = [_TopicPartitions(topic_id=tid, topic_name=by_id[tid].name if tid in by_id else "", partitions=sorted(ps))
           for tid, ps in assignment.items()]
    out.sort(key=lambda t: t.topic_name)
    return _Assignment(topic_partitions=out)


@handles(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1)
async def share_group_describe(ctx, req):
    out = []
    if share_disabled(ctx):        # (Kafka's getErrorResponse: the group id and the error, nothing else)
        return ShareGroupDescribeResponse(throttle_time_ms=0, groups=[
            _Described(error_code=E.UNSUPPORTED_VERSION, error_message=None, group_id=g, group_state="",
                       group_epoch=0, assignment_epoch=0, assignor_name="", members=[],
                       authorized_operations=_NOT_REQUESTED) for g in req.group_ids])
    for group_id in req.group_ids:
        err, message = _not_share_group(ctx, group_id)
        group = share_group(ctx, group_id)
        if err is None and group is None:
            err, message = E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        if err is not None:
            out.append(_Described(error_code=err, error_message=message, group_id=group_id, group_state="Dead",
                                  group_epoch=-1, assignment_epoch=-1, assignor_name="", members=[],
                                  authorized_operations=_NOT_REQUESTED))
            continue
        out.append(_Described(
            error_code=E.NONE, error_message=None, group_id=group_id, group_state=group.state,
            group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch, assignor_name=_ASSIGNOR,
            members=[_Member(member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                             client_id=m.client_id, client_host=m.client_host,
                             subscribed_topic_names=list(m.subscribed), assignment=_assignment(ctx, m.current))
                     for m in group.members.values()],
            authorized_operations=_GROUP_OPERATIONS if req.include_authorized_operations else _NOT_REQUESTED))
    return ShareGroupDescribeResponse(throttle_time_ms=0, groups=out)


# ======================================================================== fetching and acknowledging

_FTopic = ShareFetchResponse.ShareFetchableTopicResponse
_FPart = ShareFetchResponse.PartitionData
_FAcquired = ShareFetchResponse.AcquiredRecords
_FLeader = ShareFetchResponse.LeaderIdAndEpoch
_ATopic = ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse
_APart = ShareAcknowledgeResponse.PartitionData
_ALeader = ShareAcknowledgeResponse.LeaderIdAndEpoch


def _locate(ctx, topic_id, index: int):
    """(error, partition) for a partition this broker must lead to serve share records."""
    t = ctx.broker.image.topics_by_id.get(topic_id)
    if t is None:
        return E.UNKNOWN_TOPIC_ID, None
    if index not in t.partitions:
        return E.UNKNOWN_TOPIC_OR_PARTITION, None
    p = ctx.broker.partitions.get(t.name, index)
    if p is None or not p.is_leader:
        return E.NOT_LEADER_OR_FOLLOWER, None
    return E.NONE, p


def _leader(ctx, topic_id, index: int, cls):
    t = ctx.broker.image.topics_by_id.get(topic_id)
    if t is None:
        return cls(leader_id=-1, leader_epoch=-1)
    leader, epoch = current_leader(ctx.broker, t.name, index)
    return cls(leader_id=leader, leader_epoch=epoch)


async def _acks(ctx, req_partition, session, topic_id) -> int:
    batches = [(b.first_offset, b.last_offset, list(b.acknowledge_types))
               for b in req_partition.acknowledgement_batches]
    err, _p = _locate(ctx, topic_id, req_partition.partition_index)
    if err != E.NONE:
        return err
    svc = ctx.broker.share
    change = Change()
    err = svc.acknowledge(session.group_id, session.member_id, topic_id, req_partition.partition_index, batches,
                          change)
    # answered once the share coordinator has the new state: no acknowledgement is lost to a failover
    # (a failed write rolls the acknowledgements back: the records stay acquired by this member)
    written = await svc.commit((session.group_id, topic_id, req_partition.partition_index), change)
    return err if err != E.NONE else written


def _session_error(ctx, req, opening_allowed: bool):
    if not req.group_id or not req.member_id:
        return E.INVALID_REQUEST, None
    if req.share_session_epoch == 0 and not opening_allowed:
        return E.INVALID_SHARE_SESSION_EPOCH, None
    svc = ctx.broker.share
    return svc.session_for(req.group_id, req.member_id, req.share_session_epoch,
                           _connection(ctx, svc) if req.share_session_epoch == 0 else None)


def _connection(ctx, svc):
    """The id of the client connection a share session is opened on, whose close ends the session
    (the connection reports its close to the share service); None off a client connection."""
    when_closed = getattr(ctx.conn, "when_closed", None)
    if when_closed is None:
        return None
    when_closed("share", svc.connection_closed)
    return ctx.conn.id


@handles(ApiKey.SHARE_FETCH, 1, 2)
async def share_fetch(ctx, req):
    svc = ctx.broker.share
    epoch = req.share_session_epoch
    has_acks = any(p.acknowledgement_batches for t in req.topics for p in t.partitions)
    if share_disabled(ctx):
        err, session = E.UNSUPPORTED_VERSION, None
    elif epoch == 0 and has_acks:
        err, session = E.INVALID_REQUEST, None
    else:
        err, session = _session_error(ctx, req, opening_allowed=True)
    if err != E.NONE:
        return ShareFetchResponse(throttle_time_ms=0, error_code=err, error_message=None,
                                  acquisition_lock_timeout_ms=0, responses=[], node_endpoints=[])
    results: dict = {}

    def part(tid, idx):
        p = results.get((tid, idx))
        if p is None:
            p = results[(tid, idx)] = _FPart(
                partition_index=idx, error_code=E.NONE, error_message=None, acknowledge_error_code=E.NONE,
                acknowledge_error_message=None, current_leader=_leader(ctx, tid, idx, _FLeader), records=b"",
                acquired_records=[])
        return p

    for ft in req.forgotten_topics_data or ():
        for idx in ft.partitions:
            session.partitions.pop((ft.topic_id, idx), None)
    for t in req.topics:
        for p in t.partitions:
            entry = part(t.topic_id, p.partition_index)
            if epoch != -1:
                session.partitions[(t.topic_id, p.partition_index)] = None
            if p.acknowledgement_batches:
                entry.acknowledge_error_code = await _acks(ctx, p, session, t.topic_id)
    # the acquisitions this answer carries: released at once if it is never made (a failure or a
    # cancellation from here on), not left locked for a member that never saw them
    delivering: list = []
    try:
        if epoch == -1:
            svc.close_session(session)
        else:
            await _fetch(ctx, req, session, part, delivering)
        if delivering and _fault_after_acquire():
            raise RuntimeError("KPROTO_TEST_FAULT: ShareFetch failed after acquiring records")
        by_topic: dict = {}
        for (tid, idx), p in results.items():
            by_topic.setdefault(tid, []).append(p)
        return ShareFetchResponse(
            throttle_time_ms=0, error_code=E.NONE, error_message=None,
            acquisition_lock_timeout_ms=svc.lock_duration_for(session.group_id),
            responses=[_FTopic(topic_id=tid, partitions=ps) for tid, ps in by_topic.items()], node_endpoints=[])
    except BaseException:
        for key, change in delivering:
            svc.undelivered(key, change)
        raise


_FAULT = "share-fetch-fail-after-acquire"
_fault_spent = False


def _fault_after_acquire() -> bool:
    """Test-only (KPROTO_TEST_FAULT=share-fetch-fail-after-acquire): the first ShareFetch that
    acquired records fails before its answer is made, as a bug would; once only, so the member's
    next ShareFetch shows where those records went."""
    global _fault_spent
    if _fault_spent or os.environ.get("KPROTO_TEST_FAULT") != _FAULT:
        return False
    _fault_spent = True
    return True


async def _fetch(ctx, req, session, part, delivering: list) -> None:
    """Acquire records of the session's partitions; wait up to MaxWaitMs for some when there are none.
    `delivering` gets (key, Change) of every acquisition, as soon as it is made."""
    svc = ctx.broker.share
    max_records = req.max_records if req.max_records > 0 else 500
    max_bytes = min(req.max_bytes if req.max_bytes > 0 else 1 << 20, 1 << 20)
    deadline = trio.current_time() + max(0, req.max_wait_ms) / 1000
    while True:
        budget, found, watched = max_records, False, []
        for tid, idx in list(session.partitions):
            err, p = _locate(ctx, tid, idx)
            if err != E.NONE:
                part(tid, idx).error_code = err
                found = True
                continue
            err = await svc.load(session.group_id, p)
            if err != E.NONE:            # its share coordinator is not there yet: nothing this time
                watched.append(p)
                continue
            change = Change()
            data, got = svc.acquire(session.group_id, session.member_id, p, budget, max_bytes, change)
            if got:
                delivering.append(((session.group_id, tid, idx), change))
            # the delivery counts are with the share coordinator before the records go out: a
            # failover never hands a record out more than share.delivery.count.limit times (a
            # failed write rolls the acquisition back: the records are AVAILABLE again)
            if got and await svc.commit((session.group_id, tid, idx), change) != E.NONE:
                data, got = b"", []
            if got:
                entry = part(tid, idx)
                entry.records = data
                entry.acquired_records = [_FAcquired(first_offset=r.first_offset, last_offset=r.last_offset,
                                                     delivery_count=r.delivery_count) for r in got]
                budget -= sum(r.last_offset - r.first_offset + 1 for r in got)
                found = True
                if budget <= 0:
                    break
            watched.append(p)
        if found or trio.current_time() >= deadline or not watched:
            return
        event = trio.Event()
        for p in watched:
            p.add_waiter(event)
        try:
            with trio.move_on_at(deadline):
                await event.wait()
        finally:
            for p in watched:
                p.remove_waiter(event)


@handles(ApiKey.SHARE_ACKNOWLEDGE, 1, 2)
async def share_acknowledge(ctx, req):
    err, session = ((E.UNSUPPORTED_VERSION, None) if share_disabled(ctx)
                    else _session_error(ctx, req, opening_allowed=False))
    if err != E.NONE:
        return ShareAcknowledgeResponse(throttle_time_ms=0, error_code=err, error_message=None,
                                        acquisition_lock_timeout_ms=0, responses=[], node_endpoints=[])
    out = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code = await _acks(ctx, p, session, t.topic_id)
            parts.append(_APart(partition_index=p.partition_index, error_code=code, error_message=None,
                                current_leader=_leader(ctx, t.topic_id, p.partition_index, _ALeader)))
        out.append(_ATopic(topic_id=t.topic_id, partitions=parts))
    if req.share_session_epoch == -1:
        ctx.broker.share.close_session(session)
    return ShareAcknowledgeResponse(throttle_time_ms=0, error_code=E.NONE, error_message=None,
                                    acquisition_lock_timeout_ms=ctx.broker.share.lock_duration_for(session.group_id),
                                    responses=out, node_endpoints=[])


# ======================================================================== share-group offsets

_OGroup = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup
_OTopic = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseTopic
_OPart = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponsePartition


@handles(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1)
async def describe_share_group_offsets(ctx, req):
    """The share-partition start offsets (and, v1, lag: records not yet delivered-complete) this
    broker holds for the group: its own share-partitions and the state it read from
    __share_group_state; -1 for a partition it holds no state of.

    As Kafka 4.3's GroupCoordinatorService, the group need not exist, nor be a share group: it is
    not looked up, so a group that does not exist, or a classic or consumer group of that id,
    answers NONE, with no topics when all are asked for and -1 for each partition asked for (its
    share persister has no state of them; Kafka 4.3.1 checked side by side). So does a topic or
    partition that does not exist (start offset -1, no error: "absence of data", as OffsetFetch).
    Without topics, the partitions listed are those the group coordinator recorded initialised
    (Kafka's initializedShareGroupPartitions): not those still initialising."""
    svc = ctx.broker.share
    image = ctx.broker.image
    out = []
    for g in req.groups:
        # (no share-group type check: Kafka 4.3 does none here)
        err = E.UNSUPPORTED_VERSION if share_disabled(ctx) else ctx.broker.groups.state.status_error(
            g.group_id, allow_empty=False)
        if err is not None:
            out.append(_OGroup(group_id=g.group_id, topics=[], error_code=err, error_message=None))
            continue
        if g.topics is None:
            # the partitions the group coordinator recorded initialised, listed even before their
            # first fetch gives them a start offset; those still initialising are not (Kafka 4.3)
            wanted: dict = {}
            for tid, indexes in sorted(svc.initialized.partitions(g.group_id).items(), key=lambda kv: str(kv[0])):
                t = image.topics_by_id.get(tid)
                if t is not None:
                    wanted[t.name] = sorted(indexes)
        else:
            wanted = {t.topic_name: list(t.partitions) for t in g.topics}
        keys = [(image.topics[n].topic_id, i) for n, ix in wanted.items() if n in image.topics for i in ix
                if i in image.topics[n].partitions]
        states = await svc.offsets(g.group_id, keys)   # (topic id, index) -> (start, complete, epoch)
        topics = []
        for name, indexes in wanted.items():
            t = image.topics.get(name)
            parts = []
            for idx in indexes:
                if t is None or idx not in t.partitions:
                    # Kafka's defaults: leader epoch 0 (after its persister gave up on the
                    # share coordinator of a partition that is not there, 27 s later)
                    parts.append(_OPart(partition_index=idx, start_offset=-1, leader_epoch=0, lag=-1,
                                        error_code=E.NONE, error_message=None))
                    continue
                # the leader epoch stored with the share state (its share-partition leader's when it
                # last read or wrote it), as Kafka 4.3; 0 when its coordinator answered an error
                start, complete, epoch = states.get((t.topic_id, idx), (-1, 0, 0))
                p = ctx.broker.partitions.get(name, idx)
                # (a follower's high watermark on a node that does not lead the partition)
                lag = max(0, p.high_watermark - start - complete) if start >= 0 and p is not None else -1
                parts.append(_OPart(partition_index=idx, start_offset=start, leader_epoch=epoch, lag=lag,
                                    error_code=E.NONE, error_message=None))
            topics.append(_OTopic(topic_name=name, topic_id=t.topic_id if t is not None else ZERO_UUID,
                                  partitions=parts))
        out.append(_OGroup(group_id=g.group_id, topics=topics, error_code=E.NONE, error_message=None))
    return DescribeShareGroupOffsetsResponse(throttle_time_ms=0, groups=out)

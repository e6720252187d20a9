"""Which operations each API needs, as Kafka's KafkaApis checks them, and
how it answers when they are refused.

Each entry takes the decoded request and the handler: the parts of the
request the principal may not touch are taken out before the handler runs
and come back in the response with Kafka's error (TOPIC_AUTHORIZATION_FAILED,
GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED,
TRANSACTIONAL_ID_AUTHORIZATION_FAILED); topics the principal may not
describe are left out of whole-cluster listings, as Kafka hides them. The
handlers themselves know nothing of ACLs."""
from __future__ import annotations

import logging

from kproto._codec import ZERO_UUID
from kproto.api import ApiKey
from kproto.errors import ErrorCode as E

from broker.net.transport import CloseConnection
from broker.security.acls import (CLUSTER, CLUSTER_NAME, GROUP, OP_NAMES, OPS, RESOURCE_TYPES, TOPIC,
                                  TRANSACTIONAL_ID)
from broker.security.principal import ANONYMOUS

log = logging.getLogger("kproto.authorizer")

OMITTED = -2147483648
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = (OPS[o] for o in ("READ", "WRITE", "CREATE", "DELETE", "ALTER",
                                                                 "DESCRIBE"))
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = (
    OPS[o] for o in ("CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE"))
MESSAGES = {E.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
            E.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
            E.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed."}
# config resource types
R_TOPIC, R_BROKER, R_BROKER_LOGGER, R_CLIENT_METRICS, R_GROUP = 2, 4, 8, 16, 32


class Check:
    """The authorizer bound to one request's principal and address, with its answers cached."""

    def __init__(self, authorizer, ctx):
        session = getattr(ctx.conn, "session", None)
        self.authorizer = authorizer
        self.principal = session.principal if session is not None else ANONYMOUS
        peer = getattr(ctx.conn, "peer", None)
        self.host = (session.peer_host if session is not None else "") or (peer[0] if peer else "")
        self._cache = {}

    def allowed(self, op: int, rtype: int, name: str) -> bool:
        key = (op, rtype, name)
        if key not in self._cache:
            ok = self.authorizer.authorize(self.principal, self.host, op, rtype, name)
            if not ok:
                log.info("Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s",
                         self.principal, _op_name(op), self.host, _rtype_name(rtype), name)
            self._cache[key] = ok
        return self._cache[key]

    def topic(self, op, name):
        return self.allowed(op, TOPIC, name)

    def group(self, op, name):
        return self.allowed(op, GROUP, name)

    def cluster(self, op):
        return self.allowed(op, CLUSTER, CLUSTER_NAME)

    def txn(self, op, name):
        return self.allowed(op, TRANSACTIONAL_ID, name)

    def ops(self, rtype, name) -> int:
        return self.authorizer.authorized_operations(self.principal, self.host, rtype, name)


def _op_name(op):
    return OP_NAMES.get(op, op)


def _rtype_name(t):
    return RESOURCE_TYPES.get(t, t)


def _close(reason: str):
    return CloseConnection(reason)


WRAPPERS = {}


def wraps(*api_keys):
    def register(fn):
        for k in api_keys:
            WRAPPERS[int(k)] = fn
        return fn
    return register


# no authorization at all (Kafka checks none for these)
UNCHECKED = {int(ApiKey.API_VERSIONS), int(ApiKey.SASL_HANDSHAKE), int(ApiKey.SASL_AUTHENTICATE),
             int(ApiKey.ALTER_USER_SCRAM_CREDENTIALS), int(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS),
             # the delegation token APIs check owners, renewers and CREATE_TOKENS/DESCRIBE themselves
             int(ApiKey.CREATE_DELEGATION_TOKEN), int(ApiKey.RENEW_DELEGATION_TOKEN),
             int(ApiKey.EXPIRE_DELEGATION_TOKEN), int(ApiKey.DESCRIBE_DELEGATION_TOKEN)}


async def run(authorizer, ctx, req, handler):
    key = ctx.api_key
    if key in UNCHECKED:
        return await handler(ctx, req)
    wrapper = WRAPPERS.get(key)
    ck = Check(authorizer, ctx)
    if wrapper is None:
        # an API this authorizer has no rule for: only a cluster operator may use it
        if ck.cluster(CLUSTER_ACTION) or ck.cluster(ALTER):
            return await handler(ctx, req)
        raise _close(f"API {key} is not authorized for {ck.principal}")
    return await wrapper(ck, ctx, req, handler)


def _unknown_id(topic) -> bool:
    """A topic named by an id the metadata does not know (Produce v13, OffsetCommit/
    OffsetFetch v10): Kafka answers UNKNOWN_TOPIC_ID before it checks ACLs."""
    return not topic.name and getattr(topic, "topic_id", ZERO_UUID) != ZERO_UUID


def _split(items, allowed):
    yes, no = [], []
    for it in items or []:
        (yes if allowed(it) else no).append(it)
    return yes, no


# -- topic-partition APIs ----------------------------------------------------------------------

@wraps(ApiKey.PRODUCE)
async def produce(ck, ctx, req, handler):
    from kproto.messages.produce_response import ProduceResponse as R

    def failed(t, code):
        return R.TopicProduceResponse(name=t.name, topic_id=t.topic_id, partition_responses=[
            R.PartitionProduceResponse(index=p.index, error_code=code, base_offset=-1, log_append_time_ms=-1,
                                       log_start_offset=-1, record_errors=[], error_message=None)
            for p in t.partition_data])
    if req.transactional_id is not None and not ck.txn(WRITE, req.transactional_id):
        if req.acks == 0:
            raise _close("produce (acks=0) refused: TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
        return R(responses=[failed(t, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) for t in req.topic_data],
                 throttle_time_ms=0)
    # an unknown topic id is answered UNKNOWN_TOPIC_ID before any ACL check (broker/handlers/topic_ids.py)
    req.topic_data, denied = _split(req.topic_data, lambda t: _unknown_id(t) or ck.topic(WRITE, t.name))
    if denied and req.acks == 0:
        # Kafka closes an acks=0 connection whose produce failed: the client learns no other way
        raise _close("produce (acks=0) refused: TOPIC_AUTHORIZATION_FAILED")
    resp = await handler(ctx, req)
    if resp is not None and denied:
        resp.responses = list(resp.responses) + [failed(t, E.TOPIC_AUTHORIZATION_FAILED) for t in denied]
    return resp


def _topic_name(ctx, name, topic_id):
    if name:
        return name
    t = ctx.broker.image.topics_by_id.get(topic_id)
    return t.name if t is not None else None


@wraps(ApiKey.FETCH)
async def fetch(ck, ctx, req, handler):
    from kproto.messages.fetch_response import FetchResponse as R
    replica = req.replica_state.replica_id if ctx.api_version >= 15 and req.replica_state else req.replica_id
    follower = replica is not None and replica >= 0

    def may(t):
        if follower:
            return ck.cluster(CLUSTER_ACTION)
        name = _topic_name(ctx, t.topic, t.topic_id)
        return name is None or ck.topic(READ, name)   # unknown ids: the handler answers UNKNOWN_TOPIC_ID
    req.topics, denied = _split(req.topics, may)
    resp = await handler(ctx, req)
    if denied:
        resp.responses = list(resp.responses) + [R.FetchableTopicResponse(
            topic=t.topic, topic_id=t.topic_id, partitions=[R.PartitionData(
                partition_index=p.partition, error_code=E.TOPIC_AUTHORIZATION_FAILED, high_watermark=-1,
                last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
                preferred_read_replica=-1, records=None) for p in t.partitions]) for t in denied]
    return resp


@wraps(ApiKey.LIST_OFFSETS)
async def list_offsets(ck, ctx, req, handler):
    from kproto.messages.list_offsets_response import ListOffsetsResponse as R
    req.topics, denied = _split(req.topics, lambda t: ck.topic(DESCRIBE, t.name))
    resp = await handler(ctx, req)
    if denied:
        resp.topics = list(resp.topics) + [R.ListOffsetsTopicResponse(name=t.name, partitions=[
            R.ListOffsetsPartitionResponse(partition_index=p.partition_index,
                                           error_code=E.TOPIC_AUTHORIZATION_FAILED, old_style_offsets=[],
                                           timestamp=-1, offset=-1, leader_epoch=-1)
            for p in t.partitions]) for t in denied]
    return resp


@wraps(ApiKey.OFFSET_FOR_LEADER_EPOCH)
async def offset_for_leader_epoch(ck, ctx, req, handler):
    from kproto.messages.offset_for_leader_epoch_response import OffsetForLeaderEpochResponse as R
    follower = ctx.api_version >= 3 and req.replica_id >= 0
    req.topics, denied = _split(req.topics, lambda t: ck.cluster(CLUSTER_ACTION) if follower
                                else ck.topic(DESCRIBE, t.topic))
    resp = await handler(ctx, req)
    if denied:
        resp.topics = list(resp.topics) + [R.OffsetForLeaderTopicResult(topic=t.topic, partitions=[
            R.EpochEndOffset(error_code=E.TOPIC_AUTHORIZATION_FAILED, partition=p.partition, leader_epoch=-1,
                             end_offset=-1) for p in t.partitions]) for t in denied]
    return resp


@wraps(ApiKey.DELETE_RECORDS)
async def delete_records(ck, ctx, req, handler):
    from kproto.messages.delete_records_response import DeleteRecordsResponse as R
    req.topics, denied = _split(req.topics, lambda t: ck.topic(DELETE, t.name))
    resp = await handler(ctx, req)
    if denied:
        resp.topics = list(resp.topics) + [R.DeleteRecordsTopicResult(name=t.name, partitions=[
            R.DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1,
                                           error_code=E.TOPIC_AUTHORIZATION_FAILED) for p in t.partitions])
            for t in denied]
    return resp


@wraps(ApiKey.DESCRIBE_PRODUCERS)
async def describe_producers(ck, ctx, req, handler):
    from kproto.messages.describe_producers_response import DescribeProducersResponse as R
    req.topics, denied = _split(req.topics, lambda t: ck.topic(READ, t.name))
    resp = await handler(ctx, req)
    if denied:
        resp.topics = list(resp.topics) + [R.TopicResponse(name=t.name, partitions=[
            R.PartitionResponse(partition_index=p, error_code=E.TOPIC_AUTHORIZATION_FAILED,
                                error_message=None, active_producers=[]) for p in t.partition_indexes])
            for t in denied]
    return resp


# -- metadata ----------------------------------------------------------------------------------

@wraps(ApiKey.METADATA)
async def metadata(ck, ctx, req, handler):
    from kproto.messages.metadata_response import MetadataResponse as R
    image = ctx.broker.image
    v = ctx.api_version
    all_topics = req.topics is None or (v == 0 and not req.topics)
    denied_entries = []
    if not all_topics:
        kept = []
        auto = ctx.broker.config.get_bool("auto.create.topics.enable") and (v < 4 or req.allow_auto_topic_creation)
        for rt in req.topics:
            name = _topic_name(ctx, rt.name, rt.topic_id)
            if name is None:
                kept.append(rt)      # unknown id or name: the handler's answer
                continue
            if not ck.topic(DESCRIBE, name):
                by_id = not rt.name
                denied_entries.append(R.MetadataResponseTopic(
                    error_code=E.TOPIC_AUTHORIZATION_FAILED, name=None if by_id else name,
                    topic_id=rt.topic_id if by_id else ZERO_UUID, is_internal=False, partitions=[],
                    topic_authorized_operations=OMITTED))
            elif (auto and name not in image.topics and not ck.cluster(CREATE)
                  and not ck.topic(CREATE, name)):
                denied_entries.append(R.MetadataResponseTopic(
                    error_code=E.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=ZERO_UUID,
                    is_internal=False, partitions=[], topic_authorized_operations=OMITTED))
            else:
                kept.append(rt)
        req.topics = kept
        if not kept and req.topics is not None and v == 0:
            pass
    if not all_topics and not req.topics:
        resp = await handler(ctx, _empty_topics(req))
    else:
        resp = await handler(ctx, req)
    topics = []
    for t in resp.topics:
        if t.error_code == 0 and t.name and not ck.topic(DESCRIBE, t.name):
            continue   # hidden: the principal may not know it exists
        if t.error_code == 0 and req.include_topic_authorized_operations and t.name:
            t.topic_authorized_operations = ck.ops(TOPIC, t.name)
        topics.append(t)
    resp.topics = topics + denied_entries
    if 8 <= v <= 10:
        resp.cluster_authorized_operations = (ck.ops(CLUSTER, CLUSTER_NAME)
                                              if req.include_cluster_authorized_operations else OMITTED)
    return resp


def _empty_topics(req):
    # every asked topic was refused: ask for none (an empty list, not "all")
    req.topics = []
    return req


# -- groups ------------------------------------------------------------------------------------

@wraps(ApiKey.FIND_COORDINATOR)
async def find_coordinator(ck, ctx, req, handler):
    from kproto.messages.find_coordinator_response import FindCoordinatorResponse as R

    def may(key, key_type):
        if key_type == 2:     # a share coordinator key: brokers only (Kafka 4.x: CLUSTER_ACTION)
            return ck.cluster(CLUSTER_ACTION)
        return ck.txn(DESCRIBE, key) if key_type == 1 else ck.group(DESCRIBE, key)

    code = {1: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 2: E.CLUSTER_AUTHORIZATION_FAILED}.get(
        req.key_type, E.GROUP_AUTHORIZATION_FAILED)
    if ctx.api_version < 4:
        if not may(req.key, req.key_type):
            return R(throttle_time_ms=0, error_code=code, error_message=MESSAGES[code], node_id=-1, host="",
                     port=-1)
        return await handler(ctx, req)
    req.coordinator_keys, denied = _split(req.coordinator_keys, lambda k: may(k, req.key_type))
    resp = await handler(ctx, req)
    if denied:
        resp.coordinators = list(resp.coordinators) + [R.Coordinator(
            key=k, node_id=-1, host="", port=-1, error_code=code, error_message=MESSAGES[code]) for k in denied]
    return resp


@wraps(ApiKey.JOIN_GROUP)
async def join_group(ck, ctx, req, handler):
    from kproto.messages.join_group_response import JoinGroupResponse as R
    if not ck.group(READ, req.group_id):
        return R(throttle_time_ms=0, error_code=E.GROUP_AUTHORIZATION_FAILED, generation_id=-1,
                 protocol_type=None, protocol_name=None if ctx.api_version >= 7 else "", leader="",
                 skip_assignment=False, member_id="", members=[])
    return await handler(ctx, req)


@wraps(ApiKey.SYNC_GROUP)
async def sync_group(ck, ctx, req, handler):
    from kproto.messages.sync_group_response import SyncGroupResponse as R
    if not ck.group(READ, req.group_id):
        return R(throttle_time_ms=0, error_code=E.GROUP_AUTHORIZATION_FAILED, protocol_type=None,
                 protocol_name=None, assignment=b"")
    return await handler(ctx, req)


@wraps(ApiKey.HEARTBEAT)
async def heartbeat(ck, ctx, req, handler):
    from kproto.messages.heartbeat_response import HeartbeatResponse as R
    if not ck.group(READ, req.group_id):
        return R(throttle_time_ms=0, error_code=E.GROUP_AUTHORIZATION_FAILED)
    return await handler(ctx, req)


@wraps(ApiKey.LEAVE_GROUP)
async def leave_group(ck, ctx, req, handler):
    from kproto.messages.leave_group_response import LeaveGroupResponse as R
    if not ck.group(READ, req.group_id):
        return R(throttle_time_ms=0, error_code=E.GROUP_AUTHORIZATION_FAILED, members=[])
    return await handler(ctx, req)


@wraps(ApiKey.DESCRIBE_GROUPS)
async def describe_groups(ck, ctx, req, handler):
    from kproto.messages.describe_groups_response import DescribeGroupsResponse as R
    req.groups, denied = _split(req.groups, lambda g: ck.group(DESCRIBE, g))
    resp = await handler(ctx, req)
    include = ctx.api_version >= 3 and req.include_authorized_operations
    for g in resp.groups:
        if include and g.error_code == 0:
            g.authorized_operations = ck.ops(GROUP, g.group_id)
    resp.groups = list(resp.groups) + [R.DescribedGroup(
        error_code=E.GROUP_AUTHORIZATION_FAILED, group_id=g, group_state="", protocol_type="", protocol_data="",
        members=[], authorized_operations=OMITTED) for g in denied]
    return resp


@wraps(ApiKey.LIST_GROUPS)
async def list_groups(ck, ctx, req, handler):
    resp = await handler(ctx, req)
    if not ck.cluster(DESCRIBE):
        resp.groups = [g for g in resp.groups if ck.group(DESCRIBE, g.group_id)]
    return resp


@wraps(ApiKey.DELETE_GROUPS)
async def delete_groups(ck, ctx, req, handler):
    from kproto.messages.delete_groups_response import DeleteGroupsResponse as R
    req.groups_names, denied = _split(req.groups_names, lambda g: ck.group(DELETE, g))
    resp = await handler(ctx, req)
    resp.results = list(resp.results) + [R.DeletableGroupResult(group_id=g, error_code=E.GROUP_AUTHORIZATION_FAILED)
                                         for g in denied]
    return resp


def _partition_errors(topics, topic_cls, part_cls, code, parts_attr="partitions", index_attr="partition_index"):
    return [topic_cls(name=t.name, partitions=[part_cls(partition_index=getattr(p, index_attr), error_code=code)
                                               for p in getattr(t, parts_attr)]) for t in topics]


@wraps(ApiKey.OFFSET_COMMIT)
async def offset_commit(ck, ctx, req, handler):
    from kproto.messages.offset_commit_response import OffsetCommitResponse as R
    if not ck.group(READ, req.group_id):
        return R(throttle_time_ms=0, topics=_partition_errors(
            req.topics, R.OffsetCommitResponseTopic, R.OffsetCommitResponsePartition, E.GROUP_AUTHORIZATION_FAILED))
    req.topics, denied = _split(req.topics, lambda t: _unknown_id(t) or ck.topic(READ, t.name))
    resp = await handler(ctx, req)
    resp.topics = list(resp.topics) + _partition_errors(
        denied, R.OffsetCommitResponseTopic, R.OffsetCommitResponsePartition, E.TOPIC_AUTHORIZATION_FAILED)
    return resp


@wraps(ApiKey.TXN_OFFSET_COMMIT)
async def txn_offset_commit(ck, ctx, req, handler):
    from kproto.messages.txn_offset_commit_response import TxnOffsetCommitResponse as R

    def all_fail(code):
        return R(throttle_time_ms=0, topics=_partition_errors(
            req.topics, R.TxnOffsetCommitResponseTopic, R.TxnOffsetCommitResponsePartition, code))
    if not ck.txn(WRITE, req.transactional_id):
        return all_fail(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ck.group(READ, req.group_id):
        return all_fail(E.GROUP_AUTHORIZATION_FAILED)
    req.topics, denied = _split(req.topics, lambda t: ck.topic(READ, t.name))
    resp = await handler(ctx, req)
    resp.topics = list(resp.topics) + _partition_errors(
        denied, R.TxnOffsetCommitResponseTopic, R.TxnOffsetCommitResponsePartition, E.TOPIC_AUTHORIZATION_FAILED)
    return resp


@wraps(ApiKey.OFFSET_DELETE)
async def offset_delete(ck, ctx, req, handler):
    from kproto.messages.offset_delete_response import OffsetDeleteResponse as R
    if not ck.group(DELETE, req.group_id):
        return R(error_code=E.GROUP_AUTHORIZATION_FAILED, throttle_time_ms=0, topics=[])
    req.topics, denied = _split(req.topics, lambda t: ck.topic(READ, t.name))
    resp = await handler(ctx, req)
    resp.topics = list(resp.topics) + _partition_errors(
        denied, R.OffsetDeleteResponseTopic, R.OffsetDeleteResponsePartition, E.TOPIC_AUTHORIZATION_FAILED)
    return resp


@wraps(ApiKey.OFFSET_FETCH)
async def offset_fetch(ck, ctx, req, handler):
    from kproto.messages.offset_fetch_response import OffsetFetchResponse as R
    v = ctx.api_version
    if v < 8:
        if not ck.group(DESCRIBE, req.group_id):
            if v >= 2:
                return R(throttle_time_ms=0, topics=[], error_code=E.GROUP_AUTHORIZATION_FAILED)
            return R(throttle_time_ms=0, error_code=0, topics=[R.OffsetFetchResponseTopic(name=t.name, partitions=[
                R.OffsetFetchResponsePartition(partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                                               metadata="", error_code=E.GROUP_AUTHORIZATION_FAILED)
                for p in t.partition_indexes]) for t in req.topics or []])
        denied = []
        if req.topics is not None:
            req.topics, denied = _split(req.topics, lambda t: ck.topic(DESCRIBE, t.name))
        resp = await handler(ctx, req)
        resp.topics = [t for t in resp.topics if ck.topic(DESCRIBE, t.name)] + [
            R.OffsetFetchResponseTopic(name=t.name, partitions=[R.OffsetFetchResponsePartition(
                partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                error_code=E.TOPIC_AUTHORIZATION_FAILED) for p in t.partition_indexes]) for t in denied]
        return resp
    req.groups, denied_groups = _split(req.groups, lambda g: ck.group(DESCRIBE, g.group_id))
    denied_topics = {}
    for g in req.groups:
        if g.topics is not None:
            g.topics, denied_topics[g.group_id] = _split(
                g.topics, lambda t: _unknown_id(t) or ck.topic(DESCRIBE, t.name))
    resp = await handler(ctx, req)
    for g in resp.groups:
        g.topics = [t for t in g.topics if _unknown_id(t) or ck.topic(DESCRIBE, t.name)] + [
            R.OffsetFetchResponseTopics(name=t.name, partitions=[R.OffsetFetchResponsePartitions(
                partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                error_code=E.TOPIC_AUTHORIZATION_FAILED) for p in t.partition_indexes])
            for t in denied_topics.get(g.group_id, [])]
    resp.groups = list(resp.groups) + [R.OffsetFetchResponseGroup(
        group_id=g.group_id, topics=[], error_code=E.GROUP_AUTHORIZATION_FAILED) for g in denied_groups]
    return resp


# -- topics and configs ------------------------------------------------------------------------

@wraps(ApiKey.CREATE_TOPICS)
async def create_topics(ck, ctx, req, handler):
    from kproto.messages.create_topics_response import CreateTopicsResponse as R
    cluster_create = ck.cluster(CREATE)
    req.topics, denied = _split(req.topics, lambda t: cluster_create or ck.topic(CREATE, t.name))
    resp = await handler(ctx, req)
    for t in resp.topics:
        if t.error_code == 0 and ctx.api_version >= 5 and not ck.topic(DESCRIBE_CONFIGS, t.name):
            t.configs = []
            t.topic_config_error_code = E.TOPIC_AUTHORIZATION_FAILED
    resp.topics = list(resp.topics) + [R.CreatableTopicResult(
        name=t.name, topic_id=ZERO_UUID, error_code=E.TOPIC_AUTHORIZATION_FAILED, error_message="Authorization failed.",
        topic_config_error_code=0, num_partitions=-1, replication_factor=-1, configs=[]) for t in denied]
    return resp


@wraps(ApiKey.DELETE_TOPICS)
async def delete_topics(ck, ctx, req, handler):
    from kproto.messages.delete_topics_response import DeleteTopicsResponse as R
    denied = []
    if ctx.api_version >= 6:
        def may(t):
            name = _topic_name(ctx, t.name, t.topic_id)
            return name is None or ck.topic(DELETE, name)
        req.topics, gone = _split(req.topics, may)
        denied = [(t.name, t.topic_id) for t in gone]
    else:
        req.topic_names, gone = _split(req.topic_names, lambda n: ck.topic(DELETE, n))
        denied = [(n, ZERO_UUID) for n in gone]
    resp = await handler(ctx, req)
    resp.responses = list(resp.responses) + [R.DeletableTopicResult(
        name=n, topic_id=i, error_code=E.TOPIC_AUTHORIZATION_FAILED, error_message=None) for n, i in denied]
    return resp


@wraps(ApiKey.CREATE_PARTITIONS)
async def create_partitions(ck, ctx, req, handler):
    from kproto.messages.create_partitions_response import CreatePartitionsResponse as R
    req.topics, denied = _split(req.topics, lambda t: ck.topic(ALTER, t.name))
    resp = await handler(ctx, req)
    resp.results = list(resp.results) + [R.CreatePartitionsTopicResult(
        name=t.name, error_code=E.TOPIC_AUTHORIZATION_FAILED, error_message=None) for t in denied]
    return resp


def _config_code(ck, op, rtype, name):
    if rtype == R_TOPIC:
        return 0 if ck.topic(op, name) else E.TOPIC_AUTHORIZATION_FAILED
    if rtype == R_GROUP:
        return 0 if ck.group(op, name) else E.GROUP_AUTHORIZATION_FAILED
    return 0 if ck.cluster(op) else E.CLUSTER_AUTHORIZATION_FAILED


@wraps(ApiKey.DESCRIBE_CONFIGS)
async def describe_configs(ck, ctx, req, handler):
    from kproto.messages.describe_configs_response import DescribeConfigsResponse as R
    codes = {}
    req.resources, denied = _split(req.resources, lambda r: not codes.setdefault(
        (r.resource_type, r.resource_name), _config_code(ck, DESCRIBE_CONFIGS, r.resource_type, r.resource_name)))
    resp = await handler(ctx, req)
    resp.results = list(resp.results) + [R.DescribeConfigsResult(
        error_code=codes[(r.resource_type, r.resource_name)],
        error_message=MESSAGES[codes[(r.resource_type, r.resource_name)]],
        resource_type=r.resource_type, resource_name=r.resource_name, configs=[]) for r in denied]
    return resp


@wraps(ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS)
async def alter_configs(ck, ctx, req, handler):
    if ctx.api_key == ApiKey.ALTER_CONFIGS:
        from kproto.messages.alter_configs_response import AlterConfigsResponse as R
    else:
        from kproto.messages.incremental_alter_configs_response import IncrementalAlterConfigsResponse as R
    codes = {}
    req.resources, denied = _split(req.resources, lambda r: not codes.setdefault(
        (r.resource_type, r.resource_name), _config_code(ck, ALTER_CONFIGS, r.resource_type, r.resource_name)))
    resp = await handler(ctx, req)
    resp.responses = list(resp.responses) + [R.AlterConfigsResourceResponse(
        error_code=codes[(r.resource_type, r.resource_name)],
        error_message=MESSAGES[codes[(r.resource_type, r.resource_name)]],
        resource_type=r.resource_type, resource_name=r.resource_name) for r in denied]
    return resp


# -- transactions ------------------------------------------------------------------------------

@wraps(ApiKey.INIT_PRODUCER_ID)
async def init_producer_id(ck, ctx, req, handler):
    from kproto.messages.init_producer_id_response import InitProducerIdResponse as R
    if req.transactional_id is not None:
        if not ck.txn(WRITE, req.transactional_id):
            return R(throttle_time_ms=0, error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1,
                     producer_epoch=-1)
    elif not (ck.cluster(IDEMPOTENT_WRITE) or ck.authorizer.authorize_any(ck.principal, ck.host, WRITE, TOPIC)):
        return R(throttle_time_ms=0, error_code=E.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
    return await handler(ctx, req)


@wraps(ApiKey.ADD_PARTITIONS_TO_TXN)
async def add_partitions_to_txn(ck, ctx, req, handler):
    from kproto.messages.add_partitions_to_txn_response import AddPartitionsToTxnResponse as R
    if ctx.api_version >= 4:
        if not ck.cluster(CLUSTER_ACTION):
            return R(throttle_time_ms=0, error_code=E.CLUSTER_AUTHORIZATION_FAILED, results_by_transaction=[])
        return await handler(ctx, req)

    def answer(code_of):
        return R(throttle_time_ms=0, error_code=0, results_by_topic_v3_and_below=[R.AddPartitionsToTxnTopicResult(
            name=t.name, results_by_partition=[R.AddPartitionsToTxnPartitionResult(
                partition_index=p, partition_error_code=code_of(t.name)) for p in t.partitions])
            for t in req.v3_and_below_topics])
    if not ck.txn(WRITE, req.v3_and_below_transactional_id):
        return answer(lambda _n: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    denied = {t.name for t in req.v3_and_below_topics if not ck.topic(WRITE, t.name)}
    if denied:
        return answer(lambda n: E.TOPIC_AUTHORIZATION_FAILED if n in denied else E.OPERATION_NOT_ATTEMPTED)
    return await handler(ctx, req)


@wraps(ApiKey.ADD_OFFSETS_TO_TXN)
async def add_offsets_to_txn(ck, ctx, req, handler):
    from kproto.messages.add_offsets_to_txn_response import AddOffsetsToTxnResponse as R
    if not ck.txn(WRITE, req.transactional_id):
        return R(throttle_time_ms=0, error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ck.group(READ, req.group_id):
        return R(throttle_time_ms=0, error_code=E.GROUP_AUTHORIZATION_FAILED)
    return await handler(ctx, req)


@wraps(ApiKey.END_TXN)
async def end_txn(ck, ctx, req, handler):
    from kproto.messages.end_txn_response import EndTxnResponse as R
    if not ck.txn(WRITE, req.transactional_id):
        return R(throttle_time_ms=0, error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1,
                 producer_epoch=-1)
    return await handler(ctx, req)


@wraps(ApiKey.WRITE_TXN_MARKERS)
async def write_txn_markers(ck, ctx, req, handler):
    from kproto.messages.write_txn_markers_response import WriteTxnMarkersResponse as R
    if not ck.cluster(CLUSTER_ACTION):
        return R(markers=[R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
            R.WritableTxnMarkerTopicResult(name=t.name, partitions=[R.WritableTxnMarkerPartitionResult(
                partition_index=p, error_code=E.CLUSTER_AUTHORIZATION_FAILED) for p in t.partition_indexes])
            for t in m.topics]) for m in req.markers])
    return await handler(ctx, req)


def _share_state_wrapper(op):
    """The share-state RPCs (83-87), inter-broker: without CLUSTER_ACTION every partition of the
    request is answered CLUSTER_AUTHORIZATION_FAILED (Kafka's toGlobalErrorResponse)."""
    async def check(ck, ctx, req, handler):
        if ck.cluster(CLUSTER_ACTION):
            return await handler(ctx, req)
        from kproto import api
        R = api.response_class(ctx.api_key)
        topic_cls = R._schema[0][2][2:]
        return R(results=[getattr(R, topic_cls)(topic_id=t.topic_id, partitions=[R.PartitionResult(
            partition=p.partition, error_code=E.CLUSTER_AUTHORIZATION_FAILED,
            error_message=MESSAGES[E.CLUSTER_AUTHORIZATION_FAILED]) for p in t.partitions])
            for t in req.topics or ()])
    return check


for _key in (ApiKey.INITIALIZE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE, ApiKey.WRITE_SHARE_GROUP_STATE,
             ApiKey.DELETE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY):
    WRAPPERS[int(_key)] = _share_state_wrapper(CLUSTER_ACTION)


@wraps(ApiKey.DESCRIBE_TRANSACTIONS)
async def describe_transactions(ck, ctx, req, handler):
    from kproto.messages.describe_transactions_response import DescribeTransactionsResponse as R
    req.transactional_ids, denied = _split(req.transactional_ids, lambda t: ck.txn(DESCRIBE, t))
    resp = await handler(ctx, req)
    for s in resp.transaction_states:
        s.topics = [t for t in s.topics if ck.topic(DESCRIBE, t.topic)]
    resp.transaction_states = list(resp.transaction_states) + [R.TransactionState(
        error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, transactional_id=t, transaction_state="",
        transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1, topics=[])
        for t in denied]
    return resp


@wraps(ApiKey.LIST_TRANSACTIONS)
async def list_transactions(ck, ctx, req, handler):
    resp = await handler(ctx, req)
    resp.transaction_states = [s for s in resp.transaction_states if ck.txn(DESCRIBE, s.transactional_id)]
    return resp


# -- cluster -----------------------------------------------------------------------------------

@wraps(ApiKey.DESCRIBE_CLUSTER)
async def describe_cluster(ck, ctx, req, handler):
    resp = await handler(ctx, req)
    resp.cluster_authorized_operations = (ck.ops(CLUSTER, CLUSTER_NAME)
                                          if req.include_cluster_authorized_operations else OMITTED)
    return resp


@wraps(ApiKey.DESCRIBE_LOG_DIRS)
async def describe_log_dirs(ck, ctx, req, handler):
    from kproto.messages.describe_log_dirs_response import DescribeLogDirsResponse as R
    if not ck.cluster(DESCRIBE):
        return R(throttle_time_ms=0, error_code=E.CLUSTER_AUTHORIZATION_FAILED if ctx.api_version >= 3 else 0,
                 results=[])
    return await handler(ctx, req)


@wraps(ApiKey.CREATE_ACLS)
async def create_acls(ck, ctx, req, handler):
    from kproto.messages.create_acls_response import CreateAclsResponse as R
    if not ck.cluster(ALTER):
        return R(throttle_time_ms=0, results=[R.AclCreationResult(
            error_code=E.CLUSTER_AUTHORIZATION_FAILED, error_message=MESSAGES[E.CLUSTER_AUTHORIZATION_FAILED])
            for _ in req.creations])
    return await handler(ctx, req)


@wraps(ApiKey.DELETE_ACLS)
async def delete_acls(ck, ctx, req, handler):
    from kproto.messages.delete_acls_response import DeleteAclsResponse as R
    if not ck.cluster(ALTER):
        return R(throttle_time_ms=0, filter_results=[R.DeleteAclsFilterResult(
            error_code=E.CLUSTER_AUTHORIZATION_FAILED, error_message=MESSAGES[E.CLUSTER_AUTHORIZATION_FAILED],
            matching_acls=[]) for _ in req.filters])
    return await handler(ctx, req)


@wraps(ApiKey.DESCRIBE_ACLS)
async def describe_acls(ck, ctx, req, handler):
    from kproto.messages.describe_acls_response import DescribeAclsResponse as R
    if not ck.cluster(DESCRIBE):
        return R(throttle_time_ms=0, error_code=E.CLUSTER_AUTHORIZATION_FAILED,
                 error_message=MESSAGES[E.CLUSTER_AUTHORIZATION_FAILED], resources=[])
    return await handler(ctx, req)


@wraps(ApiKey.DESCRIBE_CLIENT_QUOTAS)
async def describe_client_quotas(ck, ctx, req, handler):
    from kproto.messages.describe_client_quotas_response import DescribeClientQuotasResponse as R
    if not ck.cluster(DESCRIBE_CONFIGS):
        return R(throttle_time_ms=0, error_code=E.CLUSTER_AUTHORIZATION_FAILED,
                 error_message=MESSAGES[E.CLUSTER_AUTHORIZATION_FAILED], entries=None)
    return await handler(ctx, req)


@wraps(ApiKey.ALTER_CLIENT_QUOTAS)
async def alter_client_quotas(ck, ctx, req, handler):
    from kproto.messages.alter_client_quotas_response import AlterClientQuotasResponse as R
    if not ck.cluster(ALTER_CONFIGS):
        return R(throttle_time_ms=0, entries=[R.EntryData(
            error_code=E.CLUSTER_AUTHORIZATION_FAILED, error_message=MESSAGES[E.CLUSTER_AUTHORIZATION_FAILED],
            entity=[R.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity])
            for entry in req.entries])
    return await handler(ctx, req)


# -- APIs other parts of kproto may serve (KIP-848 groups, partition admin, quorum) -------------------

async def _group_heartbeat(ck, ctx, req, handler, R, refused_epoch: int):
    """A KIP-848 or share group heartbeat: READ on the group, DESCRIBE on each subscribed topic."""
    code, message = 0, None
    if not ck.group(READ, req.group_id):
        code = E.GROUP_AUTHORIZATION_FAILED
    elif req.subscribed_topic_names and not all(ck.topic(DESCRIBE, t) for t in req.subscribed_topic_names):
        code, message = E.TOPIC_AUTHORIZATION_FAILED, "The group has subscribed to topics that are not authorized."
    if code:
        return R(throttle_time_ms=0, error_code=code, error_message=message, member_id=None,
                 member_epoch=refused_epoch, heartbeat_interval_ms=0, assignment=None)
    return await handler(ctx, req)


async def _group_describe(ck, ctx, req, handler, R):
    """ConsumerGroupDescribe / ShareGroupDescribe: DESCRIBE on each group, refused ones answered."""
    req.group_ids, denied = _split(req.group_ids, lambda g: ck.group(DESCRIBE, g))
    resp = await handler(ctx, req)
    for g in resp.groups:
        if req.include_authorized_operations and g.error_code == 0:
            g.authorized_operations = ck.ops(GROUP, g.group_id)
    resp.groups = list(resp.groups) + [R.DescribedGroup(
        error_code=E.GROUP_AUTHORIZATION_FAILED, error_message=MESSAGES[E.GROUP_AUTHORIZATION_FAILED], group_id=g,
        group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="", members=[],
        authorized_operations=OMITTED) for g in denied]
    return resp


@wraps(ApiKey.CONSUMER_GROUP_HEARTBEAT)
async def consumer_group_heartbeat(ck, ctx, req, handler):
    from kproto.messages.consumer_group_heartbeat_response import ConsumerGroupHeartbeatResponse as R
    return await _group_heartbeat(ck, ctx, req, handler, R, -1)


@wraps(ApiKey.CONSUMER_GROUP_DESCRIBE)
async def consumer_group_describe(ck, ctx, req, handler):
    from kproto.messages.consumer_group_describe_response import ConsumerGroupDescribeResponse as R
    return await _group_describe(ck, ctx, req, handler, R)


# -- share groups (KIP-932): as Kafka 4.3's KafkaApis -------------------------------------------------

@wraps(ApiKey.SHARE_GROUP_HEARTBEAT)
async def share_group_heartbeat(ck, ctx, req, handler):
    from kproto.messages.share_group_heartbeat_response import ShareGroupHeartbeatResponse as R
    return await _group_heartbeat(ck, ctx, req, handler, R, 0)


@wraps(ApiKey.SHARE_GROUP_DESCRIBE)
async def share_group_describe(ck, ctx, req, handler):
    from kproto.messages.share_group_describe_response import ShareGroupDescribeResponse as R
    return await _group_describe(ck, ctx, req, handler, R)


@wraps(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)
async def describe_share_group_offsets(ck, ctx, req, handler):
    """DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED for the group), DESCRIBE on each topic named
    (the topic is left out otherwise)."""
    from kproto.messages.describe_share_group_offsets_response import DescribeShareGroupOffsetsResponse as R
    req.groups, denied = _split(req.groups, lambda g: ck.group(DESCRIBE, g.group_id))
    for g in req.groups:
        if g.topics is not None:
            g.topics = [t for t in g.topics if ck.topic(DESCRIBE, t.topic_name)]
    resp = await handler(ctx, req)
    for g in resp.groups:
        g.topics = [t for t in g.topics if ck.topic(DESCRIBE, t.topic_name)]
    resp.groups = list(resp.groups) + [R.DescribeShareGroupOffsetsResponseGroup(
        group_id=g.group_id, topics=[], error_code=E.GROUP_AUTHORIZATION_FAILED,
        error_message=MESSAGES[E.GROUP_AUTHORIZATION_FAILED]) for g in denied]
    return resp


@wraps(ApiKey.ALTER_SHARE_GROUP_OFFSETS)
async def alter_share_group_offsets(ck, ctx, req, handler):
    """READ on the group (else the whole request fails), READ on each topic (else its partitions
    answer TOPIC_AUTHORIZATION_FAILED and are not altered), as Kafka 4.3's KafkaApis."""
    from kproto.messages.alter_share_group_offsets_response import AlterShareGroupOffsetsResponse as R
    if not ck.group(READ, req.group_id):
        return R(throttle_time_ms=0, error_code=E.GROUP_AUTHORIZATION_FAILED,
                 error_message=MESSAGES[E.GROUP_AUTHORIZATION_FAILED], responses=[])
    req.topics, denied = _split(req.topics, lambda t: ck.topic(READ, t.topic_name))
    resp = await handler(ctx, req)
    if resp.error_code == 0:
        resp.responses = [R.AlterShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name, topic_id=_topic_id(ctx, t.topic_name), partitions=[
                R.AlterShareGroupOffsetsResponsePartition(
                    partition_index=p.partition_index, error_code=E.TOPIC_AUTHORIZATION_FAILED,
                    error_message=MESSAGES[E.TOPIC_AUTHORIZATION_FAILED]) for p in t.partitions])
            for t in denied] + list(resp.responses)
    return resp


@wraps(ApiKey.DELETE_SHARE_GROUP_OFFSETS)
async def delete_share_group_offsets(ck, ctx, req, handler):
    """DELETE on the group (else the whole request fails), READ on each topic (else the topic answers
    TOPIC_AUTHORIZATION_FAILED), as Kafka 4.3's KafkaApis."""
    from kproto.messages.delete_share_group_offsets_response import DeleteShareGroupOffsetsResponse as R
    if not ck.group(DELETE, req.group_id):
        return R(throttle_time_ms=0, error_code=E.GROUP_AUTHORIZATION_FAILED,
                 error_message=MESSAGES[E.GROUP_AUTHORIZATION_FAILED], responses=[])
    req.topics, denied = _split(req.topics, lambda t: ck.topic(READ, t.topic_name))
    resp = await handler(ctx, req)
    if resp.error_code == 0:
        resp.responses = [R.DeleteShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name, topic_id=ZERO_UUID, error_code=E.TOPIC_AUTHORIZATION_FAILED,
            error_message=MESSAGES[E.TOPIC_AUTHORIZATION_FAILED]) for t in denied] + list(resp.responses)
    return resp


def _topic_id(ctx, name: str):
    t = ctx.broker.image.topics.get(name)
    return t.topic_id if t is not None else ZERO_UUID


async def _share_records(ck, ctx, req, handler, R, part):
    """ShareFetch/ShareAcknowledge: READ on the group, else the whole request fails; READ on each
    topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED (and are not served)."""
    if not ck.group(READ, req.group_id):
        return R(throttle_time_ms=0, error_code=E.GROUP_AUTHORIZATION_FAILED, error_message=None,
                 acquisition_lock_timeout_ms=0, responses=[], node_endpoints=[])
    req.topics, denied = _split(req.topics, lambda t: ck.topic(READ, _topic_name(ctx, None, t.topic_id) or ""))
    resp = await handler(ctx, req)
    if denied and resp.error_code == 0:
        resp.responses = list(resp.responses) + [
            part(t.topic_id, [p.partition_index for p in t.partitions]) for t in denied]
    return resp


@wraps(ApiKey.SHARE_FETCH)
async def share_fetch(ck, ctx, req, handler):
    from kproto.messages.share_fetch_response import ShareFetchResponse as R
    return await _share_records(ck, ctx, req, handler, R, lambda tid, ps: R.ShareFetchableTopicResponse(
        topic_id=tid, partitions=[R.PartitionData(
            partition_index=p, error_code=E.TOPIC_AUTHORIZATION_FAILED, error_message=None,
            acknowledge_error_code=E.TOPIC_AUTHORIZATION_FAILED, acknowledge_error_message=None,
            current_leader=R.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1), records=b"", acquired_records=[])
            for p in ps]))


@wraps(ApiKey.SHARE_ACKNOWLEDGE)
async def share_acknowledge(ck, ctx, req, handler):
    from kproto.messages.share_acknowledge_response import ShareAcknowledgeResponse as R
    return await _share_records(ck, ctx, req, handler, R, lambda tid, ps: R.ShareAcknowledgeTopicResponse(
        topic_id=tid, partitions=[R.PartitionData(
            partition_index=p, error_code=E.TOPIC_AUTHORIZATION_FAILED, error_message=None,
            current_leader=R.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)) for p in ps]))


@wraps(ApiKey.DESCRIBE_TOPIC_PARTITIONS)
async def describe_topic_partitions(ck, ctx, req, handler):
    from kproto.messages.describe_topic_partitions_response import DescribeTopicPartitionsResponse as R
    denied = []
    if req.topics:
        req.topics, denied = _split(req.topics, lambda t: ck.topic(DESCRIBE, t.name))
        if not req.topics:
            return R(throttle_time_ms=0, next_cursor=None, topics=[R.DescribeTopicPartitionsResponseTopic(
                error_code=E.TOPIC_AUTHORIZATION_FAILED, name=t.name, topic_id=ZERO_UUID, is_internal=False,
                partitions=[], topic_authorized_operations=OMITTED) for t in denied])
    resp = await handler(ctx, req)
    topics = []
    for t in resp.topics:
        if t.error_code == 0 and t.name and not ck.topic(DESCRIBE, t.name):
            continue
        if t.error_code == 0 and t.name:
            t.topic_authorized_operations = ck.ops(TOPIC, t.name)
        topics.append(t)
    resp.topics = topics + [R.DescribeTopicPartitionsResponseTopic(
        error_code=E.TOPIC_AUTHORIZATION_FAILED, name=t.name, topic_id=ZERO_UUID, is_internal=False, partitions=[],
        topic_authorized_operations=OMITTED) for t in denied]
    return resp


def _cluster_wrapper(op):
    async def check(ck, ctx, req, handler):
        if ck.cluster(op):
            return await handler(ctx, req)
        from kproto import api
        resp = api.response_class(ctx.api_key)()
        if not hasattr(resp, "error_code"):
            raise _close(f"API {ctx.api_key} refused: CLUSTER_AUTHORIZATION_FAILED")
        resp.error_code = E.CLUSTER_AUTHORIZATION_FAILED
        if hasattr(resp, "error_message"):
            resp.error_message = MESSAGES[E.CLUSTER_AUTHORIZATION_FAILED]
        return resp
    return check


@wraps(ApiKey.ELECT_LEADERS)
async def elect_leaders(ck, ctx, req, handler):
    """ALTER on the cluster; a refusal carries CLUSTER_AUTHORIZATION_FAILED at the top level and, with
    its message, on every partition asked for (ElectLeadersRequest.getErrorResponse)."""
    if ck.cluster(ALTER):
        return await handler(ctx, req)
    from kproto.error_response import error_response
    resp = error_response(ctx.api_key, ctx.api_version, req, E.CLUSTER_AUTHORIZATION_FAILED)
    resp.error_code = E.CLUSTER_AUTHORIZATION_FAILED   # (v0 has no field for it: not encoded)
    for topic in resp.replica_election_results:
        for p in topic.partition_result:
            p.error_message = MESSAGES[E.CLUSTER_AUTHORIZATION_FAILED]
    return resp


for _key, _op in ((ApiKey.ALTER_PARTITION_REASSIGNMENTS, ALTER),
                  (ApiKey.LIST_PARTITION_REASSIGNMENTS, DESCRIBE), (ApiKey.DESCRIBE_QUORUM, DESCRIBE),
                  (ApiKey.UPDATE_FEATURES, ALTER), (ApiKey.ALTER_REPLICA_LOG_DIRS, ALTER),
                  (ApiKey.UNREGISTER_BROKER, ALTER), (ApiKey.LIST_CONFIG_RESOURCES, DESCRIBE_CONFIGS),
                  (ApiKey.ALTER_PARTITION, CLUSTER_ACTION),   # (ControllerApis: brokers' CLUSTER_ACTION)
                  (ApiKey.ADD_RAFT_VOTER, ALTER), (ApiKey.REMOVE_RAFT_VOTER, ALTER)):
    WRAPPERS[int(_key)] = _cluster_wrapper(_op)
for _key in ("GET_TELEMETRY_SUBSCRIPTIONS", "PUSH_TELEMETRY"):
    if hasattr(ApiKey, _key):
        UNCHECKED.add(int(getattr(ApiKey, _key)))   # Kafka authorizes neither (KIP-714)

"""The answer to a request whose handler failed unexpectedly, as Kafka's
`AbstractRequest.getErrorResponse` builds it: the error in the top-level
error code where the version has one, and in every topic / partition /
group / resource entry the request named (the form older clients read).
Kafka answers UNKNOWN_SERVER_ERROR this way and keeps the connection."""
from __future__ import annotations

import sys

from kproto import api
from kproto.api import ApiKey
from kproto.errors import ErrorCode


def _has_field(cls, name: str, version: int) -> bool:
    for field in cls._schema:
        if field[0] == name:
            lo, hi = field[3]
            return lo <= version and (hi is None or version <= hi)
    return False


def _classes(response_cls):
    return sys.modules[response_cls.__module__]


def _produce(m, req, v, code):
    return {"responses": [m.TopicProduceResponse(name=t.name, partition_responses=[
        m.PartitionProduceResponse(index=p.index, error_code=code, base_offset=-1, log_append_time_ms=-1,
                                   log_start_offset=-1) for p in t.partition_data]) for t in req.topic_data]}


def _fetch(m, req, v, code):
    # v13+: the top-level error alone; earlier versions also per partition
    topics = [] if v >= 13 else [m.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=[
        m.PartitionData(partition_index=p.partition, error_code=code, high_watermark=-1, last_stable_offset=-1,
                        log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1, records=b"")
        for p in t.partitions]) for t in req.topics]
    return {"responses": topics, "session_id": req.session_id}


def _list_offsets(m, req, v, code):
    return {"topics": [m.ListOffsetsTopicResponse(name=t.name, partitions=[
        m.ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=code, timestamp=-1,
                                       offset=-1, leader_epoch=-1) for p in t.partitions]) for t in req.topics]}


def _metadata(m, req, v, code):
    return {"brokers": [], "controller_id": -1, "topics": [
        m.MetadataResponseTopic(error_code=code, name=t.name, topic_id=t.topic_id, partitions=[])
        for t in (req.topics or [])]}


def _offset_commit(m, req, v, code, prefix="OffsetCommit"):
    topic_cls = getattr(m, f"{prefix}ResponseTopic")
    part_cls = getattr(m, f"{prefix}ResponsePartition")
    return {"topics": [topic_cls(name=t.name, partitions=[
        part_cls(partition_index=p.partition_index, error_code=code) for p in t.partitions]) for t in req.topics]}


def _txn_offset_commit(m, req, v, code):
    return _offset_commit(m, req, v, code, "TxnOffsetCommit")


def _offset_fetch(m, req, v, code):
    if v >= 8:
        return {"groups": [m.OffsetFetchResponseGroup(group_id=g.group_id, topics=[], error_code=code)
                           for g in req.groups]}
    return {"topics": [m.OffsetFetchResponseTopic(name=t.name, partitions=[
        m.OffsetFetchResponsePartition(partition_index=i, committed_offset=-1, committed_leader_epoch=-1,
                                       metadata="", error_code=code) for i in t.partition_indexes])
        for t in (req.topics or [])]}


def _create_topics(m, req, v, code):
    return {"topics": [m.CreatableTopicResult(name=t.name, error_code=code, num_partitions=-1,
                                              replication_factor=-1) for t in req.topics]}


def _delete_topics(m, req, v, code):
    if v >= 6:
        return {"responses": [m.DeletableTopicResult(name=t.name, topic_id=t.topic_id, error_code=code)
                              for t in req.topics]}
    return {"responses": [m.DeletableTopicResult(name=n, error_code=code) for n in req.topic_names]}


def _describe_groups(m, req, v, code):
    return {"groups": [m.DescribedGroup(error_code=code, group_id=g, group_state="", protocol_type="",
                                        protocol_data="", members=[]) for g in req.groups]}


def _describe_configs(m, req, v, code):
    return {"results": [m.DescribeConfigsResult(error_code=code, resource_type=r.resource_type,
                                                resource_name=r.resource_name, configs=[])
                        for r in req.resources]}


def _add_partitions_to_txn(m, req, v, code):
    if v >= 4:
        return {}
    return {"results_by_topic_v3_and_below": [m.AddPartitionsToTxnTopicResult(name=t.name, results_by_partition=[
        m.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=code) for p in t.partitions])
        for t in req.v3_and_below_topics]}


def _find_coordinator(m, req, v, code):
    if v < 4:
        return {"node_id": -1, "host": "", "port": -1}
    return {"coordinators": [m.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=code)
                             for k in req.coordinator_keys]}


def _delete_records(m, req, v, code):
    return {"topics": [m.DeleteRecordsTopicResult(name=t.name, partitions=[
        m.DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1, error_code=code)
        for p in t.partitions]) for t in req.topics]}


def _offset_for_leader_epoch(m, req, v, code):
    return {"topics": [m.OffsetForLeaderTopicResult(topic=t.topic, partitions=[
        m.EpochEndOffset(error_code=code, partition=p.partition, leader_epoch=-1, end_offset=-1)
        for p in t.partitions]) for t in req.topics]}


def _alter_configs(m, req, v, code):
    return {"responses": [m.AlterConfigsResourceResponse(error_code=code, resource_type=r.resource_type,
                                                         resource_name=r.resource_name) for r in req.resources]}


def _create_partitions(m, req, v, code):
    return {"results": [m.CreatePartitionsTopicResult(name=t.name, error_code=code) for t in req.topics]}


def _delete_groups(m, req, v, code):
    return {"results": [m.DeletableGroupResult(group_id=g, error_code=code) for g in req.groups_names]}


def _write_txn_markers(m, req, v, code):
    # Kafka keys the answer by producer id: a later marker of the same producer replaces an earlier one
    by_producer = {}
    for marker in req.markers:
        by_producer[marker.producer_id] = [m.WritableTxnMarkerTopicResult(name=t.name, partitions=[
            m.WritableTxnMarkerPartitionResult(partition_index=p, error_code=code) for p in t.partition_indexes])
            for t in marker.topics]
    return {"markers": [m.WritableTxnMarkerResult(producer_id=pid, topics=topics)
                        for pid, topics in by_producer.items()]}


def _create_acls(m, req, v, code):
    return {"results": [m.AclCreationResult(error_code=code, error_message=None) for _ in req.creations]}


def _delete_acls(m, req, v, code):
    return {"filter_results": [m.DeleteAclsFilterResult(error_code=code, error_message=None, matching_acls=[])
                               for _ in req.filters]}


def _alter_replica_log_dirs(m, req, v, code):
    return {"results": [m.AlterReplicaLogDirTopicResult(topic_name=t.name, partitions=[
        m.AlterReplicaLogDirPartitionResult(partition_index=p, error_code=code) for p in t.partitions])
        for d in req.dirs for t in d.topics]}


def _describe_log_dirs(m, req, v, code):
    # no log dir at all; v3+ carries the code in the top-level error code (v0-2 have no place for it)
    return {"results": []}


def _elect_leaders(m, req, v, code):
    return {"replica_election_results": [m.ReplicaElectionResult(topic=t.topic, partition_result=[
        m.PartitionResult(partition_id=p, error_code=code, error_message=None) for p in t.partitions])
        for t in (req.topic_partitions or [])]}


def _alter_client_quotas(m, req, v, code):
    return {"entries": [m.EntryData(error_code=code, error_message=_message(code), entity=[
        m.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity])
        for entry in req.entries]}


def _alter_user_scram_credentials(m, req, v, code):
    users = sorted({c.name for c in req.deletions} | {c.name for c in req.upsertions})
    return {"results": [m.AlterUserScramCredentialsResult(user=u, error_code=code, error_message=None)
                        for u in users]}


def _describe_producers(m, req, v, code):
    return {"topics": [m.TopicResponse(name=t.name, partitions=[
        m.PartitionResponse(partition_index=p, error_code=code) for p in t.partition_indexes])
        for t in req.topics]}


def _describe_transactions(m, req, v, code):
    return {"transaction_states": [m.TransactionState(error_code=code, transactional_id=t)
                                   for t in req.transactional_ids]}


def _consumer_group_describe(m, req, v, code):
    return {"groups": [m.DescribedGroup(error_code=code, group_id=g) for g in req.group_ids]}


def _describe_share_group_offsets(m, req, v, code):
    return {"groups": [m.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, topics=[], error_code=code)
                       for g in req.groups]}


def _describe_topic_partitions(m, req, v, code):
    return {"topics": [m.DescribeTopicPartitionsResponseTopic(error_code=code, name=t.name, is_internal=False,
                                                              partitions=[]) for t in req.topics]}


def _alter_partition_reassignments(m, req, v, code):
    return {"error_message": None, "responses": [m.ReassignableTopicResponse(name=t.name, partitions=[
        m.ReassignablePartitionResponse(partition_index=p.partition_index, error_code=code, error_message=None)
        for p in t.partitions]) for t in req.topics]}


def _list_partition_reassignments(m, req, v, code):
    return {"error_message": None, "topics": [m.OngoingTopicReassignment(name=t.name, partitions=[
        m.OngoingPartitionReassignment(partition_index=p) for p in t.partition_indexes])
        for t in (req.topics or [])]}


def _describe_user_scram_credentials(m, req, v, code):
    # one result per user asked about, with no user name (as Kafka builds it)
    return {"error_message": None, "results": [
        m.DescribeUserScramCredentialsResult(user="", error_code=code, error_message=None)
        for _ in (req.users or [])]}


def _describe_client_quotas(m, req, v, code):
    return {"error_message": None, "entries": None}


def _share_state(result: str, **partition_defaults):
    """The share-state RPCs (83-87): every topic and partition asked about, with the error and its
    standard text (their getErrorResponse)."""
    def build(m, req, v, code):
        return {"results": [getattr(m, result)(topic_id=t.topic_id, partitions=[
            m.PartitionResult(partition=p.partition, error_code=code, error_message=_message(code),
                              **partition_defaults) for p in t.partitions]) for t in req.topics or []]}
    return build


# AlterClientQuotas and the share-state RPCs put the error's standard text (Kafka's Errors.message())
# in their entries
_MESSAGES = {ErrorCode.UNKNOWN_SERVER_ERROR: "The server experienced an unexpected error when processing the request."}


def _message(code: int) -> str | None:
    return _MESSAGES.get(code)


_ENTRIES = {
    ApiKey.WRITE_TXN_MARKERS: _write_txn_markers,
    ApiKey.CREATE_ACLS: _create_acls,
    ApiKey.DELETE_ACLS: _delete_acls,
    ApiKey.ALTER_REPLICA_LOG_DIRS: _alter_replica_log_dirs,
    ApiKey.DESCRIBE_LOG_DIRS: _describe_log_dirs,
    ApiKey.ELECT_LEADERS: _elect_leaders,
    ApiKey.ALTER_CLIENT_QUOTAS: _alter_client_quotas,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _alter_user_scram_credentials,
    ApiKey.DESCRIBE_PRODUCERS: _describe_producers,
    ApiKey.DESCRIBE_TRANSACTIONS: _describe_transactions,
    ApiKey.CONSUMER_GROUP_DESCRIBE: _consumer_group_describe,
    ApiKey.SHARE_GROUP_DESCRIBE: _consumer_group_describe,   # the same shape: one entry per group id
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: _describe_share_group_offsets,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: _describe_topic_partitions,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _list_partition_reassignments,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _describe_user_scram_credentials,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _describe_client_quotas,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.DELETE_RECORDS: _delete_records,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.ALTER_CONFIGS: _alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _alter_configs,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.DELETE_GROUPS: _delete_groups,
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.METADATA: _metadata,
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    ApiKey.DESCRIBE_CONFIGS: _describe_configs,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: _share_state("InitializeStateResult"),
    ApiKey.READ_SHARE_GROUP_STATE: _share_state("ReadStateResult", state_batches=[]),
    ApiKey.WRITE_SHARE_GROUP_STATE: _share_state("WriteStateResult"),
    ApiKey.DELETE_SHARE_GROUP_STATE: _share_state("DeleteStateResult"),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: _share_state("ReadStateSummaryResult"),
}


def error_response(api_key: int, version: int, request, code: int):
    """The response carrying ``code`` for this request, or None for an API
    this module does not know (the connection is closed then)."""
    cls = api.response_class(api_key)
    fields = {}
    entries = _ENTRIES.get(api_key)
    if entries is not None:
        fields.update(entries(_classes(cls), request, version, code))
    if _has_field(cls, "error_code", version):
        fields["error_code"] = code
    if entries is None and not fields:
        return None
    return cls(**fields)

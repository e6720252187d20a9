"""The answer to a request whose handler failed unexpectedly, as Kafka's
`AbstractRequest.getErrorResponse` builds it: the error in the top-level
error code where the version has one, and in every topic / partition /
group / resource entry the request named (the form older clients read).
Kafka answers UNKNOWN_SERVER_ERROR this way and keeps the connection."""
from __future__ import annotations

import sys

from kproto import api
from kproto.api import ApiKey


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


_ENTRIES = {
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
}


def error_response(api_key: int, version: int, request, code: int):
    """The response carrying ``code`` for this request, or None when the
    API has no place for an error (the connection is closed then)."""
    cls = api.response_class(api_key)
    fields = {}
    entries = _ENTRIES.get(api_key)
    if entries is not None:
        fields.update(entries(_classes(cls), request, version, code))
    if _has_field(cls, "error_code", version):
        fields["error_code"] = code
    if not fields:
        return None
    return cls(**fields)

"""Transaction APIs: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn, WriteTxnMarkers, TxnOffsetCommit, DescribeProducers,
DescribeTransactions, ListTransactions. A thin adapter, as Kafka's KafkaApis:
request fields in, per-version error conversions and response shapes out;
the logic is in broker/transactions (and broker/groups for the offsets)."""
from __future__ import annotations

import re

from kproto.api import ApiKey
from kproto.errors import ErrorCode as E
from kproto.messages.add_offsets_to_txn_response import AddOffsetsToTxnResponse
from kproto.messages.add_partitions_to_txn_response import AddPartitionsToTxnResponse
from kproto.messages.describe_producers_response import DescribeProducersResponse
from kproto.messages.describe_transactions_response import DescribeTransactionsResponse
from kproto.messages.end_txn_response import EndTxnResponse
from kproto.messages.init_producer_id_response import InitProducerIdResponse
from kproto.messages.list_transactions_response import ListTransactionsResponse
from kproto.messages.txn_offset_commit_response import TxnOffsetCommitResponse
from kproto.messages.write_txn_markers_response import WriteTxnMarkersResponse

from broker.groups.placement import partition_for as group_partition_for
from broker.coordination.shell import wall_clock_ms
from broker.handlers import handles
from broker.metadata.internal_topics import OFFSETS_TOPIC
from broker.metadata.topic_names import INTERNAL_TOPICS, invalid_reason
from broker.transactions.markers import append_marker, await_marker, offsets_completed

UNKNOWN_PARTITION_MESSAGE = "This server does not host this topic-partition."
# TxnOffsetCommit versions from which the commit adds the offsets partition to the transaction (KIP-890 part 2)
IMPLICIT_ADD_TXN_OFFSET_COMMIT_VERSION = 5


def _coordinator(ctx):
    return ctx.broker.transactions


def _fenced(error: int, version: int, first_version_with_fenced: int) -> int:
    """Clients older than KIP-588 do not know PRODUCER_FENCED: Kafka answers
    them INVALID_PRODUCER_EPOCH, which they handle the same way."""
    if version < first_version_with_fenced and error == E.PRODUCER_FENCED:
        return E.INVALID_PRODUCER_EPOCH
    return error


def _partition_exists(ctx, topic: str, partition: int) -> bool:
    t = ctx.broker.image.topics.get(topic)
    return t is not None and partition in t.partitions


# ======================================================================== InitProducerId

@handles(ApiKey.INIT_PRODUCER_ID, 0, 5)
async def init_producer_id(ctx, req):
    v = ctx.api_version
    pid, epoch = (req.producer_id, req.producer_epoch) if v >= 3 else (-1, -1)
    if (pid == -1) != (epoch == -1):
        return InitProducerIdResponse(throttle_time_ms=0, error_code=E.INVALID_REQUEST, producer_id=-1,
                                      producer_epoch=-1)
    # without a transactional id the expected id/epoch are ignored: a fresh
    # id serves a KIP-360 idempotent producer just as well (as in Kafka)
    res = await _coordinator(ctx).init_producer_id(req.transactional_id, req.transaction_timeout_ms,
                                                   (pid, epoch) if pid >= 0 else None)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=_fenced(res.error, v, 4),
                                  producer_id=res.producer_id, producer_epoch=res.producer_epoch)


# ======================================================================== AddPartitionsToTxn

_TxnResult = AddPartitionsToTxnResponse.AddPartitionsToTxnResult
_TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_PartitionResult = AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult


def _topic_results(errors: dict) -> list:
    by_topic: dict[str, list] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append(_PartitionResult(partition_index=partition,
                                                               partition_error_code=error))
    return [_TopicResult(name=name, results_by_partition=parts) for name, parts in by_topic.items()]


async def _add_or_verify(ctx, v: int, txn_id, pid: int, epoch: int, verify_only: bool, partitions: list) -> dict:
    """{(topic, partition): error} for one transaction of the request."""
    failed = {}
    for topic, p in partitions:
        if v < 4 and topic in INTERNAL_TOPICS:
            # clients never get write access to internal topics this way
            failed[(topic, p)] = E.TOPIC_AUTHORIZATION_FAILED
        elif not _partition_exists(ctx, topic, p):
            failed[(topic, p)] = E.UNKNOWN_TOPIC_OR_PARTITION
    if failed:
        # one bad partition fails the whole request; the others were not tried
        return {tp: failed.get(tp, E.OPERATION_NOT_ATTEMPTED) for tp in partitions}
    coordinator = _coordinator(ctx)
    if verify_only:
        return coordinator.verify_here(txn_id, pid, epoch, partitions)
    # TransactionVersion.transactionVersionForAddPartitionsToTxn: v4+ comes from a v2 client or a broker
    error = await coordinator.add_partitions(txn_id, pid, epoch, partitions, 2 if v > 3 else 0)
    return {tp: _fenced(error, v, 2) for tp in partitions}


def _unique(pairs) -> list:
    return list(dict.fromkeys(pairs))


@handles(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5)
async def add_partitions_to_txn(ctx, req):
    v = ctx.api_version
    if v < 4:
        partitions = _unique((t.name, p) for t in req.v3_and_below_topics for p in t.partitions)
        errors = await _add_or_verify(ctx, v, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                                      req.v3_and_below_producer_epoch, False, partitions)
        return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(errors))
    results = []
    for txn in req.transactions:
        partitions = _unique((t.name, p) for t in txn.topics for p in t.partitions)
        errors = await _add_or_verify(ctx, v, txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                      txn.verify_only, partitions)
        results.append(_TxnResult(transactional_id=txn.transactional_id, topic_results=_topic_results(errors)))
    return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=0, results_by_transaction=results)


# ======================================================================== AddOffsetsToTxn

def offsets_partition(broker, group_id: str) -> int:
    """The __consumer_offsets partition of a group; before that topic exists,
    from the configured partition count (as Kafka's partitionFor)."""
    p = broker.groups.partition_for(group_id) if broker.groups is not None else None
    if p is None:
        p = group_partition_for(group_id, broker.config.get_int("offsets.topic.num.partitions"))
    return p


@handles(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
async def add_offsets_to_txn(ctx, req):
    partition = offsets_partition(ctx.broker, req.group_id)
    error = await _coordinator(ctx).add_partitions(req.transactional_id, req.producer_id, req.producer_epoch,
                                                   [(OFFSETS_TOPIC, partition)])
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=_fenced(error, ctx.api_version, 2))


# ======================================================================== EndTxn

@handles(ApiKey.END_TXN, 0, 5)
async def end_txn(ctx, req):
    # TransactionVersion.transactionVersionForEndTxn: v5+ is a transactions v2 client (KIP-890), whose
    # every EndTxn bumps the epoch; the answer tells it the producer id and epoch to go on with
    v2 = ctx.api_version > 4
    res = await _coordinator(ctx).end_txn(req.transactional_id, req.producer_id, req.producer_epoch,
                                          bool(req.committed), 2 if v2 else 0)
    if v2:
        return EndTxnResponse(throttle_time_ms=0, error_code=res.error, producer_id=res.producer_id,
                              producer_epoch=res.producer_epoch)
    return EndTxnResponse(throttle_time_ms=0, error_code=_fenced(res, ctx.api_version, 2))


# ======================================================================== WriteTxnMarkers

_MarkerResult = WriteTxnMarkersResponse.WritableTxnMarkerResult
_MarkerTopic = WriteTxnMarkersResponse.WritableTxnMarkerTopicResult
_MarkerPartition = WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult


# v2 (KIP-1228, Kafka 4.2) names each marker's transaction version; before it, version 0's epoch check
@handles(ApiKey.WRITE_TXN_MARKERS, 0, 2)
async def write_txn_markers(ctx, req):
    """From a transaction coordinator to this partition leader: append each
    marker, then answer once the high watermark passed them (Kafka appends
    markers with requiredAcks=-1; broker/transactions/markers.py)."""
    broker = ctx.broker
    now = wall_clock_ms()
    out = []
    waits = []
    for marker in req.markers:
        commit = bool(marker.transaction_result)
        topics = []
        for t in marker.topics:
            parts = []
            for p in t.partition_indexes:
                error, offset = append_marker(broker, t.name, p, marker.producer_id, marker.producer_epoch,
                                              marker.coordinator_epoch, commit, now,
                                              marker.transaction_version if ctx.api_version >= 2 else 0)
                result = _MarkerPartition(partition_index=p, error_code=error)
                if error == E.NONE:
                    waits.append((marker.producer_id, commit, t.name, p, offset, result))
                parts.append(result)
            topics.append(_MarkerTopic(name=t.name, partitions=parts))
        out.append(_MarkerResult(producer_id=marker.producer_id, topics=topics))
    for producer_id, commit, topic, p, offset, result in waits:
        result.error_code = await await_marker(broker, topic, p, offset)
        if result.error_code == E.NONE and topic == OFFSETS_TOPIC:
            # the offsets of the transaction become visible to the group
            offsets_completed(broker, producer_id, commit, [p])
    return WriteTxnMarkersResponse(markers=out)


# ======================================================================== TxnOffsetCommit

_CommitTopic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
_CommitPartition = TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition

# GroupMetadataManager.maybeConvertOffsetCommitError
_COMMIT_ERRORS = {
    E.NETWORK_EXCEPTION: E.COORDINATOR_LOAD_IN_PROGRESS,
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
    E.RECORD_LIST_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
    E.INVALID_FETCH_SIZE: E.INVALID_COMMIT_OFFSET_SIZE,
}


async def _verify_offsets_partition(ctx, req, v: int) -> int:
    """Kafka 3.9 checks with the transaction coordinator that the group's
    __consumer_offsets partition is in the transaction (AddOffsetsToTxn)
    unless the producer already wrote to it in this transaction."""
    broker = ctx.broker
    transactions = _coordinator(ctx)
    add = v >= IMPLICIT_ADD_TXN_OFFSET_COMMIT_VERSION
    if not (transactions.config.partition_verification or add) or not req.transactional_id:
        return E.NONE
    groups = broker.groups
    index = groups.partition_for(req.group_id) if req.group_id else None
    if index is None or index in groups.state.loading:
        return E.NONE   # the group coordinator answers with its own status error
    partition = broker.partitions.get(OFFSETS_TOPIC, index)
    if partition is not None and req.producer_id in partition.open_transactions:
        epoch = broker.producers.producer_epoch(partition, req.producer_id)
        if epoch is not None and req.producer_epoch < epoch:
            return E.INVALID_PRODUCER_EPOCH
        if epoch is None or req.producer_epoch == epoch:
            return E.NONE
        # a newer epoch (transactions v2): a new transaction while the last one's marker is in flight
    if add:
        # transactions v2: no AddOffsetsToTxn came first, the commit adds the partition itself
        await transactions.add_implicitly(req.transactional_id, req.producer_id, req.producer_epoch,
                                          [(OFFSETS_TOPIC, index)])
    else:
        await transactions.prepare_verification(req.transactional_id, req.producer_id, req.producer_epoch,
                                                [(OFFSETS_TOPIC, index)])
    error = transactions.verify_partitions(req.transactional_id, req.producer_id, req.producer_epoch,
                                           [(OFFSETS_TOPIC, index)])[(OFFSETS_TOPIC, index)]
    if error == E.PRODUCER_FENCED:
        error = E.INVALID_PRODUCER_EPOCH
    elif error == E.TRANSACTION_ABORTABLE and v < 4:
        error = E.INVALID_TXN_STATE    # clients before TxnOffsetCommit v4 do not know TRANSACTION_ABORTABLE
    return _COMMIT_ERRORS.get(error, error)


@handles(ApiKey.TXN_OFFSET_COMMIT, 0, 5)
async def txn_offset_commit(ctx, req):
    v = ctx.api_version
    errors: dict[str, dict[int, int]] = {}
    valid = []
    for t in req.topics:
        out = errors.setdefault(t.name, {})
        for p in t.partitions:
            if not _partition_exists(ctx, t.name, p.partition_index):
                out[p.partition_index] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                out[p.partition_index] = E.NONE
                valid.append((t.name, p.partition_index, p.committed_offset,
                              p.committed_leader_epoch if v >= 2 else -1, p.committed_metadata, -1))
    if valid:
        error = await _verify_offsets_partition(ctx, req, v)
        if error != E.NONE:
            results = {(t, p): error for t, p, *_rest in valid}
        else:
            res = await ctx.broker.groups.txn_commit_offsets(
                group_id=req.group_id, producer_id=req.producer_id, producer_epoch=req.producer_epoch,
                offsets=valid, member_id=req.member_id if v >= 3 else "",
                generation_id=req.generation_id if v >= 3 else -1,
                instance_id=req.group_instance_id if v >= 3 else None)
            results = res.errors
        for (topic, partition), code in results.items():
            if v < 2 and code == E.COORDINATOR_LOAD_IN_PROGRESS:
                code = E.COORDINATOR_NOT_AVAILABLE   # clients before 2.0 could crash on it (KAFKA-7296)
            errors[topic][partition] = code
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
        _CommitTopic(name=name, partitions=[_CommitPartition(partition_index=p, error_code=e)
                                            for p, e in parts.items()])
        for name, parts in errors.items()])


# ======================================================================== DescribeProducers

_ProducersTopic = DescribeProducersResponse.TopicResponse
_ProducersPartition = DescribeProducersResponse.PartitionResponse
_ProducerState = DescribeProducersResponse.ProducerState


@handles(ApiKey.DESCRIBE_PRODUCERS, 0, 0)
async def describe_producers(ctx, req):
    broker = ctx.broker
    topics = []
    for t in req.topics:
        parts = []
        topics.append(_ProducersTopic(name=t.name, partitions=parts))
        reason = invalid_reason(t.name)
        if reason is not None:
            topic_error = (E.INVALID_TOPIC_EXCEPTION, reason)
        elif t.name not in broker.image.topics:
            topic_error = (E.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_PARTITION_MESSAGE)
        else:
            topic_error = None
        for index in t.partition_indexes:
            partition = broker.partitions.get(t.name, index) if topic_error is None else None
            if partition is None:
                code, message = topic_error or (E.UNKNOWN_TOPIC_OR_PARTITION, None)
                parts.append(_ProducersPartition(partition_index=index, error_code=code, error_message=message,
                                                 active_producers=[]))
                continue
            parts.append(_ProducersPartition(partition_index=index, error_code=0, error_message=None,
                                             active_producers=[
                _ProducerState(producer_id=pid, producer_epoch=epoch, last_sequence=seq, last_timestamp=ts,
                               coordinator_epoch=cepoch, current_txn_start_offset=txn_start)
                for pid, epoch, seq, ts, cepoch, txn_start in broker.producers.active_producers(partition)]))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)


# ======================================================================== DescribeTransactions / ListTransactions

_TxnState = DescribeTransactionsResponse.TransactionState
_TxnTopic = DescribeTransactionsResponse.TopicData


@handles(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
async def describe_transactions(ctx, req):
    coordinator = _coordinator(ctx)
    states = []
    for txn_id in req.transactional_ids:
        error, d = coordinator.describe(txn_id)
        if d is None:
            # Kafka leaves the other fields at their defaults
            states.append(_TxnState(error_code=error, transactional_id=txn_id, transaction_state="",
                                    transaction_timeout_ms=0, transaction_start_time_ms=0, producer_id=0,
                                    producer_epoch=0, topics=[]))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, p in d.partitions:
            by_topic.setdefault(topic, []).append(p)
        states.append(_TxnState(error_code=0, transactional_id=txn_id, transaction_state=d.state,
                                transaction_timeout_ms=d.timeout_ms, transaction_start_time_ms=d.start_timestamp,
                                producer_id=d.producer_id, producer_epoch=d.producer_epoch,
                                topics=[_TxnTopic(topic=t, partitions=ps) for t, ps in by_topic.items()]))
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)


_ListedTxn = ListTransactionsResponse.TransactionState


@handles(ApiKey.LIST_TRANSACTIONS, 0, 2)
async def list_transactions(ctx, req):
    duration = req.duration_filter if ctx.api_version >= 1 else -1
    pattern = req.transactional_id_pattern if ctx.api_version >= 2 else None
    if pattern:   # KIP-1152: a regular expression the whole transactional id matches
        try:
            matcher = re.compile(pattern).fullmatch
        except re.error:
            return ListTransactionsResponse(throttle_time_ms=0, error_code=E.INVALID_REGULAR_EXPRESSION,
                                            unknown_state_filters=[], transaction_states=[])
    error, unknown, rows = _coordinator(ctx).list_transactions(req.producer_id_filters or (),
                                                               req.state_filters or (), duration)
    if pattern:
        rows = [row for row in rows if matcher(row[0])]
    return ListTransactionsResponse(throttle_time_ms=0, error_code=error, unknown_state_filters=unknown,
                                    transaction_states=[
                                        _ListedTxn(transactional_id=t, producer_id=pid, transaction_state=state)
                                        for t, pid, state in rows])

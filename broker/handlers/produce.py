"""Produce: validate each batch through its header, assign offsets in place,
append. Records are not decoded, except the magic 0/1 message sets of
Produce v0-2, which Kafka converts to a v2 batch on append."""
from __future__ import annotations

import logging
from time import perf_counter

import trio

from kproto import legacy
from kproto import records as rec
from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.produce_response import ProduceResponse

from broker.net.transport import CloseConnection
from broker.handlers import handles, topic_ids
from broker.metrics.registry import remote_time
from broker.replication.leader_hint import current_leader, node_endpoint
from broker.storage.errors import KafkaStorageError
from broker.metadata.topic_names import INTERNAL_TOPICS

log = logging.getLogger("kproto.produce")

_TopicResp = ProduceResponse.TopicProduceResponse
_PartResp = ProduceResponse.PartitionProduceResponse
_RecordError = ProduceResponse.BatchIndexAndErrorMessage

# First bytes of each codec's stream. Kafka decompresses every compressed
# batch on append and answers UNKNOWN_SERVER_ERROR for one that is not what
# its attributes claim; kproto keeps batches compressed and checks only the
# stream's magic (docs/compatibility.md).
_COMPRESSION_MAGIC = {
    1: (b"\x1f\x8b",),                         # gzip
    3: (b"\x04\x22\x4d\x18",),                 # lz4 frame
    4: (b"\x28\xb5\x2f\xfd",),                 # zstd frame
}


class BatchRejected(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None):
        self.code = code
        self.message = message


ZSTD = 4
ZSTD_MIN_PRODUCE_VERSION = 7  # Kafka refuses zstd batches in older Produce requests


def check_shape(data, version: int) -> rec.BatchHeader:
    """What Kafka checks of a Produce v3+ partition entry before anything else
    (ProduceRequest.validateRecords): exactly one complete v2 batch, and zstd
    only from Produce v7."""
    try:
        header = rec.validate_batches(data, max_batches=1, verify_crc=False)[0]
    except rec.CorruptRecordError as exc:
        raise BatchRejected(ErrorCode(exc.error_code), str(exc)) from None
    if header.compression == ZSTD and version < ZSTD_MIN_PRODUCE_VERSION:
        raise BatchRejected(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                            f"Produce requests with version {version} are not allowed to use ZStandard compression")
    return header


def check_batch(data, header: rec.BatchHeader, max_message_bytes: int) -> None:
    """The rest of Kafka's checks of a produced batch, in its order; raise
    BatchRejected with Kafka's error."""
    try:
        if header.size > max_message_bytes:
            raise BatchRejected(ErrorCode.MESSAGE_TOO_LARGE)
        rec.validate_batch(data)
        rec.check_client_batch(header)
    except rec.CorruptRecordError as exc:
        raise BatchRejected(ErrorCode(exc.error_code), str(exc)) from None
    codec = header.compression
    magics = _COMPRESSION_MAGIC.get(codec)
    if magics and header.size > rec.HEADER_SIZE:
        start = bytes(data[rec.HEADER_SIZE:rec.HEADER_SIZE + 4])
        if not any(start.startswith(m) for m in magics):
            raise BatchRejected(ErrorCode.UNKNOWN_SERVER_ERROR, "compressed payload does not match its codec")


def convert_legacy(data, max_message_bytes: int, now_ms: int) -> bytes | None:
    """Produce v0-2 may carry magic 0/1 message sets: one v2 batch holding
    their records, as Kafka converts them on append (None: nothing to append)."""
    # Kafka checks each shallow message against max.message.bytes before converting
    pos = 0
    while pos + 12 <= len(data):
        size = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        if size + 12 > max_message_bytes:
            raise BatchRejected(ErrorCode.MESSAGE_TOO_LARGE)
        if size < 0:
            break
        pos += 12 + size
    try:
        batch, _shallow = legacy.convert(data, now_ms)
    except rec.CorruptRecordError as exc:
        raise BatchRejected(ErrorCode(exc.error_code), str(exc)) from None
    if batch is not None and len(batch) > max_message_bytes:
        raise BatchRejected(ErrorCode.MESSAGE_TOO_LARGE, "the converted batch exceeds max.message.bytes")
    return batch


# how long a produce request runs on the event loop before other tasks get a turn
YIELD_S = 0.005


# v12 is v11's layout, a transactions v2 producer (KIP-890: an implicit AddPartitionsToTxn); v13
# names topics by id
@handles(ApiKey.PRODUCE, 0, 13)
async def produce(ctx, req):
    broker = ctx.broker
    acks = req.acks
    version = ctx.api_version
    topics_out = []
    acks_ok = acks in (0, 1, -1)
    # (partition, offset, response) to answer only once an fsync covered them
    durable = [] if acks == -1 else None
    replicated = [] if acks == -1 else None   # (partition, offset, response): acks=all waits (broker/replication)
    metrics = getattr(broker, "metrics", None)   # broker/metrics: BrokerTopicMetrics
    if req.transactional_id is not None and getattr(broker, "transactions", None) is not None:
        # KIP-890 where another broker coordinates the transaction: ask it first (broker/transactions)
        await broker.transactions.prepare_produce_verification(req, version)
    moved = False   # a partition answered NOT_LEADER_OR_FOLLOWER: KIP-951's endpoints to add
    stepped = perf_counter()
    for td in req.topic_data:
        parts_out = []
        topics_out.append(_TopicResp(name=td.name, topic_id=td.topic_id, partition_responses=parts_out))
        for pd in td.partition_data:
            if perf_counter() - stepped > YIELD_S:
                # a request of thousands of partitions (a producer's first records to new topics,
                # or its retries while their logs are made) is 0.1-0.2 s of appends, each
                # opening a new .log: other clients are served between its parts, as Kafka's
                # request handler threads serve them beside it. Its partitions stay in order on
                # this connection (the next request is read once this one is answered)
                await trio.sleep(0)
                stepped = perf_counter()
            resp = _PartResp(index=pd.index, error_code=0, base_offset=-1, log_append_time_ms=-1,
                             log_start_offset=-1, record_errors=[], error_message=None)
            parts_out.append(resp)
            try:
                if topic_ids.unknown(td):
                    raise BatchRejected(ErrorCode.UNKNOWN_TOPIC_ID)
                _append_one(broker, req, version, acks_ok, td.name, pd, resp, ctx.received_ms, durable, replicated,
                            metrics)
            except BatchRejected as exc:
                if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                    moved = True
                if metrics is not None:
                    metrics.produce_failed(td.name)
                resp.error_code = exc.code
                resp.base_offset = -1
                resp.log_start_offset = -1
                if exc.code not in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID):
                    log.debug("rejected batch for %s-%s: %s", td.name, pd.index, exc.message or exc.code.name)
            except (OSError, KafkaStorageError) as exc:
                # the disk refused the append (full, read-only, I/O error): Kafka's answer for a
                # partition whose log dir is offline; the failed dir is reported (the broker
                # halts once all have failed, as Kafka does) and the batch is not acknowledged
                failures = getattr(broker, "dir_failures", None)
                if failures is None or not failures.report(exc):
                    raise
                if metrics is not None:
                    metrics.produce_failed(td.name)
                resp.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                resp.base_offset = -1
                resp.log_start_offset = -1
    if acks == 0:
        if any(r.error_code for t in topics_out for r in t.partition_responses):
            # Kafka's only way to tell an acks=0 producer that something failed
            raise CloseConnection("acks=0 produce request failed for "
                                  + ", ".join(f"{t.name}-{r.index}: {ErrorCode(r.error_code).name}"
                                              for t in topics_out for r in t.partition_responses
                                              if r.error_code))
        return None
    if durable:
        await _await_fsync(broker.flusher, durable)
    if replicated:
        waiting = perf_counter()
        if await _await_replication(broker, replicated, req.timeout_ms):
            moved = True
        remote_time(ctx, waiting)   # RequestMetrics RemoteTimeMs: the wait for the ISR
    node_endpoints = []
    if version >= 10 and moved:   # (an answer with no moved partition names no endpoint: skip the walk)
        node_endpoints = _leader_endpoints(broker, ctx, topics_out)
    return ProduceResponse(responses=topics_out, throttle_time_ms=0, node_endpoints=node_endpoints)


async def _await_replication(broker, replicated, timeout_ms: int) -> bool:
    """acks=all on a replicated partition: answer once every ISR member has the batch
    (broker/replication/manager.py), each partition with its own error otherwise.
    True when a partition's leadership moved meanwhile (its answer names the new leader)."""
    moved = False
    for partition, offset, resp in replicated:
        code = await broker.replication.wait_replicated(partition, offset, timeout_ms)
        if code != ErrorCode.NONE:
            resp.error_code = code
            resp.base_offset = -1
            resp.log_append_time_ms = -1
            resp.log_start_offset = -1
            if code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                # leadership moved while the batch waited (KIP-951: name the new leader)
                leader, leader_epoch = current_leader(broker, partition.topic, partition.index)
                resp.current_leader = ProduceResponse.LeaderIdAndEpoch(leader_id=leader, leader_epoch=leader_epoch)
                moved = True
    return moved


def _leader_endpoints(broker, ctx, topics_out) -> list:
    """KIP-951: the endpoints of the leaders named in NOT_LEADER_OR_FOLLOWER answers."""
    ids = {r.current_leader.leader_id for t in topics_out for r in t.partition_responses
           if r.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and r.current_leader.leader_id >= 0}
    listener = ctx.conn.listener if ctx.conn else None
    out = [node_endpoint(broker, i, listener, ProduceResponse.NodeEndpoint) for i in sorted(ids)]
    return [e for e in out if e is not None]


async def _await_fsync(flusher, durable) -> None:
    """fsync before ack (acks=-1, flush.messages=1): answer once the flusher
    covered each partition's last offset; a failed fsync is Kafka's
    KAFKA_STORAGE_ERROR (its log directory would be offline), a partition
    deleted meanwhile NOT_LEADER_OR_FOLLOWER (the client looks it up again)."""
    for partition, offset, resp in durable:
        if not await flusher.wait_flushed(partition.log, offset):
            resp.error_code = (ErrorCode.NOT_LEADER_OR_FOLLOWER if partition.log.closed
                               else ErrorCode.KAFKA_STORAGE_ERROR)
            resp.base_offset = -1
            resp.log_append_time_ms = -1
            resp.log_start_offset = -1


# transaction coordinator answers that a retry can fix: older producers do not
# retry them, so Kafka reports NOT_ENOUGH_REPLICAS, which every producer retries
_VERIFY_RETRIABLE = (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION,
                     ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     ErrorCode.NOT_COORDINATOR)
GENERIC_ERROR_PRODUCE_VERSION = 11   # from here clients know TRANSACTION_ABORTABLE


def _verify_transaction(broker, transactional_id: str, version: int, partition, header, resp) -> None:
    """KIP-890 verification (transaction.partition.verification.enable): the
    first transactional batch of a producer in a partition is appended only
    if the coordinator has the partition in the producer's transaction."""
    transactions = getattr(broker, "transactions", None)
    if transactions is None or not transactions.config.partition_verification:
        return
    if broker.producers.in_transaction(partition, header.producer_id, header.producer_epoch):
        return   # the producer's transaction already wrote here: nothing to verify
    tp = (partition.topic, partition.index)
    error = transactions.verify_partitions(transactional_id, header.producer_id, header.producer_epoch, [tp])[tp]
    if error == ErrorCode.NONE:
        return
    if error == ErrorCode.PRODUCER_FENCED:
        raise BatchRejected(ErrorCode.INVALID_PRODUCER_EPOCH)
    if error == ErrorCode.TRANSACTION_ABORTABLE and version < GENERIC_ERROR_PRODUCE_VERSION:
        error = ErrorCode.INVALID_TXN_STATE
    if error == ErrorCode.INVALID_TXN_STATE:
        resp.error_message = "Partition was not added to the transaction"
    elif error in _VERIFY_RETRIABLE:
        resp.error_message = ("Unable to verify the partition has been added to the transaction. "
                              f"Underlying error: {ErrorCode(error).name}")
        error = ErrorCode.NOT_ENOUGH_REPLICAS
    raise BatchRejected(ErrorCode(error))


def _check_keys(data, topic: str, index: int, resp) -> None:
    """A compacted topic keeps the latest record per key, so Kafka refuses
    records without one (LogValidator.validateKey). The only produce check
    that decodes records, and only for compacted topics."""
    try:
        missing = [i for i, r in enumerate(rec.iter_records(data)) if r.key is None]
    except rec.CorruptRecordError as exc:
        raise BatchRejected(ErrorCode(exc.error_code), str(exc)) from None
    if not missing:
        return
    errors = [_RecordError(batch_index=i, batch_index_error_message=(
        f"Compacted topic cannot accept message without key in topic partition {topic}-{index}"))
        for i in missing]
    shown = ", ".join(f"(batchIndex={e.batch_index}, message={e.batch_index_error_message})"
                      for e in errors[:3])
    resp.record_errors = errors
    resp.error_message = (f"One or more records have been rejected due to {len(errors)} record errors in total, "
                          f"and only showing the first three errors at most: [{shown}]")
    raise BatchRejected(ErrorCode.INVALID_RECORD, resp.error_message)


def _append_one(broker, req, version: int, acks_ok: bool, topic: str, pd, resp, now_ms: int,
                durable: list | None, replicated: list | None = None, metrics=None) -> None:
    # Kafka's order: unknown partition, request-level record checks, required
    # acks, internal topic, then the log's own checks of the batch
    partition = broker.partitions.get(topic, pd.index)
    if partition is None:
        missing = broker.partitions.missing_error(topic, pd.index)
        if missing in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.KAFKA_STORAGE_ERROR):
            raise BatchRejected(missing)   # (KAFKA_STORAGE_ERROR: its log could not be made)
    data = pd.records
    if data is None:
        # Kafka 3.9 fails with an internal error and never answers; a
        # missing record set is an invalid record here (docs/compatibility.md)
        raise BatchRejected(ErrorCode.INVALID_RECORD, "records are null")
    is_legacy = version < 3 and legacy.is_legacy(data)
    header = None if is_legacy else check_shape(data, version)
    if (header is not None and header.is_transactional and req.transactional_id is not None
            and partition is not None):
        _verify_transaction(broker, req.transactional_id, version, partition, header, resp)
    if not acks_ok:
        raise BatchRejected(ErrorCode.INVALID_REQUIRED_ACKS)
    if topic in INTERNAL_TOPICS:
        raise BatchRejected(ErrorCode.INVALID_TOPIC_EXCEPTION)
    if partition is None or not partition.is_leader:
        # (None: the metadata names it but its log is not made here yet, after a CreateTopics:
        # Kafka's getPartitionOrException; the producer refreshes its metadata and retries)
        leader, leader_epoch = current_leader(broker, topic, pd.index)
        resp.current_leader = ProduceResponse.LeaderIdAndEpoch(leader_id=leader, leader_epoch=leader_epoch)
        raise BatchRejected(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    if replicated is not None and partition.replication is not None:
        code = partition.replication.check_min_isr(partition)   # Kafka checks before appending
        if code is not None:
            raise BatchRejected(code)
    if is_legacy:
        data = convert_legacy(data, partition.max_message_bytes, now_ms)
        if data is None:
            return  # no whole message: Kafka appends nothing and answers offset -1
        header = rec.BatchHeader(data, 0)
    check_batch(data, header, partition.max_message_bytes)
    if partition.compacted:
        _check_keys(data, topic, pd.index, resp)
    if header.is_transactional or header.producer_id >= 0:
        code = broker.producers.check_append(req.transactional_id, partition, header)
        if code is not None:
            if isinstance(code, tuple):  # duplicate of an appended batch
                resp.base_offset, resp.log_start_offset = code
                if durable is not None and partition.fsync_before_ack:
                    # (its first attempt may still be waiting for its fsync)
                    durable.append((partition, resp.base_offset, resp))
                if replicated is not None and partition.replication is not None:
                    replicated.append((partition, resp.base_offset, resp))   # batches replicate whole
                return
            raise BatchRejected(code)
    info = partition.append(data, header, now_ms)
    if metrics is not None:   # (looked up once per request by produce())
        metrics.produced(topic, header.record_count, header.size)
    resp.base_offset = info.base_offset
    resp.log_append_time_ms = info.log_append_time
    resp.log_start_offset = info.log_start_offset
    if durable is not None and partition.fsync_before_ack:
        durable.append((partition, info.last_offset, resp))
    if replicated is not None and partition.replication is not None:
        replicated.append((partition, info.last_offset, resp))

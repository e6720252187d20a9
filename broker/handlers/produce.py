"""Produce: validate each batch through its header, assign offsets in place,
append. Records are not decoded."""
from __future__ import annotations

import logging

from kproto import records as rec
from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.produce_response import ProduceResponse

from broker.handlers import handles
from broker.topic_names import INTERNAL_TOPICS

log = logging.getLogger("kproto.produce")

_TopicResp = ProduceResponse.TopicProduceResponse
_PartResp = ProduceResponse.PartitionProduceResponse

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


def check_batch(data, max_message_bytes: int) -> rec.BatchHeader:
    """Validate the one v2 batch a Produce v3+ partition entry may carry, in
    the order Kafka checks it; raise BatchRejected with Kafka's error."""
    try:
        header = rec.validate_batches(data, max_batches=1, verify_crc=False)[0]
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
    return header


@handles(ApiKey.PRODUCE, 3, 11)
async def produce(ctx, req):
    broker = ctx.broker
    acks = req.acks
    topics_out = []
    acks_ok = acks in (0, 1, -1)
    for td in req.topic_data:
        parts_out = []
        topics_out.append(_TopicResp(name=td.name, partition_responses=parts_out))
        for pd in td.partition_data:
            resp = _PartResp(index=pd.index, error_code=0, base_offset=-1, log_append_time_ms=-1,
                             log_start_offset=-1, record_errors=[], error_message=None)
            parts_out.append(resp)
            if not acks_ok:
                resp.error_code = ErrorCode.INVALID_REQUIRED_ACKS
                continue
            try:
                _append_one(broker, req, td.name, pd, resp, ctx.received_ms)
            except BatchRejected as exc:
                resp.error_code = exc.code
                resp.base_offset = -1
                if exc.code not in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,):
                    log.debug("rejected batch for %s-%s: %s", td.name, pd.index, exc.message or exc.code.name)
    if acks == 0:
        return None
    return ProduceResponse(responses=topics_out, throttle_time_ms=0)


def _append_one(broker, req, topic: str, pd, resp, now_ms: int) -> None:
    if topic in INTERNAL_TOPICS and topic in broker.image.topics:
        raise BatchRejected(ErrorCode.INVALID_TOPIC_EXCEPTION)
    partition = broker.partitions.get(topic, pd.index)
    if partition is None:
        raise BatchRejected(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    data = pd.records
    if data is None:
        # Kafka 3.9 fails with an internal error and never answers; a
        # missing record set is an invalid record here (docs/compatibility.md)
        raise BatchRejected(ErrorCode.INVALID_RECORD, "records are null")
    header = check_batch(data, partition.max_message_bytes)
    if header.is_transactional or header.producer_id >= 0:
        code = broker.producers.check_append(req.transactional_id, partition, header)
        if code is not None:
            if isinstance(code, tuple):  # duplicate of an appended batch
                resp.base_offset, resp.log_start_offset = code
                return
            raise BatchRejected(code)
    info = partition.append(data, header, now_ms)
    resp.base_offset = info.base_offset
    resp.log_append_time_ms = info.log_append_time
    resp.log_start_offset = info.log_start_offset

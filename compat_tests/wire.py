"""Raw Kafka requests for the suite, encoded by kafka-python's protocol classes.

kafka-python builds its request and response codecs from Kafka's JSON message
definitions on its own, so a request built here does not share a line of code
with kproto's codec: a broker bug cannot hide behind a matching client bug.
This is how the suite sends requests at an exact version, or requests no
client library would send (acks=2, a fetch beyond the end), to compare error
codes with the rows of kafka-observations/error-cases.csv.
"""
from __future__ import annotations

import itertools
import socket
import struct
import time

from kafka.protocol.admin import (CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
                                  CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
                                  DescribeConfigsRequest, DescribeConfigsResponse,
                                  IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse)
from kafka.protocol.consumer import (FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse)
from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse
from kafka.protocol.metadata import (ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse)
from kafka.protocol.producer import (InitProducerIdRequest, InitProducerIdResponse, ProduceRequest,
                                     ProduceResponse)
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

PAIRS = {
    "ApiVersions": (ApiVersionsRequest, ApiVersionsResponse),
    "Metadata": (MetadataRequest, MetadataResponse),
    "Produce": (ProduceRequest, ProduceResponse),
    "Fetch": (FetchRequest, FetchResponse),
    "ListOffsets": (ListOffsetsRequest, ListOffsetsResponse),
    "CreateTopics": (CreateTopicsRequest, CreateTopicsResponse),
    "DescribeConfigs": (DescribeConfigsRequest, DescribeConfigsResponse),
    "DeleteRecords": (DeleteRecordsRequest, DeleteRecordsResponse),
    "DeleteTopics": (DeleteTopicsRequest, DeleteTopicsResponse),
    "CreatePartitions": (CreatePartitionsRequest, CreatePartitionsResponse),
    "IncrementalAlterConfigs": (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
    "InitProducerId": (InitProducerIdRequest, InitProducerIdResponse),
}

# The API keys the suite refers to by name when it asks what a broker supports.
API_KEYS = {
    "Produce": 0, "Fetch": 1, "ListOffsets": 2, "Metadata": 3, "OffsetCommit": 8, "OffsetFetch": 9,
    "FindCoordinator": 10, "JoinGroup": 11, "Heartbeat": 12, "LeaveGroup": 13, "SyncGroup": 14,
    "DescribeGroups": 15, "ListGroups": 16, "ApiVersions": 18, "CreateTopics": 19, "DeleteTopics": 20,
    "DeleteRecords": 21, "InitProducerId": 22, "OffsetForLeaderEpoch": 23, "AddPartitionsToTxn": 24,
    "AddOffsetsToTxn": 25, "EndTxn": 26, "TxnOffsetCommit": 28, "DescribeConfigs": 32,
    "CreatePartitions": 37, "IncrementalAlterConfigs": 44, "OffsetDelete": 47, "DescribeCluster": 60,
    "DescribeProducers": 61, "DescribeTransactions": 65, "ListTransactions": 66,
}

_correlation = itertools.count(1)


class WireError(Exception):
    """The broker closed the connection or did not answer in time."""


class Connection:
    """One TCP connection; requests go one at a time, as a simple client sends them."""

    def __init__(self, bootstrap: str, timeout: float = 15.0, client_id: str = "compat-wire"):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.client_id = client_id

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _read_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            try:
                chunk = self.sock.recv(n)
            except socket.timeout as exc:
                raise WireError("no answer within the timeout") from exc
            if not chunk:
                raise WireError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def call(self, api: str, version: int, **fields) -> dict:
        """Send one request; return the decoded response body as a dict."""
        req_cls, resp_cls = PAIRS[api]
        request = req_cls[version](**_containers(req_cls._struct, fields))
        correlation_id = next(_correlation)
        request.with_header(correlation_id=correlation_id, client_id=self.client_id)
        self.sock.sendall(request.encode(header=True, framed=True))
        if api == "Produce" and fields.get("acks") == 0:
            return {}
        size = struct.unpack(">i", self._read_exact(4))[0]
        body = self._read_exact(size)
        response = resp_cls.decode(body, version=version, header=True)
        if response.header.correlation_id != correlation_id:
            raise WireError(f"correlation id {response.header.correlation_id} != {correlation_id}")
        return response.to_dict(json=False)


def _containers(struct, values: dict) -> dict:
    """Nested dicts -> kafka-python's generated struct classes, by the schema."""
    out = {}
    for name, value in values.items():
        field = struct.fields.get(name)
        if field is not None and value is not None and (field.is_struct() or field.is_struct_array()):
            if field.is_struct_array():
                value = [item if not isinstance(item, dict) else field.data_class(**_containers(field, item))
                         for item in value]
            elif isinstance(value, dict):
                value = field.data_class(**_containers(field, value))
        out[name] = value
    return out


def call(bootstrap: str, api: str, version: int, **fields) -> dict:
    with Connection(bootstrap) as conn:
        return conn.call(api, version, **fields)


def api_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    """API key -> (min, max) as the broker advertises them (ApiVersions v3)."""
    resp = call(bootstrap, "ApiVersions", 3, client_software_name="kproto-compat",
                client_software_version="1.0")
    return {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}


def wait_ready(bootstrap: str, timeout: float = 60.0) -> dict[int, tuple[int, int]]:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            return api_versions(bootstrap)
        except (OSError, WireError) as exc:
            last = exc
            time.sleep(0.3)
    raise WireError(f"broker at {bootstrap} not answering ApiVersions: {last}")


def record_batch(records: list[tuple[bytes | None, bytes | None]], *, compression: int = 0,
                 timestamp: int | None = None, producer_id: int = -1, producer_epoch: int = -1,
                 base_sequence: int = -1, magic: int = 2) -> bytes:
    """A record batch (v2, or a legacy message set) built by kafka-python's record builder."""
    kwargs = dict(producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence) \
        if magic == 2 else {}
    builder = MemoryRecordsBuilder(magic=magic, compression_type=compression, batch_size=1 << 30, **kwargs)
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    for key, value in records:
        builder.append(timestamp=ts, key=key, value=value, headers=[] if magic == 2 else None)
    builder.close()
    return builder.buffer()


def record_batches(data) -> list[dict]:
    """The batch headers of a Fetch response's records (decoded by kafka-python)."""
    out = []
    if not data:
        return out
    records = MemoryRecords(bytes(data))
    while True:
        batch = records.next_batch()
        if batch is None:
            break
        out.append({"base_offset": batch.base_offset, "compression": batch.compression_type,
                    "producer_id": batch.producer_id, "producer_epoch": batch.producer_epoch,
                    "base_sequence": batch.base_sequence, "transactional": batch.is_transactional,
                    "control": batch.is_control_batch,
                    "last_offset": batch.base_offset + batch.last_offset_delta})
    return out


def with_attributes(batch: bytes, set_bits: int) -> bytes:
    """A v2 batch with attribute bits set and its CRC-32C made valid again."""
    from kafka.record.util import calc_crc32c
    attributes = struct.unpack_from(">h", batch, 21)[0] | set_bits
    body = bytearray(batch)
    struct.pack_into(">h", body, 21, attributes)
    struct.pack_into(">I", body, 17, calc_crc32c(bytes(body[21:])))
    return bytes(body)

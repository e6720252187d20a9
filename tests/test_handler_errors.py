"""An unexpected error inside a handler: Kafka answers the request with
UNKNOWN_SERVER_ERROR (in the places the API has for errors) and keeps the
connection; the error is logged once with the API and correlation id."""
from __future__ import annotations

import logging
import struct
import sys
import uuid

import pytest
import trio

from kproto import api
from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.alter_partition_reassignments_request import AlterPartitionReassignmentsRequest
from kproto.messages.create_acls_request import CreateAclsRequest
from kproto.messages.delete_acls_request import DeleteAclsRequest
from kproto.messages.describe_log_dirs_request import DescribeLogDirsRequest
from kproto.messages.describe_producers_request import DescribeProducersRequest
from kproto.messages.describe_transactions_request import DescribeTransactionsRequest
from kproto.messages.describe_user_scram_credentials_request import DescribeUserScramCredentialsRequest
from kproto.messages.fetch_request import FetchRequest
from kproto.messages.heartbeat_request import HeartbeatRequest
from kproto.messages.list_offsets_request import ListOffsetsRequest
from kproto.messages.write_txn_markers_request import WriteTxnMarkersRequest

from broker.net.transport import CloseConnection
from broker.server.dispatch import Dispatcher
from broker.handlers import HANDLERS, load_all
from broker.server.listener import serve_connection

UNKNOWN = ErrorCode.UNKNOWN_SERVER_ERROR


async def _failing(ctx, req):
    raise RuntimeError("boom")


def _exchange(requests: list[tuple[object, int]]) -> list:
    """Send the requests over one connection served by kproto's connection
    loop; the decoded responses (None where the connection closed)."""
    async def main():
        listener = trio.socket.socket()
        await listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client_sock = trio.socket.socket()
        await client_sock.connect(listener.getsockname())
        server_sock, _ = await listener.accept()
        listener.close()
        out = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_connection, server_sock, Dispatcher(None), 1 << 20, "PLAINTEXT")
            stream = trio.SocketStream(client_sock)
            for cid, (req, v) in enumerate(requests, 1):
                await stream.send_all(api.encode_request(req, v, cid, "t"))
                head = b""
                with trio.move_on_after(5):
                    while len(head) < 4:
                        chunk = await stream.receive_some(4 - len(head))
                        if not chunk:
                            break
                        head += chunk
                if len(head) < 4:
                    out.append(None)
                    break
                body = b""
                size = struct.unpack(">i", head)[0]
                while len(body) < size:
                    body += await stream.receive_some(size - len(body))
                got_cid, resp = api.decode_response(body, req.API_KEY, v)
                assert got_cid == cid
                out.append(resp)
            await stream.aclose()
            nursery.cancel_scope.cancel()
        return out
    return trio.run(main)


@pytest.fixture
def failing(monkeypatch):
    load_all()

    def make(key):
        lo, hi, _ = HANDLERS[key]
        monkeypatch.setitem(HANDLERS, key, (lo, hi, _failing))
    return make


def _list_offsets():
    return ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(name="t", partitions=[
        ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=-1) for p in (0, 1)])])


def test_error_answered_and_connection_kept(failing, caplog):
    failing(ApiKey.LIST_OFFSETS)
    failing(ApiKey.HEARTBEAT)
    with caplog.at_level("ERROR", logger="kproto.dispatch"):
        first, second, third = _exchange([(_list_offsets(), 7), (_list_offsets(), 1),
                                          (HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), 4)])
    # per partition, as Kafka's getErrorResponse, on the same connection
    assert [(p.partition_index, p.error_code) for p in first.topics[0].partitions] == [(0, UNKNOWN), (1, UNKNOWN)]
    assert second.topics[0].partitions[1].error_code == UNKNOWN
    assert third.error_code == UNKNOWN  # a top-level error code
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 3
    assert "ListOffsets v7" in errors[0].getMessage() and "correlation id 1" in errors[0].getMessage()
    assert "boom" in caplog.text


def test_fetch_error_form_by_version(failing):
    failing(ApiKey.FETCH)
    ft = FetchRequest.FetchTopic(topic="t", topic_id=uuid.uuid4(), partitions=[
        FetchRequest.FetchPartition(partition=0, partition_max_bytes=100)])
    old, new = _exchange([(FetchRequest(topics=[ft], max_bytes=100), 12), (FetchRequest(topics=[ft], max_bytes=100), 13)])
    assert old.error_code == UNKNOWN and old.responses[0].partitions[0].error_code == UNKNOWN
    assert new.error_code == UNKNOWN and new.responses == []  # v13+: the top-level code alone


_SCALARS = {"int8": 1, "int16": 1, "int32": 1, "int64": 1, "uint16": 1, "float64": 1.0, "bool": False,
            "string": "x", "uuid": uuid.UUID(int=7), "bytes": b"", "records": b""}


def _populated(cls, version: int):
    """An instance of message class ``cls`` with one entry in every list
    (recursively) and a value in every field of ``version``."""
    module = sys.modules[cls.__module__]
    fields = {}
    for name, _, typ, versions, *_ in cls._schema:
        if versions is None:          # a field of no served version (ShareFetch's v0-only PartitionMaxBytes)
            continue
        lo, hi = versions
        if not (lo <= version and (hi is None or version <= hi)):
            continue
        elem = typ.removeprefix("[]")
        value = _SCALARS[elem] if elem in _SCALARS else _populated(getattr(module, elem), version)
        fields[name] = [value] if typ.startswith("[]") else value
    return cls(**fields)


def _codes(obj) -> set:
    """Every error code anywhere in a decoded response."""
    found = set()
    for f in getattr(obj, "_fields", ()):
        value = getattr(obj, f)
        if f.endswith("error_code"):
            found.add(value)
        for item in value if isinstance(value, list) else [value]:
            found |= _codes(item)
    return found


# Kafka's getErrorResponse for DescribeLogDirs is an empty list of log dirs;
# only v3+ has a top-level error code to carry the error
_NO_PLACE_FOR_THE_CODE = {(ApiKey.DESCRIBE_LOG_DIRS, v) for v in range(3)}


def test_every_served_api_version_answers_a_failure_with_unknown_server_error(monkeypatch):
    """Each API kproto serves, in each version, with a request naming one
    of everything: a failing handler gets an answer (never a closed
    connection) that carries UNKNOWN_SERVER_ERROR. A new API without an
    error answer in kproto/error_response.py fails here."""
    load_all()
    for key, (lo, hi, _) in list(HANDLERS.items()):
        monkeypatch.setitem(HANDLERS, key, (lo, hi, _failing))
    dispatcher = Dispatcher(None)
    failures, checked = [], 0

    async def run():
        nonlocal checked
        for key, (lo, hi, _) in sorted(HANDLERS.items()):
            for v in range(lo, hi + 1):
                name = f"{api.request_class(key).NAME} v{v}"
                request = _populated(api.request_class(key), v)
                frame = api.encode_request(request, v, 42, "t")[4:]
                try:
                    chunks = await dispatcher.handle(frame, object())
                except CloseConnection as exc:
                    failures.append(f"{name}: connection closed ({exc})")
                    continue
                body = b"".join(bytes(c) for c in chunks)[4:]
                cid, resp = api.decode_response(body, key, v)
                checked += 1
                if cid != 42:
                    failures.append(f"{name}: correlation id {cid}")
                elif UNKNOWN not in _codes(resp) and (key, v) not in _NO_PLACE_FOR_THE_CODE:
                    failures.append(f"{name}: no UNKNOWN_SERVER_ERROR in {resp}")

    logging.disable(logging.ERROR)
    try:
        trio.run(run)
    finally:
        logging.disable(logging.NOTSET)
    assert failures == []
    assert checked > 200


@pytest.mark.parametrize("key, version, request_, where", [
    (ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(resource_name="t")] * 2),
     lambda r: [x.error_code for x in r.results]),
    (ApiKey.DELETE_ACLS, 1, DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter()]),
     lambda r: [(x.error_code, x.matching_acls) for x in r.filter_results]),
    (ApiKey.DESCRIBE_LOG_DIRS, 4, DescribeLogDirsRequest(topics=None), lambda r: (r.error_code, r.results)),
    (ApiKey.DESCRIBE_PRODUCERS, 0, DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
        name="t", partition_indexes=[0, 2])]), lambda r: [(p.partition_index, p.error_code) for p in r.topics[0].partitions]),
    (ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(transactional_ids=["a", "b"]),
     lambda r: [(s.transactional_id, s.error_code) for s in r.transaction_states]),
    (ApiKey.WRITE_TXN_MARKERS, 1, WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=5, topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name="t", partition_indexes=[1])])]),
     lambda r: [(m.producer_id, t.name, p.partition_index, p.error_code)
                for m in r.markers for t in m.topics for p in t.partitions]),
    (ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, AlterPartitionReassignmentsRequest(topics=[
        AlterPartitionReassignmentsRequest.ReassignableTopic(name="t", partitions=[
            AlterPartitionReassignmentsRequest.ReassignablePartition(partition_index=3, replicas=[1])])]),
     lambda r: (r.error_code, [(t.name, p.partition_index, p.error_code) for t in r.responses for p in t.partitions])),
    (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, DescribeUserScramCredentialsRequest(users=[
        DescribeUserScramCredentialsRequest.UserName(name="alice")]),
     lambda r: (r.error_code, [(x.user, x.error_code) for x in r.results])),
])
def test_error_answers_as_kafka_builds_them(failing, key, version, request_, where):
    failing(key)
    (resp,) = _exchange([(request_, version)])
    expected = {
        ApiKey.CREATE_ACLS: [UNKNOWN, UNKNOWN],
        ApiKey.DELETE_ACLS: [(UNKNOWN, [])],
        ApiKey.DESCRIBE_LOG_DIRS: (UNKNOWN, []),
        ApiKey.DESCRIBE_PRODUCERS: [(0, UNKNOWN), (2, UNKNOWN)],
        ApiKey.DESCRIBE_TRANSACTIONS: [("a", UNKNOWN), ("b", UNKNOWN)],
        ApiKey.WRITE_TXN_MARKERS: [(5, "t", 1, UNKNOWN)],
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: (UNKNOWN, [("t", 3, UNKNOWN)]),
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (UNKNOWN, [("", UNKNOWN)]),   # Kafka names no user
    }[key]
    assert resp is not None and where(resp) == expected

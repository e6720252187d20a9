"""An unexpected error inside a handler: Kafka answers the request with
UNKNOWN_SERVER_ERROR (in the places the API has for errors) and keeps the
connection; the error is logged once with the API and correlation id."""
from __future__ import annotations

import struct
import uuid

import pytest
import trio

from kproto import api
from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.fetch_request import FetchRequest
from kproto.messages.heartbeat_request import HeartbeatRequest
from kproto.messages.list_offsets_request import ListOffsetsRequest

from broker.dispatch import Dispatcher
from broker.error_response import error_response
from broker.handlers import HANDLERS, load_all
from broker.server import serve_connection

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


def test_every_handled_api_version_has_an_error_answer_or_closes():
    load_all()
    answered = 0
    for key, (lo, hi, _) in HANDLERS.items():
        for v in range(lo, hi + 1):
            resp = error_response(key, v, api.request_class(key)(), UNKNOWN)
            if resp is not None:
                resp.encode(v, strict=False)
                answered += 1
    assert answered > 150

"""Fetch answers of megabytes (a consumer catching up) on a real `kproto serve`
over TCP: broker/net/transport.py writes them from a worker thread while another
connection sends Produce requests, on the event loop otherwise, resuming
where the socket would block. A reader that does not read holds its answers
back without holding a producer on another connection, and once it reads, its
pipelined answers arrive whole, byte for byte, in request order."""
from __future__ import annotations

import socket
import time
import uuid

import pytest

from kproto import records as rec
from kproto.api import ApiKey, decode_response, encode_request
from kproto.messages.api_versions_request import ApiVersionsRequest
from kproto.messages.fetch_request import FetchRequest
from tests.wire_client import FETCH_V, WireClient, create_topic, produce

pytestmark = pytest.mark.timeout(60)

RECORDS = 4096          # 1 KiB each: 4 MiB per fetch answer
PER_BATCH = 64


def _value(i: int) -> bytes:
    # every record different, so a byte sent twice or skipped shows
    return (b"%08d" % i) * 128


def _fetch(topic: str, offset: int) -> FetchRequest:
    part = FetchRequest.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=offset,
                                       partition_max_bytes=8 << 20)
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=16 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                            topic=topic, topic_id=uuid.UUID(int=0), partitions=[part])])


def _values(records) -> list[tuple[int, bytes]]:
    data = bytes(records)
    return [(r.offset, r.value) for pos, _ in rec.iter_batch_headers(data, allow_partial_tail=True)
            for r in rec.iter_records(data, pos)]


def _slow_reader(bootstrap: str) -> WireClient:
    """A client whose small receive window makes the broker's writes block."""
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.settimeout(20)
    sock.connect((host, int(port)))
    client = WireClient.__new__(WireClient)
    client.sock, client._next_cid = sock, 1
    return client


def _fill(broker, topic_name) -> WireClient:
    create_topic(broker.bootstrap, topic_name, partitions=1)
    producer = WireClient(broker.bootstrap)
    for start in range(0, RECORDS, PER_BATCH):
        batch = rec.build_batch([(None, _value(i), []) for i in range(start, start + PER_BATCH)])
        assert produce(producer, topic_name, batch).error_code == 0
    return producer


def _send_pipelined(reader: WireClient, topic_name: str) -> None:
    versions = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    # fetch 4 MiB, ApiVersions, fetch the second half, ApiVersions: all sent before reading
    reader.send_raw(encode_request(_fetch(topic_name, 0), FETCH_V, 1, "t")
                    + encode_request(versions, 3, 2, "t")
                    + encode_request(_fetch(topic_name, RECORDS // 2), FETCH_V, 3, "t")
                    + encode_request(versions, 3, 4, "t"))
    # its first answer has filled the reader's window (peeked, not read): the broker's
    # writes to it now block
    assert len(reader.sock.recv(60 * 1024, socket.MSG_PEEK | socket.MSG_WAITALL)) == 60 * 1024


def _check_answers(reader: WireClient) -> None:
    answers = []
    for cid, key, version in ((1, ApiKey.FETCH, FETCH_V), (2, ApiKey.API_VERSIONS, 3),
                              (3, ApiKey.FETCH, FETCH_V), (4, ApiKey.API_VERSIONS, 3)):
        frame = reader.recv_frame()
        assert frame is not None, f"connection closed before answer {cid}"
        got_cid, resp = decode_response(frame, key, version)
        assert got_cid == cid
        answers.append(resp)
    first, third = (a.responses[0].partitions[0] for a in (answers[0], answers[2]))
    assert first.error_code == 0 and third.error_code == 0
    got = _values(first.records)
    assert len(got) >= RECORDS
    assert got == [(i, _value(i)) for i in range(len(got))]
    got = _values(third.records)
    assert got[0][0] == RECORDS // 2 and len(got) >= RECORDS // 2
    assert got == [(i, _value(i)) for i in range(RECORDS // 2, RECORDS // 2 + len(got))]
    assert answers[1].error_code == 0 and answers[3].error_code == 0


def test_pipelined_large_fetches_arrive_whole_in_order_while_a_producer_is_served(broker, topic_name):
    # a producer on another connection: the answers are written from a worker thread
    with _fill(broker, topic_name) as producer:
        reader = _slow_reader(broker.bootstrap)
        try:
            _send_pipelined(reader, topic_name)
            # and a produce on another connection is still answered
            more = rec.build_batch([(None, _value(RECORDS), [])])
            part = produce(producer, topic_name, more)
            assert (part.error_code, part.base_offset) == (0, RECORDS)
            _check_answers(reader)
        finally:
            reader.close()


def test_a_lone_readers_large_fetches_arrive_whole_in_order(broker, topic_name):
    # no producer for a while (broker/net/transport.py _PRODUCER_WINDOW_S): the
    # answers are written on the event loop, resumed where the socket would block
    _fill(broker, topic_name).close()
    time.sleep(0.3)
    reader = _slow_reader(broker.bootstrap)
    try:
        _send_pipelined(reader, topic_name)
        _check_answers(reader)
    finally:
        reader.close()

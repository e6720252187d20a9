"""Golden tests from real clients: librdkafka (confluent-kafka) and kafka-python
talk to a capturing TCP server that answers with kproto's encoders. Every frame
they send must decode with kproto.api.decode_request, re-encode to the same
bytes, and carry the values the client was asked to send (client id, topic,
acks, the record batch's codec, CRC, key and value).

The server answers ApiVersions, Metadata (one broker: itself; one topic with
one partition), FindCoordinator, InitProducerId, ListOffsets, Produce (success)
and a first Fetch (one record batch), so clients get as far as Produce, Fetch
and JoinGroup; anything else is recorded and left unanswered. Clients run in
subprocesses that are killed once the frames we want have arrived.

A few captured frames are kept in tests/fixtures/frames (manifest.json says
what each holds), so decoding is tested without the clients too. Rewrite them
with KPROTO_WRITE_FRAME_FIXTURES=1.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import crc32c
import pytest

from kproto import records
from kproto.api import (
    APIS, ApiKey, ResponseHeader, decode_request, request_header_version,
    response_header_version,
)
from kproto.messages.api_versions_response import ApiVersionsResponse
from kproto.messages.fetch_response import FetchResponse
from kproto.messages.find_coordinator_response import FindCoordinatorResponse
from kproto.messages.init_producer_id_response import InitProducerIdResponse
from kproto.messages.list_offsets_response import ListOffsetsResponse
from kproto.messages.metadata_response import MetadataResponse
from kproto.messages.produce_response import ProduceResponse

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "frames"
OBSERVED_API_VERSIONS = REPO.parent / "shared" / "kafka-observations" / "api-versions.json"

TOPIC = "golden-topic"
TOPIC_ID = uuid.UUID("5d0b1c6e-2f4a-4b8e-9c1d-7a6f3e2b1c0d")
NODE_ID = 1
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
FETCH_KEY, FETCH_VALUE = b"golden-key", b"golden-value"
CLIENT_TIMEOUT = 25.0


def produced_key(codec: str) -> bytes:
    return f"key-{codec}".encode()


def produced_value(codec: str) -> bytes:
    # compressible, so that every client really compresses it
    return (f"value-{codec}-" * 40).encode()


def advertised_versions() -> list[tuple[int, int, int]]:
    """What a Kafka 3.9 broker advertises (recorded), else every API kproto has."""
    if OBSERVED_API_VERSIONS.exists():
        data = json.loads(OBSERVED_API_VERSIONS.read_text())
        return [(a["api_key"], a["min_version"], a["max_version"]) for a in data["api_keys"]
                if a["api_key"] in APIS]
    return [(key, entry[3], entry[4]) for key, entry in sorted(APIS.items())]


# ---------------------------------------------------------------------------
# The capturing server

def _recv_exact(conn, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


class Capture:
    """One request frame as it arrived, and what kproto made of it."""

    def __init__(self, frame: bytes):
        self.frame = frame
        self.error = None
        self.header = self.request = None
        try:
            self.header, self.request = decode_request(frame)
        except Exception as exc:  # recorded; test_every_frame_decodes reports it
            self.error = exc
        self.api_key, self.version = struct.unpack_from(">hh", frame)

    @property
    def client_id(self):
        return self.header.client_id if self.header else None


class CaptureBroker:
    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.captures: list[Capture] = []
        self.cond = threading.Condition()
        self.conns: list[socket.socket] = []
        self.fetch_batch = self._fetch_batch()
        threading.Thread(target=self._accept, daemon=True).start()

    @staticmethod
    def _fetch_batch():
        build = getattr(records, "build_batch", None)
        return build([(FETCH_KEY, FETCH_VALUE)]) if build else b""

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)   # wakes the accept()ing thread
        except OSError:
            pass
        self.sock.close()
        for c in list(self.conns):
            try:
                c.close()
            except OSError:
                pass

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        conn.settimeout(CLIENT_TIMEOUT + 5)
        try:
            while True:
                head = _recv_exact(conn, 4)
                if head is None:
                    return
                size = int.from_bytes(head, "big", signed=True)
                if not 0 < size <= 64 << 20:
                    return
                frame = _recv_exact(conn, size)
                if frame is None:
                    return
                cap = Capture(frame)
                with self.cond:
                    self.captures.append(cap)
                    self.cond.notify_all()
                reply = self._reply(cap)
                if reply is not None:
                    conn.sendall(reply)
        except OSError:
            return
        finally:
            conn.close()

    def wait_for(self, predicate, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: any(predicate(c) for c in self.captures), timeout)

    def of(self, client_id=None, api_key=None):
        with self.cond:
            return [c for c in self.captures
                    if (client_id is None or c.client_id == client_id)
                    and (api_key is None or c.api_key == api_key)]

    # -- answers ---------------------------------------------------------------

    def _reply(self, cap: Capture):
        if cap.error is not None:
            return None
        body = self._answer(cap.header, cap.request, cap.version)
        if body is None:
            return None
        key, v = cap.api_key, cap.version
        out = bytearray(4)
        ResponseHeader(correlation_id=cap.header.correlation_id).encode_into(
            out, response_header_version(key, v))
        body.encode_into(out, v)
        struct.pack_into(">i", out, 0, len(out) - 4)
        return bytes(out)

    def _answer(self, header, req, v):
        key = header.request_api_key
        if key == ApiKey.API_VERSIONS:
            return ApiVersionsResponse(api_keys=[
                ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, lo, hi in advertised_versions()])
        if key == ApiKey.METADATA:
            names = [t.name for t in req.topics] if req.topics else [TOPIC]
            M = MetadataResponse
            return M(
                brokers=[M.MetadataResponseBroker(node_id=NODE_ID, host="127.0.0.1", port=self.port)],
                cluster_id="kproto-golden", controller_id=NODE_ID,
                topics=[M.MetadataResponseTopic(
                    name=name or TOPIC, topic_id=TOPIC_ID,
                    partitions=[M.MetadataResponsePartition(
                        partition_index=0, leader_id=NODE_ID, leader_epoch=0,
                        replica_nodes=[NODE_ID], isr_nodes=[NODE_ID])])
                    for name in names])
        if key == ApiKey.FIND_COORDINATOR:
            F = FindCoordinatorResponse
            if v >= 4:
                return F(coordinators=[F.Coordinator(key=k, node_id=NODE_ID, host="127.0.0.1",
                                                     port=self.port, error_message=None)
                                       for k in req.coordinator_keys])
            return F(node_id=NODE_ID, host="127.0.0.1", port=self.port, error_message=None)
        if key == ApiKey.INIT_PRODUCER_ID:
            return InitProducerIdResponse(producer_id=4242, producer_epoch=0)
        if key == ApiKey.LIST_OFFSETS:
            L = ListOffsetsResponse
            return L(topics=[L.ListOffsetsTopicResponse(name=t.name, partitions=[
                L.ListOffsetsPartitionResponse(partition_index=p.partition_index, timestamp=-1,
                                               offset=0, leader_epoch=0, old_style_offsets=[0])
                for p in t.partitions]) for t in req.topics])
        if key == ApiKey.PRODUCE:
            if req.acks == 0:
                return None
            P = ProduceResponse
            return P(responses=[P.TopicProduceResponse(name=t.name, partition_responses=[
                P.PartitionProduceResponse(index=p.index, base_offset=0, log_start_offset=0)
                for p in t.partition_data]) for t in req.topic_data])
        if key == ApiKey.FETCH:
            # one batch for a fetch from offset 0; later fetches long-poll forever
            wanted = [(t, p) for t in req.topics for p in t.partitions if p.fetch_offset == 0]
            if not wanted:
                return None
            F = FetchResponse
            return F(responses=[F.FetchableTopicResponse(
                topic=t.topic or TOPIC, topic_id=t.topic_id, partitions=[F.PartitionData(
                    partition_index=p.partition, high_watermark=1, last_stable_offset=1,
                    log_start_offset=0, records=self.fetch_batch)])
                for t, p in wanted])
        return None


# ---------------------------------------------------------------------------
# The clients

RDKAFKA_SCRIPT = r"""
import json, os, sys, time
import confluent_kafka as ck
cfg = json.loads(sys.argv[1])
bs = "127.0.0.1:%d" % cfg["port"]
common = {"bootstrap.servers": bs, "socket.timeout.ms": 10000, "log_level": 3}
if cfg["mode"] == "produce":
    for codec in cfg["codecs"]:
        p = ck.Producer(dict(common, **{"client.id": "golden-librdkafka-" + codec,
                        "compression.type": codec, "linger.ms": 0, "message.timeout.ms": 10000}))
        p.produce(cfg["topic"], key=cfg["keys"][codec].encode("latin-1"),
                  value=cfg["values"][codec].encode("latin-1"))
        print(json.dumps({"codec": codec, "unflushed": p.flush(15)}), flush=True)
    os._exit(0)
if cfg["mode"] == "fetch":
    c = ck.Consumer(dict(common, **{"client.id": "golden-librdkafka-fetch", "group.id": "golden-fetch",
                    "enable.auto.commit": False, "fetch.wait.max.ms": 200}))
    c.assign([ck.TopicPartition(cfg["topic"], 0, 0)])
else:
    c = ck.Consumer(dict(common, **{"client.id": "golden-librdkafka-group", "group.id": "golden-group",
                    "session.timeout.ms": 6000}))
    c.subscribe([cfg["topic"]])
end = time.monotonic() + cfg["lifetime"]   # never outlive a test run that died
while time.monotonic() < end:
    m = c.poll(0.2)
    if m is not None and not m.error():
        print(json.dumps({"key": m.key().decode("latin-1"), "value": m.value().decode("latin-1")}), flush=True)
os._exit(0)
"""

KAFKA_PYTHON_SCRIPT = r"""
import json, os, sys, time
cfg = json.loads(sys.argv[1])
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
bs = "127.0.0.1:%d" % cfg["port"]
if cfg["mode"] == "produce":
    for codec in cfg["codecs"]:
        p = KafkaProducer(bootstrap_servers=bs, client_id="golden-kafka-python-" + codec,
                          compression_type=None if codec == "none" else codec, acks="all",
                          linger_ms=0, request_timeout_ms=10000)
        p.send(cfg["topic"], key=cfg["keys"][codec].encode("latin-1"),
               value=cfg["values"][codec].encode("latin-1")).get(timeout=15)
        p.close(timeout=2)
        print(json.dumps({"codec": codec, "unflushed": 0}), flush=True)
    os._exit(0)
if cfg["mode"] == "fetch":
    c = KafkaConsumer(bootstrap_servers=bs, client_id="golden-kafka-python-fetch", group_id=None,
                      enable_auto_commit=False, fetch_max_wait_ms=200)
    tp = TopicPartition(cfg["topic"], 0)
    c.assign([tp])
    c.seek(tp, 0)
else:
    c = KafkaConsumer(cfg["topic"], bootstrap_servers=bs, client_id="golden-kafka-python-group",
                      group_id="golden-group", session_timeout_ms=6000)
end = time.monotonic() + cfg["lifetime"]   # never outlive a test run that died
while time.monotonic() < end:
    for recs in c.poll(timeout_ms=200).values():
        for r in recs:
            print(json.dumps({"key": r.key.decode("latin-1"), "value": r.value.decode("latin-1")}), flush=True)
os._exit(0)
"""


def _available_clients():
    out = {}
    try:
        import confluent_kafka  # noqa: F401
        out["librdkafka"] = (RDKAFKA_SCRIPT, list(CODECS))
    except ImportError:
        pass
    try:
        import kafka.codec as kc
        codecs = ["none"] + [c for c in ("gzip", "snappy", "lz4", "zstd") if getattr(kc, f"has_{c}")()]
        out["kafka-python"] = (KAFKA_PYTHON_SCRIPT, codecs)
    except ImportError:
        pass
    return out


CLIENTS = _available_clients()


class ClientRun:
    """A client in a subprocess; its output is read by daemon threads so that
    nothing here can block on a client that hangs."""

    def __init__(self, client, mode, script, port, codecs):
        cfg = {"port": port, "mode": mode, "topic": TOPIC, "codecs": codecs, "lifetime": 2 * CLIENT_TIMEOUT,
               "keys": {c: produced_key(c).decode("latin-1") for c in codecs},
               "values": {c: produced_value(c).decode("latin-1") for c in codecs}}
        self.client, self.mode = client, mode
        self.proc = subprocess.Popen([sys.executable, "-c", script, json.dumps(cfg)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True)
        self.out: list[str] = []
        self.err: list[str] = []
        self.cond = threading.Condition()
        self.readers = [threading.Thread(target=self._read, args=(s, buf), daemon=True)
                        for s, buf in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for t in self.readers:
            t.start()

    def _read(self, stream, buf):
        for line in stream:
            with self.cond:
                buf.append(line)
                self.cond.notify_all()

    def wait_exit(self, timeout):
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        self.stop()

    def wait_output(self, timeout):
        """Until the client printed a result line (or exited)."""
        with self.cond:
            self.cond.wait_for(lambda: self.lines() or self.proc.poll() is not None, timeout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for t in self.readers:
            t.join(2)

    @property
    def stdout(self):
        return "".join(self.out)

    @property
    def stderr(self):
        return "".join(self.err)

    def lines(self):
        return [json.loads(line) for line in list(self.out) if line.startswith("{")]


def _client_id(client, what):
    return f"golden-{client}-{what}"


@pytest.fixture(scope="module")
def captured():
    if not CLIENTS:
        pytest.skip("neither confluent-kafka nor kafka-python is installed")
    broker = CaptureBroker()
    runs = {}
    try:
        # all clients at once: their frames are told apart by client id
        for client, (script, codecs) in CLIENTS.items():
            for mode in ("produce", "fetch", "group"):
                runs[(client, mode)] = ClientRun(client, mode, script, broker.port, codecs)
        deadline = time.monotonic() + CLIENT_TIMEOUT
        wanted = {"fetch": ApiKey.FETCH, "group": ApiKey.JOIN_GROUP}

        def left():
            return max(0.1, deadline - time.monotonic())

        for (client, mode), run in runs.items():
            if mode == "produce":
                run.wait_exit(left())
                continue
            cid, key = _client_id(client, mode), wanted[mode]
            broker.wait_for(lambda c: c.client_id == cid and c.api_key == key, left())
            if mode == "fetch" and broker.fetch_batch:
                run.wait_output(min(10.0, left()))   # the record it read from our answer
            run.stop()
        yield broker, runs
    finally:
        for run in runs.values():
            run.stop()
        broker.close()
    if os.environ.get("KPROTO_WRITE_FRAME_FIXTURES"):
        write_fixtures(broker)


def _debug(runs, client, mode):
    run = runs[(client, mode)]
    return f"\n--- {client} {mode} stdout:\n{run.stdout[-2000:]}\n--- stderr:\n{run.stderr[-3000:]}"


# ---------------------------------------------------------------------------
# Tests on the captured traffic

def test_every_frame_decodes_and_reencodes(captured):
    broker, _runs = captured
    assert broker.captures, "no client connected"
    for cap in broker.captures:
        assert cap.error is None, f"api {cap.api_key} v{cap.version}: {cap.error!r}"
        hv = request_header_version(cap.api_key, cap.version)
        again = cap.header.encode(hv) + cap.request.encode(cap.version)
        assert again == cap.frame, f"api {cap.api_key} v{cap.version} re-encodes differently"


CLIENT_NAMES = sorted(CLIENTS)


@pytest.mark.parametrize("client", CLIENT_NAMES)
def test_api_versions_and_metadata(captured, client):
    broker, runs = captured
    cid = _client_id(client, "none")
    av = broker.of(cid, ApiKey.API_VERSIONS)
    assert av, f"{client} sent no ApiVersions" + _debug(runs, client, "produce")
    assert all(c.header.client_id == cid for c in av)
    if av[0].version >= 3:
        assert av[0].request.client_software_name
        assert av[0].request.client_software_version
    md = broker.of(cid, ApiKey.METADATA)
    assert md, f"{client} sent no Metadata" + _debug(runs, client, "produce")
    # all topics (null), none (the bootstrap probe) or ours by name
    for c in md:
        assert c.request.topics is None or {t.name for t in c.request.topics} <= {TOPIC}


PRODUCE_CASES = [pytest.param(client, codec, id=f"{client}-{codec}")
                 for client in CLIENT_NAMES for codec in CLIENTS[client][1]]


@pytest.mark.parametrize("client,codec", PRODUCE_CASES)
def test_produce(captured, client, codec):
    broker, runs = captured
    cid = _client_id(client, codec)
    produced = [c for c in broker.of(cid, ApiKey.PRODUCE) if c.request.topic_data]
    assert produced, f"{client} sent no Produce with {codec}" + _debug(runs, client, "produce")
    check_produce(produced[0].request, codec)
    # our ProduceResponse satisfied the client: the send completed
    done = {line["codec"]: line["unflushed"] for line in runs[(client, "produce")].lines()}
    assert done.get(codec) == 0, f"{client} did not complete the {codec} send" + _debug(runs, client, "produce")


def check_produce(req, codec, key=None, value=None):
    assert req.acks == -1
    assert req.timeout_ms > 0
    (topic,) = req.topic_data
    assert topic.name == TOPIC
    (part,) = topic.partition_data
    assert part.index == 0
    batch = part.records
    assert isinstance(batch, memoryview)      # records stay a view into the frame
    header = records.BatchHeader(batch)
    assert header.magic == 2
    assert header.size == len(batch)
    assert header.attributes & records.COMPRESSION_MASK == CODECS[codec]
    assert crc32c.crc32c(batch[records.CRC_START:]) == header.crc
    if hasattr(records, "validate_batch"):
        records.validate_batch(batch)
    if hasattr(records, "iter_records"):
        (rec,) = list(records.iter_records(batch))
        assert rec.key == (key or produced_key(codec))
        assert rec.value == (value or produced_value(codec))


@pytest.mark.parametrize("client", CLIENT_NAMES)
def test_fetch(captured, client):
    broker, runs = captured
    cid = _client_id(client, "fetch")
    fetches = broker.of(cid, ApiKey.FETCH)
    assert fetches, f"{client} sent no Fetch" + _debug(runs, client, "fetch")
    check_fetch(fetches[0].request, fetches[0].version)
    if broker.fetch_batch:
        # the client read the batch out of our FetchResponse
        got = runs[(client, "fetch")].lines()
        assert got and got[0] == {"key": FETCH_KEY.decode(), "value": FETCH_VALUE.decode()}, \
            _debug(runs, client, "fetch")


def check_fetch(req, version):
    assert req.max_wait_ms >= 0
    assert req.max_bytes > 0 if version >= 3 else True
    (topic,) = req.topics
    if version >= 13:
        assert topic.topic_id == TOPIC_ID
    else:
        assert topic.topic == TOPIC
    (part,) = topic.partitions
    assert part.partition == 0
    assert part.fetch_offset == 0
    assert part.partition_max_bytes > 0


@pytest.mark.parametrize("client", CLIENT_NAMES)
def test_join_group(captured, client):
    broker, runs = captured
    cid = _client_id(client, "group")
    assert broker.of(cid, ApiKey.FIND_COORDINATOR), "no FindCoordinator" + _debug(runs, client, "group")
    joins = broker.of(cid, ApiKey.JOIN_GROUP)
    assert joins, f"{client} sent no JoinGroup" + _debug(runs, client, "group")
    check_join_group(joins[0].request)


def check_join_group(req):
    assert req.group_id == "golden-group"
    assert req.protocol_type == "consumer"
    assert req.session_timeout_ms == 6000
    assert req.protocols and all(p.name for p in req.protocols)
    # the consumer-protocol subscription names the topic
    assert any(TOPIC.encode() in bytes(p.metadata) for p in req.protocols)


# ---------------------------------------------------------------------------
# Stored frames: decoding tested without the clients

def _manifest():
    path = FIXTURES / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else {}


def write_fixtures(broker):
    """One frame per (client, API) and one Produce per codec."""
    FIXTURES.mkdir(parents=True, exist_ok=True)
    manifest = {}
    names = {k: APIS[k][0] for k in APIS}
    for client in CLIENT_NAMES:
        picks = []
        for codec in CLIENTS[client][1]:
            prods = [c for c in broker.of(_client_id(client, codec), ApiKey.PRODUCE) if c.request.topic_data]
            picks += [(prods[0], {"codec": codec})] if prods else []
        for what, key in (("none", ApiKey.API_VERSIONS), ("none", ApiKey.METADATA),
                          ("fetch", ApiKey.FETCH), ("group", ApiKey.JOIN_GROUP)):
            caps = broker.of(_client_id(client, what), key)
            picks += [(caps[0], {})] if caps else []
        for cap, extra in picks:
            name = f"{client}-{names[cap.api_key].lower()}-v{cap.version}"
            name += f"-{extra['codec']}" if "codec" in extra else ""
            (FIXTURES / f"{name}.bin").write_bytes(cap.frame)
            manifest[f"{name}.bin"] = {"api_key": cap.api_key, "api_version": cap.version,
                                       "client_id": cap.client_id, **extra}
    (FIXTURES / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


FIXTURE_CASES = sorted(_manifest().items())


@pytest.mark.parametrize("name,meta", FIXTURE_CASES, ids=[n for n, _ in FIXTURE_CASES])
def test_stored_frame(name, meta):
    frame = (FIXTURES / name).read_bytes()
    header, req = decode_request(frame)
    assert (header.request_api_key, header.request_api_version) == (meta["api_key"], meta["api_version"])
    assert header.client_id == meta["client_id"]
    hv = request_header_version(meta["api_key"], meta["api_version"])
    assert header.encode(hv) + req.encode(meta["api_version"]) == frame
    key = meta["api_key"]
    if key == ApiKey.PRODUCE:
        check_produce(req, meta["codec"])
    elif key == ApiKey.FETCH:
        check_fetch(req, meta["api_version"])
    elif key == ApiKey.JOIN_GROUP:
        check_join_group(req)
    elif key == ApiKey.METADATA:
        assert req.topics is None or {t.name for t in req.topics} <= {TOPIC}


def test_fixtures_cover_produce_with_every_codec():
    if not FIXTURE_CASES:
        pytest.skip("no stored frames (run with KPROTO_WRITE_FRAME_FIXTURES=1 to capture them)")
    codecs = {m.get("codec") for _, m in FIXTURE_CASES if m["api_key"] == ApiKey.PRODUCE}
    assert set(CODECS) <= codecs
    apis = {m["api_key"] for _, m in FIXTURE_CASES}
    assert {ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.FETCH, ApiKey.JOIN_GROUP} <= apis

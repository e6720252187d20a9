"""Records written by one client and read by another: contents, codecs, acks, offsets, seeks.

Clients: confluent (librdkafka), kafka-python, aiokafka, kcat, java
(kafka-clients). The broker must hand every client back exactly what any
client wrote: keys (and null keys), values, headers (order and duplicates
kept), CreateTime timestamps, offsets from 0, and the producer's codec.
"""
from __future__ import annotations

import pytest

from compat_tests import wire
from compat_tests.clients import CLIENTS, CODECS, client_limits

T0 = 1_700_000_000_000

# Each client writes for confluent to read, confluent writes for each client
# to read, plus a few pairs of other clients.
PAIRS = ([(p, "confluent") for p in CLIENTS] + [("confluent", c) for c in CLIENTS if c != "confluent"]
         + [("java", "java"), ("kafka-python", "aiokafka"), ("aiokafka", "kafka-python"), ("kcat", "java"),
            ("java", "kcat")])


def sample_records(producer: str) -> list[dict]:
    """Keys, a null key, headers with duplicates, non-ASCII text, a larger value."""
    headers = [["trace", "abc"], ["dup", "1"], ["dup", "2"]]
    records = [
        {"key": "k0", "value": "v0", "headers": headers},
        {"key": None, "value": "no key", "headers": headers},
        {"key": "k2", "value": "grüße ✓", "headers": []},
        {"key": "k3", "value": "x" * 3000, "headers": []},
        {"key": "k4", "value": "v4", "headers": [["only", "one"]]},
    ]
    for i, r in enumerate(records):
        r["partition"] = 0
        # kcat cannot set timestamps; the broker then keeps the producer's clock
        r["timestamp"] = None if producer == "kcat" else T0 + i
    return records


def expected_records(records: list[dict], first_offset: int = 0) -> list[dict]:
    return [{"partition": 0, "offset": first_offset + i, "key": r["key"], "value": r["value"],
             "headers": [list(h) for h in r["headers"]], "timestamp": r["timestamp"]}
            for i, r in enumerate(records)]


def without_unset_timestamps(read: list[dict], records: list[dict]) -> list[dict]:
    return [dict(got, timestamp=None) if sent["timestamp"] is None else got for got, sent in zip(read, records)]


@pytest.mark.compat("round trip: keys, null key, headers, timestamps", client="{producer} → {consumer}")
@pytest.mark.parametrize("producer,consumer", PAIRS, ids=[f"{p}-to-{c}" for p, c in PAIRS])
def test_round_trip(target, clients, compat, topic, producer, consumer):
    clients.need(producer)
    clients.need(consumer)
    target.create_topic(topic, 1)
    records = sample_records(producer)
    reports = clients.produce(producer, target.bootstrap, topic, records)
    if producer != "kcat":
        compat.observe(reports, expected=[{"partition": 0, "offset": i} for i in range(len(records))],
                       what="delivery reports")
    read = clients.consume(consumer, target.bootstrap, topic, 0, 0, len(records))
    compat.observe(without_unset_timestamps(read, records), expected=expected_records(records))


def _stored_codecs(target, topic) -> list[int]:
    resp = wire.call(target.bootstrap, "Fetch", 12, replica_id=-1, max_wait_ms=100, min_bytes=1,
                     max_bytes=1 << 22, isolation_level=0, session_id=0, session_epoch=-1,
                     topics=[{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                               "fetch_offset": 0, "log_start_offset": -1,
                                                               "partition_max_bytes": 1 << 22}]}],
                     forgotten_topics_data=[], rack_id="")
    codecs = []
    for b in wire.record_batches(resp["responses"][0]["partitions"][0]["records"]):
        if not codecs or codecs[-1] != b["compression"]:
            codecs.append(b["compression"])
    return codecs


def codec_records(codec: str) -> list[dict]:
    # compressible values, so every codec really compresses
    return [{"key": f"{codec}-{i}", "value": f"{codec}-{i}-" + "abcdefgh" * 64, "headers": [["c", codec]],
             "partition": 0, "timestamp": None} for i in range(3)]


@pytest.mark.compat("compression none/gzip/snappy/lz4/zstd: produce (confluent reads)", client="{client}")
@pytest.mark.parametrize("client", CLIENTS)
def test_compression_produce(target, clients, compat, topic, client):
    clients.need(client)
    target.create_topic(topic, 1)
    codecs = [c for c in CODECS if client_limits(client, c) is None]
    runs = [(codec_records(c), c) for c in codecs]
    clients.produce_runs(client, target.bootstrap, topic, runs)
    sent = [r for records, _ in runs for r in records]
    read = clients.consume("confluent", target.bootstrap, topic, 0, 0, len(sent))
    obs = {"read": [[r["key"], r["value"], r["headers"]] for r in read],
           # the broker keeps the producer's codec (compression.type=producer)
           "stored_codecs": [CODECS[i] for i in _stored_codecs(target, topic)]}
    compat.observe(obs, expected={"read": [[r["key"], r["value"], r["headers"]] for r in sent],
                                  "stored_codecs": codecs})


@pytest.mark.compat("compression none/gzip/snappy/lz4/zstd: consume (confluent writes)", client="{client}")
@pytest.mark.parametrize("client", CLIENTS)
def test_compression_consume(target, clients, compat, topic, client):
    clients.need(client)
    target.create_topic(topic, 1)
    codecs = [c for c in CODECS if client_limits(client, c) is None]
    runs = [(codec_records(c), c) for c in codecs]
    clients.produce_runs("confluent", target.bootstrap, topic, runs)
    sent = [r for records, _ in runs for r in records]
    read = clients.consume(client, target.bootstrap, topic, 0, 0, len(sent))
    compat.observe([[r["offset"], r["key"], r["value"], r["headers"]] for r in read],
                   expected=[[i, r["key"], r["value"], r["headers"]] for i, r in enumerate(sent)])


ACK_CLIENTS = ("confluent", "kafka-python", "aiokafka", "java")


@pytest.mark.compat("acks={acks}", client="{client}")
@pytest.mark.parametrize("acks", ["0", "1", "all"])
@pytest.mark.parametrize("client", ACK_CLIENTS)
def test_acks(target, clients, compat, topic, client, acks):
    clients.need(client)
    target.create_topic(topic, 1)
    records = [{"key": f"k{i}", "value": f"acks-{acks}-{i}", "headers": [], "partition": 0, "timestamp": T0 + i}
               for i in range(10)]
    reports = clients.produce(client, target.bootstrap, topic, records, acks=acks)
    if acks == "0":
        # The broker sends no answer, so what a client reports is its own
        # making (-1, nothing, or kafka-python's counted offsets): compared
        # between brokers only.
        compat.observe(reports, what="delivery reports")
    else:
        compat.observe(reports, expected=[{"partition": 0, "offset": i} for i in range(10)],
                       what="delivery reports")
    read = clients.consume("confluent", target.bootstrap, topic, 0, 0, len(records))
    compat.observe([r["value"] for r in read], expected=[r["value"] for r in records])


@pytest.mark.compat("offsets: earliest, latest, by timestamp", client="{client}")
@pytest.mark.parametrize("client", CLIENTS)
def test_offsets_by_timestamp(target, clients, compat, topic, client):
    clients.need(client)
    target.create_topic(topic, 1)
    records = [{"key": None, "value": f"t{i}", "headers": [], "partition": 0, "timestamp": T0 + 1000 * i}
               for i in range(10)]
    clients.produce("confluent", target.bootstrap, topic, records)
    queries = [T0 - 5000, T0, T0 + 3500, T0 + 9000, T0 + 9001]
    found = clients.offsets(client, target.bootstrap, topic, 0, queries)
    compat.observe(found, expected={"earliest": 0, "latest": 10,
                                    "by_timestamp": {T0 - 5000: 0, T0: 0, T0 + 3500: 4, T0 + 9000: 9,
                                                     T0 + 9001: None}})


@pytest.mark.compat("assign + seek to an offset", client="{client}")
@pytest.mark.parametrize("client", CLIENTS)
def test_seek(target, clients, compat, topic, client):
    clients.need(client)
    target.create_topic(topic, 1)
    records = [{"key": f"k{i}", "value": f"s{i}", "headers": [], "partition": 0, "timestamp": T0 + i}
               for i in range(10)]
    clients.produce("confluent", target.bootstrap, topic, records)
    read = clients.consume(client, target.bootstrap, topic, 0, 5, 3)
    compat.observe([[r["offset"], r["value"]] for r in read], expected=[[5, "s5"], [6, "s6"], [7, "s7"]])


@pytest.mark.compat("records across 3 partitions by explicit partition", client="{client}")
@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka", "java"])
def test_partitions(target, clients, compat, topic, client):
    clients.need(client)
    target.create_topic(topic, 3)
    records = [{"key": f"k{i}", "value": f"p{i % 3}-{i // 3}", "headers": [], "partition": i % 3,
                "timestamp": T0 + i} for i in range(9)]
    reports = clients.produce(client, target.bootstrap, topic, records)
    read = {p: [r["value"] for r in clients.consume("confluent", target.bootstrap, topic, p, 0, 3)]
            for p in range(3)}
    compat.observe({"reports": reports, "read": read}, expected={
        "reports": [{"partition": i % 3, "offset": i // 3} for i in range(9)],
        "read": {p: [f"p{p}-{j}" for j in range(3)] for p in range(3)}})

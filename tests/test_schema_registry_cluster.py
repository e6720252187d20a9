"""The schema registry on every node of a 3-node kproto cluster (real
`kproto serve` processes): any node takes writes (the others forward them
to the writer elected through the `schema-registry` group), every node reads
what any registered, and kill -9 of the writer node leaves a working
registry: writes go on after the election, ids stay unique, and every schema
registered before the kill is still read from each surviving node."""
from __future__ import annotations

import json
import time

import pytest
import requests

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from broker.launch.process import free_port  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

SETTINGS = {"broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "2000",
            "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "offsets.topic.replication.factor": "3",
            "default.replication.factor": "3", "min.insync.replicas": "2",
            "group.min.session.timeout.ms": "1000", "schema.registry.session.timeout.ms": "3000"}


def record(name: str, *fields: str) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [{"name": f, "type": "string"} for f in fields]})


def wait_until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (requests.RequestException, ValueError, KeyError) as exc:
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def register(url: str, subject: str, schema: str, timeout: float = 40.0) -> int:
    """POST a version; retried while the cluster elects a writer (50003 / 5xx), bounded."""
    def attempt():
        r = requests.post(f"{url}/subjects/{subject}/versions", json={"schema": schema}, timeout=30)
        if r.status_code >= 500:
            return None
        assert r.status_code == 200, r.text
        return r.json()["id"]
    return wait_until(attempt, timeout, f"register {subject} at {url}")


def writer_nodes(urls: dict, metrics: dict) -> list[int]:
    out = []
    for i in urls:
        try:
            text = requests.get(metrics[i], timeout=5).text
        except requests.RequestException:
            continue
        if "\nkproto_schema_registry_writer 1.0" in text:
            out.append(i)
    return out


@pytest.fixture
def cluster():
    reg = {i: free_port() for i in (1, 2, 3)}
    met = {i: free_port() for i in (1, 2, 3)}
    node_settings = {i: {"schema.registry.listeners": f"http://127.0.0.1:{reg[i]}",
                         "kproto.metrics.listener": f"http://127.0.0.1:{met[i]}"} for i in reg}
    with QuorumCluster(3, settings=SETTINGS, node_settings=node_settings) as c:
        c.registry_urls = {i: f"http://127.0.0.1:{p}" for i, p in reg.items()}
        c.metrics_urls = {i: f"http://127.0.0.1:{p}/metrics" for i, p in met.items()}
        yield c


def test_every_node_serves_one_writer_and_kill_9_of_the_writer(cluster):
    urls, metrics = cluster.registry_urls, cluster.metrics_urls
    for url in urls.values():
        wait_until(lambda: requests.get(f"{url}/subjects", timeout=5).status_code == 200, 60, f"{url} up")
    ids = {}
    # writes through every node (two of them forward to the writer)
    for i, url in urls.items():
        ids[f"before-{i}"] = register(url, f"before-{i}", record(f"B{i}", "a"))
    # and through confluent-kafka's serializer with auto-registration, on a node that may not be the writer
    client = SchemaRegistryClient({"url": urls[2]})
    ser = AvroSerializer(client, record("Ser", "x", "y"))
    framed = ser({"x": "1", "y": "2"}, SerializationContext("cl-topic", MessageField.VALUE))
    ids["cl-topic-value"] = int.from_bytes(framed[1:5], "big")
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    producer.produce("cl-topic", value=framed)
    assert producer.flush(30) == 0
    assert len(set(ids.values())) == len(ids), ids
    writers = wait_until(lambda: writer_nodes(urls, metrics), 20, "one writer")
    assert len(writers) == 1, writers
    # a follower forwards writes over kept-alive connections to the writer, not one connection each
    follower = next(i for i in urls if i != writers[0])
    for n in range(5):
        ids[f"kept-{n}"] = register(urls[follower], f"kept-{n}", record(f"K{n}", "a"))
    text = requests.get(metrics[follower], timeout=5).text
    forwarded, connections = (float(line.split()[-1]) for line in text.splitlines() if line.startswith((
        "kproto_schema_registry_forwarded_total ", "kproto_schema_registry_forward_connections_total ")))
    assert forwarded >= 5 and connections <= 2, (forwarded, connections)
    # every node reads every schema
    for url in urls.values():
        for subject, sid in ids.items():
            wait_until(lambda: requests.get(f"{url}/schemas/ids/{sid}", timeout=5).status_code == 200, 20,
                       f"{url} reads id {sid}")
            assert requests.get(f"{url}/subjects/{subject}/versions/latest", timeout=5).json()["id"] == sid

    dead = writers[0]
    cluster.nodes[dead].kill()
    alive = {i: u for i, u in urls.items() if i != dead}
    after = {}
    for i, url in alive.items():
        after[f"after-{i}"] = register(url, f"after-{i}", record(f"A{i}", "a", "b"))
    new_writers = wait_until(lambda: writer_nodes(alive, metrics), 20, "a new writer")
    assert len(new_writers) == 1 and new_writers[0] != dead
    every = {**ids, **after}
    assert len(set(every.values())) == len(every), every   # no id handed out twice
    assert min(after.values()) > max(ids.values())
    for url in alive.values():
        for subject, sid in every.items():
            wait_until(lambda: requests.get(f"{url}/schemas/ids/{sid}", timeout=5).status_code == 200, 20,
                       f"{url} reads id {sid}")
            assert requests.get(f"{url}/subjects/{subject}/versions/latest", timeout=5).json()["id"] == sid
    # the killed node comes back, reads everything from _schemas, and takes writes again
    cluster.nodes[dead].start(60)
    wait_until(lambda: requests.get(f"{urls[dead]}/schemas/ids/{max(every.values())}", timeout=5).status_code == 200,
               30, "the restarted node caught up")
    back = register(urls[dead], "after-restart", record("R", "z"))
    assert back not in every.values()

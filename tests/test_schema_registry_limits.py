"""The schema registry under schemas that cost a lot of CPU, against a real
`kproto serve`: a compatibility check has a time budget
(schema.registry.compatibility.check.timeout.ms, here 0.5 s) past which it
answers 50002 and frees its worker thread; after a restart the stored
schemas are parsed off the event loop, so the broker's Kafka listeners keep
answering while the registry reads `_schemas` back."""
from __future__ import annotations

import json
import threading
import time

import pytest
import requests

from broker.launch.process import BrokerProcess, free_port
from tests.test_schema_registry_api import post

BUDGET_MS = 500


def nested_alternatives(kind: str, width: int = 6, depth: int = 4) -> str:
    """`oneOf`s of `width` objects nested `depth` deep, every level sharing the property `x`:
    the check compares every old alternative with every new one at each level, (width^2)^depth
    pairs (about half a minute of CPU here, 140 KB of schema)."""
    s: dict = {"type": kind}
    for d in range(depth):
        s = {"oneOf": [{"type": "object", "properties": {"x": s, f"k{d}_{i}": {"type": "string"}}}
                       for i in range(width)]}
    return json.dumps(s)


def big_proto(fields: int = 2000) -> str:
    """A .proto of one message with many fields: seconds of parsing (proto-schema-parser)."""
    lines = "\n".join(f"  string f{i} = {i + 1};" for i in range(fields))
    return f'syntax = "proto3";\npackage big;\nmessage Big {{\n{lines}\n}}\n'


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    port = free_port()
    proc = BrokerProcess(str(tmp_path_factory.mktemp("sr-limits")), settings={
        "schema.registry.listeners": f"http://127.0.0.1:{port}",
        "schema.registry.compatibility.check.timeout.ms": str(BUDGET_MS)})
    proc.start()
    try:
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


def test_a_check_over_its_budget_answers_50002_and_frees_its_worker(node):
    """Two checks that would each run for half a minute, at once (both worker threads): each is
    answered 50002 once its budget is spent, and the registry then registers at once, its
    workers free again (were the threads abandoned rather than stopped, the registration would
    queue behind them)."""
    _proc, url = node
    s = "limits-nested-value"
    assert post(url, f"/subjects/{s}/versions", {"schemaType": "JSON", "schema": nested_alternatives("string")}) \
        .status_code == 200
    answers: list = []

    def check():
        answers.append(requests.post(f"{url}/compatibility/subjects/{s}/versions/latest", timeout=20, json={
            "schemaType": "JSON", "schema": nested_alternatives("number")}))
    threads = [threading.Thread(target=check) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [(r.status_code, r.json()["error_code"]) for r in answers] == [(500, 50002)] * 2, \
        [r.text[:200] for r in answers]
    assert "schema.registry.compatibility.check.timeout.ms" in answers[0].json()["message"]
    # a registration of the same schema type, right after: the workers are free
    small = requests.post(f"{url}/subjects/limits-small-value/versions", timeout=10, json={
        "schemaType": "JSON", "schema": json.dumps({"type": "object"})})
    assert small.status_code == 200, small.text
    # and a registration whose check is over budget writes nothing
    again = requests.post(f"{url}/subjects/{s}/versions", timeout=20, json={
        "schemaType": "JSON", "schema": nested_alternatives("number")})
    assert again.json()["error_code"] == 50002
    assert requests.get(f"{url}/subjects/{s}/versions", timeout=10).json() == [1]


def test_a_restarted_registry_parses_its_schemas_off_the_event_loop(node):
    """After a restart the registry reads `_schemas` back and parses every stored schema (for
    its identity: the same schema under two subjects keeps one id) before it answers. That
    parse runs in worker threads: a stored schema that takes seconds to parse delays the
    registry's first answer, while the same process goes on answering Metadata and Produce.
    (Were it parsed on the event loop, no round would be answered until it ended.)"""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    proc, url = node
    schema = {"schemaType": "PROTOBUF", "schema": big_proto()}
    first = requests.post(f"{url}/subjects/limits-big-value/versions", json=schema, timeout=60)
    assert first.status_code == 200, first.text
    proc.stop()
    proc.start()
    answer = {}
    # the registry reads `_schemas` back from the moment the process is ready: ask it at once
    lookup = threading.Thread(target=lambda: answer.setdefault("r", requests.get(
        f"{url}/schemas/ids/{first.json()['id']}", timeout=60)))
    started = time.monotonic()
    lookup.start()
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 0})
    answered = []   # when each Metadata + Produce round was answered while the registry was reading
    for _ in range(2000):   # bounded: the parse takes seconds; each round milliseconds
        if not lookup.is_alive():
            break
        admin.list_topics(timeout=10)
        producer.produce("limits-restart", b"x")
        assert producer.flush(10) == 0
        if lookup.is_alive():
            answered.append(time.monotonic())
    lookup.join(60)
    ended = time.monotonic()
    assert answer["r"].status_code == 200 and answer["r"].json()["schemaType"] == "PROTOBUF", answer["r"].text
    late = [t for t in answered if t > started + (ended - started) / 2]
    assert len(late) >= 10, (len(answered), len(late), round(ended - started, 2))

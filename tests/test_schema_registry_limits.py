"""The schema registry under schemas that cost a lot of CPU, against a real
`kproto serve`: a compatibility check has a time budget
(schema.registry.compatibility.check.timeout.ms, here 1 s) past which it
answers 50002 and frees its worker thread; after a restart the stored
schemas are parsed off the event loop, so the broker's Kafka listeners keep
answering while the registry reads `_schemas` back."""
from __future__ import annotations

import json
import threading

import pytest
import requests

from broker.launch.process import BrokerProcess, free_port
from tests.test_schema_registry_api import post

BUDGET_MS = 1000


def nested_alternatives(kind: str, width: int = 6, depth: int = 4) -> str:
    """`oneOf`s of `width` objects nested `depth` deep, every level sharing the property `x`:
    the check compares every old alternative with every new one at each level, (width^2)^depth
    pairs (about half a minute of CPU here, 140 KB of schema)."""
    s: dict = {"type": kind}
    for d in range(depth):
        s = {"oneOf": [{"type": "object", "properties": {"x": s, f"k{d}_{i}": {"type": "string"}}}
                       for i in range(width)]}
    return json.dumps(s)


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

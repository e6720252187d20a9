"""Incremental fetch sessions (KIP-227) as Kafka 3.9 answers them: the
scripted fetch sequences of tools/fetch_sessions.py (full and incremental
fetches, partitions added / updated / forgotten, unknown topics, byte limits
and the session's round-robin order, FETCH_SESSION_ID_NOT_FOUND,
INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR, closing, and the
cache's eviction with 8 slots) were run against real Kafka 3.9 brokers
(`python -m tools.fetch_sessions --bootstrap <kafka> [--eviction] --out ...`)
into tests/fixtures; kproto must answer every fetch the same: error, which
session, which partitions in which order, their error, high watermark, log
start offset and record bytes."""
from __future__ import annotations

import json
import os

from tools import fetch_sessions
from broker.launch.process import BrokerProcess

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "fetch_sessions_kafka39.json")


def _recorded() -> dict:
    with open(FIXTURE) as f:
        recorded = json.load(f)
    assert recorded["script"] == fetch_sessions.script(), "re-record the fixture"
    return recorded["answers"]


def _differences(expected: list, got: list) -> list[str]:
    return [f"fetch #{i}:\n  kafka  {e}\n  kproto {g}"
            for i, (e, g) in enumerate(zip(expected, got)) if e != g] + (
        [f"{len(expected)} fetches recorded, {len(got)} made"] if len(expected) != len(got) else [])


def test_session_sequences_match_kafka(broker):
    recorded = _recorded()
    got = fetch_sessions.run(broker.bootstrap, "fsq")
    for key in fetch_sessions.SEQUENCES:
        diffs = _differences(recorded[key], got[key])
        assert not diffs, f"{key}: {len(diffs)} answers differ from Kafka 3.9:\n" + "\n".join(diffs[:5])


def test_cache_eviction_matches_kafka(tmp_path):
    # a broker of its own: the 8 shards are taken in turn from its first session on
    recorded = _recorded()["eviction"]
    proc = BrokerProcess(str(tmp_path / "data"), settings={"max.incremental.fetch.session.cache.slots": "8"})
    proc.start()
    try:
        got = fetch_sessions.run(proc.bootstrap, "fse", eviction=True)["eviction"]
    finally:
        proc.stop()
    diffs = _differences(recorded, got)
    assert not diffs, f"{len(diffs)} answers differ from Kafka 3.9:\n" + "\n".join(diffs[:5])


def test_checker_sees_a_difference():
    recorded = _recorded()["ids v17"]
    broken = json.loads(json.dumps(recorded))
    # an incremental answer that repeats an unchanged partition
    i = next(i for i, a in enumerate(broken) if a[0] == 0 and a[1] != 0 and a[2] == [])
    broken[i][2] = [["A", 0, 0, 3, 0, 0]]
    assert len(_differences(recorded, broken)) == 1
    # a session error answered as a success
    j = next(i for i, a in enumerate(broken) if a[0] == 71)
    broken[j][0] = 0
    assert len(_differences(recorded, broken)) == 2

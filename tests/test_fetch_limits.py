"""Fetch size limits as Kafka 3.9 applies them: max_bytes, partition
max_bytes, the oversized first batch (only for the first partition that
returns data, never for v0-2), byte-count cuts with a trailing partial
batch, v0-3 down-conversion sizes and contents; with transactions,
read_committed's last stable offset, the aborted transactions listed (those
overlapping the returned bytes) and control batches. The answers of a real Kafka 3.9 to the
grid of tools/fetch_limits.py are in tests/fixtures (recorded with
`python -m tools.fetch_limits --bootstrap <kafka> --out ...`); kproto must
answer every one of them the same, byte for byte (sha1 of the records)."""
from __future__ import annotations

import json
import os

from tools import fetch_limits

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "fetch_limits_kafka39.json")


def _differences(expected: dict, got: dict) -> list[str]:
    return [f"{k}:\n  kafka  {expected[k]}\n  kproto {got.get(k)}" for k in expected if got.get(k) != expected[k]]


def test_fetch_limits_match_kafka(broker):
    with open(FIXTURE) as f:
        recorded = json.load(f)
    assert recorded["layout"] == fetch_limits.layout(), "re-record the fixture"
    topic_id = fetch_limits.prepare(broker.bootstrap)
    got = fetch_limits.run(broker.bootstrap, topic_id)
    assert set(got) == set(recorded["answers"])
    diffs = _differences(recorded["answers"], got)
    assert not diffs, f"{len(diffs)} of {len(got)} fetches differ from Kafka 3.9, e.g.\n" + "\n".join(diffs[:5])


def test_checker_sees_a_difference():
    # one byte more in one partition's records is a difference
    with open(FIXTURE) as f:
        answers = json.load(f)["answers"]
    key = next(k for k, v in answers.items() if any(p[4] for p in v))
    broken = {k: [list(p) for p in v] for k, v in answers.items()}
    part = next(p for p in broken[key] if p[4])
    part[4] += 1
    assert len(_differences(answers, broken)) == 1

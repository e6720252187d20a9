"""docs/compatibility.md's API table is what the handler registry serves,
beside Kafka 3.9's ranges, with a reason for every difference."""
from __future__ import annotations

import json
import os

import pytest

from tools import api_table

OBSERVATIONS = os.path.join(api_table.ROOT, "..", "shared", "kafka-observations", "api-versions.json")


def test_doc_is_current():
    with open(api_table.DOC) as f:
        doc = f.read()
    assert api_table.render() in doc, "docs/compatibility.md is stale: run python -m tools.api_table"


def test_stale_doc_is_detected():
    with open(api_table.DOC) as f:
        doc = f.read()
    stale = doc.replace("| 75 | DescribeTopicPartitions | 0 | 0 |", "| 75 | DescribeTopicPartitions | 0 | – |")
    assert stale != doc
    assert api_table.splice(stale, api_table.render()) == doc
    assert api_table.main(["--check"]) == 0


def test_every_difference_has_a_reason():
    assert api_table.missing_reasons() == []


def test_kafka_ranges_are_the_observed_ones():
    if not os.path.exists(OBSERVATIONS):
        pytest.skip("../shared/kafka-observations is absent")
    with open(OBSERVATIONS) as f:
        observed = {a["api_key"]: (a["min_version"], a["max_version"]) for a in json.load(f)["api_keys"]}
    assert observed == api_table.KAFKA_39

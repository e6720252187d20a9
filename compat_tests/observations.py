"""What a real Kafka 3.9 broker answered, from the shared observations folder.

The folder sits beside the repository (`../shared/kafka-observations`), as on
the developers' machines and in CI; KPROTO_KAFKA_OBSERVATIONS overrides the
path. Tests that need it skip with a reason when it is absent.
"""
from __future__ import annotations

import csv
import functools
import json
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIR = os.path.join(os.path.dirname(REPO), "shared", "kafka-observations")


def directory() -> str:
    path = os.environ.get("KPROTO_KAFKA_OBSERVATIONS", DEFAULT_DIR)
    if not os.path.isdir(path):
        pytest.skip(f"no Kafka observations at {path} (../shared is absent)")
    return path


@functools.lru_cache(maxsize=None)
def _load_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def load(name: str) -> dict:
    return _load_json(os.path.join(directory(), name))


@functools.lru_cache(maxsize=None)
def _error_rows(path: str) -> tuple[dict, ...]:
    with open(path, newline="") as f:
        return tuple(csv.DictReader(f))


def error_case(case: str, api: str | None = None, version: int | None = None) -> dict:
    """The error-cases.csv row whose `case` is exactly `case` (and api/version when given)."""
    rows = [r for r in _error_rows(os.path.join(directory(), "error-cases.csv"))
            if r["case"] == case and (api is None or r["api"] == api)
            and (version is None or int(r["version"]) == version)]
    if len(rows) != 1:
        raise LookupError(f"{len(rows)} rows in error-cases.csv for {case!r}")
    return rows[0]


def kafka_api_versions() -> dict[int, tuple[str, int, int]]:
    """API key -> (name, min, max) of the observed Kafka 3.9 broker."""
    data = load("api-versions.json")
    return {k["api_key"]: (k["name"], k["min_version"], k["max_version"]) for k in data["api_keys"]}

"""docs/compatibility.md's matrix is written by every full compatibility
run (compat_tests/conftest.py); this checks, without running the suite,
that the committed matrix still describes it: one row per scenario the
suite has, and no skip that the code has made impossible (a scenario
skipped because kproto "does not advertise" an API it now advertises)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from compat_tests import report, wire

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # (kafka-python's importlib use)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _matrix_rows(text: str) -> dict[tuple[str, str], tuple[str, str]]:
    body = text.split(report.START, 1)[1].split(report.END, 1)[0]
    rows = {}
    for line in body.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 4 and cells[0] not in ("feature", "---"):
            rows[(cells[0], cells[1])] = (cells[2], cells[3])
    return rows


def _suite_rows(tmp_path) -> set[tuple[str, str]]:
    out = tmp_path / "labels.json"
    env = dict(os.environ, KPROTO_COMPAT_LABELS=str(out))
    proc = subprocess.run([sys.executable, "-m", "pytest", "compat_tests", "--collect-only", "-q",
                           "-p", "no:cacheprovider"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {(report._short(f, 120), c or "—") for f, c in json.loads(out.read_text())}


def _advertised() -> set[str]:
    from broker.handlers import HANDLERS, load_all
    load_all()
    return {name for name, key in wire.API_KEYS.items() if key in HANDLERS}


def _stale_skips(rows, advertised) -> list[str]:
    stale = []
    for (feature, client), cells in rows.items():
        for cell in cells:
            m = re.search(r"does not advertise (.+?)( at v\d+)? in ApiVersions", cell)
            if m and not m.group(2) and set(m.group(1).split(", ")) & advertised and cell.startswith("skip"):
                stale.append(f"{feature} / {client}: {cell}")
    return stale


def test_matrix_rows_are_the_suites_scenarios(tmp_path):
    with open(report.DOC) as f:
        rows = _matrix_rows(f.read())
    assert rows, "no matrix in docs/compatibility.md"
    suite = _suite_rows(tmp_path)
    assert set(rows) == suite, (
        "docs/compatibility.md's matrix is out of date: run `python3 -m pytest compat_tests` "
        f"(it rewrites the matrix). Missing: {sorted(suite - set(rows))[:5]}; gone: {sorted(set(rows) - suite)[:5]}")


def test_no_skip_for_an_api_kproto_now_advertises():
    with open(report.DOC) as f:
        rows = _matrix_rows(f.read())
    stale = _stale_skips(rows, _advertised())
    assert not stale, ("docs/compatibility.md's matrix is out of date (run `python3 -m pytest compat_tests`): "
                       + "; ".join(stale[:3]))


def test_checker_sees_a_stale_skip():
    rows = {("transactions", "confluent"): (
        "skip: kproto does not advertise AddPartitionsToTxn, EndTxn in ApiVersions", "not run")}
    assert _stale_skips(rows, {"AddPartitionsToTxn"}) and not _stale_skips(rows, {"Produce"})

"""`python -m tools.bench scaling` drives 1 and 2 kproto processes side by
side and reports aggregate throughput and the CPU cost per byte of each
layout (docs/architecture.md, "Using many cores")."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.long
@pytest.mark.timeout(150)
def test_scaling_reports_both_layouts(tmp_path):
    out = tmp_path / "scaling.json"
    proc = subprocess.run([sys.executable, "-m", "tools.bench", "scaling", "--records", "4000", "--reps", "1",
                           "--partitions", "2", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=140, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["processes"] for r in rows] == [1, 2]
    for r in rows:
        assert r["records"] == 4000
        assert r["produce records/s"] > 0 and r["consume records/s"] > 0
        assert len(r["broker cpu % each"]) == r["processes"]
        assert r["broker cpu s per GiB"] > 0

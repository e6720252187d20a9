"""Short real chaos runs against a kproto node (the long runs are commands,
see docs/chaos.md): a healthy broker under kill -9 and pause gives a clean
history; a broker started with the test-only switch that drops the last
batch of every partition on restart is caught losing acknowledged writes."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def chaos(tmp_path, *args, timeout=180):
    p = subprocess.run([sys.executable, "-m", "tools.chaos", "run", "--loopback", "--out", str(tmp_path / "run"),
                        "--progress", "5", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    m = re.fullmatch(r"(\d+) operations, (\d+) faults, (\d+) anomalies", last)
    assert m, p.stdout[-3000:] + p.stderr[-3000:]
    return p, [int(x) for x in m.groups()]


@pytest.mark.long
@pytest.mark.timeout(200)
def test_kill_and_pause_on_a_healthy_node_lose_nothing(tmp_path):
    p, (ops, faults, anomalies) = chaos(tmp_path, "--time", "10", "--seed", "31", "--nemesis", "kill,pause",
                                        "--workload", "queue,copier,groups", "--rate", "60")
    assert (anomalies, p.returncode) == (0, 0), p.stdout[-3000:]
    assert faults >= 2 and ops > 500
    assert re.search(r"faults\s+\d+\s+\(kill \d+, pause \d+\)", p.stdout), p.stdout[-2000:]
    assert "run completed         yes" in p.stdout
    assert re.search(r"transactions\s+.*commit/ok \d+", p.stdout)
    hist = (tmp_path / "run" / "history.jsonl").read_text()
    assert '"f":"assign"' in hist and '"f":"commit"' in hist and '"f":"txn"' in hist
    assert (tmp_path / "run" / "plot.png").stat().st_size > 10_000


@pytest.mark.timeout(200)
def test_a_broker_that_drops_acknowledged_batches_is_caught(tmp_path):
    p, (ops, faults, anomalies) = chaos(tmp_path, "--time", "13", "--seed", "28", "--nemesis", "kill",
                                        "--workload", "queue", "--rate", "60", "--no-plot",
                                        "--fault", "drop-last-acked-batch-on-restart")
    assert faults >= 1 and anomalies > 0 and p.returncode == 1
    assert re.search(r"anomalies\s+.*lost-write \d+", p.stdout), p.stdout[-3000:]
    assert re.search(r"^lost-write: '.*' acknowledged at t0-queue/\d+@\d+", p.stdout, re.M)
    # the same history, checked again offline, gives the same verdict
    c = subprocess.run([sys.executable, "-m", "tools.chaos", "check", str(tmp_path / "run" / "history.jsonl"),
                        "--no-plot"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert c.returncode == 1 and c.stdout.strip().splitlines()[-1] == p.stdout.strip().splitlines()[-1]

"""The soak (`python -m tools.chaos.soak`, docs/chaos.md) in its short CI form: 40 s of steady mixed
load on a 3-node kproto cluster (an idempotent acks=all producer, 5 consumers of one group, a member
leaving and joining every 8 s, a transactional copier) ends with 0 anomalies from the chaos checkers,
no ERROR line in the nodes' logs, and RSS, descriptors and event-loop lag sampled on every node. The
same history with one acknowledged record removed from every read, and one committed transaction
recorded as aborted, is caught by the checkers. The long run is a command (figures in docs/chaos.md);
the flatness rule itself is checked on made-up series."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tools.chaos.resources import flat, judge

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_flatness_rule_tells_a_leak_from_noise():
    noisy = [100 + (i * 7919) % 9 for i in range(100)]           # flat with +-4% noise
    assert flat(noisy, 0.10, 4.0)[0]
    leak = [100 + i * 0.5 for i in range(100)]                    # +45% over the run
    ok, second, last = flat(leak, 0.10, 4.0)
    assert not ok and second < last
    assert flat(leak[:9], 0.10, 4.0) is None                      # fewer than 10 samples: no verdict
    samples = [{"node": "n0", "rss_mib": v, "fds": 50, "loop_mean_ms": 1.0} for v in leak]
    rows, ok = judge(samples, duration_s=3600)
    assert not ok and [r["verdict"] for r in rows if r["series"] == "rss_mib"] == ["GROWING"]
    rows, ok = judge(samples, duration_s=60)                      # too short to call a leak
    assert ok and rows[0]["verdict"].startswith("growing (not judged")


def _break(history: str, broken: str) -> tuple[str, str]:
    """Copy the history with one acknowledged queue value removed from every read (a lost write) and
    one committed copier transaction recorded as aborted (its records then read as aborted reads)."""
    ops = [json.loads(line) for line in open(history)]
    acked = [o for o in ops if o.get("f") == "send" and o["type"] == "ok" and o["topic"] == "soak-queue"]
    lost = acked[len(acked) // 2]["value"]
    txn = next(o["txn"] for o in ops if o.get("f") == "txn" and o["type"] == "ok" and o["outcome"] == "commit"
               and o.get("offsets"))
    with open(broken, "w") as f:
        for o in ops:
            if o.get("f") == "poll" and o["type"] == "ok":
                o["records"] = [r for r in o["records"] if r[3] != lost]
            if o.get("f") == "txn" and o.get("txn") == txn and o["type"] == "ok":
                o["outcome"] = "abort"
            f.write(json.dumps(o) + "\n")
    return lost, txn


@pytest.mark.timeout(240)
def test_short_soak_on_a_3_node_cluster_is_clean_and_a_broken_history_is_caught(tmp_path):
    out = tmp_path / "soak"
    p = subprocess.run([sys.executable, "-m", "tools.chaos.soak", "--seconds", "40", "--churn", "8",
                        "--sample", "2", "--progress", "10", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=220)
    shown = p.stdout[-5000:] + p.stderr[-2000:]
    last = p.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"soak: (\d+) operations, (\d+) member joins\+leaves, (\d+) anomalies, (\d+) error lines, "
                     r"resources (\w+), completed (\w+)", last)
    assert m, shown
    ops, churn, anomalies, errors = (int(x) for x in m.groups()[:4])
    assert (anomalies, errors, m.group(6), p.returncode) == (0, 0, "yes", 0), shown
    assert ops > 3000 and churn >= 4, shown
    assert re.search(r"transactions\s+abort/ok \d+, commit/ok \d+", p.stdout), shown
    # every node sampled all along: RSS, descriptors and loop lag
    summary = json.loads((out / "summary.json").read_text())
    rows = {(r["node"], r["series"]): r for r in summary["resources"]}
    assert {n for n, _ in rows} == {"n0", "n1", "n2"}
    for (node, series), r in rows.items():
        assert r["samples"] >= 15 and r["last tenth"] > 0, (node, series, r)
    hist = (out / "history.jsonl").read_text()
    assert '"proc":"rejoin1"' in hist and '"f":"revoke"' in hist

    lost, txn = _break(str(out / "history.jsonl"), str(tmp_path / "broken.jsonl"))
    c = subprocess.run([sys.executable, "-m", "tools.chaos", "check", str(tmp_path / "broken.jsonl"), "--no-plot"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert c.returncode == 1, c.stdout[-3000:]
    assert re.search(rf"^lost-write: '{re.escape(lost)}' acknowledged at soak-queue/\d+@\d+", c.stdout, re.M), \
        c.stdout[-3000:]
    assert re.search(rf"^aborted-read: .* from aborted transaction {re.escape(txn)}$", c.stdout, re.M), \
        c.stdout[-3000:]

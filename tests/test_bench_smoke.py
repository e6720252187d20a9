"""The benchmark tool works end to end: `python -m tools.bench all --quick`
(one record size and one partition count here, to keep CI short) starts a
real kproto broker, drives it with librdkafka and prints its table.
Not a timed test: it checks that figures come out, not how good they are."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUMBER = r"\d[\d,]*(?:\.\d+)?"


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    md = out / "performance.md"
    proc = subprocess.run([sys.executable, "-m", "tools.bench", "all", "--quick", "--sizes", "1024", "--partitions", "6",
                           "--markdown", str(md)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    return proc, md


def _figure(stdout: str, case: str, metric: str) -> str:
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(case))
    for ln in lines[start:]:
        if re.match(r"\s*" + re.escape(metric) + r"\s", ln[len(case):] if ln.startswith(case) else ln):
            return ln.split()[-1]
    raise AssertionError(f"no {metric!r} row under {case!r}")


@pytest.mark.timeout(300)
def test_quick_run_prints_a_table_with_numbers(quick_run):
    proc, _md = quick_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for section in ("== produce ==", "== consume ==", "== latency ==", "== broker cost =="):
        assert section in out
    assert re.fullmatch(NUMBER, _figure(out, "1 KiB, acks=1, 6 partitions", "MiB/s"))
    assert re.fullmatch(NUMBER, _figure(out, "1 KiB, acks=all, 6 partitions", "ack p99 ms"))
    assert re.fullmatch(NUMBER, _figure(out, "1 KiB, 6 partitions, assign", "records/s"))
    assert "1 partition" not in out.split("== latency ==")[0]      # the shape asked for, only
    lat = [ln for ln in out.splitlines() if "e2e p99 ms" in ln]
    assert len(lat) == 2 and all(re.fullmatch(NUMBER, ln.split()[-1]) for ln in lat)
    for metric in ("start to ready s", "CPU s per GiB written", "CPU s per GiB read", "bytes sent per byte read",
                   "CPU s per GiB sent", "peak RSS MiB", "recovery of 16 MiB after kill -9, s"):
        row = next(ln for ln in out.splitlines() if metric in ln)
        assert re.fullmatch(NUMBER, row.split()[-1]), row
    # the group rows hold numbers or say why not
    group = [ln for ln in out.splitlines() if "group of 3" in ln]
    assert group and all(re.search(NUMBER + r"$|n/a \(no group support\)$", ln) for ln in group)


@pytest.mark.timeout(300)
def test_quick_run_writes_the_markdown_report(quick_run):
    proc, md = quick_run
    assert proc.returncode == 0
    text = md.read_text()
    for heading in ("## Method", "## Machine", "## Baseline: Apache Kafka 3.9.0", "## Results", "### produce"):
        assert heading in text
    assert "librdkafka" in text and "processors (nproc)" in text

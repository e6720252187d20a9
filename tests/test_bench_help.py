"""`python -m tools.bench --help` prints the full help: every workload and
the options, not only a usage line."""
from __future__ import annotations

import contextlib
import importlib
import io
import os
import subprocess
import sys

import pytest

from tools.bench.__main__ import MODULE_COMMANDS
from tools.bench.cli import COMMANDS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_help_lists_the_workloads():
    proc = subprocess.run([sys.executable, "-m", "tools.bench", "--help"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for name in COMMANDS + MODULE_COMMANDS:
        assert any(line.strip().startswith(name + " ") for line in lines), name  # described, one per line
    for option in ("--quick", "--targets", "--json"):
        assert option in proc.stdout


def test_tiered_kafka_without_the_local_tiered_storage_jar_says_so(tmp_path):
    """`tiered --kafka` names the missing LocalTieredStorage jar in one line before starting anything."""
    home = tmp_path / "kafka"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "kafka-server-start.sh").write_text("")
    jar = tmp_path / "absent.jar"
    proc = subprocess.run([sys.executable, "-m", "tools.bench", "tiered", "--targets", "kafka", "--kafka", str(home),
                           "--lts-jar", str(jar)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2
    assert f"LocalTieredStorage jar {jar} is missing" in proc.stderr.splitlines()[-1]


def test_every_bench_module_answers_help():
    """Each bench command that is a module of its own (and partitions_cluster, run as
    `python -m tools.bench.partitions_cluster`) prints its options: the shared options
    (tools/bench/options.py) and a bench's own ones must not clash, and the module must import."""
    for name in MODULE_COMMANDS + ("partitions_cluster",):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
            importlib.import_module(f"tools.bench.{name}").main(["--help"])
        assert stop.value.code == 0, name
        assert "usage:" in out.getvalue() and "--help" in out.getvalue(), name

"""Start-up mistakes end in one line naming the problem (what, which key or
path, what to do) and exit code 1, not a traceback."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from broker.launch.process import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _serve(*args: str, data_dir: str | None = None, port: int | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "broker.launch.cli", "serve"]
    if data_dir is not None:
        cmd += ["--set", f"log.dirs={data_dir}"]
    cmd += ["--set", f"listeners=PLAINTEXT://127.0.0.1:{port or free_port()}",
            "--set", "kproto.metrics.listener=off", *args]  # (its fixed port may be taken)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=env, cwd=ROOT)


def _one_line_failure(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kproto: "), proc.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert not proc.stdout  # (no ready line)
    return lines[0]


def test_port_in_use(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        proc = _serve(data_dir=str(tmp_path / "d"), port=port)
    _one_line_failure(proc, f"127.0.0.1:{port}", "listeners", "already in use")


def test_second_broker_on_the_same_directory(broker):
    proc = _serve(data_dir=broker.data_dir)
    _one_line_failure(proc, broker.data_dir, "log.dirs", "in use by another process")


def test_log_dirs_under_a_regular_file(tmp_path):
    (tmp_path / "file").write_text("x")
    target = str(tmp_path / "file" / "data")
    _one_line_failure(_serve(data_dir=target), target, "log.dirs", "Not a directory")


def test_log_dirs_not_writable(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root can write anywhere")
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    _one_line_failure(_serve(data_dir=str(ro / "data")), "log.dirs", "Permission denied")


def test_missing_config_file(tmp_path):
    missing = str(tmp_path / "server.properties")
    _one_line_failure(_serve("--config", missing, data_dir=str(tmp_path / "d")), missing, "--config")


def test_unknown_log_level(tmp_path):
    _one_line_failure(_serve("--log-level", "bogus", data_dir=str(tmp_path / "d")), "--log-level", "bogus")


def test_invalid_value_names_the_key(tmp_path):
    _one_line_failure(_serve("--set", "num.partitions=abc", data_dir=str(tmp_path / "d")), "num.partitions")

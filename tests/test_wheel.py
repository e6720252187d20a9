"""What `pip install kproto` puts on a machine: the wheel holds the packages kproto, broker and raft
and nothing else (tools/ stays in the checkout), and the pytest plugin and broker.launch.embedded
work from it, in a fresh virtual environment, with the checkout nowhere on the path."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from broker.launch.version import VERSION

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytest.importorskip("confluent_kafka")   # the example project's application uses it


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    """The wheel built from a copy of what the package is made of (the checkout stays clean)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for pkg in ("kproto", "broker", "raft", "tools"):
        shutil.copytree(os.path.join(ROOT, pkg), src / pkg, ignore=ignore)
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "--disable-pip-version-check", "-q", "-w", str(out), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (path,) = [p for p in os.listdir(out) if p.endswith(".whl")]
    return str(out / path)


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel) -> str:
    """A fresh virtual environment with the wheel installed. Its dependencies (trio, ...) come from
    this interpreter's site-packages, so no index is needed; the venv's own copy of kproto comes
    first on its path."""
    env_dir = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(env_dir)], check=True,
                   timeout=120)
    python = str(env_dir / "bin" / "python")
    r = subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                        "--disable-pip-version-check", wheel], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return str(env_dir)


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def test_the_wheel_holds_kproto_broker_and_raft_only(wheel):
    with zipfile.ZipFile(wheel) as z:
        tops = {n.split("/")[0] for n in z.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"kproto", "broker", "raft"}
    with zipfile.ZipFile(wheel) as z:
        entry_points = next(z.read(n).decode() for n in z.namelist() if n.endswith("entry_points.txt"))
    assert "kproto = broker.launch.cli:main" in entry_points
    assert "kproto = broker.launch.pytest_plugin" in entry_points
    with zipfile.ZipFile(wheel) as z:   # the web console's templates are package data
        assert "broker/console/templates/base.html" in z.namelist()
    # the distribution's version is broker/launch/version.py's, which the broker prints
    with zipfile.ZipFile(wheel) as z:
        metadata = next(z.read(n).decode() for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    assert f"\nVersion: {VERSION}\n" in metadata, metadata[:300]


def test_the_installed_package_runs_from_the_venv_and_has_no_tools(venv, tmp_path):
    python = os.path.join(venv, "bin", "python")
    r = subprocess.run([python, "-c", "import broker, kproto, raft; print(broker.__file__);\n"
                        "import importlib.util; print(importlib.util.find_spec('tools'))"],
                       capture_output=True, text=True, cwd=tmp_path, env=_clean_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    where, tools = r.stdout.split()
    assert where.startswith(venv), where       # the wheel's copy, not the checkout
    assert tools == "None"                      # no top-level `tools` shadowing a user's own
    r = subprocess.run([os.path.join(venv, "bin", "kproto"), "--version"], capture_output=True, text=True,
                       cwd=tmp_path, env=_clean_env(), timeout=60)
    assert r.returncode == 0 and r.stdout.startswith(f"kproto {VERSION} "), r.stdout + r.stderr
    # the installed broker knows its version without importlib.metadata (~10-20 ms of a start-up)
    r = subprocess.run([python, "-c", "import sys; before = 'importlib.metadata' in sys.modules\n"
                        "import broker.launch.version; print(before, 'importlib.metadata' in sys.modules)"],
                       capture_output=True, text=True, cwd=tmp_path, env=_clean_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    before, after = r.stdout.split()
    assert after == before, r.stdout


def test_the_example_plugin_project_passes_against_the_installed_wheel(venv, tmp_path):
    project = tmp_path / "project"
    shutil.copytree(os.path.join(ROOT, "tests", "plugin_project"), project,
                    ignore=shutil.ignore_patterns("__pycache__"))
    python = os.path.join(venv, "bin", "python")
    # the plugin comes from the installed wheel's pytest11 entry point, not from -p
    r = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project,
                       env=_clean_env(), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "5 passed, 1 skipped" in r.stdout
    r = subprocess.run([python, "-c", "import broker.launch.embedded as e; print(e.__file__)"], cwd=project,
                       env=_clean_env(), capture_output=True, text=True, timeout=60)
    assert r.stdout.strip().startswith(venv), r.stdout + r.stderr


def test_the_startup_bench_starts_the_installed_broker(venv, tmp_path):
    """`python -m tools.bench startup --targets venv@PATH` times the broker `pip install` put in
    PATH (its bin/kproto, none of the checkout on its path): the ready line is that build's."""
    from tools.bench.startup import kproto_target, one_start
    target = kproto_target(f"venv@{venv}", str(tmp_path / "work"))
    figures = one_start(target)
    assert target.proc.ready_line.startswith("kproto ready:"), target.proc.ready_line
    assert target.proc.proc.args[0] == os.path.join(venv, "bin", "kproto")
    assert 0 < figures["cpu to ready line s"] <= figures["cpu to ApiVersions s"] < 30
    with pytest.raises(SystemExit, match="no bin/kproto"):
        kproto_target(f"venv@{tmp_path}", str(tmp_path / "work2"))

"""Shared fixtures: a real `kproto serve` process per test module."""
from __future__ import annotations

import shutil

import pytest

from broker.launch.process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A broker shared by the tests of one module (topics are per test)."""
    proc = BrokerProcess(str(tmp_path_factory.mktemp("kproto-data")))
    proc.start()
    yield proc
    proc.stop()
    if proc.proc and proc.proc.returncode not in (0, None, -15):
        print("".join(proc.stderr_lines[-50:]))


@pytest.fixture
def fresh_broker(tmp_path):
    """A broker of the test's own, for restarts and kills."""
    proc = BrokerProcess(str(tmp_path / "data"))
    proc.start()
    yield proc
    proc.stop()
    shutil.rmtree(tmp_path / "data", ignore_errors=True)


@pytest.fixture
def topic_name(request):
    name = request.node.name
    safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in name)
    return f"t-{safe}"[:200]

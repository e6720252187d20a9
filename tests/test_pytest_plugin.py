"""The pytest plugin (broker/launch/pytest_plugin.py) and the embedding API
(broker/launch/embedded.py): the example project in tests/plugin_project tests a
small application with nothing but the plugin's fixtures."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import tomllib
import weakref
from importlib.metadata import entry_points

import pytest
import trio

from broker.launch.embedded import BrokerSubprocess, create_topic, open_broker, open_trio_broker

confluent_kafka = pytest.importorskip("confluent_kafka")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = os.path.join(ROOT, "tests", "plugin_project")


def _plugin_installed() -> bool:
    return any(ep.name == "kproto" for ep in entry_points(group="pytest11"))


def run_project(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    """pytest on the example project, as its users would run it: the
    installed entry point loads the plugin (before kproto is installed,
    -p loads it from this tree)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env_extra or {}))
    plugin = [] if _plugin_installed() else ["-p", "broker.launch.pytest_plugin"]
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, *args],
                          cwd=PROJECT, env=env, capture_output=True, text=True, timeout=180)


def test_example_project_passes_with_only_the_plugin_fixtures():
    r = run_project()
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "5 passed, 1 skipped" in r.stdout


def test_example_project_catches_a_broken_application_in_thread_mode():
    # the broker in a thread of pytest, metrics on; the application loses a line
    r = run_project("--kproto-mode=thread", "--kproto-metrics", "-k", "counted or metrics",
                    env_extra={"WORDCOUNT_BROKEN": "1"})
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    assert "1 failed, 1 passed" in r.stdout and " error" not in r.stdout.splitlines()[-1], r.stdout[-3000:]
    assert "assert counts[" in r.stdout   # it is the application's check that failed


def test_plugin_is_registered_as_a_pytest11_entry_point():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["entry-points"]["pytest11"] == {"kproto": "broker.launch.pytest_plugin"}
    if not _plugin_installed():
        pytest.skip("kproto is not installed with its entry points here (pip install -e .)")
    r = subprocess.run([sys.executable, "-m", "pytest", "--help"], capture_output=True, text=True, cwd=PROJECT,
                       env=dict(os.environ, PYTHONPATH=ROOT), timeout=60)
    assert "--kproto-mode" in r.stdout


def _roundtrip(bootstrap: str, topic: str) -> bytes:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, b"payload")
    assert p.flush(10) == 0
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "g",
                                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        for _ in range(60):
            m = c.poll(0.25)
            if m is not None and not m.error():
                return m.value()
    finally:
        c.close()
    raise AssertionError("nothing consumed")


def test_open_broker_in_a_thread_and_in_trio():
    with open_broker(metrics=True) as b:
        data_dir = b.data_dir
        assert b.metrics_url.startswith("http://127.0.0.1:")
        create_topic(b.bootstrap, "t", partitions=2)
        assert _roundtrip(b.bootstrap, "t") == b"payload"
    assert not os.path.exists(data_dir)   # a temporary directory of its own, removed at stop

    async def main():
        async with open_trio_broker() as b:
            assert b.metrics_url is None
            await trio.to_thread.run_sync(create_topic, b.bootstrap, "t")
            return await trio.to_thread.run_sync(_roundtrip, b.bootstrap, "t")

    assert trio.run(main) == b"payload"


def test_a_broker_in_a_thread_leaves_its_programs_garbage_to_the_collector():
    """`kproto serve` gc.freeze()s what each slice of new logs is made of (its process is the
    broker's: broker/partitions/creation.py); a broker in a thread of another program freezes
    nothing of that program, whose cyclic garbage stays collectable."""
    class Cycle:
        pass

    with open_broker() as b:
        collecting = gc.isenabled()
        gc.disable()   # (so the cycle is still there, uncollected, when the logs are made)
        try:
            c = Cycle()
            c.me = c
            garbage = weakref.ref(c)
            del c
            create_topic(b.bootstrap, "wide", partitions=40)   # past 16: the log maker's slices make them
            p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap})
            for i in range(40):
                p.produce("wide", b"x", partition=i)
            assert p.flush(30) == 0   # every log made (until then: NOT_LEADER_OR_FOLLOWER, retried)
        finally:
            if collecting:
                gc.enable()
    gc.collect()
    assert garbage() is None


def test_broker_subprocess_keeps_its_data_across_kill_and_restart(tmp_path):
    with BrokerSubprocess(str(tmp_path / "d")) as b:
        create_topic(b.bootstrap, "kept")
        p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap})
        p.produce("kept", b"survives")
        assert p.flush(10) == 0
        b.restart(clean=False)
        assert _roundtrip(b.bootstrap, "kept") == b"survives"

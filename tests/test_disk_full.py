"""A full disk under a real broker (a small tmpfs as its log dir; needs root
to mount it, skipped otherwise).

What a user sees, as with Kafka: batches the disk refused are answered
KAFKA_STORAGE_ERROR, never acknowledged; once every log dir has failed the
broker stops with one line naming the directory and the cause (Kafka halts,
so that in a cluster leadership moves to replicas on healthy disks); after
space is freed it restarts on the same directory and every acknowledged
record is still there, once, in order (recovery truncates the partial
write)."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.tmpfs import small_tmpfs
from broker.launch.process import BrokerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture
def small_disk(tmp_path):
    with small_tmpfs(tmp_path / "disk", "3m") as path:
        yield path


def _read_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 30) -> list:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                                  "enable.auto.commit": False})
    c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append((m.offset(), m.value()))
    c.close()
    return got


@pytest.mark.timeout(150)
def test_a_full_disk_stops_the_broker_and_loses_no_acknowledged_record(small_disk):
    data = str(small_disk / "data")
    broker = BrokerProcess(data_dir=data)
    broker.start()
    try:
        p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                                      "linger.ms": 5, "message.timeout.ms": 8000, "enable.idempotence": True})
        acked, errors = [], {}

        def delivered(err, msg):
            if err is None:
                acked.append((msg.offset(), msg.value()))
            else:
                errors[err.name()] = errors.get(err.name(), 0) + 1
        for i in range(4000):       # 4 MB of values into a 3 MB disk
            p.produce("full", value=b"%06d" % i + b"x" * 1000, partition=0, on_delivery=delivered)
            p.poll(0)
        p.flush(30)
        assert acked and errors, (len(acked), errors)
        broker.proc.wait(timeout=30)        # the broker halts by itself
        assert broker.proc.returncode == 1
        stderr = "".join(broker.stderr_lines)
        assert f"every log directory has failed: {os.path.abspath(data)} (No space left on device)" in stderr
        assert "Traceback" not in stderr
    finally:
        broker.stop()
    subprocess.run(["mount", "-o", "remount,size=20m", str(small_disk)], check=True)
    again = BrokerProcess(data_dir=data)
    again.start()
    try:
        got = _read_all(again.bootstrap, "full", len(acked))
        assert got[:len(acked)] == sorted(acked)          # every acknowledged record, in order, once
        assert [o for o, _ in got] == list(range(len(got)))
        values = [v for _, v in got]
        assert len(values) == len(set(values))
    finally:
        again.stop()

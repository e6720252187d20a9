"""Kafka's own command-line tools against a running kproto:
`kafka-consumer-groups.sh --describe` shows a group's members, partitions,
committed offsets and lag as the consumers see them. Needs an Apache Kafka
installation in KAFKA_HOME."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

KAFKA_HOME = os.environ.get("KAFKA_HOME")

pytestmark = [
    pytest.mark.skipif(not KAFKA_HOME, reason="KAFKA_HOME is not set: these tests run Kafka's "
                                              "bin/kafka-consumer-groups.sh from an Apache Kafka installation"),
    pytest.mark.timeout(300),
]


def tool(name: str, *args: str) -> str:
    proc = subprocess.run([os.path.join(KAFKA_HOME, "bin", name), *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout


def test_consumer_groups_describe_shows_members_offsets_and_lag(broker):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, group = "cli-groups", "cli-group"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(15)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(100):
        p.produce(topic, value=b"v%d" % i, partition=i % 2)
    assert p.flush(15) == 0

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    seen = 0
    deadline = time.time() + 30
    while seen < 60 and time.time() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            seen += 1
    c.commit(asynchronous=False)
    try:
        out = tool("kafka-consumer-groups.sh", "--bootstrap-server", broker.bootstrap, "--describe",
                   "--group", group)
        rows = [ln.split() for ln in out.splitlines() if ln.startswith(group)]
        assert len(rows) == 2, out
        committed = {int(r[2]): (int(r[3]), int(r[4]), int(r[5])) for r in rows}  # partition: offset, end, lag
        assert sum(o for o, _e, _l in committed.values()) == seen
        assert all(e == 50 and lag == e - o for o, e, lag in committed.values())
        members = tool("kafka-consumer-groups.sh", "--bootstrap-server", broker.bootstrap, "--describe",
                       "--group", group, "--members")
        assert len([ln for ln in members.splitlines() if ln.startswith(group)]) == 1, members
        listed = tool("kafka-consumer-groups.sh", "--bootstrap-server", broker.bootstrap, "--list")
        assert group in listed.split()
    finally:
        c.close()

"""A librdkafka consumer whose fetch.max.bytes is small (and
receive.message.max.bytes just above it, as librdkafka requires) reads a
partition of batches that together exceed it: each Fetch answer stays
within fetch.max.bytes (or one batch), as Kafka's. kproto used to fill the
first partition up to max.partition.fetch.bytes, and librdkafka failed with
`Invalid response size 280911 (0..100512): increase receive.message.max.bytes`."""
from __future__ import annotations

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from tests.wire_client import create_topic  # noqa: E402

VALUE = 70_000
COUNT = 4


def test_small_fetch_max_bytes(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(COUNT):
        p.produce(topic_name, value=bytes([65 + i]) * VALUE)
        p.flush(10)  # one batch each
    errors = []
    c = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": topic_name,
        "fetch.max.bytes": 100_000, "message.max.bytes": 100_000, "receive.message.max.bytes": 100_512,
        "error_cb": lambda err: errors.append(str(err))})
    c.assign([confluent_kafka.TopicPartition(topic_name, 0, 0)])
    got = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < COUNT and time.monotonic() < deadline and not errors:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value()[0])
    finally:
        c.close()
    assert not errors
    assert got == [65 + i for i in range(COUNT)]

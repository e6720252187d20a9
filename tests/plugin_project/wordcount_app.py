"""A small Kafka application, the kind users test with kproto's fixtures:
it publishes lines of text, and a consumer counts the words in them."""
from __future__ import annotations

import os
from collections import Counter

from confluent_kafka import Consumer, Producer

# set by the suite to show that the example's checks catch a broken application
_BROKEN = os.environ.get("WORDCOUNT_BROKEN") == "1"


def publish(bootstrap: str, topic: str, lines: list[str]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, line in enumerate(lines):
        if _BROKEN and i == len(lines) - 1:
            continue   # the bug: the last line is lost
        p.produce(topic, key=str(i).encode(), value=line.encode())
    if p.flush(10):
        raise RuntimeError("lines were not delivered")


def count_words(consumer: Consumer, expected_lines: int, timeout: float = 5.0) -> Counter:
    import time
    counts: Counter = Counter()
    seen = 0
    deadline = time.monotonic() + timeout
    while seen < expected_lines and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is None or m.error():
            continue
        seen += 1
        counts.update(m.value().decode().split())
    consumer.commit(asynchronous=False)
    return counts


def group_consumer(bootstrap: str, topic: str, group: str) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    return c

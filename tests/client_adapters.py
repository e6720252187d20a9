"""The same produce / consume / seek operations through each real client
library (confluent-kafka, kafka-python, aiokafka, kcat), so integration
tests can cross them: produced by one library, consumed by another.

A record is `Rec(key, value, headers, timestamp)`; consumed records come back
as `Got(partition, offset, key, value, headers, timestamp)` with bytes keys,
values and header values and headers as a list of (str, bytes) pairs.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from typing import NamedTuple

KCAT = shutil.which("kcat")
CLIENTS = ("confluent", "kafka-python", "aiokafka", "kcat")


class Rec(NamedTuple):
    key: bytes
    value: bytes
    headers: list
    timestamp: int | None


class Got(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list
    timestamp: int


def _acks_str(acks: int) -> str:
    return "all" if acks == -1 else str(acks)


def _kafka_python_acks(acks: int):
    return "all" if acks == -1 else acks


# -- produce -------------------------------------------------------------------

def produce(client: str, bootstrap: str, topic: str, records: list[Rec], compression: str = "none",
            acks: int = -1) -> list[tuple[int, int]]:
    """Produce records in order; returns (partition, offset) per record as
    acknowledged ((-1, -1) where the client cannot know: acks=0, kcat)."""
    return _PRODUCERS[client](bootstrap, topic, records, compression, acks)


def _produce_confluent(bootstrap, topic, records, compression, acks):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": compression,
                  "acks": _acks_str(acks), "linger.ms": 5, "enable.idempotence": False,
                  "max.in.flight.requests.per.connection": 1 if acks == 0 else 5})
    out = [None] * len(records)
    errors = []

    def delivered(err, msg, i):
        if err is not None:
            errors.append(err)
        out[i] = (msg.partition(), msg.offset())

    for i, r in enumerate(records):
        while True:
            try:
                p.produce(topic, key=r.key, value=r.value, headers=r.headers,
                          timestamp=r.timestamp or 0,
                          on_delivery=lambda err, msg, i=i: delivered(err, msg, i))
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0, "confluent producer did not deliver everything"
    assert not errors, errors[:5]
    return [(-1, -1) if acks == 0 else o for o in out]


def _produce_kafka_python(bootstrap, topic, records, compression, acks):
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=_kafka_python_acks(acks),
                      compression_type=None if compression == "none" else compression,
                      linger_ms=5, max_in_flight_requests_per_connection=1, retries=0)
    try:
        futures = [p.send(topic, key=r.key, value=r.value, headers=r.headers, timestamp_ms=r.timestamp)
                   for r in records]
        p.flush(60)
        out = []
        for f in futures:
            md = f.get(timeout=60)
            out.append((-1, -1) if acks == 0 else (md.partition, md.offset))
        return out
    finally:
        p.close(5)


def _produce_aiokafka(bootstrap, topic, records, compression, acks):
    from aiokafka import AIOKafkaProducer

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=_kafka_python_acks(acks),
                             compression_type=None if compression == "none" else compression,
                             linger_ms=5, enable_idempotence=False)
        await p.start()
        try:
            futures = [await p.send(topic, key=r.key, value=r.value, headers=r.headers,
                                    timestamp_ms=r.timestamp) for r in records]
            mds = await asyncio.gather(*futures)
        finally:
            await p.stop()
        return [(-1, -1) if acks == 0 else (md.partition, md.offset) for md in mds]

    return asyncio.run(run())


def _produce_kcat(bootstrap, topic, records, compression, acks):
    # kcat reads "key<TAB>value" lines; headers are the same for every record
    # (-H) and timestamps are the producer's clock.
    headers = records[0].headers
    assert all(r.headers == headers for r in records) and all(r.timestamp is None for r in records)
    cmd = [KCAT, "-P", "-q", "-b", bootstrap, "-t", topic, "-K", "\t",
           "-X", f"request.required.acks={_acks_str(acks)}", "-X", f"compression.codec={compression}"]
    for k, v in headers:
        cmd += ["-H", f"{k}={v.decode()}"]
    data = b"".join(r.key + b"\t" + r.value + b"\n" for r in records)
    proc = subprocess.run(cmd, input=data, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    return [(-1, -1)] * len(records)


_PRODUCERS = {"confluent": _produce_confluent, "kafka-python": _produce_kafka_python,
              "aiokafka": _produce_aiokafka, "kcat": _produce_kcat}


# -- consume -------------------------------------------------------------------

def consume(client: str, bootstrap: str, topic: str, partitions: int, count: int,
            start: dict | None = None, timeout: float = 30.0) -> list[Got]:
    """Read `count` records from the topic's partitions (from the beginning, or
    from start[partition], an offset) without a consumer group."""
    return _CONSUMERS[client](bootstrap, topic, partitions, count, start or {}, timeout)


def _consume_confluent(bootstrap, topic, partitions, count, start, timeout):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kproto-tests-unused",
                  "enable.auto.commit": False, "enable.partition.eof": False,
                  "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition(topic, p, start.get(p, OFFSET_BEGINNING)) for p in range(partitions)])
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for m in c.consume(min(count - len(out), 5000), 0.5):
                assert m.error() is None, m.error()
                ts_type, ts = m.timestamp()
                out.append(Got(m.partition(), m.offset(), m.key(), m.value(),
                               [(k, v) for k, v in (m.headers() or [])], ts))
        return out
    finally:
        c.close()


def _consume_kafka_python(bootstrap, topic, partitions, count, start, timeout):
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", fetch_max_wait_ms=100)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        for tp in tps:
            if tp.partition in start:
                c.seek(tp, start[tp.partition])
            else:
                c.seek_to_beginning(tp)
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for tp, msgs in c.poll(timeout_ms=500, max_records=5000).items():
                for m in msgs:
                    out.append(Got(m.partition, m.offset, m.key, m.value, list(m.headers), m.timestamp))
        return out
    finally:
        c.close()


def _consume_aiokafka(bootstrap, topic, partitions, count, start, timeout):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100)
        await c.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            c.assign(tps)
            for tp in tps:
                if tp.partition in start:
                    c.seek(tp, start[tp.partition])
                else:
                    await c.seek_to_beginning(tp)
            out = []
            deadline = time.monotonic() + timeout
            while len(out) < count and time.monotonic() < deadline:
                batches = await c.getmany(timeout_ms=500, max_records=5000)
                for tp, msgs in batches.items():
                    for m in msgs:
                        out.append(Got(m.partition, m.offset, m.key, m.value, list(m.headers), m.timestamp))
            return out
        finally:
            await c.stop()

    return asyncio.run(run())


def kcat_consume(bootstrap: str, topic: str, partition: int | None, offset: str, count: int | None = None,
                 timeout: float = 30.0, extra: tuple = ()) -> list[Got]:
    """kcat -C -J from `offset` (beginning, end, N, s@ts) until the end of the
    partitions (or `count` records); messages without a timestamp (magic 0)
    get -1."""
    cmd = [KCAT, "-C", "-q", "-J", "-e", "-b", bootstrap, "-t", topic, "-o", offset, *extra]
    if partition is not None:
        cmd += ["-p", str(partition)]
    if count is not None:
        cmd += ["-c", str(count)]
    proc = subprocess.run(cmd, capture_output=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr.decode()
    out = []
    for line in proc.stdout.splitlines():
        m = json.loads(line)
        h = m.get("headers") or []
        headers = [(h[i], h[i + 1].encode()) for i in range(0, len(h), 2)]
        out.append(Got(m["partition"], m["offset"], _enc(m.get("key")), _enc(m.get("payload")), headers,
                       m.get("ts", -1)))
    return out


def _enc(s):
    return None if s is None else s.encode()


def _consume_kcat(bootstrap, topic, partitions, count, start, timeout):
    assert not start, "kcat consumes from one start offset for all partitions"
    return kcat_consume(bootstrap, topic, None, "beginning", None, timeout)


_CONSUMERS = {"confluent": _consume_confluent, "kafka-python": _consume_kafka_python,
              "aiokafka": _consume_aiokafka, "kcat": _consume_kcat}


def read_values(bootstrap: str, partitions, expected: int, group: str, timeout: float = 90.0) -> list[bytes]:
    """The values confluent-kafka reads from offset 0 of every (topic, partition), until
    `expected` have come or `timeout` seconds have passed."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(t, p, 0) for t, p in partitions])
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1.0):
                if msg.error() is None:
                    got.append(msg.value())
        return got
    finally:
        consumer.close()

"""The client libraries behind one interface: produce, consume from an offset, query offsets.

Each function returns what the client reported, normalised so observations
from different clients (and different brokers) compare with `==`:

- a consumed record: {"partition", "offset", "key", "value", "headers": [[k, v], ...], "timestamp"}
  (text decoded as UTF-8, no headers = []);
- a delivery report: {"partition", "offset"} (offset -1 when the client got none, as with acks=0)
  or {"error": Kafka error code};
- an offset lookup: an int, or None when the broker found none.

Clients: confluent (librdkafka), kafka-python, aiokafka, kcat, java (kafka-clients).
"""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from itertools import groupby

import pytest

CLIENTS = ("confluent", "kafka-python", "aiokafka", "kcat", "java")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


class Unsupported(Exception):
    """The client library cannot do this at all (not a broker matter)."""


def client_limits(client: str, codec: str = "none") -> str | None:
    """Why a client cannot take part in a scenario here, or None."""
    if client == "kcat" and shutil.which("kcat") is None:
        return "kcat is not installed"
    if client == "kafka-python" and codec != "none":
        import kafka.codec as kc
        has = {"gzip": kc.has_gzip, "snappy": kc.has_snappy, "lz4": kc.has_lz4, "zstd": kc.has_zstd}[codec]
        if not has():
            return f"kafka-python has no {codec} codec installed here"
    if client == "aiokafka" and codec != "none":
        import aiokafka.codec as ac
        has = {"gzip": ac.has_gzip, "snappy": ac.has_snappy, "lz4": ac.has_lz4, "zstd": ac.has_zstd}[codec]
        if not has():
            return f"aiokafka has no {codec} codec installed here"
    return None


def _text(b) -> str | None:
    if b is None:
        return None
    return bytes(b).decode("utf-8")


def _bytes(s: str | None) -> bytes | None:
    return None if s is None else s.encode("utf-8")


def _norm_offset(offset) -> int:
    return offset if offset is not None and offset >= 0 else -1


def record(partition, offset, key, value, headers, timestamp) -> dict:
    return {"partition": partition, "offset": offset, "key": _text(key), "value": _text(value),
            "headers": [[k, _text(v)] for k, v in (headers or [])], "timestamp": timestamp}


class Clients:
    """Produce/consume/offsets for each client.

    `java_provider()` returns (JavaClient or None, reason): the harness is
    compiled only when a scenario first needs the java client.
    """

    def __init__(self, java_provider):
        self._java_provider = java_provider

    @property
    def java(self):
        return self._java_provider()[0]

    def need(self, client: str, codec: str = "none") -> None:
        """Skip the test when the client itself cannot run here."""
        if client == "java" and self.java is None:
            pytest.skip(f"Java clients unavailable: {self._java_provider()[1]}")
        reason = client_limits(client, codec)
        if reason:
            pytest.skip(reason)

    # ------------------------------------------------------------ produce

    def produce(self, client: str, bootstrap: str, topic: str, records: list[dict], *,
                compression: str = "none", acks="all", config: dict | None = None) -> list[dict]:
        fn = {"confluent": _confluent_produce, "kafka-python": _kafka_python_produce,
              "aiokafka": _aiokafka_produce, "kcat": _kcat_produce, "java": self._java_produce}[client]
        return fn(bootstrap, topic, records, compression, acks, config or {})

    def produce_runs(self, client: str, bootstrap: str, topic: str, runs: list[tuple[list[dict], str]]) -> list:
        """Several producer sessions one after the other, one codec each: (records, compression)."""
        if client == "java":
            steps = [self._java_produce_step(topic, records, compression, "all", {}) for records, compression in runs]
            return [self._java_reports(r) for r in self.java.run(bootstrap, steps)]
        return [self.produce(client, bootstrap, topic, records, compression=compression)
                for records, compression in runs]

    @staticmethod
    def _java_produce_step(topic, records, compression, acks, config) -> dict:
        cfg = {"compression.type": compression, "acks": str(acks), "linger.ms": "5", **config}
        if str(acks) != "all" and str(acks) != "-1":
            cfg.setdefault("enable.idempotence", "false")
        return {"op": "produce", "topic": topic, "config": cfg, "records": records}

    @staticmethod
    def _java_reports(result: dict) -> list[dict]:
        if "error" in result:
            raise AssertionError(f"java producer failed: {result['error']}")
        return [{"error": r["error"]["code"]} if "error" in r else
                {"partition": r["partition"], "offset": _norm_offset(r["offset"])} for r in result["records"]]

    def _java_produce(self, bootstrap, topic, records, compression, acks, config):
        step = self._java_produce_step(topic, records, compression, acks, config)
        return self._java_reports(self.java.run(bootstrap, [step])[0])

    # ------------------------------------------------------------ consume

    def consume(self, client: str, bootstrap: str, topic: str, partition: int, offset: int, count: int,
                timeout: float = 20.0) -> list[dict]:
        fn = {"confluent": _confluent_consume, "kafka-python": _kafka_python_consume,
              "aiokafka": _aiokafka_consume, "kcat": _kcat_consume, "java": self._java_consume}[client]
        return fn(bootstrap, topic, partition, offset, count, timeout)

    def _java_consume(self, bootstrap, topic, partition, offset, count, timeout):
        result = self.java.step(bootstrap, "consume_assign", topic=topic, partitions=[partition],
                                seek={str(partition): offset}, max_records=count,
                                timeout_ms=int(timeout * 1000))
        if "error" in result:
            raise AssertionError(f"java consumer failed: {result['error']}")
        return [record(r["partition"], r["offset"], _bytes(r["key"]), _bytes(r["value"]),
                       [(k, _bytes(v)) for k, v in r["headers"]], r["timestamp"]) for r in result["records"]]

    # ------------------------------------------------------------ offsets

    def offsets(self, client: str, bootstrap: str, topic: str, partition: int,
                timestamps: list[int]) -> dict:
        """{"earliest", "latest", "by_timestamp": {ts: offset or None}}."""
        fn = {"confluent": _confluent_offsets, "kafka-python": _kafka_python_offsets,
              "aiokafka": _aiokafka_offsets, "kcat": _kcat_offsets, "java": self._java_offsets}[client]
        return fn(bootstrap, topic, partition, timestamps)

    def _java_offsets(self, bootstrap, topic, partition, timestamps):
        steps = [{"op": "list_offsets", "topic": topic, "partitions": [partition], "spec": "earliest"},
                 {"op": "list_offsets", "topic": topic, "partitions": [partition], "spec": "latest"}]
        steps += [{"op": "list_offsets", "topic": topic, "partitions": [partition], "spec": {"timestamp": ts}}
                  for ts in timestamps]
        results = self.java.run(bootstrap, steps)
        offs = []
        for r in results:
            one = r.get("partitions", {}).get(str(partition)) if "error" not in r else None
            if one is None or "error" in one:
                raise AssertionError(f"java list_offsets failed: {r}")
            offs.append(one["offset"] if one["offset"] >= 0 else None)
        return {"earliest": offs[0], "latest": offs[1], "by_timestamp": dict(zip(timestamps, offs[2:]))}


# ---------------------------------------------------------------- confluent

def _confluent_produce(bootstrap, topic, records, compression, acks, config):
    from confluent_kafka import Producer
    reports: list = [None] * len(records)

    def report(i):
        def cb(err, msg):
            reports[i] = ({"error": err.code()} if err is not None else
                          {"partition": msg.partition(), "offset": _norm_offset(msg.offset())})
        return cb

    p = Producer({"bootstrap.servers": bootstrap, "compression.type": compression, "acks": str(acks),
                  "linger.ms": 5, **config})
    for i, r in enumerate(records):
        kwargs = {"value": _bytes(r.get("value")), "key": _bytes(r.get("key")), "on_delivery": report(i)}
        if r.get("partition") is not None:
            kwargs["partition"] = r["partition"]
        if r.get("timestamp") is not None:
            kwargs["timestamp"] = r["timestamp"]
        if r.get("headers"):
            kwargs["headers"] = [(k, _bytes(v)) for k, v in r["headers"]]
        p.produce(topic, **kwargs)
    left = p.flush(30)
    if left:
        raise AssertionError(f"confluent producer: {left} messages not delivered in 30 s")
    return reports


def _confluent_consumer(bootstrap, extra=None):
    from confluent_kafka import Consumer
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-assign", "enable.auto.commit": False,
                     "enable.partition.eof": True, "auto.offset.reset": "earliest", **(extra or {})})


def _confluent_consume(bootstrap, topic, partition, offset, count, timeout):
    from confluent_kafka import KafkaError, TopicPartition
    c = _confluent_consumer(bootstrap)
    out = []
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(f"confluent consumer error: {msg.error()}")
            out.append(record(msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers(),
                              msg.timestamp()[1]))
    finally:
        c.close()
    return out


def _confluent_offsets(bootstrap, topic, partition, timestamps):
    from confluent_kafka import TopicPartition
    c = _confluent_consumer(bootstrap)
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=15, cached=False)
        by_ts = {}
        for ts in timestamps:
            # one partition once per request: librdkafka folds repeats of a partition
            (found,) = c.offsets_for_times([TopicPartition(topic, partition, ts)], timeout=15)
            by_ts[ts] = found.offset if found.offset >= 0 else None
    finally:
        c.close()
    return {"earliest": low, "latest": high, "by_timestamp": by_ts}


# ------------------------------------------------------------- kafka-python

def _kafka_python_produce(bootstrap, topic, records, compression, acks, config):
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=acks if acks == "all" else int(acks),
                      compression_type=None if compression == "none" else compression, linger_ms=5, **config)
    futures = []
    try:
        for r in records:
            futures.append(p.send(topic, value=_bytes(r.get("value")), key=_bytes(r.get("key")),
                                  partition=r.get("partition"), timestamp_ms=r.get("timestamp"),
                                  headers=[(k, _bytes(v)) for k, v in r.get("headers") or []]))
        p.flush(30)
        out = []
        for f in futures:
            try:
                md = f.get(timeout=30)
                out.append({"partition": md.partition, "offset": _norm_offset(md.offset)})
            except Exception as exc:  # noqa: BLE001 - kafka-python raises KafkaError subclasses
                out.append({"error": getattr(exc, "errno", None)})
        return out
    finally:
        p.close(5)


def _kafka_python_consumer(bootstrap):
    from kafka import KafkaConsumer
    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest")


def _kafka_python_consume(bootstrap, topic, partition, offset, count, timeout):
    from kafka import TopicPartition
    c = _kafka_python_consumer(bootstrap)
    out = []
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        c.seek(tp, offset)
        end = c.end_offsets([tp])[tp]
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline and c.position(tp) < end:
            for msgs in c.poll(timeout_ms=500).values():
                for m in msgs:
                    out.append(record(m.partition, m.offset, m.key, m.value, m.headers, m.timestamp))
    finally:
        c.close()
    return out[:count]


def _kafka_python_offsets(bootstrap, topic, partition, timestamps):
    from kafka import TopicPartition
    c = _kafka_python_consumer(bootstrap)
    try:
        tp = TopicPartition(topic, partition)
        low = c.beginning_offsets([tp])[tp]
        high = c.end_offsets([tp])[tp]
        by_ts = {}
        for ts in timestamps:
            found = c.offsets_for_times({tp: ts})[tp]
            by_ts[ts] = found.offset if found is not None else None
    finally:
        c.close()
    return {"earliest": low, "latest": high, "by_timestamp": by_ts}


# ----------------------------------------------------------------- aiokafka

def _aiokafka_produce(bootstrap, topic, records, compression, acks, config):
    from aiokafka import AIOKafkaProducer

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=acks if acks == "all" else int(acks),
                             compression_type=None if compression == "none" else compression,
                             linger_ms=5, **config)
        await p.start()
        try:
            futures = []
            for r in records:
                futures.append(await p.send(topic, value=_bytes(r.get("value")), key=_bytes(r.get("key")),
                                            partition=r.get("partition"), timestamp_ms=r.get("timestamp"),
                                            headers=[(k, _bytes(v)) for k, v in r.get("headers") or []]))
            out = []
            for f in futures:
                try:
                    md = await f
                    out.append({"partition": md.partition, "offset": _norm_offset(md.offset)} if md is not None
                               else {"partition": None, "offset": -1})
                except Exception as exc:  # noqa: BLE001
                    out.append({"error": getattr(exc, "errno", None)})
            return out
        finally:
            await p.stop()
    return asyncio.run(run())


def _aiokafka_consume(bootstrap, topic, partition, offset, count, timeout):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest")
        await c.start()
        out = []
        try:
            tp = TopicPartition(topic, partition)
            c.assign([tp])
            c.seek(tp, offset)
            end = (await c.end_offsets([tp]))[tp]
            deadline = time.monotonic() + timeout
            while len(out) < count and time.monotonic() < deadline and await c.position(tp) < end:
                for msgs in (await c.getmany(tp, timeout_ms=500)).values():
                    for m in msgs:
                        out.append(record(m.partition, m.offset, m.key, m.value, m.headers, m.timestamp))
        finally:
            await c.stop()
        return out[:count]
    return asyncio.run(run())


def _aiokafka_offsets(bootstrap, topic, partition, timestamps):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
        await c.start()
        try:
            tp = TopicPartition(topic, partition)
            low = (await c.beginning_offsets([tp]))[tp]
            high = (await c.end_offsets([tp]))[tp]
            by_ts = {}
            for ts in timestamps:
                found = (await c.offsets_for_times({tp: ts}))[tp]
                by_ts[ts] = found.offset if found is not None else None
        finally:
            await c.stop()
        return {"earliest": low, "latest": high, "by_timestamp": by_ts}
    return asyncio.run(run())


# --------------------------------------------------------------------- kcat

def _kcat(args: list[str], input_text: str | None = None, timeout: float = 30.0) -> str:
    proc = subprocess.run(["kcat", *args], input=input_text, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"kcat {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout


def _kcat_produce(bootstrap, topic, records, compression, acks, config):
    # kcat sets headers per invocation, not per message, and cannot set a
    # timestamp: runs of records with equal headers go out in one call.
    if any(r.get("timestamp") is not None for r in records):
        raise Unsupported("kcat cannot set record timestamps")
    for headers, run in groupby(records, key=lambda r: tuple(map(tuple, r.get("headers") or []))):
        run = list(run)
        args = ["-P", "-b", bootstrap, "-t", topic, "-K", "\t", "-z", compression,
                "-X", f"acks={acks}", "-q"]
        partitions = {r.get("partition") for r in run}
        if partitions != {None}:
            (partition,) = partitions
            args += ["-p", str(partition)]
        for k, v in headers:
            args += ["-H", f"{k}={v}"]
        for k, v in config.items():
            args += ["-X", f"{k}={v}"]
        lines = "".join((f"{r['key']}\t" if r.get("key") is not None else "") + r["value"] + "\n" for r in run)
        _kcat(args, lines)
    # kcat reports no offsets.
    return [{"partition": r.get("partition"), "offset": None} for r in records]


def _kcat_consume(bootstrap, topic, partition, offset, count, timeout):
    out = _kcat(["-C", "-b", bootstrap, "-t", topic, "-p", str(partition), "-o", str(offset), "-c", str(count),
                 "-e", "-J", "-q"], timeout=timeout)
    records = []
    for line in out.splitlines():
        if not line.strip():
            continue
        m = json.loads(line)
        h = m.get("headers") or []
        headers = [(h[i], None if h[i + 1] is None else h[i + 1].encode()) for i in range(0, len(h), 2)]
        records.append(record(m["partition"], m["offset"], _bytes(m.get("key")), _bytes(m.get("payload")),
                              headers, m.get("ts")))
    return records


def _kcat_offsets(bootstrap, topic, partition, timestamps):
    def query(ts):
        out = _kcat(["-Q", "-b", bootstrap, "-t", f"{topic}:{partition}:{ts}"])
        # "<topic> [<partition>] offset <n>"
        for line in out.splitlines():
            if "offset" in line:
                n = int(line.rsplit("offset", 1)[1].strip())
                return n if n >= 0 else None
        raise AssertionError(f"kcat -Q printed no offset: {out!r}")
    return {"earliest": query(-2), "latest": query(-1), "by_timestamp": {ts: query(ts) for ts in timestamps}}

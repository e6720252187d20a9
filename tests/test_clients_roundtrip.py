"""Round trips through a real `kproto serve` with real client libraries:
confluent-kafka (librdkafka), kafka-python, aiokafka and kcat.

Each producer library writes 10,000 keyed records with headers and explicit
timestamps into a 3-partition topic with every compression codec and every
acks setting; another library reads them back (the pairing rotates so every
producer meets several consumers). Then each consumer library's offset
lookups and seeks are checked against known data.
"""
from __future__ import annotations

import time

import pytest

from tests.client_adapters import CLIENTS, KCAT, Got, Rec, consume, kcat_consume, produce
from kproto.api import ApiKey
from tests.wire_client import WireClient, create_topic
from broker.launch.process import BrokerProcess

PARTITIONS = 3
COUNT = 10_000
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = (0, 1, -1)

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

pytestmark = [pytest.mark.timeout(120),
              # kafka-python loads its protocol schemas through deprecated importlib calls
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _kafka_python_has_snappy() -> bool:
    import warnings
    with warnings.catch_warnings():
        # importing kafka-python loads its protocol schemas through deprecated importlib calls
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka.codec
    return kafka.codec.has_snappy()


def _skip_reason(producer: str, consumer: str, compression: str) -> str | None:
    if "kcat" in (producer, consumer) and KCAT is None:
        return "kcat is not on PATH"
    if "kafka-python" in (producer, consumer) and compression == "snappy" and not _kafka_python_has_snappy():
        # kafka-python 3.0 reads snappy only through python-snappy (not cramjam)
        return "kafka-python needs the python-snappy module for snappy, which is not installed"
    return None


def _cases():
    """Every producer with every codec; acks and the consumer rotate so that
    each producer uses every acks value and meets every consumer library."""
    for pi, producer in enumerate(CLIENTS):
        for ci, compression in enumerate(COMPRESSIONS):
            acks = ACKS[(pi + ci) % len(ACKS)]
            consumer = CLIENTS[(pi + ci + 1) % len(CLIENTS)]
            if _skip_reason(producer, consumer, compression) and consumer != "confluent" and producer != "kcat":
                # keep the producer side covered when only the consumer cannot run
                consumer = "confluent"
            yield pytest.param(producer, consumer, compression, acks,
                               id=f"{producer}-to-{consumer}-{compression}-acks{acks}")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(str(tmp_path_factory.mktemp("kproto-rt")), settings={"num.partitions": str(PARTITIONS)})
    proc.start()
    yield proc
    proc.stop()


def make_records(tag: str, n: int = COUNT, with_timestamps: bool = True) -> list[Rec]:
    base = int(time.time() * 1000) - 3_600_000
    out = []
    for i in range(n):
        key = b"key-%04d" % (i % 997)
        value = b"%s:%06d:" % (tag.encode(), i) + b"x" * (i % 50)
        if with_timestamps:
            headers = [("idx", b"%d" % i), ("src", tag.encode()), ("empty", b"")]
            out.append(Rec(key, value, headers, base + i))
        else:
            out.append(Rec(key, value, [("src", tag.encode()), ("two", b"2")], None))
    return out


def check_roundtrip(records: list[Rec], got: list[Got], acked: list[tuple[int, int]], since_ms: int,
                    until_ms: int) -> None:
    assert len(got) == len(records), f"consumed {len(got)} of {len(records)}"
    by_value = {r.value: i for i, r in enumerate(records)}
    seen = set()
    last_in_partition: dict[int, tuple[int, int]] = {}
    key_partition: dict[bytes, int] = {}
    for g in got:
        i = by_value.get(g.value)
        assert i is not None, f"unexpected record {g}"
        assert i not in seen, f"record {i} consumed twice"
        seen.add(i)
        r = records[i]
        assert g.key == r.key
        assert g.headers == r.headers, (g.headers, r.headers)
        if r.timestamp is not None:
            assert g.timestamp == r.timestamp
        else:
            assert since_ms - 1000 <= g.timestamp <= until_ms + 1000, (g.timestamp, since_ms, until_ms)
        # keyed records of one key stay in one partition
        assert key_partition.setdefault(g.key, g.partition) == g.partition
        # per partition: offsets dense and increasing, records in produce order
        prev = last_in_partition.get(g.partition)
        if prev is None:
            assert g.offset == 0
        else:
            assert g.offset == prev[0] + 1, f"partition {g.partition}: offset {g.offset} after {prev[0]}"
            assert i > prev[1], f"partition {g.partition}: record {i} after {prev[1]}"
        last_in_partition[g.partition] = (g.offset, i)
        if acked[i] != (-1, -1):
            assert acked[i] == (g.partition, g.offset), f"record {i} acknowledged at {acked[i]}, read at {g}"
    assert len(last_in_partition) == PARTITIONS, "keys should spread over every partition"


@pytest.mark.parametrize("producer,consumer,compression,acks", list(_cases()))
def test_roundtrip(broker, topic_name, producer, consumer, compression, acks):
    reason = _skip_reason(producer, consumer, compression)
    if reason:
        pytest.skip(reason)
    create_topic(broker.bootstrap, topic_name, PARTITIONS)
    records = make_records(producer, with_timestamps=producer != "kcat")
    since = int(time.time() * 1000)
    acked = produce(producer, broker.bootstrap, topic_name, records, compression, acks)
    until = int(time.time() * 1000)
    got = consume(consumer, broker.bootstrap, topic_name, PARTITIONS, COUNT)
    check_roundtrip(records, got, acked, since, until)
    # nothing beyond what was produced (no duplicates written)
    ends = _end_offsets(broker.bootstrap, topic_name)
    assert sum(ends.values()) == COUNT, ends
    # the batches are stored as the client compressed them
    stored = _stored_codecs(broker.data_dir, topic_name)
    if (stored == {0} and compression == "lz4" and producer in ("confluent", "kcat")
            and not _advertises(broker.bootstrap, ApiKey.FIND_COORDINATOR)):
        pytest.xfail("librdkafka enables lz4 only when the broker advertises FindCoordinator "
                     "(its 0.8.2 feature probe); kproto does not serve it yet, so it sent lz4 batches uncompressed")
    # clients send a batch uncompressed when compression would not shrink it
    assert CODEC_IDS[compression] in stored and stored <= {0, CODEC_IDS[compression]}, stored


def _advertises(bootstrap: str, api_key: int) -> bool:
    from kproto.messages.api_versions_request import ApiVersionsRequest
    with WireClient(bootstrap) as c:
        resp = c.call(ApiVersionsRequest(client_software_name="kproto-tests", client_software_version="1"), 3)
    return any(k.api_key == api_key for k in resp.api_keys)


def _stored_codecs(data_dir: str, topic: str) -> set[int]:
    import glob
    import os

    from kproto.records import iter_batch_headers
    codecs = set()
    for part in range(PARTITIONS):
        for path in glob.glob(os.path.join(data_dir, f"{topic}-{part}", "*.log")):
            with open(path, "rb") as f:
                data = f.read()
            codecs.update(h.compression for _pos, h in iter_batch_headers(data))
    return codecs


def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kproto-tests-unused"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    finally:
        c.close()


# -- old producers: Produce v0-2 with magic 0/1 message sets -------------------------------------

LEGACY_COUNT = 2000


def _legacy_kcat(bootstrap, topic, records, compression, fallback):
    import subprocess
    cmd = [KCAT, "-P", "-q", "-b", bootstrap, "-t", topic, "-K", "\t", "-X", "api.version.request=false",
           "-X", f"broker.version.fallback={fallback}", "-X", f"compression.codec={compression}"]
    data = b"".join(r.key + b"\t" + r.value + b"\n" for r in records)
    proc = subprocess.run(cmd, input=data, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()


def _legacy_kafka_python(bootstrap, topic, records, compression, api_version):
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, api_version=api_version, linger_ms=5,
                      compression_type=None if compression == "none" else compression)
    try:
        futures = [p.send(topic, key=r.key, value=r.value, timestamp_ms=r.timestamp) for r in records]
        p.flush(60)
        for f in futures:
            f.get(10)
    finally:
        p.close(5)


@pytest.mark.parametrize("producer,magic", [("kcat-0.8.2", 0), ("kcat-0.9.0", 0), ("kafka-python-0.9", 0),
                                            ("kafka-python-0.10.1", 1)])
@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4"])
def test_legacy_producer_roundtrip(broker, topic_name, producer, magic, compression):
    """Producers that speak Produce v0-2 (magic 0/1 messages, as brokers before
    0.11 took them) are converted to v2 batches, as Kafka 3.9 does."""
    if producer.startswith("kcat") and KCAT is None:
        pytest.skip("kcat is not on PATH")
    if producer.startswith("kafka-python") and compression == "snappy" and not _kafka_python_has_snappy():
        pytest.skip("kafka-python needs the python-snappy module for snappy, which is not installed")
    if producer == "kafka-python-0.9" and compression == "lz4":
        pytest.skip("kafka-python writes magic-0 lz4 only with the xxhash module, which is not installed")
    create_topic(broker.bootstrap, topic_name, PARTITIONS)
    base = int(time.time() * 1000) - 60_000
    records = [Rec(b"key-%d" % (i % 31), b"legacy:%05d" % i, [], base + i) for i in range(LEGACY_COUNT)]
    since = int(time.time() * 1000)
    if producer.startswith("kcat"):
        _legacy_kcat(broker.bootstrap, topic_name, records, compression, producer.split("-")[1] + ".0")
    else:
        version = tuple(int(x) for x in producer.split("-")[2].split("."))
        _legacy_kafka_python(broker.bootstrap, topic_name, records, compression, version)
    until = int(time.time() * 1000)
    got = consume("confluent", broker.bootstrap, topic_name, PARTITIONS, LEGACY_COUNT)
    if magic == 0:
        # magic 0 messages carry no timestamp; Kafka stores them with NO_TIMESTAMP (-1)
        assert {g.timestamp for g in got} == {-1}
        got = [g._replace(timestamp=base + int(g.value.split(b":")[1])) for g in got]
    elif producer.startswith("kcat"):
        got = [g._replace(timestamp=base + int(g.value.split(b":")[1])) for g in got
               if since - 1000 <= g.timestamp <= until + 1000]
    check_roundtrip(records, got, [(-1, -1)] * len(records), since, until)
    stored = _stored_codecs(broker.data_dir, topic_name)
    assert CODEC_IDS[compression] in stored and stored <= {0, CODEC_IDS[compression]}, stored


def _legacy_consume_kafka_python(bootstrap, topic, count, api_version) -> list[Got]:
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, api_version=api_version, group_id=None,
                      auto_offset_reset="earliest", fetch_max_wait_ms=100)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning()
        out = []
        deadline = time.monotonic() + 30
        while len(out) < count and time.monotonic() < deadline:
            for msgs in c.poll(timeout_ms=300, max_records=5000).values():
                out += [Got(m.partition, m.offset, m.key, m.value, list(m.headers or []),
                            -1 if m.timestamp is None else m.timestamp) for m in msgs]
        return out
    finally:
        c.close()


@pytest.mark.parametrize("consumer,magic", [("kcat-0.8.2", 0), ("kcat-0.9.0", 0), ("kafka-python-0.9", 0),
                                            ("kafka-python-0.10.1", 1)])
@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4"])
def test_legacy_consumer_roundtrip(broker, topic_name, consumer, magic, compression):
    """Consumers that speak Fetch v0-3 and ListOffsets v0 get the v2 batches
    down-converted to magic 0/1 messages, as Kafka 3.9 sends them: no headers,
    and no timestamps in magic 0."""
    if consumer.startswith("kcat") and KCAT is None:
        pytest.skip("kcat is not on PATH")
    if consumer.startswith("kafka-python") and compression == "snappy" and not _kafka_python_has_snappy():
        pytest.skip("kafka-python needs the python-snappy module for snappy, which is not installed")
    if consumer == "kafka-python-0.9" and compression == "lz4":
        pytest.skip("kafka-python reads magic-0 lz4 only with the xxhash module, which is not installed")
    create_topic(broker.bootstrap, topic_name, PARTITIONS)
    records = [Rec(r.key, r.value, [], r.timestamp) for r in make_records("old", LEGACY_COUNT)]
    with_headers = [Rec(r.key, r.value, [("dropped", b"1")], r.timestamp) for r in records]
    produce("confluent", broker.bootstrap, topic_name, with_headers, compression, -1)
    if consumer.startswith("kcat"):
        fallback = consumer.split("-")[1] + ".0"
        got = kcat_consume(broker.bootstrap, topic_name, None, "beginning",
                           extra=("-X", "api.version.request=false", "-X", f"broker.version.fallback={fallback}"))
    else:
        version = tuple(int(x) for x in consumer.split("-")[2].split("."))
        got = _legacy_consume_kafka_python(broker.bootstrap, topic_name, LEGACY_COUNT, version)
    if magic == 0:
        assert {g.timestamp for g in got} == {-1}, "magic 0 messages carry no timestamp"
        by_value = {r.value: r.timestamp for r in records}
        got = [g._replace(timestamp=by_value.get(g.value, -1)) for g in got]
    check_roundtrip(records, got, [(-1, -1)] * len(records), 0, 0)


# -- offset lookups and seeks, per consumer library ---------------------------------------

SEEK_PER_PARTITION = 200


@pytest.fixture
def seek_topic(broker, topic_name):
    """A topic whose partition p holds records with timestamps base+10*i at
    offset i (written by confluent-kafka to explicit partitions)."""
    from confluent_kafka import Producer
    create_topic(broker.bootstrap, topic_name, PARTITIONS)
    base = int(time.time() * 1000) - 600_000
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "compression.type": "lz4"})
    for part in range(PARTITIONS):
        for i in range(SEEK_PER_PARTITION):
            p.produce(topic_name, partition=part, key=b"k%d" % i, value=b"p%d-%d" % (part, i),
                      timestamp=base + 10 * i)
    assert p.flush(30) == 0
    return topic_name, base


def _expect_at(got: list[Got], partition: int, offset: int) -> None:
    assert got, "nothing consumed"
    assert (got[0].partition, got[0].offset, got[0].value) == (partition, offset, b"p%d-%d" % (partition, offset))


def _seek_confluent(bootstrap, topic, base):
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kproto-tests-unused",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        # offsets_for_times: exact timestamp, between two timestamps, before all, after all
        asked = [TopicPartition(topic, 0, base + 10 * 37), TopicPartition(topic, 1, base + 10 * 37 + 5),
                 TopicPartition(topic, 2, base - 1000)]
        found = {tp.partition: tp.offset for tp in c.offsets_for_times(asked, timeout=10)}
        assert found == {0: 37, 1: 38, 2: 0}
        after = c.offsets_for_times([TopicPartition(topic, 0, base + 10 * SEEK_PER_PARTITION + 1)], timeout=10)
        assert after[0].offset == -1  # OFFSET_END: no record that late
        assert c.get_watermark_offsets(TopicPartition(topic, 1), timeout=10) == (0, SEEK_PER_PARTITION)

        def first(partition, offset):
            c.assign([TopicPartition(topic, partition, offset)])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is not None:
                    assert m.error() is None, m.error()
                    return m
            return None

        m = first(0, OFFSET_BEGINNING)
        assert (m.partition(), m.offset()) == (0, 0)
        m = first(1, 123)
        assert (m.offset(), m.value()) == (123, b"p1-123")
        c.assign([TopicPartition(topic, 2, OFFSET_END)])
        assert c.poll(1.0) is None
        c.seek(TopicPartition(topic, 2, 7))
        m = c.poll(10)
        assert (m.partition(), m.offset(), m.value()) == (2, 7, b"p2-7")
    finally:
        c.close()


def _seek_kafka_python(bootstrap, topic, base):
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      fetch_max_wait_ms=100)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        found = c.offsets_for_times({tps[0]: base + 10 * 37, tps[1]: base + 10 * 37 + 5, tps[2]: base - 1000})
        assert {tp.partition: (o.offset, o.timestamp) for tp, o in found.items()} == {
            0: (37, base + 370), 1: (38, base + 380), 2: (0, base)}
        assert c.offsets_for_times({tps[0]: base + 10 * SEEK_PER_PARTITION + 1})[tps[0]] is None
        assert c.beginning_offsets(tps) == {tp: 0 for tp in tps}
        assert c.end_offsets(tps) == {tp: SEEK_PER_PARTITION for tp in tps}
        c.assign(tps)
        c.seek_to_end(tps[2])
        assert c.position(tps[2]) == SEEK_PER_PARTITION
        c.seek_to_beginning(tps[0])
        c.seek(tps[1], 123)
        c.pause(tps[2])
        firsts = {}
        deadline = time.monotonic() + 10
        while len(firsts) < 2 and time.monotonic() < deadline:
            for tp, msgs in c.poll(timeout_ms=200).items():
                firsts.setdefault(tp.partition, msgs[0])
        assert (firsts[0].offset, firsts[0].value) == (0, b"p0-0")
        assert (firsts[1].offset, firsts[1].value) == (123, b"p1-123")
        c.resume(tps[2])
        c.seek(tps[2], 7)
        deadline = time.monotonic() + 10
        got = None
        while got is None and time.monotonic() < deadline:
            got = c.poll(timeout_ms=200).get(tps[2])
        assert (got[0].offset, got[0].value, got[0].timestamp) == (7, b"p2-7", base + 70)
    finally:
        c.close()


def _seek_aiokafka(bootstrap, topic, base):
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             fetch_max_wait_ms=100)
        await c.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            found = await c.offsets_for_times({tps[0]: base + 10 * 37, tps[1]: base + 10 * 37 + 5,
                                               tps[2]: base - 1000})
            assert {tp.partition: (o.offset, o.timestamp) for tp, o in found.items()} == {
                0: (37, base + 370), 1: (38, base + 380), 2: (0, base)}
            late = await c.offsets_for_times({tps[0]: base + 10 * SEEK_PER_PARTITION + 1})
            assert late[tps[0]] is None
            assert await c.beginning_offsets(tps) == {tp: 0 for tp in tps}
            assert await c.end_offsets(tps) == {tp: SEEK_PER_PARTITION for tp in tps}
            c.assign(tps)
            await c.seek_to_end(tps[2])
            assert await c.position(tps[2]) == SEEK_PER_PARTITION
            await c.seek_to_beginning(tps[0])
            c.seek(tps[1], 123)
            m = await asyncio.wait_for(c.getone(tps[0]), 10)
            assert (m.offset, m.value) == (0, b"p0-0")
            m = await asyncio.wait_for(c.getone(tps[1]), 10)
            assert (m.offset, m.value) == (123, b"p1-123")
            c.seek(tps[2], 7)
            m = await asyncio.wait_for(c.getone(tps[2]), 10)
            assert (m.offset, m.value, m.timestamp) == (7, b"p2-7", base + 70)
        finally:
            await c.stop()

    asyncio.run(run())


def _seek_kcat(bootstrap, topic, base):
    import subprocess
    q = subprocess.run([KCAT, "-Q", "-b", bootstrap, "-t", f"{topic}:0:{base + 10 * 37}",
                        "-t", f"{topic}:1:{base + 10 * 37 + 5}"], capture_output=True, text=True, timeout=30)
    assert q.returncode == 0, q.stderr
    lines = sorted(line.split() for line in q.stdout.splitlines() if line.strip())
    assert [(ln[1], ln[3]) for ln in lines] == [("[0]", "37"), ("[1]", "38")], q.stdout
    _expect_at(kcat_consume(bootstrap, topic, 0, "beginning", 1), 0, 0)
    _expect_at(kcat_consume(bootstrap, topic, 1, "123", 1), 1, 123)
    _expect_at(kcat_consume(bootstrap, topic, 2, f"s@{base + 10 * 7}", 1), 2, 7)
    _expect_at(kcat_consume(bootstrap, topic, 2, "-5", 1), 2, SEEK_PER_PARTITION - 5)
    assert kcat_consume(bootstrap, topic, 2, "end") == []


_SEEKERS = {"confluent": _seek_confluent, "kafka-python": _seek_kafka_python,
            "aiokafka": _seek_aiokafka, "kcat": _seek_kcat}


@pytest.mark.parametrize("client", CLIENTS)
def test_offsets_for_times_and_seeks(broker, seek_topic, client):
    if client == "kcat" and KCAT is None:
        pytest.skip("kcat is not on PATH")
    topic, base = seek_topic
    _SEEKERS[client](broker.bootstrap, topic, base)


# -- LogAppendTime topics ----------------------------------------------------------------------------

@pytest.mark.parametrize("consumer", ["confluent", "aiokafka"])
def test_log_append_time_topic(broker, topic_name, consumer):
    """message.timestamp.type=LogAppendTime: the broker's clock replaces the
    producer's timestamps, in the ack and in what consumers read."""
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, PARTITIONS, 1,
                                  config={"message.timestamp.type": "LogAppendTime"})])[topic_name].result(10)
    records = [Rec(r.key, r.value, r.headers, 12345) for r in make_records("lat", 300)]
    before = int(time.time() * 1000)
    produce("confluent", broker.bootstrap, topic_name, records, "gzip", -1)
    after = int(time.time() * 1000)
    got = consume(consumer, broker.bootstrap, topic_name, PARTITIONS, len(records))
    assert len(got) == len(records)
    assert all(before <= g.timestamp <= after for g in got), "records carry the broker's append time"
    check_roundtrip([r._replace(timestamp=None) for r in records], got, [(-1, -1)] * len(records), before, after)

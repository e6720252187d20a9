"""The Spark pipeline against a real `kproto serve` process, through Spark's
built-in Kafka source and sink (the Java client: AdminClient for offsets and
partitions, assign/seek consumers, an idempotent producer).

Needs the connector jars, which CI cannot download: set SPARK_KAFKA_JARS
(docs/pipeline.md). The transformations alone are tested in
tests/test_pipeline_transform.py."""
from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from decimal import Decimal

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from tools.pipeline.connector import ENV_JARS, local_jars_configured  # noqa: E402
from tools.pipeline.session import build_session, java_available  # noqa: E402

if not local_jars_configured():
    pytest.skip(f"{ENV_JARS} is not set: the Spark Kafka connector jars (spark-sql-kafka-0-10, "
                "spark-token-provider-kafka-0-10, commons-pool2, kafka-clients 3.9) are not on PyPI and "
                "CI cannot download them; see docs/pipeline.md", allow_module_level=True)
if not java_available():
    pytest.skip("pyspark needs a Java runtime (java on PATH or JAVA_HOME); none found",
                allow_module_level=True)

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from broker.launch.process import BrokerProcess  # noqa: E402
from tests.test_tiered_storage import tiered_settings  # noqa: E402
from tests.wire_client import WireClient, list_offset  # noqa: E402
from tools.pipeline import stream  # noqa: E402
from tools.pipeline.generate import encode, make_events, produce_events  # noqa: E402
from tools.pipeline.replay import KAFKA_COLUMNS, ReplayOptions, read_range, replay  # noqa: E402

T0 = 1_700_000_040_000          # on a minute boundary
MIN = 60_000
WATERMARK_MS = 30_000


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    # Tiered storage on (the local-directory store): topics that do not ask for
    # it (remote.storage.enable) are unaffected; one test reads a tiered topic.
    # Its retention checks run every 200 ms, and the events' timestamps are from
    # 2023 (T0): unlimited time retention, or the 7-day default deletes them.
    base = tmp_path_factory.mktemp("kproto-pipeline")
    settings = {"num.partitions": "2", **tiered_settings(str(base / "remote")), "log.retention.ms": "-1"}
    proc = BrokerProcess(str(base / "data"), settings=settings)
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def spark():
    session = build_session(app_name="kproto-pipeline-tests", kafka=True, log_level="ERROR")
    yield session
    session.stop()


@pytest.fixture
def names():
    tag = uuid.uuid4().hex[:8]
    return lambda what: f"pl-{tag}-{what}"


def create_topic(bootstrap, name, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=15).values():
        fut.result()


def read_topic(bootstrap, topic) -> list[dict]:
    """Every record of the topic: partition, offset, key, value (JSON), timestamp."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pipeline-test-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return []
        out = []
        for p in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            while True:
                msg = consumer.poll(10)
                assert msg is not None, f"timed out reading {topic}/{p}"
                if msg.error():
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        break
                    raise KafkaException(msg.error())
                out.append({"partition": p, "offset": msg.offset(), "key": msg.key().decode(),
                            "value": json.loads(msg.value(), parse_float=Decimal),
                            "timestamp": msg.timestamp()[1]})
                if msg.offset() >= high - 1:
                    break
        return out
    finally:
        consumer.close()


def wait_for(fn, done, what, timeout=90.0):
    """fn() until done(result); returns the result."""
    deadline = time.monotonic() + timeout
    while True:
        result = fn()
        if done(result):
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


# What the job must output, computed here independently of the Spark code.

def expected_enriched(events, where):
    """`where[id]` = (topic, partition, offset, record timestamp)."""
    out = []
    for e in events:
        topic, partition, offset, record_ts = where[e["id"]]
        f = e["fields"]
        hour = time.gmtime(e["ts"] / 1000)
        row = {"event_id": e["id"], "kind": e["kind"], "key": e["key"], "ts": e["ts"],
               "event_date": time.strftime("%Y-%m-%d", hour), "event_hour": hour.tm_hour,
               "lag_ms": record_ts - e["ts"], "source_topic": topic, "source_partition": partition,
               "source_offset": offset}
        if e["kind"] == "order":
            amount = Decimal(str(f["amount"]))
            row.update(item=f["item"], quantity=f["quantity"], amount=amount, revenue=amount,
                       order_size="small" if amount < 20 else "medium" if amount < 100 else "large")
        else:
            row.update(page=f["page"], revenue=Decimal(0), section=f["page"].split("/")[1])
        out.append(row)
    return sorted(out, key=lambda r: r["event_id"])


def expected_totals(events, window_ms=MIN):
    """Windows the watermark (max event time - 30 s) has closed, one row each."""
    watermark = max(e["ts"] for e in events) - WATERMARK_MS
    acc = defaultdict(lambda: {"events": 0, "orders": 0, "clicks": 0, "revenue": Decimal(0), "items": 0})
    for e in events:
        start = e["ts"] - e["ts"] % window_ms
        a = acc[(e["key"], start)]
        a["events"] += 1
        if e["kind"] == "order":
            a["orders"] += 1
            a["revenue"] += Decimal(str(e["fields"]["amount"]))
            a["items"] += e["fields"]["quantity"]
        else:
            a["clicks"] += 1
    return sorted(({"key": k, "window_start": s, "window_end": s + window_ms, **a}
                   for (k, s), a in acc.items() if s + window_ms <= watermark),
                  key=lambda r: (r["window_start"], r["key"]))


def produced(bootstrap, topic, events, **kw):
    report = produce_events(bootstrap, topic, events, keep_deliveries=True, **kw)
    assert report.failed == 0, report.first_error
    # Deliveries come back in produce order within a partition; match them
    # to events by reading the topic back.
    return {r["value"]["id"]: (topic, r["partition"], r["offset"], r["timestamp"])
            for r in read_topic(bootstrap, topic)}


def job_options(kafka, names, tmp_path, **kw):
    base = dict(bootstrap=kafka.bootstrap, checkpoint=str(tmp_path / "checkpoint"), topics=[names("in")],
                enriched_topic=names("enriched"), totals_topic=names("totals"))
    base.update(kw)
    return stream.StreamOptions(**base)


def outputs(kafka, opts):
    enriched = read_topic(kafka.bootstrap, opts.enriched_topic)
    totals = read_topic(kafka.bootstrap, opts.totals_topic)
    for r in enriched + totals:
        assert r["key"] == r["value"]["key"]
    return (sorted((r["value"] for r in enriched), key=lambda v: v["event_id"]),
            sorted((r["value"] for r in totals), key=lambda v: (v["window_start"], v["key"])))


def test_bounded_input_gives_exactly_the_expected_records(kafka, spark, names, tmp_path):
    events = list(make_events(150, seed=1, keys=4, start_ms=T0, step_ms=2000))
    where = produced(kafka.bootstrap, names("in"), events)
    opts = job_options(kafka, names, tmp_path)

    rows = stream.run(spark, opts)

    assert rows == {"enriched": 150, "totals": 150}
    enriched, totals = outputs(kafka, opts)
    assert enriched == expected_enriched(events, where)
    want = expected_totals(events)
    assert [w["window_end"] for w in want][-1] == T0 + 4 * MIN   # four closed windows, the fifth is open
    assert totals == want


def test_rerun_with_the_same_checkpoint_adds_no_duplicates(kafka, spark, names, tmp_path):
    first = list(make_events(80, seed=2, keys=3, start_ms=T0, step_ms=2000, id_prefix="a"))
    where = produced(kafka.bootstrap, names("in"), first)
    opts = job_options(kafka, names, tmp_path)
    stream.run(spark, opts)
    after_first = outputs(kafka, opts)
    assert after_first == (expected_enriched(first, where), expected_totals(first))

    assert stream.run(spark, opts) == {"enriched": 0, "totals": 0}
    assert outputs(kafka, opts) == after_first

    # New input: only it is processed, and the windows it closes go out once.
    second = list(make_events(60, seed=3, keys=3, start_ms=T0 + 80 * 2000, step_ms=2000, id_prefix="b"))
    where = produced(kafka.bootstrap, names("in"), second)
    assert stream.run(spark, opts) == {"enriched": 60, "totals": 60}
    assert outputs(kafka, opts) == (expected_enriched(first + second, where), expected_totals(first + second))


def _round_robin(i, _event):
    return i % 2


def _replayed(spark, opts, tmp_path):
    out = str(tmp_path / "replay")
    count = replay(spark, opts, out)
    frame = spark.read.parquet(out)
    assert tuple(frame.columns) == KAFKA_COLUMNS
    rows = frame.select("key", "value", "topic", "partition", "offset",
                        F.unix_millis("timestamp").alias("ts"), "timestampType").collect()
    assert count == len(rows)
    return sorted((bytes(r["key"]), bytes(r["value"]), r["topic"], r["partition"], r["offset"], r["ts"],
                   r["timestampType"]) for r in rows)


def _as_rows(topic, events, where):
    # timestampType 0: CreateTime, the producer's timestamp.
    return sorted((e["key"].encode(), encode(e), topic, where[e["id"]][1], where[e["id"]][2], e["ts"], 0)
                  for e in events)


def test_batch_replay_by_offsets(kafka, spark, names, tmp_path):
    topic = names("in")
    events = list(make_events(20, seed=4, start_ms=T0, step_ms=1000))
    where = produced(kafka.bootstrap, topic, events, partition_of=_round_robin)
    # Partition 0 holds events 0, 2, ... at offsets 0..9; partition 1 the odd ones.
    opts = ReplayOptions(bootstrap=kafka.bootstrap, topics=[topic],
                         starting_offsets=json.dumps({topic: {"0": 2, "1": -2}}),
                         ending_offsets=json.dumps({topic: {"0": 7, "1": 3}}))
    want = [e for e in events if (where[e["id"]][1] == 0 and 2 <= where[e["id"]][2] < 7)
            or (where[e["id"]][1] == 1 and where[e["id"]][2] < 3)]
    assert len(want) == 8
    assert _replayed(spark, opts, tmp_path) == _as_rows(topic, want, where)


def test_batch_replay_by_timestamp(kafka, spark, names, tmp_path):
    topic = names("in")
    events = list(make_events(20, seed=5, start_ms=T0, step_ms=1000))
    where = produced(kafka.bootstrap, topic, events, partition_of=_round_robin)
    opts = ReplayOptions(bootstrap=kafka.bootstrap, topics=[topic],
                         starting_timestamp=T0 + 5000, ending_timestamp=T0 + 15_000)
    want = [e for e in events if T0 + 5000 <= e["ts"] < T0 + 15_000]
    assert len(want) == 10
    assert _replayed(spark, opts, tmp_path) == _as_rows(topic, want, where)


def test_read_committed_excludes_an_aborted_transaction(kafka, spark, names, tmp_path):
    topic = names("in")
    create_topic(kafka.bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": names("txn")})
    producer.init_transactions(10)
    committed = list(make_events(10, seed=6, start_ms=T0, step_ms=1000, id_prefix="c"))
    aborted = list(make_events(5, seed=7, start_ms=T0 + 10_000, step_ms=1000, id_prefix="x"))
    later = list(make_events(5, seed=8, start_ms=T0 + 15_000, step_ms=1000, id_prefix="d"))
    for batch, commit in ((committed, True), (aborted, False), (later, True)):
        producer.begin_transaction()
        for e in batch:
            producer.produce(topic, key=e["key"].encode(), value=encode(e), timestamp=e["ts"])
        producer.flush(15)
        (producer.commit_transaction if commit else producer.abort_transaction)(15)

    opts = job_options(kafka, names, tmp_path, isolation_level="read_committed")
    stream.run(spark, opts)
    enriched, _ = outputs(kafka, opts)
    assert [r["event_id"] for r in enriched] == sorted(e["id"] for e in committed + later)

    def ids(isolation):
        frame = read_range(spark, ReplayOptions(bootstrap=kafka.bootstrap, topics=[topic],
                                                isolation_level=isolation, decode=True))
        return sorted(json.loads(r["value"])["id"] for r in frame.collect())
    assert ids("read_committed") == sorted(e["id"] for e in committed + later)
    # The aborted records are in the log: read_uncommitted sees them.
    assert ids("read_uncommitted") == sorted(e["id"] for e in committed + aborted + later)


def _enriched_ids(kafka, opts):
    return {r["value"]["event_id"]: (r["value"]["source_topic"], r["value"]["source_partition"])
            for r in read_topic(kafka.bootstrap, opts.enriched_topic)}


def test_a_topic_created_while_the_query_runs_is_picked_up(kafka, spark, names, tmp_path):
    first = list(make_events(10, seed=9, start_ms=T0, id_prefix="p"))
    produced(kafka.bootstrap, names("in-a"), first)
    opts = job_options(kafka, names, tmp_path, topics=[], pattern=names("in-") + ".*",
                       trigger="1 second", starting_offsets="earliest")
    pipeline = stream.start(spark, opts)
    try:
        wait_for(lambda: _enriched_ids(kafka, opts), lambda ids: len(ids) >= 10, "the first topic's events")
        create_topic(kafka.bootstrap, names("in-b"), 2)
        second = list(make_events(10, seed=10, start_ms=T0 + 10_000, id_prefix="q"))
        produced(kafka.bootstrap, names("in-b"), second)
        got = wait_for(lambda: _enriched_ids(kafka, opts), lambda ids: len(ids) >= 20, "the new topic's events")
        for q in pipeline.queries:
            assert q.exception() is None
    finally:
        pipeline.stop()
    assert sorted(got) == sorted(e["id"] for e in first + second)
    assert {got[e["id"]][0] for e in second} == {names("in-b")}


def test_a_partition_added_while_the_query_runs_is_picked_up(kafka, spark, names, tmp_path):
    topic = names("in")
    create_topic(kafka.bootstrap, topic, 1)
    first = list(make_events(5, seed=11, start_ms=T0, id_prefix="p"))
    produced(kafka.bootstrap, topic, first)
    opts = job_options(kafka, names, tmp_path, trigger="1 second")
    pipeline = stream.start(spark, opts)
    try:
        wait_for(lambda: _enriched_ids(kafka, opts), lambda ids: len(ids) >= 5, "the first partition's events")
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        for fut in admin.create_partitions([NewPartitions(topic, 3)], request_timeout=15).values():
            fut.result()
        second = list(make_events(6, seed=12, start_ms=T0 + 5000, id_prefix="q"))
        produced(kafka.bootstrap, topic, second, partition_of=lambda i, e: 1 + i % 2)
        got = wait_for(lambda: _enriched_ids(kafka, opts), lambda ids: len(ids) >= 11,
                       "the new partitions' events")
        for q in pipeline.queries:
            assert q.exception() is None
    finally:
        pipeline.stop()
    assert sorted(got) == sorted(e["id"] for e in first + second)
    assert sorted(got[e["id"]][1] for e in second) == [1, 1, 1, 2, 2, 2]


def _local_start(bootstrap, topic):
    """ListOffsets EARLIEST (-2) and EARLIEST_LOCAL (-4) of partition 0."""
    with WireClient(bootstrap) as c:
        return list_offset(c, topic, -2).offset, list_offset(c, topic, -4).offset


def test_a_tiered_topic_is_read_from_offset_zero(kafka, spark, names, tmp_path):
    """KIP-405: once the first segments are only in the object store (the local
    log starts above 0), Spark's batch read from `earliest` and a streaming read
    from JSON offsets below the local start get every record, unchanged."""
    topic = names("tiered")
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    config = {"remote.storage.enable": "true", "segment.bytes": str(16 * 1024),
              "local.retention.bytes": str(32 * 1024)}
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(15)
    count = 500   # ~260 KiB: ~16 segments of 16 KiB, 2 of them kept locally
    value = {i: f"{i:05d}-".encode() + b"v" * 500 for i in range(count)}
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5, "batch.size": 4096})
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=value[i])
    assert producer.flush(20) == 0
    earliest, local = wait_for(lambda: _local_start(kafka.bootstrap, topic), lambda o: o[1] > count // 2,
                               "the local log start to pass the first half", timeout=30)
    assert earliest == 0

    frame = read_range(spark, ReplayOptions(bootstrap=kafka.bootstrap, topics=[topic]))
    rows = sorted((r["offset"], bytes(r["key"]), bytes(r["value"])) for r in frame.collect())
    assert rows == [(i, str(i).encode(), value[i]) for i in range(count)]

    start = local // 2   # below the local log start: only in the store
    table = topic.replace("-", "_")
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
             .option("subscribe", topic).option("startingOffsets", json.dumps({topic: {"0": start}})).load()
             .writeStream.format("memory").queryName(table)
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(60), "the availableNow query did not finish"
    finally:
        query.stop()
    assert query.exception() is None
    streamed = sorted((r["offset"], bytes(r["value"]))
                      for r in spark.sql(f"SELECT offset, value FROM {table}").collect())
    assert streamed == [(i, value[i]) for i in range(start, count)]
    # The local log still starts where it did: what was read below it came from the store.
    assert _local_start(kafka.bootstrap, topic)[1] >= local


def test_the_broker_closed_no_connection_of_the_java_client(kafka):
    """Last in the module: nothing Spark's Java client sent above was a
    request kproto does not handle (an unknown API or version makes the
    broker close the connection and log why)."""
    closed = [line.strip() for line in kafka.stderr_lines if "closing connection" in line]
    assert closed == []

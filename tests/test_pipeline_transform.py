"""The pipeline's transformations on in-memory DataFrames and a file stream:
parsing, enrichment, windowed totals with a watermark, Kafka record shape.
No Kafka here (tests/test_pipeline_kafka.py runs the job against kproto)."""
from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from tools.pipeline.connector import local_jars_configured  # noqa: E402
from tools.pipeline.session import build_session, java_available  # noqa: E402

if not java_available():
    pytest.skip("pyspark needs a Java runtime (java on PATH or JAVA_HOME); none found",
                allow_module_level=True)


from tools.pipeline import events as ev  # noqa: E402

# 2023-11-14 22:14:00 UTC, on a minute boundary.
T0 = 1_700_000_040_000
MIN = 60_000
RECORD_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
                 "timestamp timestamp")


@pytest.fixture(scope="module")
def spark():
    # The Kafka tests share this process's one SparkContext, whose jars are
    # fixed at start: include the connector whenever it is configured.
    session = build_session(app_name="kproto-pipeline-tests", kafka=local_jars_configured(),
                            log_level="ERROR")
    yield session
    session.stop()


def order(i, key, ts, amount, quantity=1, item="sku-1"):
    return {"id": f"e-{i}", "kind": "order", "key": key, "ts": ts,
            "fields": {"item": item, "quantity": quantity, "amount": amount}}


def click(i, key, ts, page="/"):
    return {"id": f"e-{i}", "kind": "click", "key": key, "ts": ts, "fields": {"page": page}}


def records(spark, values, kafka_keys=None, ingest_ms=None):
    """A frame shaped like the Kafka source's output."""
    rows = []
    for n, v in enumerate(values):
        raw = v if isinstance(v, (bytes, str)) else json.dumps(v)
        raw = raw.encode() if isinstance(raw, str) else raw
        key = (kafka_keys or {}).get(n)
        ts = ingest_ms[n] if ingest_ms else (v["ts"] if isinstance(v, dict) and "ts" in v else T0)
        rows.append((key.encode() if key else None, raw, "events", n % 2, n // 2,
                     dt.datetime.fromtimestamp(ts / 1000, dt.timezone.utc)))
    return spark.createDataFrame(rows, RECORD_SCHEMA)


def by_id(frame):
    return {r["event_id"]: r.asDict() for r in frame.collect()}


def test_parse_keeps_valid_events_and_drops_the_rest(spark):
    values = [
        order(1, "c-1", T0, 19.99, quantity=2, item="sku-7"),
        click(2, "c-2", T0 + 1000, "/cart"),
        b"not json at all",
        {"id": "e-4", "kind": "refund", "key": "c-1", "ts": T0},   # unknown kind
        {"kind": "click", "key": "c-1", "ts": T0},                  # no id
        {"id": "e-6", "kind": "click", "key": "c-1"},               # no time
        {"id": "e-7", "kind": "click", "ts": T0},                   # no key: the record key
        {"id": "e-8", "kind": "click", "ts": T0},                   # no key anywhere
        b'{"id": "e-9", "kind": "order", "key": "c-3", "ts": 1700000040000, "fields": {"amount": "x"}',
    ]
    parsed = by_id(ev.parse_events(records(spark, values, kafka_keys={6: "from-record"})))
    assert sorted(parsed) == ["e-1", "e-2", "e-7"]
    one = parsed["e-1"]
    assert (one["kind"], one["key"], one["item"], one["quantity"], one["amount"]) == \
        ("order", "c-1", "sku-7", 2, Decimal("19.99"))
    assert one["source_topic"] == "events" and one["source_partition"] == 0 and one["source_offset"] == 0
    assert parsed["e-2"]["page"] == "/cart" and parsed["e-2"]["amount"] is None
    assert parsed["e-7"]["key"] == "from-record"


def test_json_key_wins_over_record_key_and_kafka_columns_are_optional(spark):
    frame = spark.createDataFrame([(json.dumps(click(1, "json-key", T0)), "record-key")],
                                  "value string, key string")
    (row,) = ev.parse_events(frame).collect()
    assert row["key"] == "json-key"
    assert row["source_topic"] is None and row["ingest_time"] is None
    frame = spark.createDataFrame([(json.dumps(click(2, "c-9", T0)),)], "value string")
    assert [r["event_id"] for r in ev.parse_events(frame).collect()] == ["e-2"]


def test_enrich_derives_fields(spark):
    values = [order(1, "c-1", T0, 19.99), order(2, "c-1", T0, 20.0), order(3, "c-2", T0 + 3_600_000, 150.5),
              click(4, "c-2", T0, "/products/sku-3"), click(5, "c-2", T0, "/")]
    ingest = [T0 + 250, T0, T0 + 3_600_000, T0 + 1000, T0]
    out = by_id(ev.enrich(ev.parse_events(records(spark, values, ingest_ms=ingest))))
    assert [out[i]["order_size"] for i in ("e-1", "e-2", "e-3", "e-4")] == ["small", "medium", "large", None]
    assert [out[i]["revenue"] for i in ("e-1", "e-3", "e-4")] == [Decimal("19.99"), Decimal("150.50"), Decimal("0")]
    assert out["e-4"]["section"] == "products" and out["e-5"]["section"] == "" and out["e-1"]["section"] is None
    assert (out["e-1"]["event_date"], out["e-1"]["event_hour"]) == ("2023-11-14", 22)
    assert (out["e-3"]["event_date"], out["e-3"]["event_hour"]) == ("2023-11-14", 23)
    assert out["e-1"]["ts"] == T0 and out["e-1"]["lag_ms"] == 250 and out["e-4"]["lag_ms"] == 1000
    assert (out["e-5"]["source_partition"], out["e-5"]["source_offset"]) == (0, 2)


def test_windowed_totals_per_key_and_window(spark):
    values = [order(1, "a", T0 + 1000, 10.10, quantity=1), order(2, "a", T0 + 59_999, 5.05, quantity=3),
              click(3, "a", T0 + 30_000), click(4, "b", T0 + 2000),
              order(5, "a", T0 + MIN, 1.00, quantity=2),   # the next window starts at its end
              click(6, "b", T0 + 5 * MIN + 1)]
    rows = ev.windowed_totals(ev.parse_events(records(spark, values))).collect()
    got = sorted((r["key"], r["window_start"] - T0, r["window_end"] - T0, r["events"], r["orders"],
                  r["clicks"], r["revenue"], r["items"]) for r in rows)
    assert got == [
        ("a", 0, MIN, 3, 2, 1, Decimal("15.15"), 4),
        ("a", MIN, 2 * MIN, 1, 1, 0, Decimal("1.00"), 2),
        ("b", 0, MIN, 1, 0, 1, Decimal("0.00"), 0),
        ("b", 5 * MIN, 6 * MIN, 1, 0, 1, Decimal("0.00"), 0),
    ]


def test_kafka_records_are_key_and_json_value(spark):
    values = [order(1, "c-1", T0, 19.9, quantity=2), click(2, "c-2", T0, "/cart")]
    rows = ev.kafka_records(ev.enrich(ev.parse_events(records(spark, values)))).collect()
    assert [r["key"] for r in rows] == ["c-1", "c-2"]
    first = json.loads(rows[0]["value"], parse_float=Decimal)
    assert first["amount"] == Decimal("19.90") and first["quantity"] == 2 and first["ts"] == T0
    second = json.loads(rows[1]["value"])
    # Null fields are left out of the JSON.
    assert "amount" not in second and "order_size" not in second and second["section"] == "cart"


@pytest.mark.long
def test_stream_watermark_emits_each_closed_window_once_and_drops_late_events(spark, tmp_path):
    """A file stream through the same transformations into a file sink, two
    runs on one checkpoint: the sink holds every closed window exactly once."""
    src = tmp_path / "in"
    src.mkdir()
    out = str(tmp_path / "out")
    checkpoint = str(tmp_path / "checkpoint")

    def run():
        lines = spark.readStream.schema("value string").text(str(src))
        totals = ev.windowed_totals(ev.parse_events(lines), "1 minute", "30 seconds")
        query = (totals.writeStream.format("parquet").option("path", out).outputMode("append")
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        assert query.awaitTermination(120)
        assert query.exception() is None
        return sorted((r["key"], r["window_start"] - T0, r["events"]) for r in spark.read.parquet(out).collect())

    def write(name, values):
        (src / name).write_text("".join(json.dumps(v) + "\n" for v in values))

    write("1.json", [click(1, "a", T0 + 1000), click(2, "a", T0 + 2000), click(3, "b", T0 + MIN + 10),
                     click(4, "a", T0 + 2 * MIN + 5000), click(5, "b", T0 + 2 * MIN + 40_000)])
    # Watermark: T0 + 2:40 - 30 s = T0 + 2:10, so windows 0 and 1 are closed.
    assert run() == [("a", 0, 2), ("b", MIN, 1)]

    write("2.json", [click(6, "a", T0 + 3000),              # older than the watermark: dropped
                     click(7, "a", T0 + 2 * MIN + 6000),    # joins the open window 2
                     click(8, "c", T0 + 4 * MIN)])          # watermark -> T0 + 3:30
    assert run() == [("a", 0, 2), ("a", 2 * MIN, 2), ("b", MIN, 1), ("b", 2 * MIN, 1)]


def test_trigger_and_source_options():
    from tools.pipeline.stream import StreamOptions, parse_trigger, source_options
    assert parse_trigger("available-now") == {"availableNow": True}
    assert parse_trigger("availableNow") == {"availableNow": True}
    assert parse_trigger("once") == {"once": True}
    assert parse_trigger("10 seconds") == {"processingTime": "10 seconds"}
    assert parse_trigger("processing-time=1 minute") == {"processingTime": "1 minute"}
    with pytest.raises(ValueError):
        parse_trigger("sometimes")
    opts = StreamOptions(bootstrap="h:1", checkpoint="/c", topics=["a", "b"], starting_timestamp=5,
                         consumer_options={"fetch.max.bytes": "1000"})
    assert source_options(opts) == {
        "kafka.bootstrap.servers": "h:1", "kafka.isolation.level": "read_committed", "failOnDataLoss": "true",
        "subscribe": "a,b", "startingTimestamp": "5", "kafka.fetch.max.bytes": "1000"}
    opts = StreamOptions(bootstrap="h:1", checkpoint="/c", pattern="in-.*", isolation_level="read_uncommitted")
    got = source_options(opts)
    assert got["subscribePattern"] == "in-.*" and "subscribe" not in got
    assert got["startingOffsets"] == "earliest" and got["kafka.isolation.level"] == "read_uncommitted"

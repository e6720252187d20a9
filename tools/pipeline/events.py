"""The pipeline's transformations, on DataFrames (no Kafka in here).

An event is a JSON object:

    {"id": "e-000001", "kind": "order", "key": "customer-7", "ts": 1700000000123,
     "fields": {"item": "sku-3", "quantity": 2, "amount": 19.98}}
    {"id": "e-000002", "kind": "click", "key": "customer-7", "ts": 1700000001123,
     "fields": {"page": "/products/sku-3"}}

`ts` is the event time in epoch milliseconds; `key` falls back to the Kafka
record key when the JSON has none. Records that are not JSON, or lack an id,
a known kind, a key or a time, are dropped by `parse_events`.

Input frames have Kafka's source columns (`value` as binary or string, and
optionally `key`, `topic`, `partition`, `offset`, `timestamp`); outputs are
frames of `key`/`value` strings ready for the Kafka sink.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (DecimalType, IntegerType, LongType, StringType, StructField,
                               StructType)

KINDS = ("order", "click")
# Money is decimal: sums are exact and the same in every partitioning.
AMOUNT = DecimalType(12, 2)
TOTAL = DecimalType(18, 2)

FIELDS_SCHEMA = StructType([
    StructField("item", StringType()),
    StructField("quantity", IntegerType()),
    StructField("amount", AMOUNT),
    StructField("page", StringType()),
])
EVENT_SCHEMA = StructType([
    StructField("id", StringType()),
    StructField("kind", StringType()),
    StructField("key", StringType()),
    StructField("ts", LongType()),
    StructField("fields", FIELDS_SCHEMA),
])

# Order sizes by amount: [0, 20) small, [20, 100) medium, else large.
SMALL_BELOW = 20
MEDIUM_BELOW = 100


def _optional(records: DataFrame, name: str, type_: str) -> Column:
    if name in records.columns:
        return F.col(name).cast(type_)
    return F.lit(None).cast(type_)


def parse_events(records: DataFrame) -> DataFrame:
    """Kafka-shaped records -> one row per valid event.

    Columns: event_id, kind, key, event_time (timestamp), item, quantity,
    amount, page, source_topic, source_partition, source_offset, ingest_time
    (the Kafka record timestamp)."""
    e = F.from_json(F.col("value").cast("string"), EVENT_SCHEMA)
    parsed = records.select(
        e.alias("e"),
        _optional(records, "key", "string").alias("record_key"),
        _optional(records, "topic", "string").alias("source_topic"),
        _optional(records, "partition", "int").alias("source_partition"),
        _optional(records, "offset", "long").alias("source_offset"),
        _optional(records, "timestamp", "timestamp").alias("ingest_time"),
    )
    events = parsed.select(
        F.col("e.id").alias("event_id"),
        F.col("e.kind").alias("kind"),
        F.coalesce(F.col("e.key"), F.col("record_key")).alias("key"),
        F.timestamp_millis(F.col("e.ts")).alias("event_time"),
        F.col("e.fields.item").alias("item"),
        F.col("e.fields.quantity").alias("quantity"),
        F.col("e.fields.amount").alias("amount"),
        F.col("e.fields.page").alias("page"),
        "source_topic", "source_partition", "source_offset", "ingest_time",
    )
    return events.where(F.col("event_id").isNotNull() & F.col("kind").isin(*KINDS)
                        & F.col("key").isNotNull() & F.col("event_time").isNotNull())


def enrich(events: DataFrame) -> DataFrame:
    """Per-record enrichment of parsed events: the event plus derived fields.

    ts (event time, epoch ms), event_date and event_hour (UTC), revenue (the
    amount for orders, 0 for clicks), order_size (small/medium/large), section
    (first path segment of a clicked page), lag_ms (Kafka timestamp minus event
    time)."""
    is_order = F.col("kind") == "order"
    return events.select(
        "event_id", "kind", "key",
        F.unix_millis("event_time").alias("ts"),
        "item", "quantity", "amount", "page",
        F.date_format("event_time", "yyyy-MM-dd").alias("event_date"),
        F.hour("event_time").alias("event_hour"),
        F.when(is_order, F.coalesce(F.col("amount"), F.lit(0).cast(AMOUNT)))
         .otherwise(F.lit(0).cast(AMOUNT)).alias("revenue"),
        F.when(is_order & F.col("amount").isNotNull(),
               F.when(F.col("amount") < SMALL_BELOW, "small")
                .when(F.col("amount") < MEDIUM_BELOW, "medium")
                .otherwise("large")).alias("order_size"),
        F.when(~is_order & F.col("page").isNotNull(),
               F.regexp_extract("page", r"^/([^/?#]*)", 1)).alias("section"),
        (F.unix_millis("ingest_time") - F.unix_millis("event_time")).alias("lag_ms"),
        "source_topic", "source_partition", "source_offset",
    )


def windowed_totals(events: DataFrame, window: str = "1 minute",
                    watermark: str = "30 seconds") -> DataFrame:
    """Per key and tumbling event-time window: event, order and click counts,
    revenue and items ordered.

    On a stream, the watermark bounds the state and (in append mode) a window
    is emitted once, when the watermark passes its end; events older than the
    watermark are dropped. On a batch frame the watermark has no effect."""
    is_order = F.col("kind") == "order"
    totals = (events.withWatermark("event_time", watermark)
              .groupBy(F.window("event_time", window).alias("window"), "key")
              .agg(F.count(F.lit(1)).alias("events"),
                   F.count(F.when(is_order, 1)).alias("orders"),
                   F.count(F.when(~is_order, 1)).alias("clicks"),
                   F.sum(F.when(is_order, F.col("amount"))).alias("revenue"),
                   F.sum(F.when(is_order, F.col("quantity"))).alias("items")))
    return totals.select(
        "key",
        F.unix_millis("window.start").alias("window_start"),
        F.unix_millis("window.end").alias("window_end"),
        "events", "orders", "clicks",
        F.coalesce("revenue", F.lit(0)).cast(TOTAL).alias("revenue"),
        F.coalesce("items", F.lit(0)).cast("long").alias("items"),
    )


def kafka_records(frame: DataFrame, key: str = "key") -> DataFrame:
    """`key` and `value` (the whole row as JSON; null fields left out) for the
    Kafka sink."""
    return frame.select(F.col(key).cast("string").alias("key"),
                        F.to_json(F.struct(*[F.col(c) for c in frame.columns])).alias("value"))

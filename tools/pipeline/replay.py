"""Batch replay: a range of a topic, read with `spark.read.format("kafka")`,
written to Parquet.

The range is given by offsets (Spark's JSON, -2 earliest, -1 latest) or by
timestamps (epoch ms; a partition starts at the first record whose timestamp
is at or after startingTimestamp and ends before the first one at or after
endingTimestamp). The rows keep Kafka's columns: key, value, topic,
partition, offset, timestamp, timestampType.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tools.pipeline.stream import ISOLATION_LEVELS

KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")


@dataclass
class ReplayOptions:
    bootstrap: str
    topics: list[str] = field(default_factory=lambda: ["events"])
    pattern: str | None = None
    starting_offsets: str | None = None      # default earliest
    ending_offsets: str | None = None        # default latest
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    isolation_level: str = "read_committed"
    # Store key and value as UTF-8 strings instead of bytes.
    decode: bool = False
    consumer_options: dict[str, str] = field(default_factory=dict)


def batch_options(opts: ReplayOptions) -> dict[str, str]:
    if opts.isolation_level not in ISOLATION_LEVELS:
        raise ValueError(f"isolation level {opts.isolation_level!r}: expected one of {ISOLATION_LEVELS}")
    if opts.starting_timestamp is not None and opts.starting_offsets is not None:
        raise ValueError("give a starting timestamp or starting offsets, not both")
    if opts.ending_timestamp is not None and opts.ending_offsets is not None:
        raise ValueError("give an ending timestamp or ending offsets, not both")
    out = {"kafka.bootstrap.servers": opts.bootstrap, "kafka.isolation.level": opts.isolation_level}
    if opts.pattern:
        out["subscribePattern"] = opts.pattern
    else:
        out["subscribe"] = ",".join(opts.topics)
    if opts.starting_timestamp is not None:
        out["startingTimestamp"] = str(opts.starting_timestamp)
    elif opts.starting_offsets is not None:
        out["startingOffsets"] = opts.starting_offsets
    if opts.ending_timestamp is not None:
        out["endingTimestamp"] = str(opts.ending_timestamp)
    elif opts.ending_offsets is not None:
        out["endingOffsets"] = opts.ending_offsets
    out.update({f"kafka.{k}": v for k, v in opts.consumer_options.items()})
    return out


def read_range(spark, opts: ReplayOptions):
    """The records in range, with Kafka's columns (key/value as strings with
    `decode`)."""
    reader = spark.read.format("kafka")
    for key, value in batch_options(opts).items():
        reader = reader.option(key, value)
    frame = reader.load().select(*KAFKA_COLUMNS)
    if opts.decode:
        frame = frame.selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value",
                                 *KAFKA_COLUMNS[2:])
    return frame


def replay(spark, opts: ReplayOptions, output: str, mode: str = "errorifexists") -> int:
    """Write the range to Parquet at `output`; returns the number of records."""
    frame = read_range(spark, opts).cache()
    try:
        frame.write.mode(mode).parquet(output)
        return frame.count()
    finally:
        frame.unpersist()

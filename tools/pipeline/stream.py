"""The streaming job: Kafka events in, enriched events and per-key windowed
totals out, through Spark's built-in Kafka source and sink.

Two queries read the input: one writes each valid event, enriched, to the
enriched topic; one writes per-key window totals to the totals topic in
append mode (a window goes out once, when the watermark passes its end).
Each query has its own checkpoint folder under `checkpoint`, so a rerun
resumes from the committed offsets and state and writes nothing twice for
input it already finished.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

from tools.pipeline import events as ev

ISOLATION_LEVELS = ("read_committed", "read_uncommitted")


@dataclass
class StreamOptions:
    bootstrap: str
    checkpoint: str
    topics: list[str] = field(default_factory=lambda: ["events"])
    # A Java regex; when set it replaces `topics`, and topics created later
    # that match it are picked up while the query runs.
    pattern: str | None = None
    enriched_topic: str = "events-enriched"
    totals_topic: str = "events-totals"
    # "earliest", "latest" or Spark's JSON ({"topic":{"0":23,"1":-2}}).
    starting_offsets: str = "earliest"
    # Epoch ms: start every partition at the first record at or after it.
    starting_timestamp: int | None = None
    # "available-now", "once", or a processing-time interval ("10 seconds").
    trigger: str = "available-now"
    isolation_level: str = "read_committed"
    window: str = "1 minute"
    watermark: str = "30 seconds"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    # Extra Kafka client settings (without the "kafka." prefix).
    consumer_options: dict[str, str] = field(default_factory=dict)
    producer_options: dict[str, str] = field(default_factory=dict)


def parse_trigger(text: str) -> dict:
    """Keyword arguments for DataStreamWriter.trigger."""
    t = text.strip()
    low = t.lower().replace("_", "-")
    if low in ("available-now", "availablenow"):
        return {"availableNow": True}
    if low == "once":
        return {"once": True}
    for prefix in ("processing-time=", "processingtime=", "processing-time:"):
        if low.startswith(prefix):
            t = t[len(prefix):].strip()
            break
    if not t or not t[0].isdigit():
        raise ValueError(f"trigger {text!r}: expected available-now, once or an interval like '10 seconds'")
    return {"processingTime": t}


def source_options(opts: StreamOptions) -> dict[str, str]:
    if opts.isolation_level not in ISOLATION_LEVELS:
        raise ValueError(f"isolation level {opts.isolation_level!r}: expected one of {ISOLATION_LEVELS}")
    out = {"kafka.bootstrap.servers": opts.bootstrap,
           "kafka.isolation.level": opts.isolation_level,
           "failOnDataLoss": str(opts.fail_on_data_loss).lower()}
    if opts.pattern:
        out["subscribePattern"] = opts.pattern
    else:
        out["subscribe"] = ",".join(opts.topics)
    if opts.starting_timestamp is not None:
        out["startingTimestamp"] = str(opts.starting_timestamp)
    else:
        out["startingOffsets"] = opts.starting_offsets
    if opts.max_offsets_per_trigger:
        out["maxOffsetsPerTrigger"] = str(opts.max_offsets_per_trigger)
    out.update({f"kafka.{k}": v for k, v in opts.consumer_options.items()})
    return out


def read_events(spark, opts: StreamOptions):
    """The streaming source, parsed into events."""
    reader = spark.readStream.format("kafka")
    for key, value in source_options(opts).items():
        reader = reader.option(key, value)
    return ev.parse_events(reader.load())


@dataclass
class Pipeline:
    enriched: object  # pyspark StreamingQuery
    totals: object

    @property
    def queries(self) -> list:
        return [self.enriched, self.totals]

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait for both queries (available-now / once end by themselves).
        Raises the query's exception if one failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for q in self.queries:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            if left is None:
                q.awaitTermination()
            elif not q.awaitTermination(left):
                return False
        return True

    def stop(self) -> None:
        for q in self.queries:
            if q.isActive:
                q.stop()

    def rows_read(self) -> dict[str, int]:
        return {q.name: sum(p.get("numInputRows", 0) for p in q.recentProgress) for q in self.queries}


def start(spark, opts: StreamOptions) -> Pipeline:
    trigger = parse_trigger(opts.trigger)
    events = read_events(spark, opts)
    enriched = ev.kafka_records(ev.enrich(events), key="key")
    totals = ev.kafka_records(ev.windowed_totals(events, opts.window, opts.watermark), key="key")

    def sink(frame, name: str, topic: str):
        writer = (frame.writeStream.format("kafka").queryName(name).outputMode("append")
                  .option("kafka.bootstrap.servers", opts.bootstrap)
                  .option("topic", topic)
                  .option("checkpointLocation", os.path.join(opts.checkpoint, name))
                  .trigger(**trigger))
        for key, value in opts.producer_options.items():
            writer = writer.option(f"kafka.{key}", value)
        return writer.start()

    return Pipeline(enriched=sink(enriched, "enriched", opts.enriched_topic),
                    totals=sink(totals, "totals", opts.totals_topic))


def run(spark, opts: StreamOptions, timeout: float | None = None) -> dict[str, int]:
    """Start the job and wait: until the input is done for available-now and
    once, until `timeout` (or forever, or Ctrl-C) for a processing-time
    trigger. Returns rows read per query."""
    pipeline = start(spark, opts)
    try:
        pipeline.await_termination(timeout)
    except KeyboardInterrupt:
        pass
    finally:
        pipeline.stop()
    return pipeline.rows_read()


def describe(opts: StreamOptions) -> str:
    src = f"pattern {opts.pattern!r}" if opts.pattern else ",".join(opts.topics)
    return json.dumps({"source": src, "enriched": opts.enriched_topic, "totals": opts.totals_topic,
                       "checkpoint": opts.checkpoint, "trigger": opts.trigger,
                       "isolation": opts.isolation_level})

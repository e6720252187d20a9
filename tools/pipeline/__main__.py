"""`python -m tools.pipeline {stream,replay,generate,jars} ...`"""
from __future__ import annotations

import argparse
import os
import sys

from tools.pipeline import generate as gen


def _settings(items):
    return gen.parse_settings(items)


def _common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--bootstrap", default="127.0.0.1:9092", help="bootstrap servers (host:port,...)")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--topics", default="events", help="comma-separated input topics")
    src.add_argument("--pattern", help="Java regex of input topics (new matching topics are picked up)")
    ap.add_argument("--isolation-level", default="read_committed",
                    choices=("read_committed", "read_uncommitted"))
    ap.add_argument("--consumer-option", action="append", default=[], metavar="KEY=VALUE",
                    help="Kafka consumer setting passed as kafka.KEY (repeatable)")
    ap.add_argument("--master", default="local[2]", help="Spark master")
    ap.add_argument("--shuffle-partitions", type=int, default=2)


def _topics(args) -> list[str]:
    return [t.strip() for t in args.topics.split(",") if t.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.pipeline",
                                 description="Spark Structured Streaming pipeline on a Kafka-compatible broker.")
    sub = ap.add_subparsers(dest="command", required=True)

    s = sub.add_parser("stream", help="run the streaming job (enriched events and windowed totals)")
    _common(s)
    s.add_argument("--checkpoint", required=True, help="checkpoint folder (one subfolder per query)")
    s.add_argument("--enriched-topic", default="events-enriched")
    s.add_argument("--totals-topic", default="events-totals")
    start = s.add_mutually_exclusive_group()
    start.add_argument("--starting-offsets", default="earliest",
                       help='earliest, latest or JSON like {"events":{"0":23,"1":-2}} (first run only)')
    start.add_argument("--starting-timestamp", type=int, metavar="EPOCH_MS",
                       help="start each partition at the first record at or after this time (first run only)")
    s.add_argument("--trigger", default="available-now",
                   help="available-now (default), once, or an interval like '10 seconds'")
    s.add_argument("--window", default="1 minute", help="tumbling event-time window")
    s.add_argument("--watermark", default="30 seconds", help="how late an event may be")
    s.add_argument("--max-offsets-per-trigger", type=int)
    s.add_argument("--producer-option", action="append", default=[], metavar="KEY=VALUE",
                   help="Kafka producer setting for the sink, passed as kafka.KEY (repeatable)")
    s.add_argument("--timeout", type=float, help="stop a processing-time job after this many seconds")

    r = sub.add_parser("replay", help="write a range of a topic to Parquet (batch)")
    _common(r)
    r.add_argument("--output", required=True, help="Parquet output folder")
    r.add_argument("--starting-offsets", help="earliest (default) or JSON; -2 is earliest")
    r.add_argument("--ending-offsets", help="latest (default) or JSON; -1 is latest")
    r.add_argument("--starting-timestamp", type=int, metavar="EPOCH_MS")
    r.add_argument("--ending-timestamp", type=int, metavar="EPOCH_MS")
    r.add_argument("--decode", action="store_true", help="store key and value as UTF-8 strings")
    r.add_argument("--overwrite", action="store_true", help="replace an existing output folder")

    g = sub.add_parser("generate", help="produce order/click events (confluent-kafka)")
    gen.add_arguments(g)

    j = sub.add_parser("jars", help="fetch kafka-clients 3.9.0 and print a SPARK_KAFKA_JARS value")
    j.add_argument("--into", default=os.path.expanduser("~/.cache/kproto/spark-kafka-jars"),
                   help="folder for kafka-clients-3.9.0.jar")
    j.add_argument("--spark-jars", required=True,
                   help="folder holding spark-sql-kafka-0-10, spark-token-provider-kafka-0-10 and commons-pool2")

    args = ap.parse_args(argv)
    if args.command == "generate":
        return gen.run(args)
    if args.command == "jars":
        return _jars(args)

    from tools.pipeline.session import build_session
    spark = build_session(master=args.master, shuffle_partitions=args.shuffle_partitions)
    if args.command == "stream":
        from tools.pipeline import stream
        opts = stream.StreamOptions(
            bootstrap=args.bootstrap, checkpoint=args.checkpoint, topics=_topics(args), pattern=args.pattern,
            enriched_topic=args.enriched_topic, totals_topic=args.totals_topic,
            starting_offsets=args.starting_offsets, starting_timestamp=args.starting_timestamp,
            trigger=args.trigger, isolation_level=args.isolation_level, window=args.window,
            watermark=args.watermark, max_offsets_per_trigger=args.max_offsets_per_trigger,
            consumer_options=_settings(args.consumer_option), producer_options=_settings(args.producer_option))
        print(f"stream: {stream.describe(opts)}", file=sys.stderr)
        rows = stream.run(spark, opts, timeout=args.timeout)
        print("rows read: " + ", ".join(f"{k} {v}" for k, v in rows.items()))
        return 0

    from tools.pipeline import replay
    opts = replay.ReplayOptions(
        bootstrap=args.bootstrap, topics=_topics(args), pattern=args.pattern,
        starting_offsets=args.starting_offsets, ending_offsets=args.ending_offsets,
        starting_timestamp=args.starting_timestamp, ending_timestamp=args.ending_timestamp,
        isolation_level=args.isolation_level, decode=args.decode,
        consumer_options=_settings(args.consumer_option))
    n = replay.replay(spark, opts, args.output, mode="overwrite" if args.overwrite else "errorifexists")
    print(f"replayed {n} records to {args.output}")
    return 0


def _jars(args) -> int:
    from tools.pipeline.connector import check_jars, fetch_kafka_clients, parse_jar_list
    clients = fetch_kafka_clients(args.into)
    wanted = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "commons-pool2")
    spark_jars = [p for p in parse_jar_list(args.spark_jars)
                  if any(os.path.basename(p).startswith(w) for w in wanted)]
    jars = check_jars(spark_jars + [clients])
    print("export SPARK_KAFKA_JARS=" + ",".join(j.path for j in jars))
    return 0


def _main() -> int:
    from tools.pipeline.connector import ConnectorError
    try:
        return main()
    except ConnectorError as exc:
        print(f"pipeline: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(_main())

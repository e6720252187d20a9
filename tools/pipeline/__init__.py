"""A data pipeline on kproto through Spark's built-in Kafka source and sink.

    python -m tools.pipeline generate --bootstrap HOST:PORT --topic events --count 10000
    python -m tools.pipeline stream   --bootstrap HOST:PORT --topics events --checkpoint DIR
    python -m tools.pipeline replay   --bootstrap HOST:PORT --topics events --output DIR ...
    python -m tools.pipeline jars     # kafka-clients 3.9.0 for SPARK_KAFKA_JARS

Modules: `events` (transformations, no Kafka), `stream` (the streaming job),
`replay` (batch range to Parquet), `generate` (load generator), `session`
and `connector` (the SparkSession and how it finds the Kafka connector).
See docs/pipeline.md.
"""

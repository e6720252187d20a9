"""The SparkSession the pipeline runs in."""
from __future__ import annotations

import os
import shutil

from tools.pipeline.connector import ConnectorError, connector_conf

DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Window boundaries and date fields are computed in UTC whatever the host says.
    "spark.sql.session.timeZone": "UTC",
    # Loopback only: no dependency on how the host name resolves.
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}


def java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    if home and os.path.isfile(os.path.join(home, "bin", "java")):
        return True
    return shutil.which("java") is not None


def build_session(app_name: str = "kproto-pipeline", master: str = "local[2]",
                  shuffle_partitions: int = 2, kafka: bool = True,
                  conf: dict[str, str] | None = None, log_level: str = "WARN"):
    """A SparkSession; with `kafka`, one that has the Kafka connector.

    A process has one SparkContext and its jars are fixed when the JVM starts,
    so if a session without the connector is already running, asking for one
    with it is an error rather than a NoSuchClassError later."""
    from pyspark.sql import SparkSession

    settings = dict(DEFAULTS)
    settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    if kafka:
        settings.update(connector_conf())
    settings.update(conf or {})
    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:
        if "spark.jars.packages" in settings and "JAVA_GATEWAY_EXITED" in str(exc):
            raise ConnectorError(
                f"Spark exited while resolving {settings['spark.jars.packages']} from Maven (its output "
                "is above); where Maven Central is not reachable, set SPARK_KAFKA_JARS to local jars "
                "(docs/pipeline.md)") from exc
        raise
    spark.sparkContext.setLogLevel(log_level)
    if kafka and not has_kafka_connector(spark):
        raise ConnectorError("a SparkSession without the Kafka connector is already running in this "
                             "process; start the process with the connector configured")
    return spark


def has_kafka_connector(spark) -> bool:
    conf = spark.sparkContext.getConf()
    return ("spark-sql-kafka-0-10" in (conf.get("spark.jars") or "")
            or "spark-sql-kafka-0-10" in (conf.get("spark.jars.packages") or ""))

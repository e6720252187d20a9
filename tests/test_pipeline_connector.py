"""How the pipeline finds Spark's Kafka connector (no Spark needed)."""
from __future__ import annotations

import pytest

from tools.pipeline.connector import (ENV_JARS, ConnectorError, check_jars, connector_conf, describe_jar,
                                      package_coordinate, parse_jar_list)

SPARK_JARS = ("spark-sql-kafka-0-10_2.13-4.0.0.jar", "spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
              "commons-pool2-2.12.0.jar")


def touch(folder, *names):
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"PK")
    return [str(folder / n) for n in names]


def test_jar_names_split_into_artifact_and_version():
    def split(name):
        jar = describe_jar("/x/" + name)
        return jar.artifact, jar.version
    assert split("spark-sql-kafka-0-10_2.13-4.0.0.jar") == ("spark-sql-kafka-0-10", "4.0.0")
    assert split("zstd-jni-1.5.6-10.jar") == ("zstd-jni", "1.5.6-10")
    assert split("kafka-clients-3.9.0.jar") == ("kafka-clients", "3.9.0")


def test_jar_list_takes_commas_colons_and_folders(tmp_path):
    spark = touch(tmp_path / "spark", *SPARK_JARS)
    (clients,) = touch(tmp_path / "other", "kafka-clients-3.9.0.jar")
    text = f"{tmp_path / 'spark'},{clients}"
    assert parse_jar_list(text) == sorted(spark) + [clients]
    assert parse_jar_list(f"{spark[0]}:{spark[1]}, {clients}") == [spark[0], spark[1], clients]


def test_a_complete_set_with_kafka_clients_3_9_is_accepted(tmp_path):
    jars = touch(tmp_path, *SPARK_JARS, "kafka-clients-3.9.0.jar")
    conf = connector_conf({ENV_JARS: str(tmp_path)})
    assert sorted(conf["spark.jars"].split(",")) == sorted(jars)


def test_missing_pieces_are_named(tmp_path):
    jars = touch(tmp_path, SPARK_JARS[0], "kafka-clients-3.9.0.jar")
    with pytest.raises(ConnectorError, match="spark-token-provider-kafka-0-10.*commons-pool2"):
        check_jars(jars)
    with pytest.raises(ConnectorError, match="do not exist: .*nowhere.jar"):
        check_jars(jars + [str(tmp_path / "nowhere.jar")])


def test_kafka_clients_4_is_refused_with_spark_sql_kafka_4_0(tmp_path):
    jars = touch(tmp_path, *SPARK_JARS, "kafka-clients-4.3.0.jar")
    with pytest.raises(ConnectorError, match=r"DescribeTopicsResult.all\(\) and Consumer.poll\(long\)"):
        check_jars(jars)


def test_without_local_jars_spark_resolves_the_package():
    assert package_coordinate("4.0.1") == "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.1"
    pytest.importorskip("pyspark")
    assert connector_conf({}) == {"spark.jars.packages": package_coordinate()}

"""The Kafka side of `python -m tools.bench tiered --kafka KAFKA_HOME`: Apache Kafka (single KRaft
node, tools.bench.targets.KafkaTarget) with KIP-405 tiering on, its remote storage manager being
LocalTieredStorage, the file-system RemoteStorageManager of Kafka's storage test sources.

Kafka ships no jar with that class, so it is built outside the repository (docs/performance.md,
"Tiered storage" says how) and found through --lts-jar or KPROTO_LTS_JAR."""
from __future__ import annotations

import os

LTS_CLASS = "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"
DEFAULT_JAR = os.path.expanduser("~/.cache/kproto-ref/kafka-lts/local-tiered-storage.jar")


def default_jar() -> str:
    return os.environ.get("KPROTO_LTS_JAR") or DEFAULT_JAR


def check(kafka_home: str, jar: str) -> str | None:
    """Why the Kafka run cannot start (one line), or None."""
    if not os.path.isfile(os.path.join(kafka_home, "bin", "kafka-server-start.sh")):
        return f"--kafka {kafka_home}: not an Apache Kafka distribution (no bin/kafka-server-start.sh)"
    if not os.path.isfile(jar):
        return (f"LocalTieredStorage jar {jar} is missing: build it from Kafka's storage test sources "
                "(docs/performance.md, 'Tiered storage') and pass --lts-jar or KPROTO_LTS_JAR")
    return None


def settings(remote_dir: str, jar: str, task_interval_ms: int = 500) -> dict[str, str]:
    """server.properties lines: the same tiering and retention cadence as the kproto run."""
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": LTS_CLASS,
        "remote.log.storage.manager.class.path": jar,
        "remote.log.storage.manager.impl.prefix": "rsm.config.",
        # LocalTieredStorage.STORAGE_DIR_CONFIG: it keeps its files under <dir>/kafka-tiered-storage
        "rsm.config.dir": remote_dir,
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "remote.log.manager.task.interval.ms": str(task_interval_ms),
        "log.retention.check.interval.ms": "500",
        # Kafka's first retention pass waits this long (30 s), kproto's does not
        "log.initial.task.delay.ms": "0",
        # else deleted segments linger 60 s as .deleted files (not counted, but on the disk)
        "log.segment.delete.delay.ms": "0",
    }

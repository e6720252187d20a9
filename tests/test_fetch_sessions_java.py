"""The Java consumer (Kafka 3.9's kafka-console-consumer.sh) uses incremental
fetch sessions (KIP-227) against kproto and reads every record while its
assignment grows (partitions added to the topic) and shrinks (a second
member joins the group). Needs an Apache Kafka installation in KAFKA_HOME."""
from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from broker.launch.process import BrokerProcess

KAFKA_HOME = os.environ.get("KAFKA_HOME")

pytestmark = [
    pytest.mark.skipif(not KAFKA_HOME, reason="KAFKA_HOME is not set: this test runs Kafka's "
                                              "bin/kafka-console-consumer.sh from an Apache Kafka installation"),
    pytest.mark.timeout(300),
]


class ConsoleConsumer:
    def __init__(self, bootstrap: str, topic: str, group: str):
        cmd = [os.path.join(KAFKA_HOME, "bin", "kafka-console-consumer.sh"), "--bootstrap-server", bootstrap,
               "--topic", topic, "--group", group, "--from-beginning",
               "--consumer-property", "metadata.max.age.ms=1000",
               "--consumer-property", "fetch.max.wait.ms=200"]
        env = dict(os.environ, KAFKA_HEAP_OPTS="-Xmx256m")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        self.values: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.values.append(line.strip())

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _wait(predicate, what: str, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_java_consumer_reads_through_partition_adds_and_removes(tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
    from tests.test_fetch_sessions import _gauges

    b = BrokerProcess(str(tmp_path / "data"), metrics=True,
                      settings={"group.initial.rebalance.delay.ms": "0"}).start()
    topic, group = "java-sessions", "java-sessions-g"
    consumers = []
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(15)
        producers = [Producer({"bootstrap.servers": b.bootstrap})]
        sent = []

        def send(partitions, n):
            producer = producers[-1]
            for p in partitions:
                for _ in range(n):
                    v = f"p{p}-{len(sent)}"
                    producer.produce(topic, value=v.encode(), partition=p)
                    sent.append(v)
            assert producer.flush(15) == 0
        send([0, 1], 10)
        a = ConsoleConsumer(b.bootstrap, topic, group)
        consumers.append(a)
        _wait(lambda: set(sent) <= set(a.values), "the first 20 records")
        assert _gauges(b.metrics_url)["numincrementalfetchsessions"] >= 1   # the Java consumer's session
        # the topic grows: the consumer's session takes the new partitions
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(15)
        producers.append(Producer({"bootstrap.servers": b.bootstrap}))
        _wait(lambda: len(producers[-1].list_topics(topic).topics[topic].partitions) == 4, "four partitions")
        time.sleep(3)   # (metadata.max.age.ms: the consumer notices the partitions)
        send([0, 1, 2, 3], 10)
        _wait(lambda: set(sent) <= set(a.values), "records of all four partitions")
        # a second member: the first gives up partitions (forgotten from its session)
        c = ConsoleConsumer(b.bootstrap, topic, group)
        consumers.append(c)
        deadline = time.monotonic() + 90
        while not c.values:   # (until the second JVM is up and the group rebalanced)
            assert time.monotonic() < deadline, "the second member never got partitions"
            send([0, 1, 2, 3], 2)
            time.sleep(1)
        n = len(a.values)
        send([0, 1, 2, 3], 10)
        _wait(lambda: set(sent) <= set(a.values) | set(c.values), "every record by the two members")
        assert len(a.values) > n   # the first member still reads its remaining partitions
        assert set(a.values) | set(c.values) == set(sent)   # nothing else (no corrupt or foreign value)
    finally:
        for cons in consumers:
            cons.stop()
        b.stop()

"""Every client library the project tests (confluent-kafka, kafka-python,
aiokafka, the Java client) against a 3-node kproto KRaft cluster of real
processes (replication factor 3, min.insync.replicas=2), through a kill -9 of
the partition leader while each client produces (idempotent, acks=all) and
consumes in a group: every acknowledged value is in the log exactly once, in
the order it was acknowledged, and the client's own consumer read it.

confluent-kafka and kafka-python run side by side (one topic each, one
leader for both, one kill), aiokafka and Java on their own; the Java client runs tests/java/FailoverClient.java and skips
without a JDK or the kafka-clients jar (compat_tests/java_client.py)."""
from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

from tools.cluster_client import QUIET, create_topic, partition_state, wait_until  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

SETTINGS = {"broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "2000",
            "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "offsets.topic.replication.factor": "3",
            "default.replication.factor": "3", "min.insync.replicas": "2",
            # (4, not 50: the test cluster makes its offsets topic quickly; see _groups_ready)
            "offsets.topic.num.partitions": "4"}
COUNT, RATE = 1500, 250          # per client: six seconds of sends, the kill in the middle
JAVA_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java", "FailoverClient.java")


class Client:
    """One library's producer and group consumer on its own topic."""

    def __init__(self, name, bootstrap, topic):
        self.name, self.bootstrap, self.topic = name, bootstrap, topic
        self.acked, self.errors, self.read = [], [], []
        self.produced = threading.Event()
        self.stop = threading.Event()
        self.failure = None

    def value(self, i):
        return f"{self.topic}-{i}"

    def pace(self, start, i):
        delay = start + (i + 1) / RATE - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def start(self):
        self.thread = threading.Thread(target=self._guarded, daemon=True)
        self.thread.start()

    def _guarded(self):
        try:
            self.run()
        except Exception as exc:   # noqa: BLE001  (reported by the test)
            self.failure = exc
            self.produced.set()

    def finish(self):
        self.stop.set()
        self.thread.join(60)


class Confluent(Client):
    def run(self):
        c = confluent_kafka.Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.topic + "-readers",
                                      "auto.offset.reset": "earliest", **QUIET})
        c.subscribe([self.topic])
        p = confluent_kafka.Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                                      "acks": "all", "linger.ms": 5, "message.timeout.ms": 120000, **QUIET})

        def done(err, msg):
            if err is None:
                self.acked.append((msg.offset(), msg.value().decode()))
            else:
                self.errors.append(err)

        def consume(timeout):
            m = c.poll(timeout)
            if m is not None and not m.error():
                self.read.append((m.offset(), m.value().decode()))
        start = time.monotonic()
        for i in range(COUNT):
            p.produce(self.topic, self.value(i).encode(), partition=0, on_delivery=done)
            p.poll(0)
            consume(0)
            self.pace(start, i)
        while len(p):
            p.poll(0.05)
            consume(0)
        self.produced.set()
        while not self.stop.is_set():
            consume(0.2)
        c.close()


class KafkaPython(Client):
    def run(self):
        import kafka
        servers = self.bootstrap.split(",")
        c = kafka.KafkaConsumer(self.topic, bootstrap_servers=servers, group_id=self.topic + "-readers",
                                auto_offset_reset="earliest")

        def consume():
            while not self.stop.is_set():
                for recs in c.poll(timeout_ms=200).values():
                    self.read += [(r.offset, r.value.decode()) for r in recs]
            c.close()
        t = threading.Thread(target=consume, daemon=True)
        t.start()
        p = kafka.KafkaProducer(bootstrap_servers=servers, acks="all", enable_idempotence=True, linger_ms=5,
                                delivery_timeout_ms=120000)
        start = time.monotonic()
        for i in range(COUNT):
            v = self.value(i)
            f = p.send(self.topic, v.encode(), partition=0)
            f.add_callback(lambda md, v=v: self.acked.append((md.offset, v)))
            f.add_errback(self.errors.append)
            self.pace(start, i)
        p.flush(120)
        p.close()
        self.produced.set()
        t.join()


class AioKafka(Client):
    def run(self):
        asyncio.run(self.main())

    async def main(self):
        import aiokafka
        # aiokafka refreshes metadata on NOT_LEADER_OR_FOLLOWER but not when the leader's port
        # refuses connections (NodeNotReadyError has no invalid_metadata): it waits for
        # metadata.max.age.ms (5 min by default) or for the old leader's return, against any
        # broker; a short max age makes it find the new leader as the other clients do
        age = {"metadata_max_age_ms": 3000}
        c = aiokafka.AIOKafkaConsumer(self.topic, bootstrap_servers=self.bootstrap,
                                      group_id=self.topic + "-readers", auto_offset_reset="earliest", **age)
        await c.start()

        async def consume():
            while not self.stop.is_set():
                for recs in (await c.getmany(timeout_ms=200)).values():
                    self.read += [(r.offset, r.value.decode()) for r in recs]
        task = asyncio.create_task(consume())
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True,
                                      linger_ms=5, request_timeout_ms=30000, **age)
        await p.start()

        def done(fut, v):
            if fut.exception() is None:
                self.acked.append((fut.result().offset, v))
            else:
                self.errors.append(fut.exception())
        start = time.monotonic()
        for i in range(COUNT):
            v = self.value(i)
            fut = await p.send(self.topic, v.encode(), partition=0)
            fut.add_done_callback(lambda f, v=v: done(f, v))
            delay = start + (i + 1) / RATE - time.monotonic()
            await asyncio.sleep(max(0.0, delay))
        await p.flush()
        await p.stop()
        self.produced.set()
        await task
        await c.stop()


class Java(Client):
    command: list = []

    def start(self):
        self.proc = subprocess.Popen([*self.command, self.bootstrap, self.topic, str(COUNT), str(RATE)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.thread = threading.Thread(target=self._guarded, daemon=True)
        self.thread.start()
        self.stderr = []
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def run(self):
        for line in self.proc.stdout:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "ACK":
                off, v = rest.split(" ", 1)
                self.acked.append((int(off), v))
            elif kind == "READ":
                _p, off, v = rest.split(" ", 2)
                self.read.append((int(off), v))
            elif kind == "ERR":
                self.errors.append(rest)
            elif kind == "PRODUCED":
                self.produced.set()
        if not self.produced.is_set():
            self.failure = RuntimeError(f"java exited {self.proc.wait()}: {''.join(self.stderr[-20:])}")
            self.produced.set()

    def finish(self):
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
            self.proc.wait(60)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        self.thread.join(10)


@pytest.fixture(scope="module")
def cluster():
    with QuorumCluster(3, settings=SETTINGS) as c:
        _groups_ready(c)
        yield c


def _groups_ready(c):
    """The group coordinators up before the clients start: the first FindCoordinator creates
    __consumer_offsets (a fresh cluster's first groups racing that creation can be left
    without a coordinator: see the report of branch faults)."""
    admin = AdminClient({"bootstrap.servers": c.bootstrap, **QUIET})

    def ready():
        g = admin.describe_consumer_groups(["warm-up"])["warm-up"].result(10)
        return g.coordinator is not None and g.coordinator.id >= 1
    wait_until(ready, 90, "a group coordinator")


@pytest.fixture(scope="module")
def java_command(tmp_path_factory):
    from compat_tests.java_client import JavaUnavailable, classpath_jars, find_libs
    try:
        jars = classpath_jars(find_libs())
    except JavaUnavailable as exc:
        pytest.skip(f"the Java client is unavailable: {exc}")
    classes = str(tmp_path_factory.mktemp("failover-java"))
    cp = os.pathsep.join(jars)
    proc = subprocess.run(["javac", "-nowarn", "-d", classes, "-cp", cp, JAVA_SOURCE], capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", os.pathsep.join([classes, cp]),
            "FailoverClient"]


def _create(admin, topic):
    # every topic led by node 1 (the first replica of the assignment): one kill fails them all over
    create_topic(admin, topic, replica_assignment=[[1, 2, 3]])
    leader, _replicas, isr = partition_state(admin, topic)
    return leader == 1 and len(isr) == 3


def _log(bootstrap, topic):
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False,
                                  **QUIET})
    end = c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10)[1]
    c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 60
    while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append((m.offset(), m.value().decode()))
    c.close()
    return out


def _failover(cluster, clients):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
    for cl in clients:
        wait_until(lambda: _create(admin, cl.topic), 60, f"{cl.topic} led by node 1 with an ISR of 3")
    for cl in clients:
        cl.start()
    try:
        # the kill while each client produces and its group consumer reads
        wait_until(lambda: all((len(cl.acked) >= COUNT // 4 and cl.read) or cl.failure for cl in clients), 90,
                   lambda: "a quarter of the sends acknowledged and read: " +
                   ", ".join(f"{cl.name} {len(cl.acked)}/{len(cl.read)}" for cl in clients))
        cluster.nodes[1].kill()
        marks = [len(cl.acked) for cl in clients]
        wait_until(lambda: all(len(cl.acked) >= min(COUNT, m + 100) or cl.failure for cl, m in zip(clients, marks)), 90,
                   lambda: "acks after the kill: " + ", ".join(f"{cl.name} {len(cl.acked)}" for cl in clients))
        cluster.nodes[1].start()
        for cl in clients:
            assert cl.produced.wait(150), f"{cl.name}: producing did not finish ({len(cl.acked)} acked)"
            assert cl.failure is None, f"{cl.name}: {cl.failure!r}"
        for cl in clients:
            try:
                wait_until(lambda: {v for _o, v in cl.read} >= {v for _o, v in cl.acked}, 60,
                           f"{cl.name}'s consumer to read every acknowledged value")
            except AssertionError as e:
                missing = sorted({v for _o, v in cl.acked} - {v for _o, v in cl.read})
                raise AssertionError(f"{e}: read {len(cl.read)}, acked {len(cl.acked)}, "
                                     f"{len(missing)} missing: {missing[:3]}...{missing[-3:]}") from None
    finally:
        for cl in clients:
            cl.finish()
    wait_until(lambda: all(len(p.isrs) == 3 for p in admin.list_topics(timeout=5).topics[clients[0].topic]
                           .partitions.values()), 60, "node 1 back in the ISR")
    for cl in clients:
        assert not cl.errors, f"{cl.name}: {cl.errors[:3]}"
        assert len(cl.acked) == COUNT, (cl.name, len(cl.acked))
        log = _log(cluster.bootstrap, cl.topic)
        values = [v for _o, v in log]
        assert len(values) == len(set(values)), f"{cl.name}: duplicates in the log"
        # exactly once, in the order sent (one idempotent producer, one partition)
        assert values == [cl.value(i) for i in range(COUNT)], (cl.name, len(values))
        # the offsets the client was told are where the values are
        assert sorted(cl.acked) == log, f"{cl.name}: acknowledged offsets differ from the log"
        # its consumer read nothing that is not in the log (no read of a lost record)
        assert {v for _o, v in cl.read} <= set(values), cl.name


@pytest.mark.timeout(300)
def test_confluent_and_kafka_python_through_a_leader_failover(cluster):
    pytest.importorskip("kafka")
    b = cluster.bootstrap
    _failover(cluster, [Confluent("confluent", b, "fo-confluent"), KafkaPython("kafka-python", b, "fo-kpy")])


@pytest.mark.timeout(300)
def test_aiokafka_through_a_leader_failover(cluster):
    pytest.importorskip("aiokafka")
    _failover(cluster, [AioKafka("aiokafka", cluster.bootstrap, "fo-aio")])


@pytest.mark.timeout(300)
def test_java_client_through_a_leader_failover(cluster, java_command):
    Java.command = java_command
    _failover(cluster, [Java("java", cluster.bootstrap, "fo-java")])

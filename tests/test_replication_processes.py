"""Replication across three real `kproto serve` processes (a KRaft cluster of
combined broker,controller nodes, tools/quorum_cluster.py): a topic with
replication factor 3 and min.insync.replicas=2, an idempotent acks=all
confluent-kafka producer (a few thousand records a second, to keep the read-back short), and kill -9 of the partition leader
(KPROTO_REPLICATION_KILLS times, 2 in CI). Every acknowledged record is read
back exactly once, in order, by a second client library (kafka-python). Throughout, no
broker's Metadata names a partition leader it does not list among the brokers (Kafka fences a
broker and elects its partitions' new leaders in one batch; kafka-python 3's consumer stops
fetching for good when its leader is not a listed broker)."""
from __future__ import annotations

import os
import threading
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

from kproto.messages.metadata_request import MetadataRequest  # noqa: E402
from tests.wire_client import WireClient  # noqa: E402
from tools.cluster_client import (QUIET, AckedProducer, assert_exactly_once_in_order, create_topic,  # noqa: E402
                                  longest_ack_gap, partition_state, wait_until, wait_brokers_unfenced)
from tools.quorum_cluster import QuorumCluster  # noqa: E402

KILLS = int(os.environ.get("KPROTO_REPLICATION_KILLS", "2"))
SETTINGS = {"broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "2000",
            "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "offsets.topic.replication.factor": "3",
            "default.replication.factor": "3", "min.insync.replicas": "2"}


@pytest.fixture
def cluster():
    with QuorumCluster(3, settings=SETTINGS) as c:
        yield c


class LeaderWatch:
    """Polls every live broker's Metadata for `topic` (a few hundred a second, bounded by `stop`)
    and keeps each answer whose partition leader is not among the brokers it lists."""

    def __init__(self, cluster, topic):
        self.cluster, self.topic = cluster, topic
        self.bad, self.answers = [], 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=self.topic)])
        while not self.stop.is_set():
            for i, node in list(self.cluster.nodes.items()):
                try:
                    with WireClient(f"{self.cluster.host}:{self.cluster.ports[i]}", timeout=1) as c:
                        r = c.call(req, 12)
                except OSError:
                    continue   # the killed node, or one starting
                self.answers += 1
                listed = {b.node_id for b in r.brokers}
                for p in r.topics[0].partitions:
                    if p.leader_id >= 0 and p.leader_id not in listed:
                        self.bad.append((i, p.partition_index, p.leader_id, sorted(listed)))
            self.stop.wait(0.005)

    def start(self):
        self.thread.start()
        return self

    def close(self):
        self.stop.set()
        self.thread.join(10)


def test_leader_kill_loses_no_acknowledged_record(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
    wait_brokers_unfenced(admin, cluster.broker_count)   # leaders spread over all brokers
    topic = "replicated"
    wait_until(lambda: create_topic(admin, topic), 60, "the topic created")
    wait_until(lambda: len(partition_state(admin, topic)[2]) == 3, 20, "an ISR of 3")
    leader, replicas, _isr = partition_state(admin, topic)
    assert sorted(replicas) == [1, 2, 3]

    # bounded to a few thousand a second: reading back stays short
    producer = AckedProducer(cluster.bootstrap, topic, b"m%07d", breather=(50, 0.01), buffer_poll=0.05).start()
    acked, errors = producer.acked, producer.errors
    kill_times = []
    watch = LeaderWatch(cluster, topic).start()
    try:
        for _ in range(KILLS):
            producer.wait_for_acks(1000, 30)
            leader = partition_state(admin, topic)[0]
            kill_times.append((time.monotonic(), len(acked)))
            cluster.nodes[leader].kill()
            wait_until(lambda: partition_state(admin, topic)[0] not in (leader, -1), 30, "a new leader")
            producer.wait_for_acks(500, 30, "acks after the failover")
            cluster.nodes[leader].start()
            wait_until(lambda: len(partition_state(admin, topic)[2]) == 3, 30, "the old leader back in the ISR")
    finally:
        watch.close()
        producer.stop(90)
    assert not errors, errors[:3]
    assert watch.answers > 100, watch.answers
    # (node answering, partition, leader it named, brokers it listed)
    assert not watch.bad, f"{len(watch.bad)} Metadata answers named an unlisted leader: {watch.bad[:3]}"

    consumer = kafka.KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                                   enable_auto_commit=False, consumer_timeout_ms=5000)
    tp = kafka.TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    values = [m.value for m in consumer]
    consumer.close()
    assert_exactly_once_in_order(values, acked)
    # failover: last ack before the kill -> first ack after it
    # the longest time without an ack from the last one before the kill over the next 600 acks (a
    # delivery report reaches its callback after the ack: "first ack after the kill" understates it)
    gaps = sorted(longest_ack_gap(producer.ack_times, k, count=600) for k, _n in kill_times)
    print(f"\n{KILLS} leader kills, {len(acked)} records acknowledged and read back once, in order; "
          f"failover p50 {gaps[len(gaps) // 2]:.2f} s, p99 {gaps[min(len(gaps) - 1, int(len(gaps) * .99))]:.2f} s")


@pytest.mark.long
def test_group_offsets_survive_the_loss_of_the_group_coordinator(cluster):
    """The group coordinator moves with the leadership of its __consumer_offsets partition
    (replicated, offsets.topic.replication.factor=3): offsets committed before its broker is
    killed are where a new member of the group starts."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
    wait_brokers_unfenced(admin, cluster.broker_count)   # leaders spread over all brokers
    topic = "grouped"
    wait_until(lambda: create_topic(admin, topic), 60, "the topic created")
    wait_until(lambda: len(partition_state(admin, topic)[2]) == 3, 30, "an ISR of 3")
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **QUIET})
    for i in range(200):
        p.produce(topic, b"g%04d" % i, partition=0)
    assert p.flush(30) == 0

    def consumer():
        c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "survivors",
                                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                      "session.timeout.ms": 6000, **QUIET})
        c.subscribe([topic])
        return c
    c = consumer()
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 120 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m)
    assert len(got) >= 120
    c.commit(message=got[119], asynchronous=False)       # next offset: 120
    c.close()
    group = admin.describe_consumer_groups(["survivors"])["survivors"].result(10)
    coordinator = group.coordinator.id
    time.sleep(1.0)                                      # the followers fetch the commit
    cluster.nodes[coordinator].kill()
    try:
        c = consumer()
        first = None
        deadline = time.monotonic() + 60
        while first is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                first = m
        c.close()
        assert first is not None and first.offset() == 120 and first.value() == b"g0120", first
        group = admin.describe_consumer_groups(["survivors"])["survivors"].result(10)
        assert group.coordinator.id != coordinator
    finally:
        cluster.nodes[coordinator].start()


def test_a_leader_restarted_before_it_is_fenced_keeps_its_log(tmp_path):
    # the node comes back before its session expired (it then waits for the expiry, is fenced,
    # and registers again, as Kafka's DUPLICATE_BROKER_REGISTRATION has it); it opens with an empty
    # metadata image that catches up with the committed log: the partition directories on its disk
    # must not be taken for strays meanwhile (they held every record)
    with QuorumCluster(3, settings={**SETTINGS, "broker.session.timeout.ms": "3000"}) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap, **QUIET})
        wait_brokers_unfenced(admin, c.broker_count)   # leaders spread over all brokers
        topic = "restarted"
        wait_until(lambda: create_topic(admin, topic), 60, "the topic created")
        wait_until(lambda: len(partition_state(admin, topic)[2]) == 3, 20, "an ISR of 3")
        p = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True,
                                      "acks": "all", **QUIET})
        for i in range(300):
            p.produce(topic, b"a%05d" % i, partition=0)
        assert p.flush(30) == 0
        leader = partition_state(admin, topic)[0]
        c.nodes[leader].kill()
        c.nodes[leader].start()
        for i in range(10):
            p.produce(topic, b"b%05d" % i, partition=0)
        assert p.flush(60) == 0
        consumer = kafka.KafkaConsumer(bootstrap_servers=c.bootstrap, auto_offset_reset="earliest",
                                       enable_auto_commit=False, consumer_timeout_ms=5000)
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values = [m.value for m in consumer]
        consumer.close()
        assert values == [b"a%05d" % i for i in range(300)] + [b"b%05d" % i for i in range(10)], \
            (len(values), values[:3])
        # every node still holds the partition's directory (none was removed as a stray)
        for n in c.nodes.values():
            assert any(d.startswith(topic + "-") and not d.endswith("-delete")
                       for d in os.listdir(n.data_dir)), (n.node_id, os.listdir(n.data_dir))


def test_transactions_with_offsets_commit_whichever_broker_coordinates_them(tmp_path):
    # consume-transform-produce on a cluster: the transaction coordinator (the leader of the
    # transactional id's __transaction_state partition) and the group coordinator are often
    # different brokers; TxnOffsetCommit and Produce must not be refused for that
    settings = {**SETTINGS, "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2"}
    with QuorumCluster(3, settings=settings) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap, **QUIET})
        wait_brokers_unfenced(admin, c.broker_count)   # leaders spread over all brokers
        for t in ("txn-in", "txn-out"):
            wait_until(lambda: create_topic(admin, t), 60, f"{t} created")
        committed = 0
        for i in range(6):
            p = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap, "transactional.id": f"tx-{i}", **QUIET})
            p.init_transactions(30)
            p.begin_transaction()
            p.produce("txn-out", b"v%d" % i)
            group = confluent_kafka.Consumer({"bootstrap.servers": c.bootstrap, "group.id": f"g{i}", **QUIET})
            p.send_offsets_to_transaction([confluent_kafka.TopicPartition("txn-in", 0, 5 + i)],
                                          group.consumer_group_metadata(), 30)
            p.commit_transaction(30)
            group.close()
            committed += 1
        assert committed == 6
        consumer = kafka.KafkaConsumer(bootstrap_servers=c.bootstrap, auto_offset_reset="earliest",
                                       enable_auto_commit=False, consumer_timeout_ms=5000,
                                       isolation_level="read_uncommitted")
        tp = kafka.TopicPartition("txn-out", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        # (read_committed across brokers: test_read_committed_across_brokers below)
        assert sorted(m.value for m in consumer) == [b"v%d" % i for i in range(6)]
        consumer.close()


@pytest.mark.long
def test_read_committed_across_brokers_sees_committed_transactions():
    settings = {**SETTINGS, "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2"}
    with QuorumCluster(3, settings=settings) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap, **QUIET})
        wait_brokers_unfenced(admin, c.broker_count)   # leaders spread over all brokers
        wait_until(lambda: create_topic(admin, "rc-out"), 60, "rc-out created")
        for i in range(6):   # six transactional ids: their coordinators spread over the brokers
            p = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap, "transactional.id": f"rc-{i}", **QUIET})
            p.init_transactions(30)
            p.begin_transaction()
            p.produce("rc-out", b"v%d" % i, partition=0)
            p.commit_transaction(30)
        consumer = kafka.KafkaConsumer(bootstrap_servers=c.bootstrap, auto_offset_reset="earliest",
                                       enable_auto_commit=False, consumer_timeout_ms=5000,
                                       isolation_level="read_committed")
        tp = kafka.TopicPartition("rc-out", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values = sorted(m.value for m in consumer)
        consumer.close()
        assert values == [b"v%d" % i for i in range(6)]

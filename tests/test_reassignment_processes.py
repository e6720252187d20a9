"""Adding a broker to a running cluster and moving a partition onto it, with
real processes: a 3-node KRaft cluster (tools/quorum_cluster.py), a 4th
broker-only node formatted with the same cluster id that registers and hosts
nothing, then AlterPartitionReassignments (kafka-python's admin client) moving
the partition's leader replica to the new broker while an idempotent acks=all
producer (confluent-kafka) and a group consumer run. Every acknowledged record
is read back exactly once in order, the consumer keeps receiving after the
move, and the removed broker no longer hosts the partition."""
from __future__ import annotations

import json
import os
import threading
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402
from kafka import KafkaAdminClient, TopicPartition  # noqa: E402

from tools.cluster_client import QUIET, create_topic, partition_state, wait_until, wait_brokers_unfenced  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

SETTINGS = {"broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "3000",
            "replica.lag.time.max.ms": "5000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "offsets.topic.replication.factor": "3",
            "default.replication.factor": "3", "min.insync.replicas": "2"}
RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def _wait(predicate, timeout, what, detail=None):
    wait_until(predicate, timeout, what, interval=0.2, detail=detail)   # (a loaded machine: not too often)


def _partition(admin, topic):
    return partition_state(admin, topic, timeout=10)


@pytest.fixture
def cluster():
    racks = {i: {"broker.rack": f"r{i}"} for i in (1, 2, 3)}   # one rack per broker, for follower fetching (KIP-392)
    with QuorumCluster(3, settings={**SETTINGS, "replica.selector.class": RACK_AWARE}, node_settings=racks) as c:
        yield c


def test_new_broker_joins_and_takes_over_a_partition_under_load(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
    wait_brokers_unfenced(admin, cluster.broker_count)   # leaders spread over all brokers
    topic = "moving"
    _wait(lambda: create_topic(admin, topic), 60, "the topic created")
    _wait(lambda: len(_partition(admin, topic)[2]) == 3, 30, "an ISR of 3")

    acked, errors = [], []
    stop = threading.Event()

    def on_delivery(err, msg):
        (errors if err is not None else acked).append(err or msg.value())

    def produce():
        p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                                      "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000, **QUIET})
        i = 0
        while not stop.is_set():
            p.produce(topic, str(i).encode(), on_delivery=on_delivery)
            i += 1
            p.poll(0)
            if i % 50 == 0:
                time.sleep(0.02)
        p.flush(60)

    consumed = []

    def consume():
        c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "during-move",
                                      "auto.offset.reset": "earliest", **QUIET})
        c.subscribe([topic])
        # until the producer is done and everything it had acknowledged was read (or a minute more)
        while not produced.is_set() or len(consumed) < len(acked):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                consumed.append((time.monotonic(), m.value()))
            if produced.is_set() and time.monotonic() > produced_at[0] + 60:
                break
        c.close()

    produced, produced_at = threading.Event(), [0.0]
    producer, consumer = threading.Thread(target=produce), threading.Thread(target=consume)
    producer.start()
    consumer.start()
    try:
        node4 = cluster.add_broker(4, settings={"broker.rack": "r4"})
        _wait(lambda: 4 in admin.list_topics(timeout=10).brokers, 40, "broker 4 registered")
        assert 4 not in _partition(admin, topic)[1]                          # hosts nothing yet
        assert not os.path.exists(os.path.join(node4.data_dir, f"{topic}-0"))
        _wait(lambda: len(acked) > 200 and consumed, 90, "records acknowledged and consumed before the move",
              lambda: f"acked {len(acked)}, consumed {len(consumed)}, errors {errors[:3]}")
        leader, replicas, _isr = _partition(admin, topic)
        target = [4] + [b for b in replicas if b != leader]   # the leader's replica moves to the new broker
        ka = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
        try:
            result = ka.alter_partition_reassignments({TopicPartition(topic, 0): target})
            assert result == {TopicPartition(topic, 0): None}
            # done once the replica set is the target, which the ongoing list then no longer shows
            _wait(lambda: sorted(_partition(admin, topic)[1]) == sorted(target), 60, "the move completed")
            assert ka.list_partition_reassignments({topic: [0]}) == {}
            # cancelling with nothing in progress: NO_REASSIGNMENT_IN_PROGRESS, as Kafka
            result = ka.alter_partition_reassignments({TopicPartition(topic, 0): None})
            assert result[TopicPartition(topic, 0)].errno == 85
        finally:
            ka.close()
        new_leader, new_replicas, _ = _partition(admin, topic)
        assert new_leader in target and new_leader != leader
        _wait(lambda: len(_partition(admin, topic)[2]) == 3, 30, "an ISR of 3 after the move")
        done_at = time.monotonic()
        before = len(acked)
        _wait(lambda: len(acked) > before + 200 and any(t > done_at for t, _v in consumed), 60,
              "records produced and consumed after the move",
              lambda: f"acked {before} -> {len(acked)}, consumed {len(consumed)}, errors {errors[:3]}")
        gone = os.path.join(cluster.nodes[leader].data_dir, f"{topic}-0")
        _wait(lambda: not os.path.exists(gone), 20, "the removed replica deleted")
    finally:
        stop.set()
        producer.join(120)
        produced_at[0] = time.monotonic()
        produced.set()
        consumer.join(120)
    assert not errors, errors[:5]
    # every acknowledged record exactly once, in order, by the consumer that ran through the move
    values = [v for _t, v in consumed]
    assert len(values) == len(set(values)), "duplicates"
    assert set(acked) <= set(values), f"{len(set(acked) - set(values))} acknowledged records lost"
    assert [int(v) for v in values] == sorted(int(v) for v in values)

    # follower fetching (KIP-392): a consumer in a follower's rack reads everything from that follower
    follower = next(b for b in new_replicas if b != new_leader)
    stats = []
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "by-rack",
                                  "client.rack": f"r{follower}", "statistics.interval.ms": 200,
                                  "stats_cb": lambda s: stats.append(json.loads(s)), **QUIET})
    try:
        c.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        read, deadline = [], time.monotonic() + 60
        while len(read) < len(values) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                read.append(m.value())
        for _ in range(3):
            c.poll(0.2)
    finally:
        c.close()
    assert read == values
    fetched_from = {s["topics"][topic]["partitions"]["0"]["broker"] for s in stats if topic in s.get("topics", {})}
    assert follower in fetched_from, (follower, new_leader, fetched_from)

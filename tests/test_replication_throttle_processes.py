"""Replication throttles (KIP-73) on real processes: a 3-node cluster of `kproto serve`, two topics
of a few MB on brokers 1 and 2, each given a replica on broker 3 by a reassignment. The first move
runs unthrottled; before the second, the brokers get `leader.replication.throttled.rate` and
`follower.replication.throttled.rate` (kafka-configs' broker configs) and the topic `*` as both
throttled-replica lists, as `kafka-reassign-partitions.sh --execute --throttle` would set them.
The throttled catch-up takes at least about (size - one fetch) / rate, which the unthrottled one
beats by far, while an acks=all producer on the same partition is acknowledged throughout (its
in-sync followers are never throttled)."""
from __future__ import annotations

import time
import urllib.request

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource  # noqa: E402
from kafka import KafkaAdminClient, TopicPartition  # noqa: E402

from tools.cluster_client import QUIET, AckProbe, create_topic, partition_state, wait_until  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

SETTINGS = {"broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "3000",
            "replica.lag.time.max.ms": "10000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "offsets.topic.replication.factor": "1",
            "kproto.metrics.listener": "http://127.0.0.1:0"}
RATE = 200_000                 # bytes/s, leader and follower
SIZE = 2_500_000               # bytes of records per topic
FETCH = 1_048_576              # replica.fetch.max.bytes: the first fetch is not held back
RECORD = 10_000


def _byte_rate(node, kind: str) -> float:
    """kafka_server_{leader,follower}replication_byte_rate from the node's /metrics."""
    with urllib.request.urlopen(node.metrics_url, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(f"kafka_server_{kind}replication_byte_rate "):
                return float(line.split()[1])
    raise AssertionError(f"no {kind} byte-rate on node {node.node_id}")


def _fill(bootstrap: str, topic: str) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                                  "compression.type": "none", **QUIET})
    value = b"x" * RECORD
    for _ in range(SIZE // RECORD):
        p.produce(topic, value)
        p.poll(0)
    assert p.flush(60) == 0


def _alter(admin, resources) -> None:
    for f in admin.incremental_alter_configs(resources).values():
        f.result(20)


def _move_to_three(cluster, admin, topic: str) -> float:
    """Add broker 3 to the topic's replicas; seconds until it is in the ISR (caught up)."""
    ka = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    try:
        started = time.monotonic()
        assert ka.alter_partition_reassignments({TopicPartition(topic, 0): [1, 2, 3]}) == {
            TopicPartition(topic, 0): None}
    finally:
        ka.close()
    wait_until(lambda: 3 in partition_state(admin, topic)[2], 90, f"broker 3 in the ISR of {topic}",
               interval=0.1)
    return time.monotonic() - started


def test_throttled_reassignment_catches_up_at_the_rate_and_acks_all_keeps_working():
    with QuorumCluster(3, settings=SETTINGS) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        for topic in ("free", "slow"):
            wait_until(lambda: create_topic(admin, topic, replica_assignment=[[1, 2]]), 60, "a topic created")
            wait_until(lambda: len(partition_state(admin, topic)[2]) == 2, 30, "an ISR of 2")
            _fill(cluster.bootstrap, topic)

        unthrottled = _move_to_three(cluster, admin, "free")

        for b in (1, 2, 3):   # (one BROKER resource per call: the client sends it to that broker)
            _alter(admin, [ConfigResource("broker", str(b), incremental_configs=[
                ConfigEntry(name, str(RATE), incremental_operation=AlterConfigOpType.SET)
                for name in ("leader.replication.throttled.rate", "follower.replication.throttled.rate")])])
        _alter(admin, [ConfigResource("topic", "slow", incremental_configs=[
            ConfigEntry(name, "*", incremental_operation=AlterConfigOpType.SET)
            for name in ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")])])

        # acks=all to the throttled partition throughout the move: ~20 records/s, each timed
        with AckProbe(cluster.bootstrap, "slow") as probe:
            time.sleep(1)
            before = len(probe.latencies)
            throttled = _move_to_three(cluster, admin, "slow")
            during = probe.latencies[before:]
            # the quota sensors, over the 11 s window: about the rate, not the burst of a free move
            rates = {"leader": _byte_rate(cluster.nodes[1], "leader"),
                     "follower": _byte_rate(cluster.nodes[3], "follower")}
        errors = probe.errors

    bound = (SIZE - FETCH) / RATE                      # what is left after the first fetch, at the rate
    print(f"\nunthrottled catch-up {unthrottled:.2f} s, throttled {throttled:.2f} s "
          f"(lower bound asserted {0.7 * bound:.2f} s), acks=all during: {len(during)} acks, "
          f"max {max(during, default=0) * 1000:.0f} ms; byte-rate {rates}")
    assert throttled >= 0.7 * bound, throttled
    assert unthrottled < 0.5 * bound, unthrottled      # far below what the throttle imposes
    assert not errors, errors[:3]
    assert len(during) >= throttled * 5                # acknowledged all along (about 20 a second)
    assert max(during) < 2.0                           # the in-sync follower is never held back
    for kind, value in rates.items():
        assert 0.3 * RATE < value < 2 * RATE, (kind, value)

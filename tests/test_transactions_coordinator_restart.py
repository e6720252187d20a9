"""A node of a multi-voter quorum restarts with an empty metadata image:
__transaction_state only shows up in it when the metadata log is replayed.
The transaction coordinator must then load the partitions it still leads
from their logs, not serve them as a new, empty topic.

It did serve them empty: in `python -m tools.chaos run --nodes 3 --nemesis
kill,pause,partition,slow,disk --workload queue,copier,groups --seed 7` the
coordinator of the copier's transactional id was killed (-9) in the middle
of a transaction and came back before it was fenced, still leading its
`__transaction_state` partition. It had forgotten the Ongoing transaction:
the copier got INVALID_PRODUCER_ID_MAPPING, re-initialised under a NEW
producer id, and the old producer id's records in an output partition were
never aborted. That partition's last stable offset stopped there for good,
so every later committed output in it stayed invisible to read_committed
consumers (2,600 `copier-lost` inputs, all copied into that one partition).

What a user sees here: a transaction open when its coordinator restarts is
aborted when the producer re-initialises (Kafka's InitProducerId on an
Ongoing transaction), and the next transaction of the same transactional id,
committed, is readable read_committed. Fails without the fix in
broker/transactions/coordinator.py `_activate_if_created`."""
from __future__ import annotations

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

from tests.test_transactions_failover import coordinator_of  # noqa: E402
from tools.cluster_client import QUIET, create_topic, wait_until, wait_brokers_unfenced  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

TOPIC = "cr-out"
TXN_ID = "cr-txn"
# one replica of __transaction_state: the restarted node waits for its old session to expire
# (DUPLICATE_BROKER_REGISTRATION), is fenced (the partition leaderless, it the last ISR member),
# registers and leads its partition again once unfenced; a short session keeps that wait short
SETTINGS = {"broker.heartbeat.interval.ms": "500", "broker.session.timeout.ms": "3000",
            "replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "100",
            "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "3", "offsets.topic.replication.factor": "3",
            "default.replication.factor": "3", "min.insync.replicas": "2"}


def _producer(cluster):
    return confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": TXN_ID,
                                     "transaction.timeout.ms": 60000, "message.timeout.ms": 30000, **QUIET})


def _init(p) -> bool:
    try:
        p.init_transactions(10)
        return True
    except confluent_kafka.KafkaException as exc:
        if exc.args[0].fatal():
            raise
        return False


def _read_committed(cluster, timeout: float) -> list[bytes]:
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"cr-{time.monotonic()}",
                                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False, **QUIET})
    c.assign([confluent_kafka.TopicPartition(TOPIC, 0, confluent_kafka.OFFSET_BEGINNING)])
    seen: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and b"committed" not in seen:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(m.value())
    finally:
        c.close()
    return seen


def test_a_transaction_open_across_a_coordinator_restart_does_not_block_read_committed():
    with QuorumCluster(3, settings=SETTINGS) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        wait_brokers_unfenced(admin, cluster.broker_count)   # leaders spread over all brokers
        wait_until(lambda: create_topic(admin, TOPIC), 60, "the topic created")
        p = _producer(cluster)
        wait_until(lambda: _init(p), 60, "init_transactions")
        p.begin_transaction()
        p.produce(TOPIC, b"open", partition=0)
        assert p.flush(30) == 0
        coordinator = wait_until(lambda: coordinator_of(admin, TXN_ID), 30, "the transaction coordinator")
        # the coordinator dies with the transaction open and comes back before it is fenced
        cluster.nodes[coordinator].kill()
        time.sleep(0.5)
        cluster.nodes[coordinator].start()
        # a new incarnation of the producer: the open transaction is aborted, its epoch bumped
        p2 = _producer(cluster)
        wait_until(lambda: _init(p2), 60, "init_transactions after the restart")
        assert coordinator_of(admin, TXN_ID) == coordinator, "the restarted node leads the state partition again"
        p2.begin_transaction()
        p2.produce(TOPIC, b"committed", partition=0)
        p2.commit_transaction(30)
        seen = _read_committed(cluster, 30)
        assert b"committed" in seen, (
            f"read_committed saw {seen}: the transaction open at the restart still holds the last stable offset")
        assert b"open" not in seen, "the transaction open at the restart was aborted, never committed"

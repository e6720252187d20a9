"""Transactions on a 3-node cluster of real `kproto serve` processes
(tools/quorum_cluster.py) when the transaction coordinator dies: a
transactional producer writes to partitions led by different brokers; the
broker that coordinates its transactional id (the leader of its
`__transaction_state` partition) is killed with SIGKILL once right after a
commit was acknowledged and once in the middle of a transaction.

What a user sees: the acknowledged commit becomes visible to read_committed
consumers (the new coordinator loads the prepared transaction and sends its
markers), the producer re-initialises and goes on, the transaction cut in
the middle is either committed whole or never visible, nothing is read twice.

A longer consume-transform-produce run through repeated coordinator kills is
`python3 -m tools.txn_failover_loop` (docs/operations.md)."""
from __future__ import annotations

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from broker.transactions.placement import partition_for  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

SETTINGS = {"broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "2000",
            "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "offsets.topic.replication.factor": "3",
            "default.replication.factor": "3", "min.insync.replicas": "2",
            "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}
QUIET = {"log_level": 0, "logger": lambda *a, **k: None}
TOPIC = "fo-out"
TXN_ID = "fo-txn"


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:   # noqa: BLE001  (a node may be down meanwhile)
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last error: {last})")


def leaders(admin, topic):
    md = admin.list_topics(topic, timeout=5)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def coordinator_of(admin, transactional_id):
    """The broker leading the transactional id's __transaction_state partition."""
    state = leaders(admin, "__transaction_state")
    leader = state[partition_for(transactional_id, len(state))]
    return leader if leader >= 0 else None


def create_topic(admin, topic, partitions):
    try:
        admin.create_topics([NewTopic(topic, partitions, 3)], request_timeout=15)[topic].result(20)
    except confluent_kafka.KafkaException as exc:
        if exc.args[0].code() != confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    return True


def producer(cluster):
    return confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": TXN_ID,
                                     "transaction.timeout.ms": 20000, "message.timeout.ms": 20000, **QUIET})


def write(p, tag: bytes, partitions) -> list[bytes]:
    values = [b"%s-%d" % (tag, i) for i in partitions]
    for i, v in zip(partitions, values):
        p.produce(TOPIC, v, partition=i)
    p.flush(30)
    return values


def read_committed(cluster, partitions, expect: set, timeout: float) -> list[bytes]:
    """Everything read_committed sees in the topic, once `expect` is among it (or at the timeout)."""
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"rc-{time.monotonic()}",
                                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False, **QUIET})
    c.assign([confluent_kafka.TopicPartition(TOPIC, i, confluent_kafka.OFFSET_BEGINNING) for i in partitions])
    seen: list[bytes] = []
    deadline = time.monotonic() + timeout
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(m.value())
            if expect <= set(seen):
                quiet_until = quiet_until or time.monotonic() + 3   # then a little more: nothing else may come
                if time.monotonic() > quiet_until:
                    break
    finally:
        c.close()
    return seen


def test_coordinator_killed_after_commit_and_mid_transaction():
    c = QuorumCluster(3, settings=SETTINGS)
    c.format()
    c.start()
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap, **QUIET})
        wait_for(lambda: create_topic(admin, TOPIC, 3), 60, f"{TOPIC} created")
        wait_for(lambda: all(v >= 0 for v in leaders(admin, TOPIC).values()), 30, "leaders")
        parts = [0, 1, 2]
        assert len(set(leaders(admin, TOPIC).values())) > 1, "the partitions should be led by different brokers"

        p = producer(c)
        p.init_transactions(60)
        p.begin_transaction()
        committed = write(p, b"a", parts)
        p.commit_transaction(60)

        # 1. the coordinator dies right after acknowledging a commit
        p.begin_transaction()
        committed += write(p, b"b", parts)
        p.commit_transaction(60)
        first = wait_for(lambda: coordinator_of(admin, TXN_ID), 30, "the coordinator")
        c.nodes[first].kill()
        seen = read_committed(c, parts, set(committed), 60)
        assert set(committed) <= set(seen), f"committed data not visible after the coordinator died: {seen}"

        # the producer's instance re-initialises with the new coordinator and goes on
        p = producer(c)
        p.init_transactions(90)
        p.begin_transaction()
        committed += write(p, b"c", parts)
        p.commit_transaction(60)

        # 2. the coordinator dies in the middle of a transaction (the first one back: a quorum is kept)
        c.nodes[first].start()
        wait_for(lambda: coordinator_of(admin, TXN_ID) not in (None, first) and len(
            admin.list_topics("__transaction_state", timeout=5).topics["__transaction_state"]
            .partitions[partition_for(TXN_ID, 50)].isrs) == 3, 60, "the old coordinator back in the ISR")
        second = coordinator_of(admin, TXN_ID)
        p.begin_transaction()
        cut = write(p, b"d", parts)
        c.nodes[second].kill()
        try:
            p.commit_transaction(60)
            committed += cut          # the new coordinator had the transaction and committed it
            maybe = []
        except confluent_kafka.KafkaException as exc:
            maybe = cut               # not acknowledged: all of it or none of it may be visible
            if exc.args[0].txn_requires_abort():
                p.abort_transaction(60)
            else:
                p = producer(c)
                p.init_transactions(90)
        p = producer(c)
        p.init_transactions(90)     # fences the previous instance; an open transaction is aborted
        p.begin_transaction()
        committed += write(p, b"e", parts)
        p.commit_transaction(60)

        seen = read_committed(c, parts, set(committed), 60)
        assert len(seen) == len(set(seen)), f"a record read twice: {sorted(seen)}"
        assert set(committed) <= set(seen), f"missing committed records: {set(committed) - set(seen)}"
        extra = set(seen) - set(committed)
        assert extra in (set(), set(maybe)), f"records of an aborted transaction were read: {extra}"
    finally:
        c.cleanup()

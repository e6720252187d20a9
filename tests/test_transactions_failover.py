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
`python3 -m tools.txn_failover_loop`."""
from __future__ import annotations

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

from kproto import records as rec  # noqa: E402
from kproto.messages.add_partitions_to_txn_request import AddPartitionsToTxnRequest as APT  # noqa: E402
from kproto.messages.end_txn_request import EndTxnRequest  # noqa: E402
from kproto.messages.init_producer_id_request import InitProducerIdRequest  # noqa: E402

from broker.transactions.placement import partition_for  # noqa: E402
from tests.wire_client import WireClient, produce  # noqa: E402
from tools.cluster_client import QUIET, create_topic, wait_until, wait_brokers_unfenced  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

SETTINGS = {"broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "2000",
            "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "offsets.topic.replication.factor": "3",
            "default.replication.factor": "3", "min.insync.replicas": "2",
            "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}
TOPIC = "fo-out"
TXN_ID = "fo-txn"


def leaders(admin, topic):
    md = admin.list_topics(topic, timeout=5)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def coordinator_of(admin, transactional_id):
    """The broker leading the transactional id's __transaction_state partition."""
    state = leaders(admin, "__transaction_state")
    leader = state[partition_for(transactional_id, len(state))]
    return leader if leader >= 0 else None


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


def check_verification_by_a_remote_coordinator(cluster, admin):
    """KIP-890 across brokers: a partition leader asks the coordinator (another broker) whether
    the partition is in the transaction before appending the producer's first batch there."""
    txn_id = "fo-verify"
    coordinator = coordinator_of(admin, txn_id)
    index = next(i for i, leader in sorted(leaders(admin, TOPIC).items()) if leader != coordinator)
    leader = leaders(admin, TOPIC)[index]
    to_coordinator = WireClient(f"127.0.0.1:{cluster.ports[coordinator]}")
    to_leader = WireClient(f"127.0.0.1:{cluster.ports[leader]}")
    try:
        res = wait_until(lambda: (lambda r: r if r.error_code == 0 else None)(to_coordinator.call(
            InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=60000, producer_id=-1,
                                  producer_epoch=-1), 4)), 30, "a producer id")
        batch = rec.build_batch([(b"k", b"not added")], producer_id=res.producer_id,
                                producer_epoch=res.producer_epoch, base_sequence=0, transactional=True)
        refused = produce(to_leader, TOPIC, batch, index, transactional_id=txn_id)
        # not in the transaction: INVALID_TXN_STATE (TRANSACTION_ABORTABLE from Produce v11)
        assert refused.error_code in (48, 120), refused
        to_coordinator.call(APT(v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=res.producer_id,
                                v3_and_below_producer_epoch=res.producer_epoch,
                                v3_and_below_topics=[APT.AddPartitionsToTxnTopic(name=TOPIC, partitions=[index])]),
                            3)
        assert produce(to_leader, TOPIC, batch, index, transactional_id=txn_id).error_code == 0
        # aborted: its marker goes to the other broker; read_committed never shows "not added"
        assert to_coordinator.call(EndTxnRequest(transactional_id=txn_id, producer_id=res.producer_id,
                                                 producer_epoch=res.producer_epoch, committed=False),
                                   3).error_code == 0
    finally:
        to_coordinator.close()
        to_leader.close()


def test_coordinator_killed_after_commit_and_mid_transaction():
    c = QuorumCluster(3, settings=SETTINGS)
    c.format()
    c.start()
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap, **QUIET})
        wait_brokers_unfenced(admin, c.broker_count)   # leaders spread over all brokers
        wait_until(lambda: create_topic(admin, TOPIC, 3), 60, f"{TOPIC} created")
        def all_led():
            # all three in one answer: a node not yet caught up with the creation answers the
            # topic unknown, with no partition (which all() of nothing took for led)
            now = leaders(admin, TOPIC)
            return now if sorted(p for p, v in now.items() if v >= 0) == [0, 1, 2] else None
        led = wait_until(all_led, 30, "leaders")
        parts = [0, 1, 2]
        assert len(set(led.values())) > 1, f"the partitions should be led by different brokers: {led}"

        p = producer(c)
        p.init_transactions(60)
        p.begin_transaction()
        committed = write(p, b"a", parts)
        p.commit_transaction(60)
        check_verification_by_a_remote_coordinator(c, admin)

        # 1. the coordinator dies right after acknowledging a commit
        p.begin_transaction()
        committed += write(p, b"b", parts)
        p.commit_transaction(60)
        first = wait_until(lambda: coordinator_of(admin, TXN_ID), 30, "the coordinator")
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
        wait_until(lambda: coordinator_of(admin, TXN_ID) not in (None, first) and len(
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

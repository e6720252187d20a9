"""Transactions v2 (KIP-890 part 2) over the raw protocol against a broker
process with transaction.version 2 finalized: EndTxn v5 answers a bumped
epoch, the markers carry it, so the partition leader refuses a late batch of
the finished transaction's epoch (server-side defense); retries are answered
idempotently; EndTxn v4 keeps the classic behaviour on the same cluster, and
librdkafka 2.16 (which does not implement transactions v2) works on it with
its classic protocol."""
from __future__ import annotations

import confluent_kafka
import pytest

from kproto.messages.describe_producers_request import DescribeProducersRequest
from kproto.messages.end_txn_request import EndTxnRequest
from tests.test_transactions_protocol import add_v3, describe, fetch_part, find_coordinator, init, txn_batch
from tests.wire_client import WireClient, create_topic, finalize_feature, produce

pytestmark = [pytest.mark.timeout(120)]


def end_v5(c, txn_id, pid, epoch, commit):
    r = c.call(EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit), 5)
    return r.error_code, r.producer_id, r.producer_epoch


def producer_epoch_at_leader(c, topic, pid):
    resp = c.call(DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
        name=topic, partition_indexes=[0])]), 0)
    return {p.producer_id: p.producer_epoch for p in resp.topics[0].partitions[0].active_producers}[pid]


def test_end_txn_v5_bumps_the_epoch_and_the_leader_refuses_the_old_one(fresh_broker):
    topic, txn_id = "v2-defense", "v2-tx"
    with WireClient(fresh_broker.bootstrap) as c:
        finalize_feature(c, "transaction.version", 2)
        create_topic(fresh_broker.bootstrap, topic)
        find_coordinator(c, txn_id)
        r = init(c, txn_id)
        pid, epoch = r.producer_id, r.producer_epoch
        assert add_v3(c, txn_id, pid, epoch, (topic, 0)) == [(topic, [(0, 0)])]
        assert produce(c, topic, txn_batch(pid, epoch, 0, [b"a", b"b"]), transactional_id=txn_id).error_code == 0
        assert end_v5(c, txn_id, pid, epoch, True) == (0, pid, epoch + 1)
        # the answer was lost: the retry gets the same answer
        assert end_v5(c, txn_id, pid, epoch, True) == (0, pid, epoch + 1)
        # the commit marker carries the new epoch: a late batch of the finished transaction is refused
        # (INVALID_PRODUCER_EPOCH) instead of opening a transaction nobody will end
        late = produce(c, topic, txn_batch(pid, epoch, 2, [b"late"]), transactional_id=txn_id)
        assert late.error_code == 47
        assert producer_epoch_at_leader(c, topic, pid) == epoch + 1
        # the next transaction runs at the new epoch from sequence 0, and its abort bumps again
        assert add_v3(c, txn_id, pid, epoch + 1, (topic, 0)) == [(topic, [(0, 0)])]
        assert produce(c, topic, txn_batch(pid, epoch + 1, 0, [b"x"]), transactional_id=txn_id).error_code == 0
        assert end_v5(c, txn_id, pid, epoch + 1, False) == (0, pid, epoch + 2)
        assert end_v5(c, txn_id, pid, epoch, False) == (90, -1, -1)        # two epochs back: fenced
        # an abort with no transaction open is allowed in v2 and bumps too
        assert end_v5(c, txn_id, pid, epoch + 2, False) == (0, pid, epoch + 3)
        assert describe(c, txn_id).producer_epoch == epoch + 3
        # read_committed sees the committed records only
        part = fetch_part(c, topic, 0, 1)
        assert part.error_code == 0 and [a.producer_id for a in part.aborted_transactions] == [pid]


def test_end_txn_v4_keeps_the_epoch_on_a_v2_cluster(fresh_broker):
    topic, txn_id = "v1-client", "v1-tx"
    with WireClient(fresh_broker.bootstrap) as c:
        finalize_feature(c, "transaction.version", 2)
        create_topic(fresh_broker.bootstrap, topic)
        find_coordinator(c, txn_id)
        r = init(c, txn_id)
        pid, epoch = r.producer_id, r.producer_epoch
        assert add_v3(c, txn_id, pid, epoch, (topic, 0)) == [(topic, [(0, 0)])]
        assert produce(c, topic, txn_batch(pid, epoch, 0, [b"a"]), transactional_id=txn_id).error_code == 0
        resp = c.call(EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=True),
                      4)
        assert resp.error_code == 0
        assert describe(c, txn_id).producer_epoch == epoch
        assert add_v3(c, txn_id, pid, epoch, (topic, 0)) == [(topic, [(0, 0)])]
        assert produce(c, topic, txn_batch(pid, epoch, 1, [b"b"]), transactional_id=txn_id).error_code == 0


def test_librdkafka_keeps_transactions_v1_on_a_v2_cluster(fresh_broker):
    topic, txn_id = "rdk-v1", "rdk-tx"
    quiet = {"log_level": 0, "logger": lambda *a, **k: None}
    with WireClient(fresh_broker.bootstrap) as c:
        finalize_feature(c, "transaction.version", 2)
        create_topic(fresh_broker.bootstrap, topic)
    p = confluent_kafka.Producer({"bootstrap.servers": fresh_broker.bootstrap, "transactional.id": txn_id, **quiet})
    p.init_transactions(30)
    for n in range(3):
        p.begin_transaction()
        p.produce(topic, b"v%d" % n, partition=0)
        if n == 1:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": fresh_broker.bootstrap, "group.id": "rdk-check",
                                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                         **quiet})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    values = []
    for _ in range(40):
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            values.append(m.value())
        if len(values) == 2:
            break
    consumer.close()
    assert values == [b"v0", b"v2"]
    with WireClient(fresh_broker.bootstrap) as c:
        assert describe(c, txn_id).producer_epoch == 0      # no EndTxn v5: the epoch InitProducerId gave

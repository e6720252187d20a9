"""Transactional producers as the Python clients drive them; read_committed consumers.

One committed transaction (5 records), one aborted (2), then a plain record:
as txn-flow.json records, the partition then holds data 0-4, the COMMIT
marker at 5, aborted data 6-7, the ABORT marker at 8 and the plain record at
9. A read_committed consumer sees 0-4 and 9. (The Java client's scenario is
in test_java_client.py.) Skips while the broker does not advertise the
transaction APIs.
"""
from __future__ import annotations

import asyncio

import pytest

TXN_APIS = ("FindCoordinator", "InitProducerId", "AddPartitionsToTxn", "EndTxn")


def _confluent_txns(bootstrap, topic, txn_id):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    p.init_transactions(30)
    for outcome, values in (("commit", [f"committed-{i}" for i in range(5)]),
                            ("abort", [f"aborted-{i}" for i in range(2)])):
        p.begin_transaction()
        for v in values:
            p.produce(topic, value=v.encode(), partition=0)
        p.flush(30)
        (p.commit_transaction if outcome == "commit" else p.abort_transaction)(30)


def _kafka_python_txns(bootstrap, topic, txn_id):
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
    try:
        p.init_transactions()
        for outcome, values in (("commit", [f"committed-{i}" for i in range(5)]),
                                ("abort", [f"aborted-{i}" for i in range(2)])):
            p.begin_transaction()
            for v in values:
                p.send(topic, value=v.encode(), partition=0)
            p.flush()
            (p.commit_transaction if outcome == "commit" else p.abort_transaction)()
    finally:
        p.close(5)


def _aiokafka_txns(bootstrap, topic, txn_id):
    from aiokafka import AIOKafkaProducer

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
        await p.start()
        try:
            for outcome, values in (("commit", [f"committed-{i}" for i in range(5)]),
                                    ("abort", [f"aborted-{i}" for i in range(2)])):
                await p.begin_transaction()
                for v in values:
                    await p.send(topic, value=v.encode(), partition=0)
                if outcome == "commit":
                    await p.commit_transaction()
                else:
                    await p.abort_transaction()
        finally:
            await p.stop()
    asyncio.run(run())


def _read(bootstrap, topic, isolation):
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-txn-read", "enable.auto.commit": False,
                  "enable.partition.eof": True, "isolation.level": isolation})
    out = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        for _ in range(100):
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(msg.error())
            out.append([msg.offset(), msg.value().decode()])
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=15, cached=False)
    finally:
        c.close()
    return out, high


@pytest.mark.compat("transactional producer: commit and abort, read_committed consumer", client="{client}")
@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_commit_and_abort(target, clients, compat, topic, client):
    target.require(*TXN_APIS)
    target.create_topic(topic, 1)
    run = {"confluent": _confluent_txns, "kafka-python": _kafka_python_txns, "aiokafka": _aiokafka_txns}[client]
    run(target.bootstrap, topic, topic + "-txn")
    clients.produce("confluent", target.bootstrap, topic,
                    [{"key": None, "value": "plain", "headers": [], "partition": 0, "timestamp": None}])
    committed, high = _read(target.bootstrap, topic, "read_committed")
    uncommitted, _ = _read(target.bootstrap, topic, "read_uncommitted")
    compat.observe({"read_committed": committed, "read_uncommitted": uncommitted, "high_watermark": high},
                   expected={
                       "read_committed": [[i, f"committed-{i}"] for i in range(5)] + [[9, "plain"]],
                       "read_uncommitted": [[i, f"committed-{i}"] for i in range(5)]
                       + [[6, "aborted-0"], [7, "aborted-1"], [9, "plain"]],
                       "high_watermark": 10})

"""Consumer groups (classic protocol) as the Python clients use them.

A consumer subscribes in a group, reads everything, commits and leaves; a
second member of the same group then starts from the committed offsets; two
members split a 3-partition topic. (The Java client's group scenario is in
test_java_client.py.) Skips while the broker does not advertise the group APIs.
"""
from __future__ import annotations

import asyncio
import time

import pytest

GROUP_APIS = ("FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit",
              "OffsetFetch")
COUNT = 30


def _setup(target, clients, topic) -> int:
    target.require(*GROUP_APIS)
    partitions = 3 if target.supports("CreateTopics") else 1
    target.create_topic(topic, partitions)
    clients.produce("confluent", target.bootstrap, topic,
                    [{"key": f"k{i}", "value": f"g{i}", "headers": [], "partition": i % partitions,
                      "timestamp": None} for i in range(COUNT)])
    return partitions


def _confluent_group(bootstrap, topic, group, partitions, timeout=45):
    from confluent_kafka import Consumer, TopicPartition
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    c = Consumer(conf)
    values = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(values) < COUNT and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                values.append(msg.value().decode())
        assignment = len(c.assignment())
        c.commit(asynchronous=False)
    finally:
        c.close()
    # a new member of the group starts where the group committed
    c = Consumer(conf)
    try:
        committed = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
        committed = {tp.partition: tp.offset for tp in committed}
    finally:
        c.close()
    return values, assignment, committed


def _kafka_python_group(bootstrap, topic, group, partitions, timeout=45):
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False)
    values = []
    try:
        deadline = time.monotonic() + timeout
        while len(values) < COUNT and time.monotonic() < deadline:
            for msgs in c.poll(timeout_ms=500).values():
                values += [m.value.decode() for m in msgs]
        assignment = len(c.assignment())
        c.commit()
    finally:
        c.close()
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        committed = {p: c.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        c.close()
    return values, assignment, committed


def _aiokafka_group(bootstrap, topic, group, partitions, timeout=45):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run():
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False)
        await c.start()
        values = []
        try:
            deadline = time.monotonic() + timeout
            while len(values) < COUNT and time.monotonic() < deadline:
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    values.extend(m.value.decode() for m in msgs)
            assignment = len(c.assignment())
            await c.commit()
        finally:
            await c.stop()
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
        await c.start()
        try:
            committed = {p: await c.committed(TopicPartition(topic, p)) for p in range(partitions)}
        finally:
            await c.stop()
        return values, assignment, committed
    return asyncio.run(run())


@pytest.mark.compat("consumer group: subscribe, commit, committed offsets", client="{client}")
@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_subscribe_and_commit(target, clients, compat, topic, client):
    partitions = _setup(target, clients, topic)
    run = {"confluent": _confluent_group, "kafka-python": _kafka_python_group,
           "aiokafka": _aiokafka_group}[client]
    values, assignment, committed = run(target.bootstrap, topic, topic + "-group", partitions)
    per_partition = {p: COUNT // partitions + (1 if p < COUNT % partitions else 0) for p in range(partitions)}
    compat.observe({"consumed": sorted(values), "assignment_size": assignment, "committed": committed},
                   expected={"consumed": sorted(f"g{i}" for i in range(COUNT)), "assignment_size": partitions,
                             "committed": per_partition})


@pytest.mark.compat("consumer group: two members split 3 partitions", client="confluent")
def test_two_members_split_partitions(target, clients, compat, topic):
    target.require(*GROUP_APIS)
    target.require("CreateTopics")
    target.create_topic(topic, 3)
    from confluent_kafka import Consumer
    conf = {"bootstrap.servers": target.bootstrap, "group.id": topic + "-group", "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 10000, "heartbeat.interval.ms": 500}
    a, b = Consumer(dict(conf, **{"client.id": "member-a"})), Consumer(dict(conf, **{"client.id": "member-b"}))
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        deadline = time.monotonic() + 60
        sizes = []
        stable_since = None
        while time.monotonic() < deadline:
            a.poll(0.2)
            b.poll(0.2)
            now = sorted([len(a.assignment()), len(b.assignment())])
            if now != sizes:
                sizes, stable_since = now, time.monotonic()
            elif sum(sizes) == 3 and time.monotonic() - stable_since > 2:
                break
    finally:
        a.close()
        b.close()
    compat.observe(sizes, expected=[1, 2])

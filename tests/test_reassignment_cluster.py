"""Reassignments with three in-process brokers (tools/replication_cluster.py),
sent as AlterPartitionReassignments / ListPartitionReassignments requests: a
single-replica partition moved to another broker keeps its records and takes
new ones there; a replicated partition whose leader is moved away gets a new
leader from the target and loses nothing; Kafka's errors for bad requests."""
from __future__ import annotations

from kproto.errors import ErrorCode
from kproto.messages.alter_partition_reassignments_request import (
    AlterPartitionReassignmentsRequest, ReassignablePartition, ReassignableTopic)
from kproto.messages.list_partition_reassignments_request import ListPartitionReassignmentsRequest

from broker.controller.controller import TopicSpec
from tools.replication_cluster import run_with_cluster

FAST = {"replica.lag.time.max.ms": "1500", "replica.fetch.wait.max.ms": "100",
        "replica.fetch.backoff.ms": "100"}


def _run(fn):
    run_with_cluster(fn, 3, FAST, controller=1)


async def _reassign(client, node, moves):
    req = AlterPartitionReassignmentsRequest(timeout_ms=10000, topics=[
        ReassignableTopic(name=t, partitions=[ReassignablePartition(partition_index=i, replicas=r)])
        for t, i, r in moves])
    resp = await client.conn(node).request(req, 0)
    assert resp.error_code == 0
    return [(p.error_code, p.error_message) for t in resp.responses for p in t.partitions]


def _create(cluster, name, replicas):
    c = cluster.brokers[cluster.controller].controller
    return c.create_topic(TopicSpec(name, -1, -1, {}, assignments=[(0, list(replicas))])).topic_id


def test_single_replica_partition_moves_to_another_broker():
    async def body(cluster, client):
        tid = _create(cluster, "solo", [1])
        for i in range(5):
            assert (await client.produce(1, "solo", [b"v%d" % i])).error_code == 0
        assert await _reassign(client, 2, [("solo", 0, [3])]) == [(0, None)]   # sent to a non-controller
        await cluster.wait_for(lambda: cluster.partition("solo").replicas == [3], what="the move")
        p = cluster.partition("solo")
        assert (p.leader, p.isr, p.adding_replicas, p.removing_replicas) == (3, [3], [], [])
        await cluster.wait_for(lambda: cluster.brokers[1].partitions.get("solo", 0) is None, what="removed on 1")
        await cluster.wait_for(lambda: cluster.brokers[3].partitions.get("solo", 0).is_leader, what="leads on 3")
        assert (await client.produce(3, "solo", [b"v5"])).error_code == 0
        values, hw = await client.read_all(3, tid)
        assert values == [b"v%d" % i for i in range(6)] and hw == 6
    _run(body)


def test_moving_the_leader_away_elects_a_target_replica_and_keeps_acknowledged_records():
    async def body(cluster, client):
        tid = _create(cluster, "t", [1, 2])
        await cluster.wait_for(lambda: ("t", 0) in cluster.brokers[1].replication.leaders, what="leadership")
        for i in range(20):
            assert (await client.produce(1, "t", [b"v%d" % i])).error_code == 0
        assert await _reassign(client, 1, [("t", 0, [3, 2])]) == [(0, None)]
        await cluster.wait_for(lambda: cluster.partition("t").replicas == [3, 2], what="the move")
        p = cluster.partition("t")
        assert p.leader in (3, 2) and sorted(p.isr) == [2, 3] and p.leader_epoch == 1
        resp = await client.conn(2).request(ListPartitionReassignmentsRequest(timeout_ms=5000, topics=None), 0)
        assert resp.error_code == 0 and resp.topics == []
        await cluster.wait_for(lambda: ("t", 0) in cluster.brokers[p.leader].replication.leaders, what="new leader")
        assert (await client.produce(p.leader, "t", [b"v20"])).error_code == 0
        values, hw = await client.read_all(p.leader, tid)
        assert values == [b"v%d" % i for i in range(21)] and hw == 21
    _run(body)


def test_errors_as_kafka():
    async def body(cluster, client):
        _create(cluster, "e", [1, 2])
        got = await _reassign(client, 2, [("e", 0, None), ("e", 0, [1, 9]), ("e", 4, [1]), ("nope", 0, [1])])
        assert got == [
            (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None),   # Kafka 3.9 answered these (run against it)
            (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
             "The manual partition assignment includes broker 9, but no such broker is registered."),
            (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition e:4."),
            (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope.")]
    _run(body)

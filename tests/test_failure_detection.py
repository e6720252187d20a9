"""Failure detection (broker/quorum/liveness.py, `kproto.broker.failure.detection.ms`): on a 3-node
cluster of real `kproto serve` processes, a node killed with -9 loses its partition leaderships
long before its broker session (set to 30 s here) would expire, because it stopped fetching the
metadata log from the active controller; both when the dead node was only a partition leader and
when it was also the active controller. Every record acknowledged with acks=all before and after
the kill is read back once, in order. Without the detection, leadership would stay on the dead
node for the whole 30 s session, and the waits below (12 s) fail."""
from __future__ import annotations

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

from tests.test_paused_controller import _controller  # noqa: E402
from tools.cluster_client import (QUIET, AckedProducer, assert_exactly_once_in_order, create_topic,  # noqa: E402
                                  partition_state, read_partition, wait_brokers_unfenced, wait_until)
from tools.quorum_cluster import QuorumCluster  # noqa: E402

pytestmark = pytest.mark.timeout(240)

SETTINGS = {"broker.session.timeout.ms": "30000", "default.replication.factor": "3",
            "offsets.topic.replication.factor": "3", "min.insync.replicas": "2",
            "replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "100"}
WITHIN_S = 12   # well inside the 30 s session, several times the 1.5 s detection (CI machines are slow)


def _leader_elsewhere(admin, topic, dead):
    try:
        leader, _replicas, isr = partition_state(admin, topic, 0, timeout=3)
    except Exception:
        return False
    return leader not in (dead, -1) and dead not in isr


@pytest.mark.parametrize("victim", ["partition-leader", "controller-and-leader"])
def test_a_killed_leader_is_replaced_well_inside_its_broker_session(victim):
    with QuorumCluster(3, settings=SETTINGS) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        wait_brokers_unfenced(admin, 3)
        controller = _controller(cluster)
        assert controller > 0
        others = [i for i in cluster.nodes if i != controller]
        # the partition's leader: the active controller, or another node
        leader_node = controller if victim == "controller-and-leader" else others[0]
        replicas = [leader_node] + [i for i in cluster.nodes if i != leader_node]
        wait_until(lambda: create_topic(admin, "fd", replica_assignment=[replicas]), 30, "topic created")
        wait_until(lambda: partition_state(admin, "fd")[0] == leader_node, 30, f"node {leader_node} leads")
        producer = AckedProducer(cluster.bootstrap, "fd", rate=200).start()
        try:
            producer.wait_for_acks(100, 30, "acks before the kill")
            cluster.nodes[leader_node].kill()
            wait_until(lambda: _leader_elsewhere(admin, "fd", leader_node), WITHIN_S,
                       f"a new leader for fd-0 within {WITHIN_S} s of killing node {leader_node}")
            producer.wait_for_acks(100, 30, "acks after the kill")
        finally:
            producer.stop()
        assert not producer.errors, producer.errors[:3]
        values = read_partition(cluster.bootstrap, "fd", len(producer.acked), 60)
        assert_exactly_once_in_order(values, producer.acked)

"""A node of a multi-voter quorum restarts with an empty metadata image:
__consumer_offsets only shows up in it when the metadata log is replayed.
The group coordinator must then load the partitions it leads from their
logs, not serve them as a new, empty topic. It did: a coordinator killed
(-9) and restarted while still leading its partition (here the only
replica; in the chaos suite, a leader back before it was fenced) answered
every OffsetFetch with "no committed offset", its consumers started over
from the earliest offset and the groups restarted at generation 1
(`offset-regression` and `double-ownership` in `python -m tools.chaos run
--nodes 3 --nemesis kill,...,disk`). Fails without the fix in
broker/groups/coordinator.py `_activate_if_created`."""
from __future__ import annotations

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from tests.test_group_coordinator_failover import GROUP, OFFSETS_PARTITIONS, TOPIC, _offsets_partition  # noqa: E402
from tools.cluster_client import QUIET, create_topic, wait_until, wait_brokers_unfenced  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

# one replica of __consumer_offsets: the restarted node leads its partition again (once its old
# session expired and it registered again: a short session keeps that wait short)
SETTINGS = {"broker.heartbeat.interval.ms": "500", "broker.session.timeout.ms": "3000",
            "replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "100",
            "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "default.replication.factor": "3", "min.insync.replicas": "2"}


def _committed(bootstrap) -> int | None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, **QUIET})
    try:
        got = c.committed([TopicPartition(TOPIC, 0)], timeout=10)[0]
        return None if got.error is not None else got.offset
    finally:
        c.close()


def test_committed_offsets_survive_a_restart_of_their_coordinator():
    with QuorumCluster(3, settings=SETTINGS) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        wait_brokers_unfenced(admin, cluster.broker_count)   # leaders spread over all brokers
        wait_until(lambda: create_topic(admin, TOPIC), 60, "the topic created")
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP, **QUIET})
        wait_until(lambda: c.commit(offsets=[TopicPartition(TOPIC, 0, 1234)], asynchronous=False) or True, 60,
                   "a commit acknowledged")
        c.close()
        wait_until(lambda: _offsets_partition(admin)[0] > 0, 60, "a leader for the group's partition")
        coordinator = _offsets_partition(admin)[0]
        cluster.nodes[coordinator].kill()
        time.sleep(0.5)
        cluster.nodes[coordinator].start()
        got = []
        wait_until(lambda: got.append(_committed(cluster.bootstrap)) or got[-1] is not None, 60,
              "the committed offset read back")
        assert got[-1] == 1234, f"committed 1234 before the restart, read back {got[-1]}"

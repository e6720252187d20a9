"""Share groups on a 3-node KRaft cluster (replication factor 3): the share-group coordinator and the
share-partition leader are wherever the cluster puts them; confluent-kafka ShareConsumer members share
one partition (release / reject / delivery limit), and a member killed -9 has its records come back
after the lock. The scenarios are tests/test_share_groups.py's."""
from __future__ import annotations

import pytest

pytest.importorskip("confluent_kafka")

from tests.test_share_groups import SETTINGS, killed_member_scenario, python_member, sharing_scenario  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

CLUSTER = {**SETTINGS, "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "3",
           "broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "2000"}


@pytest.fixture(scope="module")
def cluster():
    with QuorumCluster(3, settings=CLUSTER) as c:
        yield c


@pytest.mark.timeout(180)
def test_members_share_a_partition_on_three_nodes(cluster):
    sharing_scenario(cluster.bootstrap, python_member, "share-c-orders", "share-c-g1", replication=3)


@pytest.mark.timeout(180)
def test_killed_member_on_three_nodes(cluster):
    killed_member_scenario(cluster.bootstrap, python_member, "share-c-jobs", "share-c-g2", replication=3)

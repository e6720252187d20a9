"""A follower killed -9 and restarted while no data flows is back in every ISR (issue 26).

With nothing produced, every fetch of a follower long-polls: the leader must still record the
fetch (the follower's fetch offset, caught up) and add the follower back to the ISR. The
reverted 'replcost' merge (73af03d, reverted by d0afd29) left a node restarted after kill -9 at
10,000 RF=3 idle partitions out of some ISRs for minutes; the suite's restart tests all have a
producer running, whose appends end every long poll early and move the fetch offsets.
This test fails (node 3 out of all 12 ISRs after 20 s) on a leader that does not record a
follower's long-polling fetch at its log end. It did not fail with the replcost commits: their
fault was intermittent at 10,000 partitions and not seen at 300 (docs/performance.md).

Three real `kproto serve` processes (tools/quorum_cluster.py), idle RF=3 partitions, the ISRs
read through Metadata by a real client (confluent-kafka's AdminClient)."""
from __future__ import annotations

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

from tools.cluster_client import QUIET, create_topic, wait_brokers_unfenced, wait_until  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

# a short broker session and lag: the killed node leaves the ISRs within seconds. The fetch
# settings are Kafka's defaults: every idle fetch long-polls replica.fetch.wait.max.ms
SETTINGS = {"broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "2000",
            "replica.lag.time.max.ms": "3000", "offsets.topic.replication.factor": "3",
            "default.replication.factor": "3", "min.insync.replicas": "2"}
TOPIC, PARTITIONS = "idle", 12
BACK_WITHIN_S = 20   # main: a few seconds on the shared 2-core machine


def _without(admin, broker: int) -> list:
    """The partitions of TOPIC that have ``broker`` as a replica but not in their ISR (None while
    the metadata is not answered)."""
    try:
        parts = admin.list_topics(TOPIC, timeout=5).topics[TOPIC].partitions
    except Exception:   # noqa: BLE001 - a node restarting
        return None
    if len(parts) < PARTITIONS:
        return None
    return sorted(i for i, p in parts.items() if broker in p.replicas and broker not in p.isrs)


@pytest.mark.timeout(120)
def test_a_follower_restarted_after_kill_9_with_no_data_flowing_is_back_in_every_isr():
    with QuorumCluster(3, settings=SETTINGS) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        wait_brokers_unfenced(admin, 3)   # (replicas and leaders spread over all three)
        wait_until(lambda: create_topic(admin, TOPIC, PARTITIONS, 3), 60, "the topic created")
        wait_until(lambda: _without(admin, 3) == [] and all(
            len(p.isrs) == 3 for p in admin.list_topics(TOPIC, timeout=5).topics[TOPIC].partitions.values()),
            30, "every ISR full")
        victim = cluster.nodes[3]
        victim.kill()
        others = AdminClient({"bootstrap.servers": f"{cluster.host}:{cluster.ports[1]},"
                                                   f"{cluster.host}:{cluster.ports[2]}", **QUIET})
        wait_until(lambda: _without(others, 3) == list(range(PARTITIONS)), 30,
                   "node 3 out of every ISR once fenced")
        victim.start()
        last = []

        def back() -> bool:
            last[:] = [_without(others, 3)]
            return last[0] == []
        wait_until(back, BACK_WITHIN_S, "node 3 back in every ISR", detail=lambda: f"still out of {last}")

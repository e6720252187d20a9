"""A paused active controller that resumes (SIGSTOP past the broker session, SIGCONT) on a 3-node
cluster of real `kproto serve` processes, with Kafka's default min.insync.replicas=1.

While it was stopped, another node became the active controller. On resume the paused node still
believes for a moment that it leads the quorum: its fencing timer sees nobody's heartbeat for
seconds, so it proposes fencing every broker and electing itself the leader of its partitions with
an ISR of one. Those records never commit. Its broker side must not act on them (Kafka's brokers
only see committed metadata): otherwise it leads a partition at a leader epoch the cluster gave to
another node, acknowledges acks=all writes alone, and loses them when it learns the truth.

What is checked: every acknowledged record is in the log, once, in order; no two nodes ever led
the same partition at the same leader epoch; and no node took up a leadership from metadata it
then threw away (a "leader at epoch" line in the half second before its "metadata image rebuilt
from the committed log", which a deposed controller logs when it learns of the new one). The last
two read the nodes' own INFO lines: the lost acknowledgement itself needs a produce request to
arrive in those milliseconds, which this test cannot arrange every time."""
from __future__ import annotations

import re
import signal
import time
from datetime import datetime

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

from kproto.messages.describe_cluster_request import DescribeClusterRequest  # noqa: E402
from tests.wire_client import WireClient  # noqa: E402
from tools.cluster_client import (QUIET, AckedProducer, assert_exactly_once_in_order, create_topic,  # noqa: E402
                                  partition_state, read_partition, wait_until)
from tools.quorum_cluster import QuorumCluster  # noqa: E402

SETTINGS = {"broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "2000",
            "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "default.replication.factor": "3",
            "offsets.topic.replication.factor": "3", "min.insync.replicas": "1"}
LEADER_LINE = re.compile(r'msg="(\S+)-(\d+): leader at epoch (\d+) ')
TIME = re.compile(r"ts=(\S+)Z ")
PAUSES = 3


def _controller(cluster, skip=()) -> int:
    """The active controller, as a controller listener reports it (DescribeCluster of the
    controllers, KIP-919), asked of the nodes not in `skip`; -1 while there is none."""
    for i in cluster.nodes:
        if i in skip:
            continue
        try:
            with WireClient(f"127.0.0.1:{cluster.controller_ports[i]}", timeout=3.0) as w:
                r = w.call(DescribeClusterRequest(endpoint_type=2, include_cluster_authorized_operations=False), 1)
        except OSError:
            continue
        # a node between elections answers -1: ask the next one
        if r.error_code == 0 and r.controller_id >= 0:
            return r.controller_id
    return -1


def _wait_for_controller(cluster, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while (found := _controller(cluster)) < 0:
        assert time.monotonic() < deadline, f"no active controller within {timeout:.0f} s"
        time.sleep(0.2)
    return found


def leaders_by_epoch(cluster) -> dict:
    """{(topic, partition, leader epoch): {node ids that logged leading it}}"""
    out: dict = {}
    for node_id, node in cluster.nodes.items():
        for line in list(node.stderr_lines):
            m = LEADER_LINE.search(line)
            if m:
                out.setdefault((m[1], int(m[2]), int(m[3])), set()).add(node_id)
    return out


def leaderships_thrown_away(cluster) -> list:
    """(node, line) of each leadership a node took up in the half second before it rebuilt its
    image from the committed log (the metadata it acted on was not committed)."""
    out = []
    for node_id, node in cluster.nodes.items():
        taken = []
        for line in list(node.stderr_lines):
            t = TIME.search(line)
            when = datetime.fromisoformat(t[1]).timestamp() if t else None
            if when is not None and LEADER_LINE.search(line):
                taken.append((when, line.strip()))
            elif when is not None and "metadata image rebuilt from the committed log" in line:
                out += [(node_id, text) for at, text in taken if when - 0.5 <= at <= when]
    return out


@pytest.mark.long
def test_a_resumed_controller_acts_on_committed_metadata_only():
    with QuorumCluster(3, settings=SETTINGS, log_level="INFO") as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        controller = _wait_for_controller(cluster)
        others = [n for n in (1, 2, 3) if n != controller]
        topic = "paused"
        # the active controller is the preferred leader: it leads the partition the producer writes
        wait_until(lambda: create_topic(admin, topic, replica_assignment=[[controller, *others]]), 60,
                   "the topic created")
        wait_until(lambda: partition_state(admin, topic)[0] == controller
                   and len(partition_state(admin, topic)[2]) == 3, 30, "led by the controller, ISR of 3")
        producer = AckedProducer(cluster.bootstrap, topic, b"m%07d", rate=500).start()
        try:
            for _ in range(PAUSES):
                producer.wait_for_acks(300, 60)
                # just after a resume the quorum may be between leaders: wait for one
                paused = _wait_for_controller(cluster)
                cluster.nodes[paused].signal(signal.SIGSTOP)
                try:
                    # past the broker session: the others fence it and elect a new controller
                    wait_until(lambda: _controller(cluster, skip=(paused,)) not in (paused, -1), 30,
                               "another controller")
                    time.sleep(2.5)
                finally:
                    cluster.nodes[paused].signal(signal.SIGCONT)
                producer.wait_for_acks(300, 60, "acks after the resume")
                wait_until(lambda: len(partition_state(admin, topic)[2]) == 3, 60, "the ISR whole again")
        finally:
            producer.stop(90)
        assert not producer.errors, producer.errors[:3]
        values = read_partition(cluster.bootstrap, topic, len(producer.acked), 60)
        assert_exactly_once_in_order(values, producer.acked)
        twice = {k: v for k, v in leaders_by_epoch(cluster).items() if len(v) > 1}
        assert not twice, f"a partition led by two nodes at one leader epoch: {twice}"
        thrown = leaderships_thrown_away(cluster)
        assert not thrown, f"leaderships taken up from uncommitted metadata: {thrown[:3]}"

"""A failed log directory in a cluster moves leadership away (JBOD in KRaft, KIP-858), with real
processes: a 3-node KRaft cluster (tools/quorum_cluster.py) whose node 1 has two log dirs, the
second a small tmpfs (needs root to mount it, skipped otherwise). A topic has a partition led by
node 1 in each of its dirs, acks=all idempotent producers write to both; the tmpfs is then filled,
so node 1's next write there fails (ENOSPC). As with Kafka 3.9: the partition in the failed dir
gets a new leader on another broker within a few seconds (node 1's heartbeat reports the dir,
the controller elects), Metadata lists node 1's replica there as offline, producing to it goes
on, and every acknowledged record is read back once, in order; the partition in node 1's healthy
dir stays led by node 1, which keeps running. (Kafka 3.9 in the same scenario, run by hand: the
leadership moved in 0.3 s, ISR [2, 3], offline replicas [1], the other partition kept leader 1.)
A broker whose failed dir no controller acknowledges (the other voters stopped) halts once
log.dir.failure.timeout.ms has passed, saying why, as Kafka's BrokerLifecycleManager does."""
from __future__ import annotations

import os
import signal
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

from kproto import records as rec  # noqa: E402
from kproto.errors import ErrorCode  # noqa: E402
from kproto.messages.describe_log_dirs_request import DescribeLogDirsRequest  # noqa: E402
from tests.wire_client import WireClient, produce  # noqa: E402
from tests.wire_client import metadata as wire_metadata  # noqa: E402

from tools.cluster_client import (  # noqa: E402
    QUIET, AckedProducer, assert_exactly_once_in_order, create_topic, partition_state, read_partition,
    wait_brokers_unfenced, wait_until,
)
from tools.quorum_cluster import QuorumCluster  # noqa: E402
from tests.tmpfs import small_tmpfs  # noqa: E402

SETTINGS = {"broker.heartbeat.interval.ms": "500", "broker.session.timeout.ms": "6000",
            "replica.lag.time.max.ms": "10000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "min.insync.replicas": "2"}
TOPIC = "jbod"


@pytest.fixture
def small_dir(tmp_path):
    with small_tmpfs(tmp_path / "node1b", "16m") as path:
        yield str(path)


def _fill(path: str) -> None:
    """Take every free byte of the file system at `path`."""
    with open(os.path.join(path, "filler"), "wb") as f:
        chunk = b"\0" * 65536
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError:
            pass


def _offline_replicas(node, partition: int) -> list:
    """Metadata's offline replicas of a partition, as node answers (v12)."""
    with WireClient(node.bootstrap) as c:
        return next(p.offline_replicas for p in wire_metadata(c, TOPIC, version=12).partitions
                    if p.partition_index == partition)


def _log_dirs(node) -> dict:
    """{log dir: (error code, topics it reports)} as node answers DescribeLogDirs v4."""
    with WireClient(node.bootstrap) as c:
        r = c.call(DescribeLogDirsRequest(topics=None), 4)
    return {d.log_dir: (d.error_code, sorted(t.name for t in d.topics)) for d in r.results}


def _two_dirs_on_node_1(tmp_path, small_dir: str, more: dict | None = None) -> tuple:
    """(node 1's healthy dir, a 3-node cluster not started yet whose node 1 has two log dirs, the
    healthy one and small_dir)."""
    healthy = str(tmp_path / "node1a")
    return healthy, QuorumCluster(3, base_dir=str(tmp_path), settings=SETTINGS,
                                  node_settings={1: {"log.dirs": f"{healthy},{small_dir}", **(more or {})}})


def _start_with_a_partition_in_each_dir(cluster, healthy: str, small_dir: str):
    """Start the cluster and create TOPIC: node 1 leads both partitions and places its replicas one
    in each dir (the one with fewer partitions). (admin, the partition node 1 placed in small_dir)."""
    cluster.format()
    cluster.start()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
    # every broker unfenced first (a broker registers fenced and may not lead until unfenced)
    wait_brokers_unfenced(admin, cluster.broker_count)
    wait_until(lambda: create_topic(admin, TOPIC, 2, replica_assignment=[[1, 2, 3], [1, 3, 2]]), 60,
               "the topic created")
    wait_until(lambda: all(len(partition_state(admin, TOPIC, i)[2]) == 3 for i in (0, 1)), 30, "ISRs of 3")
    # (node 1 creates its replicas' directories once its image has the topic)
    wait_until(lambda: all(any(os.path.isdir(os.path.join(d, f"{TOPIC}-{i}")) for d in (healthy, small_dir))
                           for i in (0, 1)), 30, "node 1's replicas created")
    in_dir = {i: next(d for d in (healthy, small_dir) if os.path.isdir(os.path.join(d, f"{TOPIC}-{i}")))
              for i in (0, 1)}
    assert sorted(in_dir.values()) == sorted([healthy, small_dir]), in_dir
    return admin, next(i for i in (0, 1) if in_dir[i] == small_dir)


@pytest.mark.timeout(180)
def test_a_failed_log_dir_moves_its_partitions_leadership_to_healthy_brokers(tmp_path, small_dir):
    healthy, cluster = _two_dirs_on_node_1(tmp_path, small_dir)
    producers = {}
    try:
        admin, failing = _start_with_a_partition_in_each_dir(cluster, healthy, small_dir)
        kept = 1 - failing
        producers = {i: AckedProducer(cluster.bootstrap, TOPIC, partition=i, rate=200).start() for i in (0, 1)}
        for p in producers.values():
            p.wait_for_acks(200, 60, "acks before the failure")

        _fill(small_dir)
        failed_at = time.monotonic()
        wait_until(lambda: partition_state(admin, TOPIC, failing)[0] not in (1, -1), 20,
                   "a new leader for the partition in the failed dir",
                   detail=lambda: f"state {partition_state(admin, TOPIC, failing)}")
        took = time.monotonic() - failed_at
        leader, _replicas, isr = partition_state(admin, TOPIC, failing)
        assert leader in (2, 3) and 1 not in isr, (leader, isr)
        print(f"leadership moved in {took:.1f} s")
        # every node's Metadata lists node 1's replica there as offline (KRaftMetadataCache)
        wait_until(lambda: all(_offline_replicas(n, failing) == [1] for n in cluster.nodes.values()), 10,
                   "node 1's replica offline")
        # the partition in the healthy dir keeps its leader, node 1, which keeps running
        assert partition_state(admin, TOPIC, kept)[0] == 1
        assert _offline_replicas(cluster.nodes[2], kept) == []
        # node 1's DescribeLogDirs: the failed dir answers KAFKA_STORAGE_ERROR and nothing more
        # (ReplicaManager.describeLogDirs), the healthy one goes on reporting its partition
        dirs = {os.path.abspath(d): v for d, v in _log_dirs(cluster.nodes[1]).items()}
        assert dirs[os.path.abspath(small_dir)] == (ErrorCode.KAFKA_STORAGE_ERROR, []), dirs
        assert dirs[os.path.abspath(healthy)] == (0, [TOPIC]), dirs
        for p in producers.values():
            p.wait_for_acks(300, 60, "acks after the failure")
        assert partition_state(admin, TOPIC, kept)[0] == 1 and cluster.nodes[1].alive()
        for i, p in producers.items():
            p.stop()
            assert not p.errors, (i, p.errors[:3])
            # every acknowledged record, once, in order (read from the leader each partition has now)
            values = read_partition(cluster.bootstrap, TOPIC, len(p.acked), 60, group=f"check{i}", partition=i)
            assert_exactly_once_in_order(values, p.acked)
    finally:
        for p in producers.values():
            p.stop(5)
        cluster.cleanup()


@pytest.mark.timeout(180)
def test_a_broker_that_cannot_report_its_failed_dir_halts_after_the_timeout(tmp_path, small_dir):
    # Kafka's BrokerLifecycleManager: a failed dir not acknowledged by the controller within
    # log.dir.failure.timeout.ms shuts the broker down ("couldn't communicate offline log dir ...
    # with controllers"), since its replicas there would otherwise stay leaders nobody can read
    timeout_ms = 3000
    healthy, cluster = _two_dirs_on_node_1(tmp_path, small_dir, {"log.dir.failure.timeout.ms": str(timeout_ms)})
    try:
        _admin, failing = _start_with_a_partition_in_each_dir(cluster, healthy, small_dir)
        node = cluster.nodes[1]
        # no controller can answer node 1: the other two voters stopped, so no quorum commits its
        # report (node 1 itself may be the raft leader, without a majority)
        for i in (2, 3):
            cluster.nodes[i].signal(signal.SIGSTOP)
        _fill(small_dir)
        with WireClient(node.bootstrap) as c:   # node 1's next append there fails (ENOSPC)
            code = produce(c, TOPIC, rec.build_batch([(b"k", b"v")]), failing, acks=1).error_code
        failed_at = time.monotonic()
        assert code == ErrorCode.KAFKA_STORAGE_ERROR, code
        wait_until(lambda: not node.alive(), 30, "node 1 to halt",
                   detail=lambda: "".join(node.stderr_lines[-10:]))
        took = time.monotonic() - failed_at
        assert node.proc.returncode == 1, node.proc.returncode
        # not before the timeout: until then a controller may still acknowledge the report
        assert took >= timeout_ms / 1000 - 0.5, took
        lines = [line for line in node.stderr_lines if "couldn't communicate offline log dir" in line]
        assert lines and "log.dir.failure.timeout.ms" in lines[0], "".join(node.stderr_lines[-10:])
        print(f"halted {took:.1f} s after the dir failed (log.dir.failure.timeout.ms={timeout_ms})")
    finally:
        for i in (2, 3):
            cluster.nodes[i].signal(signal.SIGCONT)
        cluster.cleanup()


@pytest.mark.timeout(120)
def test_a_log_that_cannot_be_made_fails_its_dir_and_leadership_leaves_it(tmp_path, small_dir):
    # The trigger is a new partition's log (Kafka's LogManager.getOrCreateLog): node 1's small dir
    # is full when a topic is created, and the partition node 1 places there (the dir with fewer
    # partitions) cannot be made. The dir fails with it: node 1's replica of the partition it
    # already hosted there goes offline too (ReplicaManager.handleLogDirFailure) and its
    # leadership moves; the new partition, whose replica no dir holds, is assigned to the failed
    # dir (AssignReplicasToDirs), so its leadership moves as well (an UNASSIGNED replica would
    # escape handleDirectoriesOffline and stay leader, answering KAFKA_STORAGE_ERROR). acks=all
    # producers write on (min.insync.replicas=2 of 3) and nothing acknowledged is lost.
    producers = {}   # the new topic's, by partition
    healthy, cluster = _two_dirs_on_node_1(tmp_path, small_dir)
    try:
        admin, failing = _start_with_a_partition_in_each_dir(cluster, healthy, small_dir)
        # paced: unpaced, a slow start lets the client queue and then write enough to fill the
        # small dir before the test does (CI saw the dir full before _fill opened its file)
        before = AckedProducer(cluster.bootstrap, TOPIC, partition=failing, rate=500).start()
        before.wait_for_acks(100, 60, "acks before the failure")
        before.stop()
        assert not before.errors, before.errors[:3]

        _fill(small_dir)
        fresh = "fresh"
        # node 1 leads both partitions; fresh-0 goes to the healthy dir (ties: log.dirs order),
        # fresh-1 to the small one, where its log cannot be made
        create_topic(admin, fresh, 2, replica_assignment=[[1, 2, 3], [1, 3, 2]])
        node1 = cluster.nodes[1]
        wait_until(lambda: any(f"making the log of {fresh}-1 failed" in line for line in node1.stderr_lines), 20,
                   "node 1 to fail making fresh-1's log")
        for topic, i in ((TOPIC, failing), (fresh, 1)):
            wait_until(lambda: partition_state(admin, topic, i)[0] in (2, 3), 20, f"a new leader for {topic}-{i}",
                       detail=lambda: f"state {partition_state(admin, topic, i)}")
            assert 1 not in partition_state(admin, topic, i)[2]
        assert partition_state(admin, fresh, 0)[0] == 1   # in the healthy dir: node 1 leads on
        producers = {i: AckedProducer(cluster.bootstrap, fresh, partition=i, rate=500).start() for i in (0, 1)}
        for p in producers.values():
            p.wait_for_acks(200, 30, "acks to the new topic")
        assert node1.alive()
        for i, p in producers.items():
            p.stop()
            assert not p.errors, (i, p.errors[:3])
            values = read_partition(cluster.bootstrap, fresh, len(p.acked), 30, group=f"fresh{i}", partition=i)
            assert_exactly_once_in_order(values, p.acked)
        values = read_partition(cluster.bootstrap, TOPIC, len(before.acked), 30, group="before", partition=failing)
        assert_exactly_once_in_order(values, before.acked)
    finally:
        for p in producers.values():
            p.stop(5)
        cluster.cleanup()

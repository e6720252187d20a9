"""The group coordinator under kill -9, with three real `kproto serve`
processes (tools/quorum_cluster.py), `__consumer_offsets` replicated three
ways with min.insync.replicas=2: one client commits ever larger offsets for
a group while another reads the group's committed offset back, and the
broker coordinating the group is killed KPROTO_GROUP_KILLS times (2 in CI)
and restarted. No acknowledged commit is lost and the committed offset read
back never goes backwards (a coordinator answers a commit only once it is
replicated, and a new coordinator serves only what its replicas agree on)."""
from __future__ import annotations

import os
import threading
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from broker.groups.placement import partition_for  # noqa: E402
from tools.cluster_client import QUIET, create_topic, wait_until, wait_brokers_unfenced  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

KILLS = int(os.environ.get("KPROTO_GROUP_KILLS", "2"))
OFFSETS_PARTITIONS = 3
SETTINGS = {"broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "2000",
            "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "offsets.topic.replication.factor": "3",
            "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "default.replication.factor": "3", "min.insync.replicas": "2"}
GROUP, TOPIC = "committer", "committed"


def _offsets_partition(admin):
    md = admin.list_topics("__consumer_offsets", timeout=5)
    p = md.topics["__consumer_offsets"].partitions[partition_for(GROUP, OFFSETS_PARTITIONS)]
    return p.leader, list(p.isrs)


def _committed(bootstrap) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, **QUIET})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                got = c.committed([TopicPartition(TOPIC, 0)], timeout=10)[0]
                if got.error is None:
                    return got.offset
            except confluent_kafka.KafkaException:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.1)
    finally:
        c.close()


class History:
    def __init__(self):
        self.lock = threading.Lock()
        self.acked: list[tuple[float, int]] = []      # (when acknowledged, offset)
        self.failed = 0
        self.reads: list[tuple[float, float, int]] = []   # (asked, answered, offset)

    def max_acked_before(self, t: float) -> int:
        with self.lock:
            return max((o for when, o in self.acked if when < t), default=-1)


def _commit_loop(bootstrap, h: History, stop, go, paused):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                  "socket.timeout.ms": 5000, **QUIET})
    n = 0
    try:
        while not stop.is_set():
            if not go.is_set():
                paused.set()
                go.wait(1)
                continue
            paused.clear()
            n += 1
            try:
                c.commit(offsets=[TopicPartition(TOPIC, 0, n)], asynchronous=False)
            except confluent_kafka.KafkaException:
                with h.lock:
                    h.failed += 1
                time.sleep(0.05)
                continue
            with h.lock:
                h.acked.append((time.monotonic(), n))
    finally:
        c.close()


def _read_loop(bootstrap, h: History, stop):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False, **QUIET})
    try:
        while not stop.is_set():
            asked = time.monotonic()
            try:
                got = c.committed([TopicPartition(TOPIC, 0)], timeout=5)[0]
            except confluent_kafka.KafkaException:
                time.sleep(0.05)
                continue
            if got.error is None and got.offset >= 0:
                with h.lock:
                    h.reads.append((asked, time.monotonic(), got.offset))
            time.sleep(0.02)
    finally:
        c.close()


def test_committed_offsets_survive_coordinator_kills_and_never_go_back():
    cluster = QuorumCluster(3, settings=SETTINGS)
    cluster.format()
    cluster.start()
    stop = threading.Event()
    threads = []
    h = History()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        wait_brokers_unfenced(admin, cluster.broker_count)   # leaders spread over all brokers
        wait_until(lambda: create_topic(admin, TOPIC), 60, "the topic created")
        go, paused = threading.Event(), threading.Event()
        go.set()
        threads = [threading.Thread(target=_commit_loop, args=(cluster.bootstrap, h, stop, go, paused)),
                   threading.Thread(target=_read_loop, args=(cluster.bootstrap, h, stop))]
        for t in threads:
            t.start()
        wait_until(lambda: len(h.acked) >= 20, 60, "the first commits acknowledged")
        wait_until(lambda: len(_offsets_partition(admin)[1]) == 3, 30, "an ISR of 3 for the group's partition")
        killed_at = len(h.acked)
        for _ in range(KILLS):
            coordinator = _offsets_partition(admin)[0]
            # the kill comes right after a commit was acknowledged: it must be there after the failover
            go.clear()
            wait_until(paused.is_set, 30, "the committer paused")
            cluster.nodes[coordinator].kill()
            killed_at = len(h.acked)
            last = h.acked[-1][1]
            wait_until(lambda: _offsets_partition(admin)[0] not in (coordinator, -1), 30, "a new coordinator")
            after = _committed(cluster.bootstrap)
            assert after >= last, f"commit of {last} acknowledged before the kill, {after} after the failover"
            go.set()
            wait_until(lambda: len(h.acked) >= killed_at + 20, 60,
                       f"commits acknowledged by the new coordinator ({len(h.acked)} acked, {h.failed} failed)")
            cluster.nodes[coordinator].start()
            wait_until(lambda: len(_offsets_partition(admin)[1]) == 3, 60, "the killed broker back in the ISR")
        wait_until(lambda: len(h.acked) >= killed_at + 40, 60, "commits after the restart")
        # the reader's pace depends on the failovers (a read waits out a dead coordinator): it
        # gets the time for a few reads after the last one, so the checks below have something
        reads = len(h.reads)
        wait_until(lambda: len(h.reads) >= max(5, reads + 2), 60, "committed offsets read back")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        final = None
        try:
            c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP, **QUIET})
            final = c.committed([TopicPartition(TOPIC, 0)], timeout=30)[0].offset
            c.close()
        finally:
            cluster.cleanup()

    last_acked = h.acked[-1][1]
    assert final is not None and final >= last_acked, (final, last_acked)
    # a read never goes back, and never shows less than what was acknowledged before it was asked
    previous = -1
    for asked, answered, offset in h.reads:
        assert offset >= previous, f"committed offset went back from {previous} to {offset}"
        floor = h.max_acked_before(asked)
        assert offset >= floor, f"read {offset} after {floor} was acknowledged"
        previous = offset
    assert len(h.reads) >= 5
    print(f"\n{KILLS} coordinator kills: {len(h.acked)} commits acknowledged, {h.failed} failed, "
          f"{len(h.reads)} reads, final committed offset {final} (last acknowledged {last_acked})")

"""Tiered storage on three `kproto serve` processes (RF=3, one local-directory store shared by
all, as a shared object store): a follower that was down while the leader tiered and deleted its
local segments rebuilds from the tier (OFFSET_MOVED_TO_TIERED_STORAGE) and rejoins the ISR; kill -9
of the leader in the middle of a copy (held back by the copy quota); the new leader continues
where the old one stopped. Afterwards the remote segments in __remote_log_metadata cover every
copied offset from 0 with no gap, no segment is listed twice, no object of the interrupted copy
is left in the store, and a consumer reads every offset once from offset 0."""
from __future__ import annotations

import os
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # noqa: E402

from broker.tiered import metadata_records as mr  # noqa: E402
from tests.wire_client import WireClient, delete_records, fetch, list_offset  # noqa: E402
from tools.cluster_client import QUIET, partition_state, wait_brokers_unfenced, wait_until  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

pytestmark = pytest.mark.timeout(240)

SEGMENT = 16 * 1024
VALUE = b"x" * 400


@pytest.fixture
def cluster(tmp_path):
    settings = {"broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "2000",
                "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
                "replica.fetch.backoff.ms": "100", "default.replication.factor": "3",
                "remote.log.storage.system.enable": "true", "remote.log.manager.task.interval.ms": "200",
                "log.retention.check.interval.ms": "200", "log.segment.delete.delay.ms": "0",
                "rsm.config.dir": str(tmp_path / "remote"),
                "rlmm.config.remote.log.metadata.topic.num.partitions": "2"}
    (tmp_path / "cluster").mkdir()
    with QuorumCluster(3, base_dir=str(tmp_path / "cluster"), settings=settings, log_level=os.environ.get("KPROTO_TEST_LOG", "WARNING")) as c:
        yield c


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 4096,
                                  "enable.idempotence": True, **QUIET})
    for i in range(start, start + count):
        while True:
            try:
                p.produce(topic, value=VALUE + b"%08d" % i)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0


def tier_offsets(cluster, node: int, topic: str) -> dict[int, int]:
    with WireClient(f"{cluster.host}:{cluster.ports[node]}") as c:
        return {ts: list_offset(c, topic, ts).offset for ts in (-1, -2, -4, -5)}


def remote_segments(bootstrap: str) -> dict:
    """segment id -> (start, end, last state) as __remote_log_metadata says."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"rlmm-{time.monotonic_ns()}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest", **QUIET})
    md = c.list_topics("__remote_log_metadata", timeout=10).topics["__remote_log_metadata"]
    c.assign([confluent_kafka.TopicPartition("__remote_log_metadata", p, 0) for p in md.partitions])
    segs: dict = {}
    idle = time.monotonic() + 3
    while time.monotonic() < idle:
        m = c.poll(0.3)
        if m is None or m.error():
            continue
        idle = time.monotonic() + 2
        r = mr.decode(m.value())
        if isinstance(r, mr.SegmentMetadata):
            segs[r.segment_id] = [r.start_offset, r.end_offset, r.state]
        elif isinstance(r, mr.SegmentUpdate) and r.segment_id in segs:
            segs[r.segment_id][2] = r.state
    c.close()
    return segs


def read_all(bootstrap: str, topic: str, count: int) -> list[int]:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{time.monotonic_ns()}",
                                  "enable.auto.commit": False, "auto.offset.reset": "error", **QUIET})
    c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 60
    while len(out) < count and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            assert m.value() == VALUE + b"%08d" % m.offset()
            out.append(m.offset())
    c.close()
    return out


@pytest.mark.long
def test_follower_rebuilds_from_the_tier_and_a_leader_killed_mid_copy_leaves_no_gap(cluster, tmp_path):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
    wait_brokers_unfenced(admin, 3)
    topic = "tiered-rf3"
    fs = admin.create_topics([NewTopic(topic, 1, 3, config={
        "remote.storage.enable": "true", "segment.bytes": str(SEGMENT), "local.retention.bytes": str(2 * SEGMENT),
        "min.insync.replicas": "1"})])
    fs[topic].result(30)
    leader, replicas, _isr = wait_until(lambda: (lambda s: s if s[0] > 0 else None)(partition_state(admin, topic)),
                                        30, "a leader")
    follower = next(r for r in replicas if r != leader)
    cluster.nodes[follower].kill()
    first = 800
    produce(cluster.bootstrap, topic, 0, first)
    wait_until(lambda: tier_offsets(cluster, leader, topic)[-4] > 0, 60, "the leader's local segments tiered")
    # the follower comes back below the leader's local log start: it rebuilds from the tier
    cluster.nodes[follower].start()
    wait_until(lambda: len(partition_state(admin, topic)[2]) == 3, 60, "the follower back in the ISR")
    # its local log starts where the leader's does (not after the last copied segment)
    leader_local_start = tier_offsets(cluster, leader, topic)[-4]
    assert 0 < tier_offsets(cluster, follower, topic)[-4] == leader_local_start
    # slow copying (the quota holds a copy between its .log object and its COPY_SEGMENT_FINISHED)
    admin.alter_configs([ConfigResource(ConfigResource.Type.BROKER, str(leader), set_config={
        "remote.log.manager.copy.max.bytes.per.second": "4096"})])[
        ConfigResource(ConfigResource.Type.BROKER, str(leader))].result(10)
    produce(cluster.bootstrap, topic, first, 200)
    remote = str(tmp_path / "remote")
    before = {f for _d, _s, fs_ in os.walk(remote) for f in fs_ if f.endswith(".log")}
    wait_until(lambda: {f for _d, _s, fs_ in os.walk(remote) for f in fs_ if f.endswith(".log")} - before,
               30, "a copy under way")
    cluster.nodes[leader].kill()
    second = 800
    produce(cluster.bootstrap, topic, first + 200, second)
    total = first + 200 + second
    new_leader = wait_until(lambda: (lambda s: s[0] if s[0] > 0 and s[0] != leader else None)(
        partition_state(admin, topic)), 30, "a new leader")
    wait_until(lambda: tier_offsets(cluster, new_leader, topic)[-5] >= total - 3 * (SEGMENT // 400), 90,
               "the new leader copying the rest")
    cluster.nodes[leader].start()

    def settled():
        segs = remote_segments(cluster.bootstrap)
        done = sorted((s, e) for s, e, st in segs.values() if st == mr.COPY_SEGMENT_FINISHED)
        pending = [v for v in segs.values() if v[2] in (mr.COPY_SEGMENT_STARTED, mr.DELETE_SEGMENT_STARTED)]
        return (done, pending) if not pending else None
    done, _ = wait_until(settled, 60, "unfinished copies cleaned up")
    states = [st for _s, _e, st in remote_segments(cluster.bootstrap).values()]
    assert mr.DELETE_SEGMENT_FINISHED in states, "no interrupted copy was seen (the kill missed the copy)"
    assert done[0][0] == 0
    for (s1, e1), (s2, _e2) in zip(done, done[1:]):
        assert s2 != s1, f"segment at {s1} listed twice"
        assert s2 <= e1 + 1, f"gap between {e1} and {s2}"
    objects = [f for _d, _s, fs_ in os.walk(remote) for f in fs_ if f.endswith(".log")]
    starts = {int(f.split("-")[0]) for f in objects}
    assert starts == {s for s, _e in done}, "objects of unfinished copies left in the store"
    assert len(objects) == len(done)
    assert read_all(cluster.bootstrap, topic, total) == list(range(total))

    # a broker with no replica of __remote_log_metadata (added now: it hosts nothing yet) follows
    # a tiered partition: it reads that metadata partition from its leader (as Kafka's
    # TopicBasedRemoteLogMetadataManager subscribes to the partitions of what it leads or follows),
    # so its local retention deletes copied segments, and once it leads it continues where the
    # old leader stopped: no segment copied twice
    cluster.add_broker(4)
    wait_brokers_unfenced(admin, 4)
    old = next(n for n in (1, 2, 3) if n in cluster.nodes)
    topic2 = "tiered-rlmm-follower"
    admin.create_topics([NewTopic(topic2, num_partitions=1, replica_assignment=[[old, 4]], config={
        "remote.storage.enable": "true", "segment.bytes": str(SEGMENT), "local.retention.bytes": str(2 * SEGMENT),
        "min.insync.replicas": "1"})])[topic2].result(30)
    wait_until(lambda: partition_state(admin, topic2)[0] == old, 30, "the first replica leading")
    produce(cluster.bootstrap, topic2, 0, 400)
    wait_until(lambda: tier_offsets(cluster, 4, topic2)[-4] > 0, 60, "the follower's copied segments deleted")
    cluster.nodes[old].kill()
    wait_until(lambda: partition_state(admin, topic2)[0] == 4, 30, "the added broker leading")
    produce(cluster.bootstrap, topic2, 400, 200)
    wait_until(lambda: tier_offsets(cluster, 4, topic2)[-5] > 400, 60, "the new leader copying")
    starts = sorted(int(f.split("-")[0]) for d, _s, fs_ in os.walk(remote) for f in fs_
                    if d.split(os.sep)[-1].startswith(f"{topic2}-0-") and f.endswith(".log"))
    assert starts[0] == 0 and len(starts) == len(set(starts)), f"a segment copied twice: {starts}"
    assert read_all(cluster.bootstrap, topic2, 600) == list(range(600))

    # DeleteRecords into the remote records of the first topic: its live replicas take the new log
    # start from their leader's fetch answers before the answer comes, so once that leader is gone
    # the next one's EARLIEST is still there (not back at the first remote segment) and a read
    # below it is OFFSET_OUT_OF_RANGE (the stopped node back first: the metadata quorum needs two of
    # its three voters to elect a leader once this one is gone)
    cluster.nodes[old].start()
    wait_brokers_unfenced(admin, 4)
    lead = wait_until(lambda: (lambda s: s[0] if len(s[2]) == 3 else None)(partition_state(admin, topic)),
                      60, lambda: f"every replica in the ISR: {partition_state(admin, topic)}")
    with WireClient(f"{cluster.host}:{cluster.ports[lead]}") as c:
        r = delete_records(c, topic, 300)
    assert (r.error_code, r.low_watermark) == (0, 300), r
    cluster.nodes[lead].kill()
    nxt = wait_until(lambda: (lambda s: s[0] if s[0] > 0 and s[0] != lead else None)(partition_state(admin, topic)),
                     30, "another leader")
    with WireClient(f"{cluster.host}:{cluster.ports[nxt]}") as c:
        earliest = wait_until(lambda: (lambda p: p if p.error_code == 0 else None)(list_offset(c, topic, -2)),
                              30, "the new leader answering")
        assert earliest.offset == 300
        assert fetch(c, topic, 0).responses[0].partitions[0].error_code == 1   # OFFSET_OUT_OF_RANGE

"""Metadata log retention (metadata.max.retention.bytes / .ms, as Kafka's KafkaMetadataLog): the
`__cluster_metadata-0` segments wholly before a newer snapshot are deleted, the log start offset
moves to that snapshot, and a restart (or a follower that was away) still comes back with every
topic, from the snapshot. Small settings make it happen within the test: 4 KiB segments, a
snapshot every 8 KiB of records, a 1-byte retention (always breached)."""
import os
import time

import pytest

from kproto.messages.incremental_alter_configs_request import (
    AlterableConfig, AlterConfigsResource, IncrementalAlterConfigsRequest)
from kproto.messages.metadata_request import MetadataRequest

from broker.metadata import retention as metadata_retention, snapshots
from tests.wire_client import WireClient
from broker.launch.process import BrokerProcess
from tools.cluster_client import wait_until

pytestmark = pytest.mark.timeout(240)

TOPICS = [f"kept-{i}" for i in range(4)]
SETTINGS = {"metadata.log.segment.bytes": "4096", "metadata.log.segment.min.bytes": "1024",
            "metadata.log.max.record.bytes.between.snapshots": "4096",
            "metadata.max.retention.bytes": "1", "num.partitions": "1"}


def _segments(metadata_dir: str) -> list[int]:
    """Base offsets of the live (not .deleted) segments of the metadata log."""
    return sorted(int(n[:-4]) for n in os.listdir(metadata_dir) if n.endswith(".log"))


def _metadata_dir(data_dir: str) -> str:
    return os.path.join(data_dir, "__cluster_metadata-0")


def _churn(address: str, changes: int) -> None:
    """Create the topics, then change their configs `changes` times (a metadata record each)."""
    with WireClient(address, timeout=30) as c:
        _create(c)
        for i in range(changes):
            name = TOPICS[i % len(TOPICS)]
            resp = c.call(IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(
                resource_type=2, resource_name=name, configs=[AlterableConfig(
                    name="retention.ms", config_operation=0, value=str(3_600_000 + i))])]), 1)
            assert resp.responses[0].error_code == 0, resp


def _create(c) -> None:
    from kproto.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
    resp = c.call(CreateTopicsRequest(topics=[CreatableTopic(name=t, num_partitions=1, replication_factor=-1)
                                              for t in TOPICS], timeout_ms=30000), 7)
    assert all(t.error_code in (0, 36) for t in resp.topics), resp


def _topics(address: str) -> set:
    with WireClient(address, timeout=10) as c:
        return {t.name for t in c.call(MetadataRequest(topics=None), 12).topics}


def _retention_ms(address: str, topic: str) -> str:
    from kproto.messages.describe_configs_request import DescribeConfigsRequest, DescribeConfigsResource
    with WireClient(address, timeout=10) as c:
        r = c.call(DescribeConfigsRequest(resources=[DescribeConfigsResource(
            resource_type=2, resource_name=topic, configuration_keys=["retention.ms"])]), 4)
    return r.results[0].configs[0].value


def _check_cleaned(metadata_dir: str) -> int:
    """The metadata log no longer starts at 0, and never below the oldest snapshot kept."""
    segments = _segments(metadata_dir)
    kept = snapshots.list_snapshots(metadata_dir)
    assert segments and segments[0] > 0, segments
    assert kept and segments[0] <= kept[-1][0], (segments, kept)
    return segments[0]


def test_single_node_metadata_log_segments_go_and_a_restart_keeps_every_topic(tmp_path):
    broker = BrokerProcess(data_dir=str(tmp_path), settings=SETTINGS).start()
    try:
        _churn(broker.bootstrap, 240)
        mdir = _metadata_dir(str(tmp_path))
        first = _check_cleaned(mdir)
        broker.restart(clean=False)   # kill -9: the snapshot and what follows it are enough
        assert set(TOPICS) <= _topics(broker.bootstrap)
        assert _retention_ms(broker.bootstrap, TOPICS[-1]) == str(3_600_000 + 239)
        assert _segments(mdir)[0] >= first
    finally:
        broker.kill()


def test_quorum_metadata_log_segments_go_and_a_node_that_was_away_gets_the_snapshot():
    from tools.quorum_cluster import QuorumCluster
    with QuorumCluster(3, settings=SETTINGS) as cluster:
        away = 3
        cluster.nodes[away].kill()
        wait_until(lambda: _churn(f"127.0.0.1:{cluster.ports[1]}", 240) or True, 120, "the changes made")
        for i in (1, 2):
            wait_until(lambda: _segments(_metadata_dir(cluster.nodes[i].data_dir))[0] > 0, 30,
                       f"node {i}'s metadata log cleaned")
            _check_cleaned(_metadata_dir(cluster.nodes[i].data_dir))
        # the node that was away needs entries the others no longer have: it is sent the snapshot
        cluster.nodes[away].start()
        address = f"127.0.0.1:{cluster.ports[away]}"
        wait_until(lambda: set(TOPICS) <= _topics(address), 60, "the returning node listing every topic")
        wait_until(lambda: _retention_ms(address, TOPICS[-1]) == str(3_600_000 + 239), 30,
                   "the returning node showing the last change")
        # all nodes restarted: every topic is still there
        cluster.stop()
        time.sleep(0.5)
        cluster.start()
        for i in (1, 2, 3):
            wait_until(lambda: set(TOPICS) <= _topics(f"127.0.0.1:{cluster.ports[i]}"), 60,
                       f"node {i} listing every topic after the restart")


def test_retention_keeps_the_newest_snapshot_and_respects_the_limits(tmp_path):
    """The cleaning rule itself: nothing while under the limits, never past the newest snapshot,
    the time limit measured from the older snapshot's last contained timestamp."""
    from broker.storage.log import PartitionLog
    from kproto import records as rec
    plog = PartitionLog.open(str(tmp_path / "__cluster_metadata-0"), {"segment.bytes": 300}, topic_id=None)
    for i in range(30):
        plog.append(bytearray(rec.build_batch([(None, b"x" * 40, [], 0)])), 0, 0)
    for end, ts in ((10, 1000), (20, 5000)):
        snapshots.write_snapshot(plog.dir, end, 0, [], last_contained_timestamp=ts)
    assert not metadata_retention.maybe_clean(plog, max_bytes=10**9, max_ms=-1, now_ms=6000)
    assert not metadata_retention.maybe_clean(plog, max_bytes=-1, max_ms=5000, now_ms=6000)
    assert plog.log_start_offset == 0
    assert metadata_retention.maybe_clean(plog, max_bytes=-1, max_ms=4000, now_ms=6000)
    assert plog.log_start_offset == 20   # the newest snapshot's end, no further
    assert snapshots.list_snapshots(plog.dir) == [(20, 0)]
    assert all(s.base_offset <= 20 for s in plog.segments[:1]) and plog.segments[0].base_offset > 0
    # one snapshot left: nothing more goes, however small the limit
    assert not metadata_retention.maybe_clean(plog, max_bytes=1, max_ms=0, now_ms=10**12)

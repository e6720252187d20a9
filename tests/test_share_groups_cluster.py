"""Share groups on a 3-node KRaft cluster (replication factor 3): the share-group coordinator and the
share-partition leader are wherever the cluster puts them; confluent-kafka ShareConsumer members share
one partition (release / reject / delivery limit), and a member killed -9 has its records come back
when its connection closes. The scenarios are tests/test_share_groups.py's. Last, the share coordinator: an
offset reset sent to a third node reaches the share-partition, and after kill -9 of a share-partition
leader its successor reads the state the killed one wrote (a raw wire member, to see every delivery).
"""
from __future__ import annotations

import base64
import time
import uuid

import pytest

pytest.importorskip("confluent_kafka")

from kproto.messages.alter_share_group_offsets_request import AlterShareGroupOffsetsRequest as Alter  # noqa: E402
from kproto.messages.describe_share_group_offsets_request import DescribeShareGroupOffsetsRequest as DescribeOffsets  # noqa: E402,E501
from kproto.messages.find_coordinator_request import FindCoordinatorRequest  # noqa: E402
from kproto.messages.read_share_group_state_summary_request import ReadShareGroupStateSummaryRequest as Summary  # noqa: E402,E501
from kproto.messages.share_acknowledge_request import ShareAcknowledgeRequest as Ack  # noqa: E402
from kproto.messages.share_fetch_request import ShareFetchRequest as Fetch  # noqa: E402
from tests.test_share_groups import (  # noqa: E402
    SETTINGS, killed_member_scenario, produce, python_member, setup, sharing_scenario, wait_until,
)
from tests.wire_client import WireClient, metadata  # noqa: E402
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


# ------------------------------------------------------------------ the share coordinator (last: kills a node)

ACCEPT = 1


def _addr(cluster, node_id: int) -> str:
    return f"{cluster.host}:{cluster.ports[node_id]}"


def _leader(cluster, topic: str, down=()):
    """(leader id, topic id) of partition 0 as a live node's metadata says, once it is a live node."""
    found = _live_leader(cluster, topic, down)
    return None if found is None else (found.partitions[0].leader_id, found.topic_id)


def _live_leader(cluster, topic: str, down=()):
    """The metadata of the topic from the first live node that names a live leader of partition 0."""
    for nid in cluster.nodes:
        if nid in down:
            continue
        with WireClient(_addr(cluster, nid)) as c:
            t = metadata(c, name=topic)
        if t.error_code == 0 and t.partitions and t.partitions[0].leader_id > 0 \
                and t.partitions[0].leader_id not in down:
            return t
    return None


def _coordinator(cluster, key_type: int, key: str, via: int):
    with WireClient(_addr(cluster, via)) as c:
        found = c.call(FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key]), 6).coordinators[0]
    return found.node_id if found.error_code == 0 else None


def _fetch(c, group: str, member: str, topic_id, epoch: int, tries: int = 40):
    """[(offset, delivery count)] acquired by one ShareFetch (the first that acquires any, `tries` at most),
    and the share session epoch of the next request."""
    for _ in range(tries):
        resp = c.call(Fetch(group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=500,
                            min_bytes=1, max_records=100, batch_size=100, topics=[Fetch.FetchTopic(
                                topic_id=topic_id, partitions=[Fetch.FetchPartition(partition_index=0)])],
                            forgotten_topics_data=[]), 1)
        assert resp.error_code == 0, resp.error_code
        epoch += 1
        got = [(o, r.delivery_count) for p in (resp.responses[0].partitions if resp.responses else ())
               for r in p.acquired_records for o in range(r.first_offset, r.last_offset + 1)]
        if got:
            return got, epoch
    return [], epoch


@pytest.mark.timeout(120)
def test_share_coordinator_alter_anywhere_and_leader_failover(cluster):
    topic, group = "share-c-failover", "share-c-g3"
    setup(cluster.bootstrap, topic, group, replication=3)          # earliest, delivery limit 3
    produce(cluster.bootstrap, topic, [f"{i}:plain" for i in range(10)])
    wait_until(lambda: _leader(cluster, topic), 30, "a leader")
    leader, tid = _leader(cluster, topic)
    tid_text = base64.urlsafe_b64encode(tid.bytes).rstrip(b"=").decode()

    # AlterShareGroupOffsets on a node that is neither the share coordinator nor the leader
    picked = None
    for i in range(60):
        g = f"share-c-alter-{i}"
        sc = _coordinator(cluster, 2, f"{g}:{tid_text}:0", leader)     # creates __share_group_state at first
        gc = _coordinator(cluster, 0, g, leader)
        if sc is not None and gc is not None and gc not in (sc, leader):
            picked = g, gc, sc
            break
    assert picked, "no group whose coordinator is a third node"
    g2, gc, sc = picked
    with WireClient(_addr(cluster, gc), timeout=30) as c:
        for _ in range(50):           # until the group coordinator has loaded (14, 15, 16: retried)
            r = c.call(Alter(group_id=g2, topics=[Alter.AlterShareGroupOffsetsRequestTopic(
                topic_name=topic, partitions=[Alter.AlterShareGroupOffsetsRequestPartition(
                    partition_index=0, start_offset=7)])]), 0)
            if r.error_code not in (14, 15, 16):
                break
            time.sleep(0.2)
    assert (r.error_code, r.responses[0].partitions[0].error_code) == (0, 0), (r.error_code, r.error_message)
    with WireClient(_addr(cluster, leader), timeout=30) as c:
        assert _fetch(c, g2, str(uuid.uuid4()), tid, 0)[0] == [(7, 1), (8, 1), (9, 1)]
    # the group's coordinator describes the offsets kept by the share coordinator of another node
    with WireClient(_addr(cluster, gc)) as c:
        d = c.call(DescribeOffsets(groups=[DescribeOffsets.DescribeShareGroupOffsetsRequestGroup(
            group_id=g2, topics=None)]), 1).groups[0]
    assert [(t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions]) for t in d.topics] == [
        (topic, [(0, 7)])]
    # the share coordinator answers ReadShareGroupStateSummary (a broker's request); another node does not
    for node, want in ((sc, (0, 7)), (next(n for n in cluster.nodes if n != sc), (16, -1))):
        with WireClient(_addr(cluster, node)) as c:
            p = c.call(Summary(group_id=g2, topics=[Summary.ReadStateSummaryData(topic_id=tid, partitions=[
                Summary.PartitionData(partition=0, leader_epoch=-1)])]), 1).results[0].partitions[0]
        assert (p.error_code, p.start_offset) == want, node

    # kill -9 of the share-partition leader: what it had acknowledged stays done, what was in flight
    # comes back from its successor with the next delivery count
    with WireClient(_addr(cluster, leader), timeout=30) as c:
        member = str(uuid.uuid4())
        got, epoch = _fetch(c, group, member, tid, 0)
        assert got == [(o, 1) for o in range(10)]
        r = c.call(Ack(group_id=group, member_id=member, share_session_epoch=epoch, topics=[Ack.AcknowledgeTopic(
            topic_id=tid, partitions=[Ack.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                Ack.AcknowledgementBatch(first_offset=0, last_offset=4, acknowledge_types=[ACCEPT])])])]), 1)
        assert (r.error_code, r.responses[0].partitions[0].error_code) == (0, 0)
    # DescribeShareGroupOffsets answers the leader epoch stored with the share state (the one it was
    # read at by its share-partition leader), as Kafka 4.3, not the partition's current one
    stored = _leader_epoch(cluster, topic)
    assert _described(cluster, group, topic) == (5, stored)
    cluster.nodes[leader].kill()
    wait_until(lambda: _leader(cluster, topic, down=(leader,)), 30, "a new leader")
    successor, _ = _leader(cluster, topic, down=(leader,))
    assert _leader_epoch(cluster, topic, down=(leader,)) > stored
    assert _described(cluster, group, topic, down=(leader,)) == (5, stored)
    with WireClient(_addr(cluster, successor), timeout=30) as c:
        assert _fetch(c, group, str(uuid.uuid4()), tid, 0)[0] == [(o, 2) for o in range(5, 10)]
    # read again by the successor, at the new leader epoch
    assert _described(cluster, group, topic, down=(leader,)) == (5, _leader_epoch(cluster, topic, down=(leader,)))


def _leader_epoch(cluster, topic: str, down=()) -> int:
    """Partition 0's leader epoch, as the first live node whose metadata names a live leader says
    (a node can learn of a failover later than another)."""
    for _ in range(100):
        found = _live_leader(cluster, topic, down)
        if found is not None:
            return found.partitions[0].leader_epoch
        time.sleep(0.2)
    raise AssertionError(f"no live node names a live leader of {topic}-0")


def _described(cluster, group: str, topic: str, down=()):
    """(start offset, leader epoch) of partition 0 by DescribeShareGroupOffsets at the group's
    coordinator, once a live node is it (NOT_COORDINATOR, loading: retried)."""
    via = next(n for n in cluster.nodes if n not in down)
    for _ in range(100):
        gc = _coordinator(cluster, 0, group, via)
        if gc is not None and gc not in down:
            with WireClient(_addr(cluster, gc)) as c:
                g = c.call(DescribeOffsets(groups=[DescribeOffsets.DescribeShareGroupOffsetsRequestGroup(
                    group_id=group, topics=[DescribeOffsets.DescribeShareGroupOffsetsRequestTopic(
                        topic_name=topic, partitions=[0])])]), 1).groups[0]
            if g.error_code == 0:
                p = g.topics[0].partitions[0]
                return p.start_offset, p.leader_epoch
        time.sleep(0.2)
    raise AssertionError(f"no DescribeShareGroupOffsets answer for {group}")

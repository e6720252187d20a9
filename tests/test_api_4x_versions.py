"""The Kafka 4.x versions of existing APIs, as a client sees them: each
request is sent at the new version through kproto's own codec (a broker
that does not serve the version closes the connection), then the Java
client 4.3 (which picks these versions from ApiVersions) does the same work
end to end. tests/test_api_probe.py checks every advertised version answers."""
from __future__ import annotations

import time
import uuid

import pytest

from kproto import records as rec
from kproto.errors import ErrorCode
from kproto.messages.fetch_request import FetchRequest
from kproto.messages.find_coordinator_request import FindCoordinatorRequest
from kproto.messages.list_offsets_request import ListOffsetsRequest
from kproto.messages.metadata_request import MetadataRequest
from kproto.messages.offset_commit_request import OffsetCommitRequest
from kproto.messages.offset_fetch_request import OffsetFetchRequest
from kproto.messages.produce_request import ProduceRequest
from tests.wire_client import WireClient, create_topic

pytestmark = pytest.mark.timeout(120)

UNKNOWN_ID = uuid.UUID(int=0xBAD)


def _topic(bootstrap, name, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})   # (kept alive until the result is in)
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)
    return create_topic(bootstrap, name, partitions)


def _await_coordinator(c, group, timeout=15.0):
    """FindCoordinator until the group's coordinator is loaded (it creates __consumer_offsets)."""
    deadline = time.monotonic() + timeout
    while c.call(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4).coordinators[0].error_code:
        assert time.monotonic() < deadline, f"no coordinator for {group}"
        time.sleep(0.1)


def _produce(c, topic_id, data, version=13):
    req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        topic_id=topic_id, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=data)])])
    return c.call(req, version).responses[0]


def test_produce_v13_names_the_topic_by_id(broker):
    tid = create_topic(broker.bootstrap, "p13", 1).topic_id
    with WireClient(broker.bootstrap) as c:
        out = _produce(c, tid, rec.build_batch([(b"k", b"v1", [])]))
        assert (out.topic_id, out.partition_responses[0].error_code, out.partition_responses[0].base_offset) == \
            (tid, ErrorCode.NONE, 0)
        missing = _produce(c, UNKNOWN_ID, rec.build_batch([(b"k", b"v2", [])]))
        assert (missing.topic_id, missing.partition_responses[0].error_code) == (UNKNOWN_ID, ErrorCode.UNKNOWN_TOPIC_ID)
        # v12 is v11's layout, by name
        req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
            name="p13", partition_data=[ProduceRequest.PartitionProduceData(
                index=0, records=rec.build_batch([(b"k", b"v3", [])]))])])
        assert c.call(req, 12).responses[0].partition_responses[0].base_offset == 1


def test_fetch_v18_metadata_v13_list_offsets_v11(broker):
    t = create_topic(broker.bootstrap, "f18", 1)
    with WireClient(broker.bootstrap) as c:
        _produce(c, t.topic_id, rec.build_batch([(b"k", b"v%d" % i, []) for i in range(3)]))
        md = c.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="f18")]), 13)
        assert (md.error_code, md.topics[0].topic_id) == (ErrorCode.NONE, t.topic_id)
        # a follower's HighWatermark (tagged, KIP-1166) rides along; a consumer's fetch ignores it
        req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_epoch=-1, topics=[
            FetchRequest.FetchTopic(topic_id=t.topic_id, partitions=[FetchRequest.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 20, high_watermark=3)])])
        part = c.call(req, 18).responses[0].partitions[0]
        assert (part.error_code, part.high_watermark) == (ErrorCode.NONE, 3)
        assert [r.value for r in rec.iter_records(part.records)] == [b"v0", b"v1", b"v2"]

        def list_offset(ts, version=11):
            req = ListOffsetsRequest(replica_id=-1, timeout_ms=1000, topics=[ListOffsetsRequest.ListOffsetsTopic(
                name="f18", partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=ts)])])
            p = c.call(req, version).topics[0].partitions[0]
            return p.error_code, p.offset, p.leader_epoch
        assert list_offset(-1) == (ErrorCode.NONE, 3, 0)
        assert list_offset(-2, 10) == (ErrorCode.NONE, 0, 0)
        # without tiered storage: LATEST_TIERED (-5) and EARLIEST_PENDING_UPLOAD (-6) have no offset
        assert list_offset(-5) == (ErrorCode.NONE, -1, -1)
        assert list_offset(-6) == (ErrorCode.NONE, -1, -1)


def test_offset_commit_and_fetch_v10_by_topic_id(broker):
    tid = _topic(broker.bootstrap, "oc10", 2).topic_id
    with WireClient(broker.bootstrap) as c:
        _await_coordinator(c, "g10")
        req = OffsetCommitRequest(group_id="g10", generation_id_or_member_epoch=-1, member_id="", topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(topic_id=tid, partitions=[
                OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=1, committed_offset=7)]),
            OffsetCommitRequest.OffsetCommitRequestTopic(topic_id=UNKNOWN_ID, partitions=[
                OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])])
        resp = c.call(req, 10)
        assert {(t.topic_id, p.partition_index, p.error_code) for t in resp.topics for p in t.partitions} == {
            (tid, 1, ErrorCode.NONE), (UNKNOWN_ID, 0, ErrorCode.UNKNOWN_TOPIC_ID)}

        def fetch(topics):
            req = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g10", topics=topics)])
            g = c.call(req, 10).groups[0]
            return g.error_code, {(t.topic_id, p.partition_index, p.committed_offset, p.error_code)
                                  for t in g.topics for p in t.partitions}
        T = OffsetFetchRequest.OffsetFetchRequestTopics
        assert fetch([T(topic_id=tid, partition_indexes=[0, 1]), T(topic_id=UNKNOWN_ID, partition_indexes=[0])]) == (
            ErrorCode.NONE, {(tid, 0, -1, ErrorCode.NONE), (tid, 1, 7, ErrorCode.NONE),
                             (UNKNOWN_ID, 0, -1, ErrorCode.UNKNOWN_TOPIC_ID)})
        assert fetch(None) == (ErrorCode.NONE, {(tid, 1, 7, ErrorCode.NONE)})   # all the group's topics, by id


def test_describe_apis_of_kafka_4(broker):
    from kproto.messages.describe_cluster_request import DescribeClusterRequest
    from kproto.messages.describe_groups_request import DescribeGroupsRequest
    from kproto.messages.describe_log_dirs_request import DescribeLogDirsRequest
    from kproto.messages.list_transactions_request import ListTransactionsRequest
    with WireClient(broker.bootstrap) as c:
        _await_coordinator(c, "g6")
        # DescribeGroups v6 (KIP-1043): an unknown group is an error, no longer a Dead group
        g = c.call(DescribeGroupsRequest(groups=["no-such-group"]), 6).groups[0]
        assert (g.error_code, g.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group no-such-group not found.")
        assert c.call(DescribeGroupsRequest(groups=["no-such-group"]), 5).groups[0].error_code == ErrorCode.NONE
        cluster = c.call(DescribeClusterRequest(include_fenced_brokers=True), 2)
        assert [b.is_fenced for b in cluster.brokers] == [False]   # a single node, never fenced
        dirs = c.call(DescribeLogDirsRequest(topics=None), 5).results
        assert dirs and all(d.error_code == 0 and d.is_cordoned is False for d in dirs)
        # ListTransactions v2 (KIP-1152): a pattern the whole id must match; a broken one is refused
        listed = c.call(ListTransactionsRequest(transactional_id_pattern="txn-.*"), 2)
        assert (listed.error_code, listed.transaction_states) == (ErrorCode.NONE, [])
        broken = c.call(ListTransactionsRequest(transactional_id_pattern="txn-("), 2)
        assert broken.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION


def test_list_config_resources_v1_lists_every_type(broker):
    """ListConfigResources v1 (KIP-1142): topics, brokers and broker loggers, client-metrics and
    group resources with configs; by type when asked, all of them when not; v0 client metrics only."""
    from kproto.messages.list_config_resources_request import ListConfigResourcesRequest
    topic, brokers = "lcr-topic", None
    _topic(broker.bootstrap, topic, 1)
    with WireClient(broker.bootstrap) as c:
        brokers = [str(b.node_id) for b in c.call(MetadataRequest(topics=[]), 12).brokers]
        every = c.call(ListConfigResourcesRequest(resource_types=[]), 1)
        assert every.error_code == 0
        listed = {(r.resource_type, r.resource_name) for r in every.config_resources}
        assert (2, topic) in listed
        assert {(4, b) for b in brokers} | {(8, b) for b in brokers} <= listed
        only_topics = c.call(ListConfigResourcesRequest(resource_types=[2]), 1).config_resources
        assert {r.resource_type for r in only_topics} == {2} and topic in {r.resource_name for r in only_topics}
        assert [(r.resource_type, r.resource_name) for r in
                c.call(ListConfigResourcesRequest(resource_types=[4]), 1).config_resources] == [(4, b) for b in brokers]
        # a type it does not list (1 is UNKNOWN in Kafka's ConfigResource.Type)
        assert c.call(ListConfigResourcesRequest(resource_types=[1]), 1).error_code == ErrorCode.UNSUPPORTED_VERSION
        v0 = c.call(ListConfigResourcesRequest(), 0)
        assert v0.error_code == 0 and all(r.resource_type == 16 for r in v0.config_resources)


@pytest.fixture(scope="module")
def java_client(tmp_path_factory):
    from compat_tests.java_client import JavaClient, JavaUnavailable
    try:
        return JavaClient(str(tmp_path_factory.mktemp("java4x")))
    except JavaUnavailable as exc:
        pytest.skip(str(exc))


def test_java_4_3_client_round_trip(broker, java_client):
    """kafka-clients 4.3 sends Produce v13, Fetch v18, Metadata v13, OffsetCommit/OffsetFetch v10
    and ListOffsets v11 to a broker that advertises them."""
    assert java_client.version.startswith("4.")
    _topic(broker.bootstrap, "java4x", 2)
    records = [{"key": f"k{i}", "value": f"v{i}", "partition": i % 2} for i in range(10)]
    produced, consumed, offsets, latest = java_client.run(broker.bootstrap, [
        {"op": "produce", "topic": "java4x", "records": records},
        {"op": "consume_subscribe", "topic": "java4x", "topics": ["java4x"], "group": "java4x-g",
         "max_records": 10, "timeout_ms": 30000, "commit": True},
        {"op": "list_group_offsets", "group": "java4x-g"},
        {"op": "list_offsets", "topic": "java4x", "partitions": [0, 1], "spec": "latest"},
    ], timeout=120)
    for r in (produced, consumed, offsets, latest):
        assert "error" not in r, r
    assert sorted(r["value"] for r in consumed["records"]) == sorted(r["value"] for r in records)
    assert offsets["offsets"] == {"java4x/0": 5, "java4x/1": 5}

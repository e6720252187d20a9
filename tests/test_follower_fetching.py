"""Follower fetching (KIP-392) with three in-process brokers on racks a, b, c
(tools/replication_cluster.py): with RackAwareReplicaSelector the leader
answers a consumer of another rack with preferred_read_replica (the in-sync
replica of its rack) and no records; that follower serves the records up to
its high watermark; without client.rack, or without the selector, the leader
serves; an old consumer (Fetch v10) is refused by the follower."""
from __future__ import annotations

from kproto.errors import ErrorCode
from kproto.messages.fetch_request import FetchRequest

from broker.controller.controller import TopicSpec
from tools.replication_cluster import _values, run_with_cluster

FAST = {"replica.lag.time.max.ms": "1500", "replica.fetch.wait.max.ms": "100",
        "replica.fetch.backoff.ms": "100"}
RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def _run(fn, selector=True):
    def racks(cluster):
        for i, rack in ((1, "a"), (2, "b"), (3, "c")):
            cluster.regs[i].rack = rack
    settings = {**FAST, **({"replica.selector.class": RACK_AWARE} if selector else {})}
    run_with_cluster(fn, 3, settings, controller=1, prepare=racks)


async def _fetch(client, node, tid, offset, rack, version=16, epoch=-1):
    req = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                       session_epoch=-1, topics=[FetchRequest.FetchTopic(
                           topic="t", topic_id=tid, partitions=[FetchRequest.FetchPartition(
                               partition=0, current_leader_epoch=epoch, fetch_offset=offset, last_fetched_epoch=-1,
                               log_start_offset=-1, partition_max_bytes=1 << 20)])],
                       forgotten_topics_data=[], rack_id=rack)
    resp = await client.conn(node).request(req, version)
    return resp.responses[0].partitions[0]


async def _setup(cluster, client):
    c = cluster.brokers[cluster.controller].controller
    tid = c.create_topic(TopicSpec("t", -1, -1, {}, assignments=[(0, [1, 2, 3])])).topic_id
    await cluster.wait_for(lambda: ("t", 0) in cluster.brokers[1].replication.leaders, what="leadership")
    for i in range(10):
        r = await client.produce(1, "t", [b"v%d" % i])
        assert r.error_code == 0, r
    for n in (2, 3):   # the followers know the high watermark from their next fetch
        await cluster.wait_for(lambda n=n: cluster.brokers[n].partitions.get("t", 0).high_watermark == 10,
                               what="follower high watermark")
    return tid


def test_leader_points_a_consumer_to_its_rack_and_the_follower_serves_it():
    async def body(cluster, client):
        tid = await _setup(cluster, client)
        p = await _fetch(client, 1, tid, 0, "b")
        assert (p.error_code, p.preferred_read_replica, bytes(p.records or b""), p.high_watermark) == (0, 2, b"", 10)
        assert (await _fetch(client, 1, tid, 0, "c")).preferred_read_replica == 3
        # the leader's own rack, an unknown rack or no client.rack: the leader serves
        for rack in ("a", "z", ""):
            p = await _fetch(client, 1, tid, 0, rack)
            assert p.preferred_read_replica == -1 and len(_values(bytes(p.records))) == 10, rack
        # the follower of rack b serves the records, up to its high watermark
        p = await _fetch(client, 2, tid, 0, "b", epoch=0)
        assert p.error_code == 0 and p.high_watermark == 10
        assert [v for _o, v in _values(bytes(p.records))] == [b"v%d" % i for i in range(10)]
        # a consumer without client metadata (Fetch v10) must read from the leader
        p = await _fetch(client, 2, tid, 0, "b", version=10)
        assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # a replica out of the ISR is not preferred
        cluster.kill(2)
        await cluster.wait_for(lambda: cluster.partition("t").isr == [1, 3], what="isr shrink")
        assert (await _fetch(client, 1, tid, 0, "b")).preferred_read_replica == -1
    _run(body)


def test_without_a_replica_selector_the_leader_serves_every_rack():
    async def body(cluster, client):
        tid = await _setup(cluster, client)
        p = await _fetch(client, 1, tid, 0, "b")
        assert p.preferred_read_replica == -1 and len(_values(bytes(p.records))) == 10
    _run(body, selector=False)

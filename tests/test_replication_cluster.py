"""Replication with three brokers (and a fourth as controller) in one process (tools/replication_cluster.py:
real sockets between the brokers, the metadata quorum stood in for by copying
the controller's records): RF=3, min.insync.replicas=2, acks=all, the high
watermark, ISR shrink/expand through AlterPartition, leader failover with the
old leader's unacknowledged tail truncated when it returns."""
from __future__ import annotations

import trio

from kproto import records as rec
from kproto.errors import ErrorCode
from kproto.messages.produce_request import ProduceRequest

from broker.controller.controller import TopicSpec
from tools.replication_cluster import run_with_cluster

FAST = {"replica.lag.time.max.ms": "1500", "replica.fetch.wait.max.ms": "100",
        "replica.fetch.backoff.ms": "100"}


def _run(fn, settings=None):
    # node 4: the controller only
    run_with_cluster(fn, 4, {**FAST, **(settings or {})}, controller=4)


def _create(cluster, name="t", replicas=(2, 3, 1), configs=None):
    c = cluster.brokers[cluster.controller].controller
    return c.create_topic(TopicSpec(name, -1, -1, {"min.insync.replicas": "2", **(configs or {})},
                                    assignments=[(0, list(replicas))])).topic_id


def test_acks_all_waits_for_the_isr_and_consumers_never_read_above_the_high_watermark():
    async def body(cluster, client):
        tid = _create(cluster)
        p = cluster.partition("t")
        assert (p.leader, p.replicas, p.isr) == (2, [2, 3, 1], [2, 3, 1])
        await cluster.wait_for(lambda: ("t", 0) in cluster.brokers[2].replication.leaders, what="leadership")
        for i in range(20):
            r = await client.produce(2, "t", [b"v%d" % i])
            assert r.error_code == 0 and r.base_offset == i, r
        # acknowledged: every replica has the records
        for n in (1, 3):
            await cluster.wait_for(lambda n=n: cluster.brokers[n].partitions.get("t", 0).log.log_end_offset == 20)
        values, hw = await client.read_all(2, tid)
        assert values == [b"v%d" % i for i in range(20)] and hw == 20
        # a follower answers NOT_LEADER_OR_FOLLOWER naming the leader (KIP-951)
        r = await client.produce(3, "t", [b"x"])
        assert r.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (r.current_leader.leader_id, r.current_leader.leader_epoch) == (2, 0)
        # with two followers gone the ISR shrinks to the leader: acks=all is refused
        # (min.insync.replicas=2) and the high watermark stops where the ISR was
        cluster.kill(3)
        cluster.kill(1)
        await cluster.wait_for(lambda: cluster.partition("t").isr == [2], what="isr shrink")
        r = await client.produce(2, "t", [b"refused"])
        assert r.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        r = await client.produce(2, "t", [b"acks1"], acks=1)
        assert r.error_code == 0 and r.base_offset == 20
        values, hw = await client.read_all(2, tid)
        assert hw == 21 and values[-1] == b"acks1"     # the ISR is {2}: the leader alone moves it
        # a follower comes back, catches up and rejoins the ISR; acks=all works again
        await cluster.start_node(3)
        await cluster.wait_for(lambda: cluster.partition("t").isr == [2, 3], what="isr expand")
        r = await client.produce(2, "t", [b"again"])
        assert r.error_code == 0 and r.base_offset == 21, r
    _run(body)


def test_a_produce_answer_names_the_moved_leaders_endpoint_and_an_accepted_one_names_none():
    """KIP-951: a Produce answer (v10+) lists the endpoints of the leaders its NOT_LEADER_OR_FOLLOWER
    partitions name, also beside a partition that was appended; the handler skips that walk when no
    partition moved (issue 26), so this checks the walk still runs when one did."""
    async def body(cluster, client):
        _create(cluster, "led", replicas=(3, 2, 1))
        _create(cluster, "elsewhere", replicas=(2, 3, 1))
        for topic, leader in (("led", 3), ("elsewhere", 2)):
            await cluster.wait_for(lambda t=topic, n=leader: (t, 0) in cluster.brokers[n].replication.leaders,
                                   what="leadership")

        def request(*topics):
            return ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
                ProduceRequest.TopicProduceData(name=t, partition_data=[ProduceRequest.PartitionProduceData(
                    index=0, records=rec.build_batch([(None, b"v")]))]) for t in topics])

        accepted = await client.conn(3).request(request("led"), 10)
        assert accepted.responses[0].partition_responses[0].error_code == 0
        assert accepted.node_endpoints == []
        mixed = await client.conn(3).request(request("led", "elsewhere"), 10)
        ok, moved = (t.partition_responses[0] for t in mixed.responses)
        assert ok.error_code == 0 and ok.base_offset == 1, ok
        assert moved.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and moved.current_leader.leader_id == 2
        assert [e.node_id for e in mixed.node_endpoints] == [2], mixed.node_endpoints
        assert mixed.node_endpoints[0].port > 0
    _run(body)


def test_leader_failover_keeps_every_acknowledged_record_and_truncates_the_old_tail():
    async def body(cluster, client):
        tid = _create(cluster)
        acked = []
        for i in range(10):
            r = await client.produce(2, "t", [b"a%d" % i], producer_id=7, seq=i)
            assert r.error_code == 0
            acked.append(b"a%d" % i)
        # the followers stop fetching (killed); the leader appends records nobody else has
        for n in (3, 1):
            await cluster.wait_for(lambda n=n: cluster.brokers[n].partitions.get("t", 0).log.log_end_offset == 10)
        cluster.kill(3)
        cluster.kill(1)
        await cluster.wait_for(lambda: cluster.partition("t").isr == [2], what="isr shrink")
        for i in range(10, 13):
            r = await client.produce(2, "t", [b"unacked%d" % i], producer_id=7, seq=i, acks=1)
            assert r.error_code == 0
        assert cluster.brokers[2].partitions.get("t", 0).log.log_end_offset == 13
        # the leader dies; 3 comes back. Unclean election is off: no leader until an ISR member returns
        cluster.kill(2)
        await cluster.start_node(3)
        await trio.sleep(0.5)
        assert cluster.partition("t").leader == -1
        # with unclean election enabled for the topic, 3 (out of sync) takes over, alone in the ISR
        cluster.brokers[cluster.controller].controller.set_configs(2, "t", {"unclean.leader.election.enable": "true"})
        cluster.poke()
        await cluster.wait_for(lambda: cluster.partition("t").leader == 3, what="unclean election")
        assert cluster.partition("t").isr == [3]
        await cluster.wait_for(lambda: cluster.brokers[3].partitions.get("t", 0).is_leader)
        r = await client.produce(3, "t", [b"b0"], producer_id=7, seq=10)
        assert r.error_code == ErrorCode.NOT_ENOUGH_REPLICAS     # an ISR of one, min.insync.replicas=2
        r = await client.produce(3, "t", [b"b0"], producer_id=7, seq=10, acks=1)
        assert r.error_code == 0 and r.base_offset == 10, r
        # the old leader returns as a follower: its unacknowledged tail (10..12) is truncated
        await cluster.start_node(2)
        await cluster.start_node(1)
        await cluster.wait_for(lambda: cluster.partition("t").isr == [3, 2, 1] or
                               sorted(cluster.partition("t").isr) == [1, 2, 3], what="isr expand")
        for n in (1, 2, 3):
            values, _hw = await _read_local(cluster, n)
            assert values == acked + [b"b0"], (n, values)
    _run(body)


def test_records_deleted_on_the_leader_stay_deleted_after_a_failover():
    """DeleteRecords is the leader's (NOT_LEADER_OR_FOLLOWER on a follower) and answers once every
    live replica's log starts at the offset (Kafka's low watermark; REQUEST_TIMED_OUT with the
    low watermark it found after the request's timeout_ms): the followers take the
    leader's log start from its fetch answers, so after the leader dies the next one's EARLIEST is
    where the user deleted to and a read below it is OFFSET_OUT_OF_RANGE."""
    async def body(cluster, client):
        tid = _create(cluster)
        await cluster.wait_for(lambda: ("t", 0) in cluster.brokers[2].replication.leaders, what="leadership")
        for i in range(10):
            r = await client.produce(2, "t", [b"a%d" % i])
            assert r.error_code == 0, r
        assert await _delete_records(client, 3, 6) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
        assert cluster.brokers[3].partitions.get("t", 0).log_start_offset == 0   # nothing deleted there
        assert await _delete_records(client, 4, 6) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)   # no replica there
        # the followers have not fetched since: with no time to wait, the low watermark is theirs
        assert await _delete_records(client, 2, 6, timeout_ms=0) == (ErrorCode.REQUEST_TIMED_OUT, 0)
        assert await _delete_records(client, 2, 6) == (ErrorCode.NONE, 6)
        cluster.kill(2)
        await cluster.wait_for(lambda: cluster.partition("t").leader in (1, 3), what="election")
        leader = cluster.partition("t").leader
        await cluster.wait_for(lambda: cluster.brokers[leader].partitions.get("t", 0).is_leader)
        assert await _earliest(client, leader) == 6
        assert (await client.fetch(leader, tid, 0)).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        p = await client.fetch(leader, tid, 6)
        assert p.error_code == 0 and p.log_start_offset == 6, p
    _run(body)


async def _delete_records(client, node, offset, timeout_ms=5000):
    from kproto.messages.delete_records_request import DeleteRecordsRequest as D
    req = D(timeout_ms=timeout_ms, topics=[D.DeleteRecordsTopic(name="t", partitions=[
        D.DeleteRecordsPartition(partition_index=0, offset=offset)])])
    p = (await client.conn(node).request(req, 2)).topics[0].partitions[0]
    return p.error_code, p.low_watermark


async def _earliest(client, node):
    from kproto.messages.list_offsets_request import ListOffsetsRequest as L
    req = L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name="t", partitions=[
        L.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-2)])])
    p = (await client.conn(node).request(req, 8)).topics[0].partitions[0]
    assert p.error_code == 0, p
    return p.offset


async def _read_local(cluster, n):
    from tools.replication_cluster import _values
    plog = cluster.brokers[n].partitions.get("t", 0).log
    data = plog.read_bytes(0)
    return [v for _o, v in _values(bytes(data))], plog.log_end_offset


def test_metadata_reports_offline_replicas_and_a_partition_without_leader():
    from kproto.messages.metadata_request import MetadataRequest

    async def body(cluster, client):
        _create(cluster)
        req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")],
                              allow_auto_topic_creation=False)

        async def describe(node):
            resp = await client.conn(node).request(req, 12)
            p = resp.topics[0].partitions[0]
            return p.error_code, p.leader_id, p.leader_epoch, p.isr_nodes, p.offline_replicas
        assert await describe(4) == (0, 2, 0, [2, 3, 1], [])
        cluster.kill(2)
        await cluster.wait_for(lambda: cluster.partition("t").leader == 3, what="election")
        assert await describe(4) == (0, 3, 1, [3, 1], [2])
        cluster.kill(3)
        cluster.kill(1)
        await cluster.wait_for(lambda: cluster.partition("t").leader == -1, what="offline")
        assert await describe(4) == (ErrorCode.LEADER_NOT_AVAILABLE, -1, 2, [3], [2, 3, 1])
    _run(body)

"""DescribeTopicPartitions (KIP-966): pages of partitions with a cursor, as
the Java Admin client's describeTopics and kafka-topics.sh use it."""
from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from kproto._codec import ZERO_UUID
from kproto.errors import ErrorCode
from kproto.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from kproto.messages.describe_topic_partitions_request import (
    Cursor, DescribeTopicPartitionsRequest, TopicRequest)
from tests.wire_client import WireClient

pytestmark = pytest.mark.timeout(60)


def _create(c: WireClient, name: str, partitions: int) -> None:
    resp = c.call(CreateTopicsRequest(topics=[CreatableTopic(name=name, num_partitions=partitions,
                                                             replication_factor=1)],
                                      timeout_ms=10000), 7)
    assert resp.topics[0].error_code == 0, resp.topics[0]


def _describe(c: WireClient, names, limit=2000, cursor=None):
    return c.call(DescribeTopicPartitionsRequest(
        topics=[TopicRequest(name=n) for n in names], response_partition_limit=limit, cursor=cursor), 0)


def _page_through(c: WireClient, names, limit):
    """Every (topic, partition) over successive pages, and the number of pages."""
    seen, pages, cursor = [], 0, None
    while True:
        resp = _describe(c, names, limit, cursor)
        pages += 1
        for t in resp.topics:
            assert t.error_code == 0, t
            seen += [(t.name, p.partition_index) for p in t.partitions]
        assert sum(len(t.partitions) for t in resp.topics) <= limit
        cursor = resp.next_cursor
        if cursor is None:
            return seen, pages
        cursor = Cursor(topic_name=cursor.topic_name, partition_index=cursor.partition_index)


def test_pages_cover_every_partition_once(broker, topic_name):
    a, b = topic_name + "-a", topic_name + "-b"
    with WireClient(broker.bootstrap) as c:
        _create(c, b, 7)
        _create(c, a, 5)
        seen, pages = _page_through(c, [b, a], 3)
        # name order, partition order, nothing twice, nothing missing
        assert seen == [(a, i) for i in range(5)] + [(b, i) for i in range(7)]
        assert pages == 4
        one = _describe(c, [a, b], limit=5)
        # the page ends exactly with topic a: the cursor points at b's first partition
        assert [t.name for t in one.topics] == [a]
        assert (one.next_cursor.topic_name, one.next_cursor.partition_index) == (b, 0)
        t = _describe(c, [a]).topics[0]
        p = t.partitions[0]
        assert t.topic_id != ZERO_UUID and not t.is_internal and t.topic_authorized_operations == 3576
        assert (p.leader_id, p.replica_nodes, p.isr_nodes, p.eligible_leader_replicas) == (1, [1], [1], [])


def test_errors_as_kafka(broker, topic_name):
    with WireClient(broker.bootstrap) as c:
        _create(c, topic_name, 2)
        resp = _describe(c, [topic_name, "no-such-topic-x", "bad/name"])
        codes = {t.name: t.error_code for t in resp.topics}
        assert codes == {topic_name: 0, "no-such-topic-x": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         "bad/name": ErrorCode.INVALID_TOPIC_EXCEPTION}
        # an empty name fails the whole request, as in Kafka 3.9
        assert [t.error_code for t in _describe(c, [topic_name, ""]).topics] == [ErrorCode.UNKNOWN_SERVER_ERROR] * 2
        # the cursor's topic must be among the asked topics; its partition must not be negative
        bad = _describe(c, [topic_name], cursor=Cursor(topic_name="zzz", partition_index=0))
        assert [t.error_code for t in bad.topics] == [ErrorCode.INVALID_REQUEST]
        bad = _describe(c, [topic_name], cursor=Cursor(topic_name=topic_name, partition_index=-1))
        assert [t.error_code for t in bad.topics] == [ErrorCode.INVALID_REQUEST]
        # no topics named: every topic, unknown ones never appear; a limit of 0 still gives one
        everything = _describe(c, [], limit=0)
        assert sum(len(t.partitions) for t in everything.topics) == 1
        assert everything.next_cursor is not None


def test_librdkafka_describe_topics(broker, topic_name):
    with WireClient(broker.bootstrap) as c:
        _create(c, topic_name, 3)
    from confluent_kafka import TopicCollection
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    desc = admin.describe_topics(TopicCollection([topic_name]))[topic_name].result(10)
    assert [p.id for p in desc.partitions] == [0, 1, 2]

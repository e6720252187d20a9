"""Incremental fetch sessions (KIP-227) on the wire, beyond the sequences
compared with Kafka (tests/test_fetch_sessions_kafka.py): a session belongs
to the broker, not the connection; a second fetch of the session while one
waits makes the waiting one INVALID_FETCH_SESSION_EPOCH; an incremental
long poll wakes on data in a partition the request does not name; and
clients that use sessions (kafka-python; the Java client's consumer is in
compat_tests) read every record while partitions join and leave their
assignment. The broker's FetchSessionCache gauges show the sessions. The
duplicate-fetch and wake-up answers were checked against Kafka 3.9."""
from __future__ import annotations

import threading
import time

import pytest

from kproto import records as rec
from kproto.errors import ErrorCode
from kproto.messages.fetch_request import FetchRequest
from tests.wire_client import WireClient, create_topic, produce
from broker.launch.process import BrokerProcess

V = 12


@pytest.fixture(scope="module")
def mbroker(tmp_path_factory):
    proc = BrokerProcess(str(tmp_path_factory.mktemp("kproto-sessions")), metrics=True,
                         settings={"num.partitions": "4"})
    proc.start()
    yield proc
    proc.stop()


def _fetch(c, topic, parts, session_id=0, epoch=0, max_wait_ms=0, forget=()):
    topics = [FetchRequest.FetchTopic(topic=topic, partitions=[
        FetchRequest.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
        for p, o in parts])] if parts else []
    forgotten = [FetchRequest.ForgottenTopic(topic=topic, partitions=list(forget))] if forget else []
    req = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
                       isolation_level=0, session_id=session_id, session_epoch=epoch, topics=topics,
                       forgotten_topics_data=forgotten)
    return c.call(req, V)


def _fetch_in_background(c, topic, session_id, epoch, max_wait_ms):
    """An incremental fetch naming no partition, waiting in a thread: (the thread, {"resp": its
    answer, "s": how long it waited} once the thread is done)."""
    out = {}

    def waiting():
        started = time.monotonic()
        out["resp"] = _fetch(c, topic, [], session_id, epoch, max_wait_ms=max_wait_ms)
        out["s"] = time.monotonic() - started
    t = threading.Thread(target=waiting)
    t.start()
    return t, out


def _partitions(resp) -> list[int]:
    return [p.partition_index for t in resp.responses for p in t.partitions]


def _gauges(url) -> dict:
    from tests.test_metrics import scrape
    s = scrape(url)
    return {name.removeprefix("kafka_server_fetchsessioncache_"): v for (name, _l), v in s.items()
            if name.startswith("kafka_server_fetchsessioncache_")}


def test_a_session_outlives_its_connection(mbroker, topic_name):
    create_topic(mbroker.bootstrap, topic_name)
    with WireClient(mbroker.bootstrap) as c:
        resp = _fetch(c, topic_name, [(0, 0), (1, 0)])
        sid = resp.session_id
        assert resp.error_code == 0 and sid != 0 and _partitions(resp) == [0, 1]
    with WireClient(mbroker.bootstrap) as c:
        produce(c, topic_name, rec.build_batch([(b"k", b"v")]), partition=1)
        resp = _fetch(c, topic_name, [], sid, 1)
        assert (resp.error_code, resp.session_id, _partitions(resp)) == (0, sid, [1])
        gauges = _gauges(mbroker.metrics_url)
        assert gauges["numincrementalfetchsessions"] >= 1
        assert gauges["numincrementalfetchpartitionscached"] >= 2
        # closed by a final full fetch: an incremental fetch of it is refused
        assert _fetch(c, topic_name, [(0, 0)], sid, -1).session_id == 0
        assert _fetch(c, topic_name, [], sid, 2).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_a_second_fetch_of_the_session_while_one_waits(mbroker, topic_name):
    create_topic(mbroker.bootstrap, topic_name)
    with WireClient(mbroker.bootstrap) as c1, WireClient(mbroker.bootstrap) as c2:
        sid = _fetch(c1, topic_name, [(0, 0)]).session_id
        t, out = _fetch_in_background(c1, topic_name, sid, 1, max_wait_ms=1500)
        time.sleep(0.3)
        # the same epoch again (a retry): refused; the next epoch goes through
        assert _fetch(c2, topic_name, [], sid, 1).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        assert _fetch(c2, topic_name, [], sid, 2).error_code == 0
        t.join(10)
        # the waiting fetch's session moved on meanwhile: Kafka answers it
        # INVALID_FETCH_SESSION_EPOCH, naming the session
        resp = out["resp"]
        assert (resp.error_code, resp.session_id, resp.responses) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, sid, [])
        assert _fetch(c2, topic_name, [], sid, 3).error_code == 0


def test_an_incremental_long_poll_wakes_on_a_partition_it_does_not_name(mbroker, topic_name):
    create_topic(mbroker.bootstrap, topic_name)
    with WireClient(mbroker.bootstrap) as c1, WireClient(mbroker.bootstrap) as c2:
        sid = _fetch(c1, topic_name, [(0, 0), (1, 0), (2, 0)]).session_id
        t, out = _fetch_in_background(c1, topic_name, sid, 1, max_wait_ms=8000)
        time.sleep(0.3)
        produce(c2, topic_name, rec.build_batch([(b"k", b"v")]), partition=2)
        t.join(10)
        assert out["s"] < 5
        assert _partitions(out["resp"]) == [2]
        assert out["resp"].responses[0].partitions[0].high_watermark == 1


def test_kafka_python_consumes_across_partition_adds_and_removes(mbroker, topic_name):
    kafka = pytest.importorskip("kafka")
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    create_topic(mbroker.bootstrap, topic_name)
    producer = KafkaProducer(bootstrap_servers=mbroker.bootstrap)
    sent = {p: [] for p in range(4)}

    def send(partitions, n):
        for p in partitions:
            for i in range(n):
                v = f"{p}-{len(sent[p])}".encode()
                producer.send(topic_name, v, partition=p)
                sent[p].append(v)
        producer.flush()
    consumer = KafkaConsumer(bootstrap_servers=mbroker.bootstrap, enable_auto_commit=False,
                             fetch_max_wait_ms=100, consumer_timeout_ms=200)
    got = {p: [] for p in range(4)}

    def drain(expected: dict):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=200).items():
                got[tp.partition].extend(m.value for m in msgs)
            if all(got[p] == sent[p][:n] for p, n in expected.items()):
                return
        raise AssertionError(f"consumed {got}, expected {expected}")

    before = _gauges(mbroker.metrics_url)["numincrementalfetchsessions"]
    try:
        consumer.assign([TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)])
        consumer.seek_to_beginning()
        send([0, 1, 2, 3], 5)
        drain({0: 5, 1: 5})
        # partitions join: the session adds them, from their start
        consumer.assign([TopicPartition(topic_name, p) for p in range(4)])
        for p in (2, 3):
            consumer.seek(TopicPartition(topic_name, p), 0)
        send([0, 1, 2, 3], 5)
        drain({0: 10, 1: 10, 2: 10, 3: 10})
        assert _gauges(mbroker.metrics_url)["numincrementalfetchsessions"] > before
        # partitions leave: what is produced to them is no longer read
        consumer.assign([TopicPartition(topic_name, 3)])
        send([0, 3], 5)
        drain({3: 15})
        time.sleep(0.5)
        for tp, msgs in consumer.poll(timeout_ms=300).items():
            got[tp.partition].extend(m.value for m in msgs)
        assert got[0] == sent[0][:10] and got[3] == sent[3]
        assert got[1] == sent[1] and got[2] == sent[2]
    finally:
        consumer.close()
        producer.close()

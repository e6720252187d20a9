"""Client quotas: AlterClientQuotas / DescribeClientQuotas (what
kafka-configs.sh --entity-type users/clients sends), ClientQuotaRecord
surviving a restart, and enforcement: a producer over producer_byte_rate is
throttled (throttle_time_ms reaches librdkafka's throttle callback) while an
unthrottled producer beside it is not; a consumer over consumer_byte_rate
gets throttle_time_ms and its connection muted."""
from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer

from kproto import records as rec
from kproto.messages.alter_client_quotas_request import AlterClientQuotasRequest
from kproto.messages.describe_client_quotas_request import DescribeClientQuotasRequest
from tests.wire_client import PRODUCE_V, WireClient, create_topic, fetch, produce, produce_req
from broker.launch.process import BrokerProcess

A = AlterClientQuotasRequest


def alter(bootstrap, entity: dict, ops: dict, remove=()):
    req = A(entries=[A.EntryData(
        entity=[A.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
        ops=[A.OpData(key=k, value=float(v), remove=False) for k, v in ops.items()]
        + [A.OpData(key=k, value=0.0, remove=True) for k in remove])], validate_only=False)
    with WireClient(bootstrap) as c:
        e = c.call(req, 1).entries[0]
    return e.error_code, e.error_message


def describe(bootstrap, components, strict=False):
    D = DescribeClientQuotasRequest
    with WireClient(bootstrap) as c:
        resp = c.call(D(components=[D.ComponentData(entity_type=t, match_type=m, match=n)
                                    for t, m, n in components], strict=strict), 1)
    assert resp.error_code == 0, resp.error_message
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in resp.entries}


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory):
    # four one-second samples (Kafka: 11): the measured rate follows the client within seconds
    b = BrokerProcess(str(tmp_path_factory.mktemp("data")),
                      settings={"quota.window.num": "4", "quota.window.size.seconds": "1"})
    b.start()
    yield b
    b.stop()


def test_alter_and_describe_client_quotas(quota_broker):
    bs = quota_broker.bootstrap
    assert alter(bs, {"user": "alice"}, {"producer_byte_rate": 1048576, "consumer_byte_rate": 2097152}) == (0, None)
    assert alter(bs, {"user": "alice", "client-id": "app"}, {"request_percentage": 50}) == (0, None)
    assert alter(bs, {"user": None}, {"producer_byte_rate": 4096}) == (0, None)
    got = describe(bs, [("user", 0, "alice")], strict=True)
    assert got == {(("user", "alice"),): {"consumer_byte_rate": 2097152.0, "producer_byte_rate": 1048576.0}}
    got = describe(bs, [("user", 0, "alice")])
    assert (("client-id", "app"), ("user", "alice")) in got
    assert describe(bs, [("user", 1, None)]) == {(("user", None),): {"producer_byte_rate": 4096.0}}
    assert alter(bs, {"user": "alice"}, {}, remove=["consumer_byte_rate"]) == (0, None)
    assert describe(bs, [("user", 0, "alice")], strict=True) == {
        (("user", "alice"),): {"producer_byte_rate": 1048576.0}}
    # the default user quota would cover every other test's clients
    assert alter(bs, {"user": None}, {}, remove=["producer_byte_rate"]) == (0, None)
    assert describe(bs, [("user", 1, None)]) == {}


@pytest.mark.parametrize("entity,ops,message", [
    ({"user": "a"}, {"no_such_quota": 1}, "Invalid configuration key no_such_quota"),
    ({"user": "a"}, {"producer_byte_rate": 1.5}, "Configuration producer_byte_rate must be a Long value"),
    ({"ip": "1.2.3.4", "user": "a"}, {"connection_creation_rate": 1},
     "Invalid quota entity combination, IP entity should not be combined with User or ClientId entities."),
    ({"group": "g"}, {"producer_byte_rate": 1}, "Unhandled client quota entity type: group"),
])
def test_invalid_quota_alterations(quota_broker, entity, ops, message):
    assert alter(quota_broker.bootstrap, entity, ops) == (42, message)


@pytest.mark.parametrize("key,value", [
    ("producer_byte_rate", -5), ("producer_byte_rate", 0), ("consumer_byte_rate", 0),
    ("request_percentage", -1), ("controller_mutation_rate", 0),
])
def test_quota_values_must_be_greater_than_zero(quota_broker, key, value):
    # Kafka 3.9's ClientQuotaControlManager: INVALID_REQUEST, and nothing is stored for the entity
    bs = quota_broker.bootstrap
    good = "consumer_byte_rate" if key == "producer_byte_rate" else "producer_byte_rate"
    assert alter(bs, {"client-id": "c-nonpositive"}, {good: 1024, key: value}) == (
        42, f"Quota {key} must be greater than 0")
    assert describe(bs, [("client-id", 0, "c-nonpositive")]) == {}
    assert alter(bs, {"ip": "127.0.0.9"}, {"connection_creation_rate": value}) == (
        42, "Quota connection_creation_rate must be greater than 0")
    assert describe(bs, [("ip", 0, "127.0.0.9")]) == {}


def _produce_for(bootstrap, client_id, topic, seconds, throttles, acked, elapsed):
    started = time.monotonic()
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                  "batch.size": 65536, "throttle_cb": lambda ev: throttles.append(ev.throttle_time),
                  "queue.buffering.max.kbytes": 512})
    value = b"x" * 16384
    deadline = time.monotonic() + seconds

    def done(err, msg):
        if err is None:
            acked.append(len(msg.value()))
    while time.monotonic() < deadline:
        try:
            p.produce(topic, value, on_delivery=done)
        except BufferError:
            pass
        p.poll(0.005)
    p.flush(15)
    elapsed.append(time.monotonic() - started)   # until the last acknowledgement


def test_producer_over_its_quota_is_throttled_and_a_neighbour_is_not(quota_broker, topic_name):
    bs = quota_broker.bootstrap
    create_topic(bs, topic_name)
    quota = 256 * 1024
    assert alter(bs, {"client-id": "slow-producer"}, {"producer_byte_rate": quota}) == (0, None)
    slow_throttles, slow_acked, fast_throttles, fast_acked, slow_time, fast_time = [], [], [], [], [], []
    seconds = 3.0
    threads = [threading.Thread(target=_produce_for, args=(bs, "slow-producer", topic_name, seconds,
                                                           slow_throttles, slow_acked, slow_time)),
               threading.Thread(target=_produce_for, args=(bs, "fast-producer", topic_name, seconds,
                                                           fast_throttles, fast_acked, fast_time))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    slow_rate = sum(slow_acked) / slow_time[0]
    fast_rate = sum(fast_acked) / fast_time[0]
    assert slow_throttles and max(slow_throttles) > 0        # librdkafka's throttle callback fired
    assert not any(fast_throttles)
    # generous bounds for a loaded machine: the first window lets a burst through
    assert 0.4 * quota < slow_rate < 1.6 * quota, slow_rate
    assert fast_rate > 2 * slow_rate, (fast_rate, slow_rate)


def _record_bytes(resp) -> int:
    return sum(len(p.records or b"") for t in resp.responses for p in t.partitions)


def test_consumer_over_its_quota_gets_an_empty_throttled_fetch_and_is_muted(quota_broker, topic_name):
    # Kafka 3.9 (KafkaApis.handleFetchRequest, KIP-219): a fetch reads at most quota x
    # (quota.window.num - 1) windows' worth; one that would take the client over its quota is
    # answered without data, with throttle_time_ms, and its connection is muted for that long
    bs = quota_broker.bootstrap
    create_topic(bs, topic_name)
    with WireClient(bs) as c:
        for _ in range(20):
            batch = rec.build_batch([(None, b"y" * 50_000, [], int(time.time() * 1000))])
            assert produce(c, topic_name, batch).error_code == 0
    assert alter(bs, {"client-id": "kproto-tests"}, {"consumer_byte_rate": 100_000}) == (0, None)
    try:
        with WireClient(bs) as c:
            assert fetch(c, topic_name, 20).throttle_time_ms == 0   # at the end: a few bytes
            time.sleep(0.3)
            # 1 MB is there; one fetch reads no more than 3 windows x 100 kB (4 samples of 1 s)
            first = fetch(c, topic_name, 0)
            part = first.responses[0].partitions[0]
            assert first.throttle_time_ms == 0 and 0 < _record_bytes(first) <= 300_000
            headers = [h for _pos, h in rec.iter_batch_headers(part.records, allow_partial_tail=True)]
            next_offset = headers[-1].last_offset + 1
            # the next one would take the client over its quota: no data, a throttle time
            second = fetch(c, topic_name, next_offset)
            assert second.throttle_time_ms > 0
            assert second.responses == [] and second.error_code == 0
            started = time.monotonic()
            third = fetch(c, topic_name, next_offset)
            waited = time.monotonic() - started
            # the connection stayed muted for (most of) the throttle time
            assert waited >= 0.8 * second.throttle_time_ms / 1000.0, (waited, second.throttle_time_ms)
            assert third.error_code == 0
    finally:
        alter(bs, {"client-id": "kproto-tests"}, {}, remove=["consumer_byte_rate"])


def test_librdkafka_consumer_over_its_quota_gets_everything_through_throttled_fetches(quota_broker, topic_name):
    # the empty throttled answers leave librdkafka's incremental fetch session intact: the
    # consumer sees throttle events and still gets every message, none twice
    from confluent_kafka import Consumer, TopicPartition
    bs = quota_broker.bootstrap
    create_topic(bs, topic_name)
    with WireClient(bs) as c:
        for i in range(12):
            batch = rec.build_batch([(None, bytes([i]) * 50_000, [], int(time.time() * 1000))])
            assert produce(c, topic_name, batch).error_code == 0
    assert alter(bs, {"client-id": "slow-consumer"}, {"consumer_byte_rate": 150_000}) == (0, None)
    throttles = []
    consumer = Consumer({"bootstrap.servers": bs, "client.id": "slow-consumer", "group.id": f"g-{topic_name}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    try:
        consumer.assign([TopicPartition(topic_name, 0, 0)])   # no group join to wait for
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 12 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value()[0])
        assert got == list(range(12))
        assert throttles and max(throttles) > 0
    finally:
        consumer.close()
        alter(bs, {"client-id": "slow-consumer"}, {}, remove=["consumer_byte_rate"])


def test_requests_pipelined_behind_a_throttled_one_wait_for_the_throttle(quota_broker, topic_name):
    # Kafka mutes a throttled channel once the answer is sent: a request the client already
    # pipelined behind it is not read, so not answered, until the throttle time is up
    from kproto import api
    bs = quota_broker.bootstrap
    create_topic(bs, topic_name)
    assert alter(bs, {"client-id": "kproto-tests"}, {"producer_byte_rate": 50_000}) == (0, None)
    try:
        with WireClient(bs) as c:
            big = rec.build_batch([(None, b"z" * 200_000, [], int(time.time() * 1000))])
            small = rec.build_batch([(None, b"z", [], int(time.time() * 1000))])
            c.send(produce_req(topic_name, big), PRODUCE_V)
            c.send(produce_req(topic_name, small), PRODUCE_V)
            _cid, first = api.decode_response(c.recv_frame(), 0, PRODUCE_V)
            answered = time.monotonic()
            assert c.recv_frame() is not None
            waited = time.monotonic() - answered
        assert first.throttle_time_ms > 0
        assert waited >= 0.8 * first.throttle_time_ms / 1000.0, (waited, first.throttle_time_ms)
    finally:
        alter(bs, {"client-id": "kproto-tests"}, {}, remove=["producer_byte_rate"])


def test_request_percentage_counts_the_brokers_work_not_a_long_poll(quota_broker, topic_name):
    # Kafka counts network and request-thread time against request_percentage, not the time a
    # fetch waits in purgatory for data: a consumer long-polling an idle topic is not throttled
    bs = quota_broker.bootstrap
    create_topic(bs, topic_name)
    # 5% of a thread: 50 ms a second, 150 ms over the 3 s window; each poll below waits 400 ms
    assert alter(bs, {"client-id": "kproto-tests"}, {"request_percentage": 5}) == (0, None)
    try:
        with WireClient(bs) as c:
            polls = [fetch(c, topic_name, 0, max_wait_ms=400) for _ in range(3)]
        assert [p.throttle_time_ms for p in polls] == [0, 0, 0]
        assert all(p.responses[0].partitions[0].error_code == 0 for p in polls)
    finally:
        alter(bs, {"client-id": "kproto-tests"}, {}, remove=["request_percentage"])


def test_connection_limits_per_ip_and_per_broker(tmp_path):
    from tests.wire_client import api_versions_ok
    b = BrokerProcess(str(tmp_path / "data"), settings={"max.connections.per.ip": "3",
                                                        "max.connections.per.ip.overrides": "127.0.0.2:1"})
    b.start()
    try:
        open_ = [WireClient(b.bootstrap) for _ in range(3)]
        assert all(api_versions_ok(c) for c in open_)
        with WireClient(b.bootstrap) as extra:
            assert extra.closed_by_peer(timeout=5)       # a fourth from 127.0.0.1
        open_.pop().close()
        time.sleep(0.2)
        with WireClient(b.bootstrap) as again:
            assert api_versions_ok(again)
        for c in open_:
            c.close()
    finally:
        b.stop()
    b = BrokerProcess(str(tmp_path / "data2"), settings={"max.connections": "2"})
    b.start()
    try:
        first, second = WireClient(b.bootstrap), WireClient(b.bootstrap)
        assert api_versions_ok(first) and api_versions_ok(second)
        third = WireClient(b.bootstrap, timeout=1.0)      # queued by the kernel, not accepted
        from kproto.messages.api_versions_request import ApiVersionsRequest
        third.send(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
        import socket
        with pytest.raises(socket.timeout):
            third.recv_frame()
        first.close()
        third.sock.settimeout(10)
        assert third.recv_frame() is not None            # accepted once a slot was free
        second.close()
        third.close()
    finally:
        b.stop()


def test_controller_mutation_rate_refuses_topic_creation_past_the_burst(fresh_broker):
    from kproto.messages.create_topics_request import CreateTopicsRequest as CT
    bs = fresh_broker.bootstrap
    assert alter(bs, {"client-id": "kproto-tests"}, {"controller_mutation_rate": 2}) == (0, None)

    def create(name, partitions, version):
        with WireClient(bs) as c:
            return c.call(CT(topics=[CT.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)],
                             timeout_ms=5000), version)
    first = create("mut-big", 25, 7)           # the burst is 2/s x 11 windows = 22 partitions
    assert first.topics[0].error_code == 0 and first.throttle_time_ms > 0
    second = create("mut-next", 1, 7)
    assert second.topics[0].error_code == 89   # THROTTLING_QUOTA_EXCEEDED
    assert second.topics[0].error_message == "The throttling quota has been exceeded."
    assert second.throttle_time_ms > 0
    old = create("mut-old-version", 1, 5)      # before v6 the request is served, only throttled
    assert old.topics[0].error_code == 0 and old.throttle_time_ms > 0


def test_connection_creation_rate_of_an_address_closes_extra_connections(tmp_path):
    from tests.wire_client import api_versions_ok
    b = BrokerProcess(str(tmp_path / "data"), settings={"quota.window.num": "2", "quota.window.size.seconds": "1"})
    b.start()
    try:
        assert alter(b.bootstrap, {"ip": "127.0.0.1"}, {"connection_creation_rate": 2}) == (0, None)
        served = 0
        for _ in range(40):
            with WireClient(b.bootstrap, timeout=10) as c:
                try:
                    api_versions_ok(c)
                    served += 1
                except (ConnectionError, OSError):
                    break      # held for the throttle time, then closed unanswered
        else:
            raise AssertionError("40 connections in a row were served at 2 per second")
        assert served >= 2, served     # the first ones are served, then the rate refuses
    finally:
        b.stop()


def test_max_connection_creation_rate_paces_accepting(tmp_path):
    from tests.wire_client import api_versions_ok
    b = BrokerProcess(str(tmp_path / "data"), settings={"max.connection.creation.rate": "5",
                                                        "quota.window.num": "2", "quota.window.size.seconds": "1"})
    b.start()
    try:
        started = time.monotonic()
        for _ in range(12):
            with WireClient(b.bootstrap, timeout=15) as c:
                assert api_versions_ok(c)      # every connection is served, later
        assert time.monotonic() - started >= 1.0
    finally:
        b.stop()

"""The application's tests: only kproto's fixtures, no broker set-up."""
import pytest

from wordcount_app import count_words, group_consumer, publish

LINES = ["the quick brown fox", "jumps over the lazy dog", "the end"]


def test_words_are_counted(kafka_bootstrap, kafka_topic):
    publish(kafka_bootstrap, kafka_topic, LINES)
    c = group_consumer(kafka_bootstrap, kafka_topic, "wordcount")
    try:
        counts = count_words(c, len(LINES))
    finally:
        c.close()
    assert counts["the"] == 3 and counts["fox"] == 1 and sum(counts.values()) == 11


@pytest.mark.kafka_topic(partitions=3)
def test_factories_with_both_clients(kafka_topic, kafka_producer, kafka_consumer):
    p = kafka_producer(linger_ms=1)
    for i in range(30):
        p.produce(kafka_topic, key=str(i).encode(), value=b"v%d" % i)
    assert p.flush(10) == 0
    kp = kafka_producer(client="kafka-python")
    kp.send(kafka_topic, key=b"kp", value=b"from kafka-python").get(timeout=10)
    c = kafka_consumer(topics=[kafka_topic])
    got = []
    import time
    deadline = time.monotonic() + 15
    while len(got) < 31 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append((m.partition(), m.value()))
    assert len(got) == 31 and {part for part, _ in got} == {0, 1, 2}
    assert (b"from kafka-python") in [v for _, v in got]


def test_every_test_gets_a_new_topic(kafka_topic):
    assert kafka_topic.startswith("test_every_test_gets_a_new_topic-")


def test_a_fresh_broker_of_its_own(kafka_broker_factory, kafka_bootstrap):
    b = kafka_broker_factory(num_partitions=2)
    assert b.bootstrap != kafka_bootstrap
    publish(b.bootstrap, "auto-created", LINES)   # auto-created with num.partitions=2
    c = group_consumer(b.bootstrap, "auto-created", "g")
    try:
        assert sum(count_words(c, len(LINES)).values()) == 11
    finally:
        c.close()


def test_cluster_is_not_there_yet(kafka_cluster):
    raise AssertionError("kafka_cluster should have skipped")


def test_metrics_only_when_asked(kafka_broker, request):
    import urllib.request
    if not request.config.getoption("--kproto-metrics"):
        assert kafka_broker.metrics_url is None
        return
    with urllib.request.urlopen(kafka_broker.metrics_url, timeout=10) as r:
        assert b"kproto_broker_ready 1.0" in r.read()

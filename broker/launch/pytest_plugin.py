"""pytest fixtures for testing Kafka applications against a real kproto
broker: registered through the `pytest11` entry point, so installing kproto
makes them available (before installing: `pytest -p broker.launch.pytest_plugin`).

    def test_roundtrip(kafka_bootstrap, kafka_topic, kafka_producer, kafka_consumer):
        p = kafka_producer()                       # confluent-kafka Producer
        p.produce(kafka_topic, b"hello"); p.flush()
        c = kafka_consumer(topics=[kafka_topic])   # subscribed, from the earliest offset
        assert c.poll(10).value() == b"hello"

Fixtures
  kafka_broker      session: one broker (free port, temporary data directory)
  kafka_bootstrap   session: its "host:port"
  kafka_topic       a new topic for the test (`@pytest.mark.kafka_topic(partitions=3, config={...})`)
  kafka_producer    factory: kafka_producer(client="confluent"|"kafka-python", **config)
  kafka_consumer    factory: kafka_consumer(topics=[...], client=..., group_id=None, **config)
  kafka_broker_factory  factory: a fresh broker of the test's own, stopped after it
  kafka_cluster     a multi-node cluster: skips until kproto runs one

Options: --kproto-mode=subprocess|thread (default subprocess: the broker
runs as a child process, so a test that blocks the GIL cannot stall it),
--kproto-metrics (the metrics listener on a free port; off by default),
--kafka-bootstrap=HOST:PORT (use a running broker instead of starting one).
Nothing starts unless a test asks for one of these fixtures.
"""
from __future__ import annotations

import re
import uuid

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("kproto", "kproto broker fixtures")
    group.addoption("--kproto-mode", choices=("subprocess", "thread"), default=None,
                    help="run the fixtures' brokers as a child process (default) or a thread of pytest")
    group.addoption("--kproto-metrics", action="store_true", default=False,
                    help="start the fixtures' brokers with the metrics listener on a free port")
    group.addoption("--kafka-bootstrap", default=None, metavar="HOST:PORT",
                    help="use this running broker for kafka_broker/kafka_bootstrap instead of starting kproto")
    parser.addini("kproto_mode", "subprocess (default) or thread", default="subprocess")


def pytest_configure(config):
    config.addinivalue_line("markers", "kafka_topic(partitions=1, config=None): what kafka_topic creates")


class _External:
    """A broker someone else runs (--kafka-bootstrap)."""
    metrics_url = None
    data_dir = None

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap


def _start(config, tmp_dir: str, settings=None):
    mode = config.getoption("--kproto-mode") or config.getini("kproto_mode")
    metrics = config.getoption("--kproto-metrics")
    if mode == "thread":
        from broker.launch.embedded import EmbeddedBroker
        return EmbeddedBroker(tmp_dir, settings=settings, metrics=metrics).start()
    from broker.launch.embedded import BrokerSubprocess
    return BrokerSubprocess(tmp_dir, settings=settings, metrics=metrics).start()


@pytest.fixture(scope="session")
def kafka_broker(request, tmp_path_factory):
    """The session's broker: `.bootstrap`, `.metrics_url`, `.data_dir`."""
    external = request.config.getoption("--kafka-bootstrap")
    if external:
        yield _External(external)
        return
    broker = _start(request.config, str(tmp_path_factory.mktemp("kproto-broker")))
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker) -> str:
    return kafka_broker.bootstrap


@pytest.fixture
def kafka_broker_factory(request, tmp_path_factory):
    """kafka_broker_factory(**settings) starts a fresh broker (Kafka's
    property names as settings); every one is stopped after the test."""
    started = []

    def start(**settings):
        settings = {k.replace("_", "."): str(v) for k, v in settings.items()}
        b = _start(request.config, str(tmp_path_factory.mktemp("kproto-fresh")), settings)
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()


@pytest.fixture
def kafka_cluster():
    pytest.skip("kproto runs single-node brokers only: multi-node clusters are not implemented yet")


@pytest.fixture
def kafka_topic(request, kafka_bootstrap) -> str:
    """The name of a topic created for this test (unique per test and run)."""
    from broker.launch.embedded import create_topic
    marker = request.node.get_closest_marker("kafka_topic")
    kwargs = dict(marker.kwargs) if marker else {}
    safe = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:150]
    name = f"{safe}-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, name, partitions=int(kwargs.get("partitions", 1)),
                 configs=kwargs.get("config"))
    return name


@pytest.fixture
def kafka_producer(kafka_bootstrap):
    """Factory of producers for the session's broker, flushed and closed
    after the test: kafka_producer(client="confluent" | "kafka-python", **config)."""
    made = []

    def make(client: str = "confluent", **config):
        if client == "confluent":
            confluent_kafka = pytest.importorskip("confluent_kafka")
            p = confluent_kafka.Producer({"bootstrap.servers": kafka_bootstrap, **_dotted(config)})
        elif client == "kafka-python":
            kafka = pytest.importorskip("kafka")
            p = kafka.KafkaProducer(bootstrap_servers=kafka_bootstrap, **config)
        else:
            raise ValueError(f"unknown client {client!r}: confluent or kafka-python")
        made.append(p)
        return p

    yield make
    for p in made:
        p.flush(10)
        if hasattr(p, "close"):   # kafka-python; a confluent Producer has no close
            p.close()


@pytest.fixture
def kafka_consumer(kafka_bootstrap):
    """Factory of consumers reading from the earliest offset, closed after
    the test: kafka_consumer(topics=[...], client="confluent" | "kafka-python",
    group_id=None (a fresh group), **config)."""
    made = []

    def make(topics=(), client: str = "confluent", group_id: str | None = None, **config):
        group_id = group_id or f"kproto-test-{uuid.uuid4().hex[:8]}"
        if client == "confluent":
            confluent_kafka = pytest.importorskip("confluent_kafka")
            c = confluent_kafka.Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group_id,
                                          "auto.offset.reset": "earliest", **_dotted(config)})
            if topics:
                c.subscribe(list(topics))
        elif client == "kafka-python":
            kafka = pytest.importorskip("kafka")
            c = kafka.KafkaConsumer(*topics, bootstrap_servers=kafka_bootstrap, group_id=group_id,
                                    auto_offset_reset="earliest", **config)
        else:
            raise ValueError(f"unknown client {client!r}: confluent or kafka-python")
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def _dotted(config: dict) -> dict:
    """librdkafka names with underscores allowed: linger_ms -> linger.ms."""
    return {k.replace("_", "."): v for k, v in config.items()}

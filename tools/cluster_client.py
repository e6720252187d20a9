"""Client-side helpers for checks against a running cluster of real processes (a QuorumCluster of
`kproto serve` nodes, or tools/chaos/cluster.py's kproto or Kafka nodes), used by the real-process
tests and tools/bench: wait for a condition, create a topic, read a partition's leader/replicas/ISR,
an idempotent acks=all producer in a thread that records every ack, the longest pause between
acks, and reading a partition back to check exactly-once-in-order delivery.

confluent_kafka is imported where it is used, so that importing this module needs no client."""
from __future__ import annotations

import bisect
import threading
import time

# librdkafka's logging off: the tests' failures show what they need
QUIET = {"log_level": 0, "logger": lambda *a, **k: None}


def wait_until(predicate, timeout: float, what, interval: float = 0.1, detail=None):
    """Poll predicate until it gives a true value, and return that; an exception counts as not yet
    (a node may be down meanwhile). On timeout an AssertionError names `what` (a string, or a
    function giving one), the last exception, and detail() when given."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:   # noqa: BLE001
            last = exc
        time.sleep(interval)
    tail = f" {detail()}" if detail is not None else ""
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what} (last error: {last}){tail}")


def wait_brokers_unfenced(admin, count: int, timeout: float = 60) -> None:
    """Until Metadata lists `count` brokers. A broker registers fenced and is listed (and may lead)
    only once unfenced, as in Kafka; a topic created before that has every leader on the brokers
    already unfenced, so tests that need leaders spread over the brokers wait for this first."""
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) >= count, timeout,
               f"{count} brokers unfenced")


def create_topic(admin, topic: str, partitions: int = 1, replication_factor: int = 3,
                 replica_assignment=None, timeout: float = 20) -> bool:
    """Create the topic with a confluent AdminClient; one that already exists (an earlier attempt
    that timed out on the client but succeeded) counts as created. True, for wait_until."""
    import confluent_kafka
    from confluent_kafka.admin import NewTopic
    if replica_assignment is not None:
        new = NewTopic(topic, num_partitions=partitions, replica_assignment=replica_assignment)
    else:
        new = NewTopic(topic, partitions, replication_factor)
    try:
        admin.create_topics([new], request_timeout=15)[topic].result(timeout)
    except confluent_kafka.KafkaException as exc:
        if exc.args[0].code() != confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    return True


def partition_state(admin, topic: str, partition: int = 0, timeout: float = 5) -> tuple:
    """(leader, replicas, isr) of a partition as the cluster's metadata answers it."""
    p = admin.list_topics(topic, timeout=timeout).topics[topic].partitions[partition]
    return p.leader, list(p.replicas), list(p.isrs)


class AckedProducer:
    """An idempotent acks=all confluent-kafka producer writing b"m<seq>" (value % seq) to one
    partition from a thread until stop(): `acked` holds the acknowledged values in ack order,
    `ack_times` when each ack arrived, `errors` the failed deliveries.

    Pace: rate (records a second; 0: as fast as the client goes), or breather=(n, seconds): a
    sleep after every n records. buffer_poll: how long to poll when the client's queue is full."""

    def __init__(self, bootstrap: str, topic: str, value: bytes = b"m%08d", partition: int = 0,
                 rate: int = 0, breather: tuple | None = None, buffer_poll: float = 0.01,
                 message_timeout_ms: int = 60000, flush_timeout: float = 60):
        self.bootstrap, self.topic, self.value, self.partition = bootstrap, topic, value, partition
        self.rate, self.breather, self.buffer_poll = rate, breather, buffer_poll
        self.message_timeout_ms, self.flush_timeout = message_timeout_ms, flush_timeout
        self.acked: list = []
        self.ack_times: list = []
        self.errors: list = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            self.acked.append(msg.value())
            self.ack_times.append(time.monotonic())
        else:
            self.errors.append(err)

    def _run(self) -> None:
        import confluent_kafka
        p = confluent_kafka.Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                                      "acks": "all", "linger.ms": 5,
                                      "message.timeout.ms": self.message_timeout_ms, **QUIET})
        seq = 0
        started = time.monotonic()
        while not self._stop.is_set():
            if self.rate and seq > (time.monotonic() - started) * self.rate:
                time.sleep(0.002)
                p.poll(0)
                continue
            try:
                p.produce(self.topic, self.value % seq, partition=self.partition, on_delivery=self._on_delivery)
                seq += 1
            except BufferError:
                p.poll(self.buffer_poll)
            p.poll(0)
            if self.breather and seq % self.breather[0] == 0:
                time.sleep(self.breather[1])
        p.flush(self.flush_timeout)

    def start(self) -> "AckedProducer":
        self.thread.start()
        return self

    def stop(self, timeout: float = 90) -> None:
        self._stop.set()
        self.thread.join(timeout)

    def wait_for_acks(self, more: int, timeout: float, what: str = "acks", interval: float = 0.1) -> None:
        """Wait until `more` records beyond those acknowledged now are acknowledged."""
        target = len(self.acked) + more
        wait_until(lambda: len(self.acked) >= target, timeout,
                   lambda: f"{what} ({len(self.acked)} acked, {len(self.errors)} errors, "
                           f"producer alive {self.thread.is_alive()})", interval)


class AckProbe:
    """A thread that produces one acks=all record to `topic` every `interval` seconds until the
    `with` block ends: `latencies` holds each acknowledged record's send-to-ack seconds, `errors`
    the failed deliveries (how a partition's writers fare while something else goes on)."""

    def __init__(self, bootstrap: str, topic: str, value: bytes = b"during", interval: float = 0.05):
        self.bootstrap, self.topic, self.value, self.interval = bootstrap, topic, value, interval
        self.latencies: list = []
        self.errors: list = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        import confluent_kafka
        p = confluent_kafka.Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 0,
                                      "message.timeout.ms": 30000, **QUIET})
        while not self._stop.is_set():
            sent = time.monotonic()
            p.produce(self.topic, self.value, on_delivery=lambda err, _m, sent=sent: (
                self.errors.append(err) if err is not None else self.latencies.append(time.monotonic() - sent)))
            p.poll(0)
            time.sleep(self.interval)
        p.flush(30)

    def __enter__(self) -> "AckProbe":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.thread.join(60)


def longest_ack_gap(ack_times, at: float, end: float | None = None, count: int | None = None) -> float:
    """The longest time without an ack from the last ack before `at` (a delivery report may reach
    its callback a little after the ack arrived, so "first ack after `at`" would understate it) up
    to `end`, or over the next `count` acks."""
    times = list(ack_times)
    start = max(0, bisect.bisect_right(times, at) - 1)
    window = times[start:] if count is None else times[start:start + count]
    if end is not None:
        window = [t for t in window if t <= end]
    return max((b - a for a, b in zip(window, window[1:])), default=float("inf"))


def read_partition(bootstrap: str, topic: str, count: int, timeout: float, group: str = "readback",
                   partition: int = 0) -> list:
    """The partition's values from offset 0 (confluent-kafka, no commits), until `count` are read
    or `timeout` has passed."""
    import confluent_kafka
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET})
    consumer.assign([confluent_kafka.TopicPartition(topic, partition, 0)])
    values = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < count and time.monotonic() < deadline:
            for m in consumer.consume(10000, 1.0):
                if not m.error():
                    values.append(m.value())
    finally:
        consumer.close()
    return values


def assert_exactly_once_in_order(values: list, acked: list) -> None:
    """What was read back is every acknowledged record, once each, in the order acknowledged
    (values are zero-padded sequence numbers, so sorted is the order written)."""
    assert len(values) == len(set(values)), "duplicates"
    assert values == sorted(values), "out of order"
    assert values == acked, (len(values), len(acked))


def finalize_feature(bootstrap: str, name: str, level: int, timeout: float = 30) -> None:
    """UpdateFeatures (what kafka-features.sh upgrade does) until the cluster answers it, e.g.
    transaction.version 2 for a run with transactions v2 (works on kproto and Kafka 4.x nodes)."""
    from broker.admin.client import Admin
    from kproto.messages.update_features_request import FeatureUpdateKey, UpdateFeaturesRequest

    def attempt():
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            resp = admin.call(UpdateFeaturesRequest(timeout_ms=10000, feature_updates=[
                FeatureUpdateKey(feature=name, max_version_level=level, upgrade_type=1)]), 1)
        codes = [r.error_code for r in resp.results]
        if resp.error_code == 0 and codes == [0]:
            return True
        if resp.error_code in (14, 15, 41) or any(c in (14, 15, 41) for c in codes):
            return False   # the controller is not there yet: again
        raise SystemExit(f"UpdateFeatures {name}={level}: {resp.error_code} {resp.error_message} {[(r.error_code, r.error_message) for r in resp.results]}")
    wait_until(attempt, timeout, f"{name} {level} finalized")

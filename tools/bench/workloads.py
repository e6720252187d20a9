"""The client side of the benchmark: librdkafka (confluent-kafka) producers
and consumers driving one endpoint. Each function returns a dict of figures.

Produce-ack latency is librdkafka's own per-message latency (`Message.latency()`,
microsecond clock from `produce()` to the delivery callback), read in the
callback. Delivery callbacks are served by a poller thread so a busy produce
loop does not delay them.
"""
from __future__ import annotations

import logging
import struct
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tools.bench.stats import percentile

_quiet = logging.getLogger("tools.bench.rdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False

STALL_SECONDS = 30.0


class BenchError(Exception):
    pass


def _common(bootstrap: str) -> dict:
    return {"bootstrap.servers": bootstrap, "logger": _quiet, "client.id": "kproto-bench"}


class _Poller:
    """Serves a producer's delivery callbacks while the main thread produces."""

    def __init__(self, producer: Producer):
        self.producer = producer
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.producer.poll(0.05)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def produce(bootstrap: str, topic: str, count: int, size: int, acks: str, linger_ms: int = 5,
            progress=None, extra: dict | None = None, producers: int = 1) -> dict:
    """Send `count` records of `size` bytes as fast as the producer takes them
    (with `producers` > 1: that many producers, each its own connection, in
    threads of this process, sharing the records)."""
    conf = _common(bootstrap) | {"acks": acks, "linger.ms": linger_ms} | (extra or {})
    clients = [Producer(conf) for _ in range(producers)]
    latencies: list[float] = []
    errors: list = []
    lat_append = latencies.append

    def delivered(err, msg):
        if err is not None:
            errors.append(err)
        else:
            lat_append(msg.latency())

    _warm_up(clients[0], topic)
    for other in clients[1:]:
        other.list_topics(topic, timeout=STALL_SECONDS)  # connected, without a record more to read back
    value = b"\x5a" * size
    shares = [count // producers + (1 if i < count % producers else 0) for i in range(producers)]

    def send_all(producer: Producer, n: int, report) -> None:
        send = producer.produce
        for i in range(n):
            while True:
                try:
                    send(topic, value, on_delivery=delivered)
                    break
                except BufferError:
                    time.sleep(0.0002)
            if report is not None and not i & 0x3FFF:
                report(i * producers, count)

    pollers = [_Poller(p) for p in clients]
    for poller in pollers:
        poller.__enter__()
    try:
        started = time.perf_counter()
        if producers == 1:
            send_all(clients[0], count, progress)
        else:
            threads = [threading.Thread(target=send_all, args=(p, n, progress if i == 0 else None))
                       for i, (p, n) in enumerate(zip(clients, shares))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        for producer in clients:
            _drain(producer, lambda: len(latencies) + len(errors), count)
        elapsed = time.perf_counter() - started
    finally:
        for poller in pollers:
            poller.__exit__(None, None, None)
    if errors:
        raise BenchError(f"{len(errors)} of {count} records failed, first: {errors[0]}")
    latencies.sort()
    return {
        "records/s": count / elapsed,
        "MiB/s": count * size / elapsed / (1 << 20),
        "ack p50 ms": percentile(latencies, 50) * 1e3,
        "ack p99 ms": percentile(latencies, 99) * 1e3,
        "ack p999 ms": percentile(latencies, 99.9) * 1e3,
        "seconds": elapsed,
        "bytes": count * size,
    }


def _warm_up(producer: Producer, topic: str) -> None:
    """Connection and metadata before the clock starts: one empty-valued
    record, acknowledged. It is not counted by the consumers' expectations;
    they read `count + 1` records per produce run."""
    done = []
    producer.produce(topic, b"", on_delivery=lambda err, msg: done.append(err))
    deadline = time.monotonic() + STALL_SECONDS
    while not done:
        producer.poll(0.05)
        if time.monotonic() > deadline:
            raise BenchError(f"no acknowledgement from {topic} within {STALL_SECONDS:.0f} s")
    if done[0] is not None:
        raise BenchError(f"warm-up record to {topic} failed: {done[0]}")


def _drain(producer: Producer, acknowledged, count: int) -> None:
    last, last_change = -1, time.monotonic()
    while True:
        remaining = producer.flush(0.1)
        n = acknowledged()
        if remaining == 0 and n >= count:
            return
        if n != last:
            last, last_change = n, time.monotonic()
        elif time.monotonic() - last_change > STALL_SECONDS:
            raise BenchError(f"producer stalled: {n} of {count} acknowledged")


# librdkafka stops fetching a partition whose local queue is full and then
# waits fetch.queue.backoff.ms (default 1000) before fetching again: a reader
# that falls behind for a moment stalls for a whole second, which made
# run-to-run spread several-fold. Both targets get the same setting.
FETCH_QUEUE_BACKOFF_MS = 10


def _consumer(bootstrap: str, group: str, extra: dict | None = None) -> Consumer:
    return Consumer(_common(bootstrap) | {"group.id": group, "enable.auto.commit": False,
                                          "auto.offset.reset": "earliest",
                                          "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS} | (extra or {}))


class _Counter:
    """Records received, and when the first and the last one arrived."""

    def __init__(self, expected: int):
        self.expected = expected
        self.count = 0
        self.start = None   # when reading could begin (assignment)
        self.first = None
        self.last = None
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.error = None

    def add(self, n: int) -> None:
        now = time.perf_counter()
        with self.lock:
            if self.first is None:
                self.first = now
            self.count += n
            self.last = now
            if self.count >= self.expected:
                self.done.set()


def _read(consumer: Consumer, counter: _Counter, stop: threading.Event) -> None:
    try:
        while not stop.is_set() and not counter.done.is_set():
            # consume(n, timeout) returns when n records are there or at the
            # timeout: never ask for more than are left, and keep the timeout
            # short for a group member whose share ends early
            want = max(1, min(1000, counter.expected - counter.count))
            msgs = consumer.consume(want, 0.01)
            if not msgs:
                continue
            for m in msgs:
                if m.error() is not None:
                    raise KafkaException(m.error())
            counter.add(len(msgs))
    except Exception as exc:  # reported by the waiting thread
        counter.error = exc
        counter.done.set()


def _wait(counter: _Counter, progress) -> None:
    last, last_change = -1, time.monotonic()
    while not counter.done.wait(0.25):
        if progress is not None:
            progress(counter.count, counter.expected)
        if counter.count != last:
            last, last_change = counter.count, time.monotonic()
        elif time.monotonic() - last_change > STALL_SECONDS:
            raise BenchError(f"consumer stalled: {counter.count} of {counter.expected} records")
    if counter.error is not None:
        raise BenchError(f"consumer failed: {counter.error}")


def _consume_result(counter: _Counter, size: int) -> dict:
    # from assignment to the last record: excludes connecting and (for
    # groups) the join
    elapsed = max(counter.last - (counter.start or counter.first), 1e-9)
    n = counter.count
    return {"records/s": n / elapsed, "MiB/s": n * size / elapsed / (1 << 20),
            "seconds": elapsed, "bytes": n * size}


def consume_assigned(bootstrap: str, topic: str, partitions: int, expected: int, size: int,
                     progress=None) -> dict:
    """One consumer, all partitions assigned from offset 0."""
    consumer = _consumer(bootstrap, f"bench-assign-{time.monotonic_ns()}")
    counter = _Counter(expected)
    stop = threading.Event()
    try:
        consumer.list_topics(topic, timeout=STALL_SECONDS)  # connected, metadata known
        counter.start = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        reader = threading.Thread(target=_read, args=(consumer, counter, stop), daemon=True)
        reader.start()
        try:
            _wait(counter, progress)
        finally:
            stop.set()
            reader.join()
    finally:
        consumer.close()
    return _consume_result(counter, size)


def consume_group(bootstrap: str, topic: str, expected: int, size: int, members: int = 3,
                  progress=None) -> dict:
    """`members` consumers in one group subscribed to the topic."""
    group = f"bench-group-{time.monotonic_ns()}"
    counter = _Counter(expected)
    stop = threading.Event()
    consumers = [_consumer(bootstrap, group) for _ in range(members)]
    threads = []

    def assigned(consumer, partitions):
        if partitions:
            with counter.lock:
                if counter.start is None:
                    counter.start = time.perf_counter()

    try:
        for c in consumers:
            c.subscribe([topic], on_assign=assigned)
            t = threading.Thread(target=_read, args=(c, counter, stop), daemon=True)
            t.start()
            threads.append(t)
        try:
            _wait(counter, progress)
        finally:
            stop.set()
            for t in threads:
                t.join()
    finally:
        for c in consumers:
            c.close()
    return _consume_result(counter, size)


_STAMP = struct.Struct(">q")


def latency(bootstrap: str, topic: str, seconds: float, acks: str, size: int = 100,
            interval: float = 0.001, progress=None) -> dict:
    """One record every `interval` seconds with linger 0: produce-ack latency
    (librdkafka's) and end to end (the record carries its send time; a
    consumer in another thread stamps its arrival; both use the monotonic
    clock of this process)."""
    producer = Producer(_common(bootstrap) | {"acks": acks, "linger.ms": 0})
    consumer = _consumer(bootstrap, f"bench-latency-{time.monotonic_ns()}")
    acks_seen: list[float] = []
    e2e: list[float] = []
    errors: list = []
    stop = threading.Event()
    warm = threading.Event()

    def delivered(err, msg):
        if err is not None:
            errors.append(err)
        elif msg.value():
            acks_seen.append(msg.latency())

    def read():
        try:
            while not stop.is_set():
                # poll, not consume(n): consume waits for n records or the timeout
                m = consumer.poll(0.05)
                if m is None:
                    continue
                now = time.perf_counter_ns()
                if m.error() is not None:
                    continue
                v = m.value()
                if len(v) < 8:
                    warm.set()
                    continue
                e2e.append((now - _STAMP.unpack_from(v, 0)[0]) / 1e9)
        except Exception as exc:
            errors.append(exc)

    _warm_up(producer, topic)
    consumer.assign([TopicPartition(topic, 0, 0)])
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if not warm.wait(STALL_SECONDS):
            raise BenchError(f"the latency consumer did not see the warm-up record on {topic}")
        pad = b"\x00" * max(size - 8, 0)
        count = int(seconds / interval)
        with _Poller(producer):
            start = time.perf_counter()
            for i in range(count):
                due = start + i * interval
                delay = due - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                producer.produce(topic, _STAMP.pack(time.perf_counter_ns()) + pad, on_delivery=delivered)
                if progress is not None and not i % 500:
                    progress(i, count)
            _drain(producer, lambda: len(acks_seen) + len(errors), count)
        deadline = time.monotonic() + 10
        while len(e2e) < count and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        reader.join()
        consumer.close()
    if errors:
        raise BenchError(f"latency run failed: {errors[0]}")
    if len(e2e) < count:
        raise BenchError(f"only {len(e2e)} of {count} records reached the consumer")
    acks_seen.sort()
    e2e.sort()
    return {
        "ack p50 ms": percentile(acks_seen, 50) * 1e3,
        "ack p99 ms": percentile(acks_seen, 99) * 1e3,
        "ack p999 ms": percentile(acks_seen, 99.9) * 1e3,
        "e2e p50 ms": percentile(e2e, 50) * 1e3,
        "e2e p99 ms": percentile(e2e, 99) * 1e3,
        "records": count,
    }

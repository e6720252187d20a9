"""Exactly-once with real clients against a real broker process:
idempotent producers across a kill -9 of the broker, transactions committed
and aborted across partitions, consume-transform-produce surviving a kill -9
of the processing client, zombie fencing and transaction timeouts.

Run as a script (`python -m tests.test_transactions_clients process ...`),
this module is the consume-transform-produce client the test kills."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from broker.launch.process import BrokerProcess
from tests.wire_client import create_topic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = [pytest.mark.timeout(180),
              # kafka-python loads its protocol schemas through deprecated importlib calls
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]
FAST_GROUPS = {"group.initial.rebalance.delay.ms": "0"}


def _admin_create(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(15)


def consume_all(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int | None = None,
                timeout: float = 20.0) -> dict[int, list[tuple[int, bytes]]]:
    """{partition: [(offset, value)]} from the start of each partition up to its
    end (as the isolation level sees it), through confluent-kafka."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: dict[int, list] = {p: [] for p in range(partitions)}
        at_eof: set = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                if len(at_eof) == partitions and (expect is None or sum(map(len, got.values())) >= expect):
                    break
                continue
            if m.error():
                if m.error().code() == -191:     # _PARTITION_EOF
                    at_eof.add(m.partition())
                    continue
                raise AssertionError(m.error())
            at_eof.discard(m.partition())
            got[m.partition()].append((m.offset(), m.value()))
        return got
    finally:
        c.close()


def values(got: dict) -> list[bytes]:
    return [v for p in sorted(got) for _o, v in got[p]]


# ==================================================================== idempotent producer, broker killed

def _close(sock) -> None:
    # shutdown first: a plain close leaves the connection open while the
    # other pump thread is blocked reading it
    import socket
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class Relay:
    """A TCP relay in front of the broker (the address it advertises). While
    `swallow` is set, the broker's answers are dropped: requests still reach
    the broker and are written, their acknowledgements are lost, as when a
    broker dies between writing a batch and answering it."""

    def __init__(self, broker_port: int):
        import socket
        self.broker_port = broker_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.swallow = False
        self.conns: list = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.broker_port), timeout=2)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src, dst, answers: bool):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if answers and self.swallow:
                    continue
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            _close(s)

    def cut(self):
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            _close(s)

    def close(self):
        self.listener.close()
        self.cut()


def test_idempotent_producer_survives_broker_kill(tmp_path, topic_name):
    """Every acknowledged record exactly once, in order, although the broker
    was killed (kill -9) and restarted twice while the producer kept sending,
    each time with batches written whose acknowledgements never came back
    (the producer sends those again; the restarted broker must know them)."""
    from confluent_kafka import Producer
    from broker.launch.process import free_port
    port = free_port()
    relay = Relay(port)
    proc = BrokerProcess(str(tmp_path / "data"), port=port, settings={
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{relay.port}"}).start()
    try:
        topic = topic_name
        _admin_create(proc.bootstrap, topic, 2)
        acked: dict[int, list[bytes]] = {0: [], 1: []}
        failed = []

        def delivered(err, msg):
            if err is None:
                acked[msg.partition()].append(msg.value())
            else:
                failed.append(err)

        p = Producer({"bootstrap.servers": f"127.0.0.1:{relay.port}", "enable.idempotence": True,
                      "acks": "all", "linger.ms": 5, "batch.num.messages": 50, "message.timeout.ms": 60000,
                      "retry.backoff.ms": 50, "reconnect.backoff.max.ms": 200,
                      "max.in.flight.requests.per.connection": 5})
        total = 6000
        sent = 0
        kills = (2000, 4000)
        while sent < total:
            for _ in range(100):
                p.produce(topic, value=f"v{sent:06d}".encode(), partition=sent % 2, on_delivery=delivered)
                sent += 1
            p.poll(0)
            time.sleep(0.005)
            if sent in kills:
                # once the producer is in full flow (earlier records acknowledged)
                deadline = time.monotonic() + 30
                while sum(map(len, acked.values())) < sent - 300 and time.monotonic() < deadline:
                    p.poll(0.01)
                for _ in range(300):
                    p.produce(topic, value=f"v{sent:06d}".encode(), partition=sent % 2, on_delivery=delivered)
                    sent += 1
                relay.swallow = True
                for _ in range(20):          # keep sending while nothing is acknowledged
                    p.poll(0.01)
                proc.kill()
                relay.cut()
                relay.swallow = False
                proc.start()
        assert p.flush(90) == 0
        assert failed == []
        assert sum(map(len, acked.values())) == total
        got = consume_all(proc.bootstrap, topic, 2, "read_committed", expect=total)
        for part in (0, 1):
            stored = [v for _o, v in got[part]]
            assert len(stored) == len(set(stored)), f"duplicates in partition {part}"
            assert stored == acked[part], f"partition {part} differs from what was acknowledged"
            assert stored == sorted(stored), "out of order"
    finally:
        proc.stop()
        relay.close()


def test_kafka_python_idempotent_producer(broker, topic_name):
    from kafka import KafkaProducer
    topic = topic_name
    create_topic(broker.bootstrap, topic, 1)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, acks="all", linger_ms=2)
    try:
        futures = [p.send(topic, value=f"kp{i:04d}".encode(), partition=0) for i in range(500)]
        p.flush(30)
        offsets = [f.get(10).offset for f in futures]
    finally:
        p.close(5)
    assert offsets == list(range(500))
    got = values(consume_all(broker.bootstrap, topic, 1, "read_committed", expect=500))
    assert got == [f"kp{i:04d}".encode() for i in range(500)]
    from kproto.messages.describe_producers_request import DescribeProducersRequest
    from tests.wire_client import WireClient
    with WireClient(broker.bootstrap) as c:
        res = c.call(DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
            name=topic, partition_indexes=[0])]), 0).topics[0].partitions[0]
    (ps,) = res.active_producers
    assert ps.producer_id >= 0 and ps.last_sequence == 499 and ps.current_txn_start_offset == -1


# ==================================================================== commit and abort across partitions

def test_commit_and_abort_across_three_partitions_of_two_topics(broker, topic_name):
    from confluent_kafka import Producer
    a, b = f"{topic_name}-a", f"{topic_name}-b"
    _admin_create(broker.bootstrap, a, 2)
    _admin_create(broker.bootstrap, b, 1)
    targets = [(a, 0), (a, 1), (b, 0)]
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic_name}-tx"})
    p.init_transactions(30)
    for outcome in ("commit", "abort", "commit2"):
        p.begin_transaction()
        for t, part in targets:
            for i in range(4):
                p.produce(t, value=f"{outcome}-{t[-1]}{part}-{i}".encode(), partition=part)
        p.flush(30)
        if outcome == "abort":
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
    committed = {(t, part): [f"{o}-{t[-1]}{part}-{i}".encode() for o in ("commit", "commit2") for i in range(4)]
                 for t, part in targets}
    aborted = {(t, part): [f"abort-{t[-1]}{part}-{i}".encode() for i in range(4)] for t, part in targets}
    rc = {a: consume_all(broker.bootstrap, a, 2, "read_committed", expect=16),
          b: consume_all(broker.bootstrap, b, 1, "read_committed", expect=8)}
    ru = {a: consume_all(broker.bootstrap, a, 2, "read_uncommitted", expect=24),
          b: consume_all(broker.bootstrap, b, 1, "read_uncommitted", expect=12)}
    for t, part in targets:
        seen = [v for _o, v in rc[t][part]]
        assert seen == committed[(t, part)], (t, part)
        everything = [v for _o, v in ru[t][part]]
        assert everything == committed[(t, part)][:4] + aborted[(t, part)] + committed[(t, part)][4:]
        # three markers (COMMIT, ABORT, COMMIT) take offsets the application never sees
        offsets = [o for o, _v in ru[t][part]]
        assert offsets == [0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13]


# ==================================================================== consume-transform-produce

def run_processor(bootstrap: str, source: str, sink: str, group: str, txn_id: str, pause_at: int) -> None:
    """The client the test kills: read source, write "out-<value>" to sink and
    the consumed offsets in one transaction per batch of 10. With pause_at,
    the transaction of that batch stops before its commit (and says so)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(source, 0)])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 1})
    producer.init_transactions(30)
    print("READY", flush=True)
    batch_no = 0
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 5:
        msgs = [m for m in consumer.consume(10, 0.5) if not m.error()]
        if not msgs:
            continue
        idle_since = time.monotonic()
        batch_no += 1
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, value=b"out-" + m.value(), partition=0)
        producer.flush(30)
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, msgs[-1].offset() + 1)], consumer.consumer_group_metadata(), 30)
        if batch_no == pause_at:
            print("PAUSED", msgs[0].offset(), flush=True)
            time.sleep(3600)
        producer.commit_transaction(30)
        print("COMMITTED", msgs[-1].offset(), flush=True)
    print("DONE", flush=True)


def _start_processor(bootstrap, source, sink, group, txn_id, pause_at):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.Popen([sys.executable, "-m", "tests.test_transactions_clients", "process", bootstrap, source,
                             sink, group, txn_id, str(pause_at)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env, cwd=ROOT)


def _wait_line(proc, prefix: str, timeout: float) -> str:
    found = {}

    def reader():
        for line in proc.stdout:
            if line.startswith(prefix):
                found["line"] = line.strip()
                return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    assert "line" in found, f"the processor never printed {prefix}"
    return found["line"]


def test_consume_transform_produce_survives_killing_the_processor(tmp_path, topic_name):
    from confluent_kafka import Producer
    proc = BrokerProcess(str(tmp_path / "data"), settings=FAST_GROUPS).start()
    try:
        source, sink = f"{topic_name}-in", f"{topic_name}-out"
        group, txn_id = f"{topic_name}-g", f"{topic_name}-tx"
        _admin_create(proc.bootstrap, source, 1)
        _admin_create(proc.bootstrap, sink, 1)
        p = Producer({"bootstrap.servers": proc.bootstrap})
        n = 200
        for i in range(n):
            p.produce(source, value=f"{i:04d}".encode(), partition=0)
        assert p.flush(30) == 0

        first = _start_processor(proc.bootstrap, source, sink, group, txn_id, pause_at=4)
        try:
            paused = _wait_line(first, "PAUSED", 60)
            assert paused == "PAUSED 30", "three batches of 10 were committed before the pause"
        finally:
            first.send_signal(signal.SIGKILL)     # kill -9 in the middle of the 4th transaction
            first.wait()
        second = _start_processor(proc.bootstrap, source, sink, group, txn_id, pause_at=0)
        try:
            _wait_line(second, "DONE", 90)
        finally:
            second.kill()
            second.wait()

        expected = [b"out-" + f"{i:04d}".encode() for i in range(n)]
        committed = values(consume_all(proc.bootstrap, sink, 1, "read_committed", expect=n))
        assert committed == expected, "each input's result exactly once, in order"
        everything = values(consume_all(proc.bootstrap, sink, 1, "read_uncommitted", expect=n + 10))
        assert len(everything) == n + 10 and everything[30:40] == expected[30:40], \
            "the killed transaction's output is in the log, aborted"
    finally:
        proc.stop()


# ==================================================================== fencing and timeouts

def test_zombie_producer_is_fenced(broker, topic_name):
    from confluent_kafka import KafkaException, Producer
    topic = topic_name
    _admin_create(broker.bootstrap, topic, 1)
    conf = {"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic}-tx"}
    zombie = Producer(conf)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(30)
    successor = Producer(conf)
    successor.init_transactions(30)          # fences the zombie and aborts its transaction
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=0)
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(30)
    err = info.value.args[0]
    assert err.fatal() or err.name() in ("PRODUCER_FENCED", "_FENCED", "INVALID_PRODUCER_EPOCH"), err
    assert values(consume_all(broker.bootstrap, topic, 1, "read_committed", expect=1)) == [b"successor"]


def test_transaction_open_past_its_timeout_is_aborted(tmp_path, topic_name):
    from confluent_kafka import KafkaException, Producer
    from kproto.messages.describe_transactions_request import DescribeTransactionsRequest
    from tests.wire_client import WireClient
    proc = BrokerProcess(str(tmp_path / "data"), settings={
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300"}).start()
    try:
        topic, txn_id = topic_name, f"{topic_name}-tx"
        _admin_create(proc.bootstrap, topic, 1)
        p = Producer({"bootstrap.servers": proc.bootstrap, "transactional.id": txn_id,
                      "transaction.timeout.ms": 1500})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, value=b"left-open", partition=0)
        p.flush(30)
        with WireClient(proc.bootstrap) as c:
            state = c.call(DescribeTransactionsRequest(transactional_ids=[txn_id]), 0).transaction_states[0]
            assert (state.transaction_state, state.producer_epoch) == ("Ongoing", 0)
            deadline = time.monotonic() + 10
            while state.transaction_state != "CompleteAbort" and time.monotonic() < deadline:
                time.sleep(0.1)
                state = c.call(DescribeTransactionsRequest(transactional_ids=[txn_id]), 0).transaction_states[0]
        assert (state.transaction_state, state.producer_epoch) == ("CompleteAbort", 1), "aborted and fenced"
        other = Producer({"bootstrap.servers": proc.bootstrap})
        other.produce(topic, value=b"after", partition=0)
        other.flush(10)
        # the abort released the last stable offset: read_committed readers move past it
        assert values(consume_all(proc.bootstrap, topic, 1, "read_committed", expect=1)) == [b"after"]
        with pytest.raises(KafkaException):
            p.commit_transaction(10)
    finally:
        proc.stop()


if __name__ == "__main__" and len(sys.argv) == 8 and sys.argv[1] == "process":
    run_processor(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], int(sys.argv[7]))

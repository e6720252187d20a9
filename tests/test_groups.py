"""Consumer groups end to end: a real broker process and unmodified clients
(confluent-kafka/librdkafka, kafka-python, aiokafka, the confluent
AdminClient) plus raw-protocol requests for the error cases.

Each group consumer runs in its own process (this file run as a script: the
`worker` entry point at the bottom) and reports what it is assigned and
every record it consumes as JSON lines, so a consumer can be closed or
killed with SIGKILL like a real one.

Error-code assertions name the row of
/work/shared/kafka-observations/error-cases.csv they match.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

SESSION_MS = 6000            # group.min.session.timeout.ms: the smallest a client may ask for
HEARTBEAT_MS = 500
COMMIT_INTERVAL_S = 0.3      # workers commit like auto-commit: what a killed one consumed last is redelivered
REPORT: dict = {}            # measurements, printed at the end of the module


# ============================================================================ the consumer worker (subprocess)

def _emit(**event) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


class _Committer:
    """Commit at most every COMMIT_INTERVAL_S, and at close; a failed commit (the
    group is rebalancing) only means redelivery."""

    def __init__(self, commit):
        self.commit = commit
        self.pending = False
        self.last = time.monotonic()

    def consumed(self, items) -> None:
        if items:
            _emit(ev="recs", items=items)
            self.pending = True

    def maybe_commit(self, force: bool = False):
        if self.pending and (force or time.monotonic() - self.last >= COMMIT_INTERVAL_S):
            self.pending = False
            self.last = time.monotonic()
            return self.commit()
        return None


def _watch_stdin(stop: threading.Event) -> None:
    for line in sys.stdin:
        if line.strip() == "close":
            break
    stop.set()


def _worker_confluent(opts, stop) -> None:
    from confluent_kafka import Consumer
    conf = {"bootstrap.servers": opts["bootstrap"], "group.id": opts["group"], "client.id": opts["name"],
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": opts["session_ms"], "heartbeat.interval.ms": HEARTBEAT_MS,
            "partition.assignment.strategy": opts.get("strategy", "range")}
    if opts.get("instance_id"):
        conf["group.instance.id"] = opts["instance_id"]
    consumer = Consumer(conf)

    def on_assign(c, parts):
        _emit(ev="assigned", parts=sorted(p.partition for p in parts))

    def on_revoke(c, parts):
        _emit(ev="revoked", parts=sorted(p.partition for p in parts))

    consumer.subscribe([opts["topic"]], on_assign=on_assign, on_revoke=on_revoke)
    _emit(ev="ready")

    def commit():
        try:
            consumer.commit(asynchronous=False)
        except Exception as exc:
            _emit(ev="commit-failed", error=str(exc))

    committer = _Committer(commit)
    while not stop.is_set():
        msgs = consumer.consume(num_messages=500, timeout=0.2)
        committer.consumed([[m.partition(), m.offset()] for m in msgs if not m.error()])
        committer.maybe_commit()
    committer.maybe_commit(force=True)
    consumer.close()
    _emit(ev="closed")


def _worker_kafka_python(opts, stop) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            _emit(ev="revoked", parts=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned):
            _emit(ev="assigned", parts=sorted(tp.partition for tp in assigned))

    consumer = KafkaConsumer(bootstrap_servers=opts["bootstrap"], group_id=opts["group"], client_id=opts["name"],
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=opts["session_ms"], heartbeat_interval_ms=HEARTBEAT_MS)
    consumer.subscribe([opts["topic"]], listener=Listener())
    _emit(ev="ready")

    def commit():
        try:
            consumer.commit()
        except Exception as exc:
            _emit(ev="commit-failed", error=str(exc))

    committer = _Committer(commit)
    while not stop.is_set():
        batch = consumer.poll(timeout_ms=200)
        committer.consumed([[r.partition, r.offset] for records in batch.values() for r in records])
        committer.maybe_commit()
    committer.maybe_commit(force=True)
    consumer.close()
    _emit(ev="closed")


def _worker_aiokafka(opts, stop) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.abc import ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            _emit(ev="revoked", parts=sorted(tp.partition for tp in revoked))

        async def on_partitions_assigned(self, assigned):
            _emit(ev="assigned", parts=sorted(tp.partition for tp in assigned))

    async def main():
        consumer = AIOKafkaConsumer(bootstrap_servers=opts["bootstrap"], group_id=opts["group"],
                                    client_id=opts["name"], auto_offset_reset="earliest",
                                    enable_auto_commit=False, session_timeout_ms=opts["session_ms"],
                                    heartbeat_interval_ms=HEARTBEAT_MS)
        consumer.subscribe([opts["topic"]], listener=Listener())
        await consumer.start()
        _emit(ev="ready")

        async def commit():
            try:
                await consumer.commit()
            except Exception as exc:
                _emit(ev="commit-failed", error=str(exc))

        committer = _Committer(commit)
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=200)
            committer.consumed([[r.partition, r.offset] for records in batch.values() for r in records])
            pending = committer.maybe_commit()
            if pending is not None:
                await pending
        pending = committer.maybe_commit(force=True)
        if pending is not None:
            await pending
        await consumer.stop()
        _emit(ev="closed")

    asyncio.run(main())


WORKERS = {"confluent": _worker_confluent, "kafka-python": _worker_kafka_python, "aiokafka": _worker_aiokafka}


def worker_main(argv) -> None:
    opts = json.loads(argv[0])
    stop = threading.Event()
    threading.Thread(target=_watch_stdin, args=(stop,), daemon=True).start()
    WORKERS[opts["client"]](opts, stop)


# ============================================================================ driving workers from the test

class Worker:
    """One consumer process and what it has reported."""

    def __init__(self, client: str, bootstrap: str, topic: str, group: str, name: str, **extra):
        opts = dict(client=client, bootstrap=bootstrap, topic=topic, group=group, name=name, session_ms=SESSION_MS)
        opts.update(extra)
        self.name = name
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker", json.dumps(opts)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, cwd=ROOT)
        self.lock = threading.Lock()
        self.assignment: set[int] = set()
        self.assign_events: list[tuple[float, list[int]]] = []
        self.revoke_events: list[tuple[float, list[int]]] = []
        self.records: list[tuple[int, int]] = []
        self.closed = False
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                kind = ev["ev"]
                if kind == "assigned":
                    self.assignment |= set(ev["parts"])
                    self.assign_events.append((time.monotonic(), ev["parts"]))
                elif kind == "revoked":
                    self.assignment -= set(ev["parts"])
                    self.revoke_events.append((time.monotonic(), ev["parts"]))
                elif kind == "recs":
                    self.records.extend(tuple(x) for x in ev["items"])
                elif kind == "closed":
                    self.closed = True

    def close(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("close\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def parts(self) -> set[int]:
        with self.lock:
            return set(self.assignment)


def wait_for(predicate, timeout: float, what: str, workers=()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    detail = "; ".join(f"{w.name}: parts={sorted(w.parts())} records={len(w.records)} "
                       f"stderr={''.join(w.stderr[-5:])!r}" for w in workers)
    raise AssertionError(f"timed out waiting for {what}: {detail}")


# ============================================================================ helpers: topics, records, raw protocol

def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        p.produce(topic, value=b"x%d" % i, partition=i % partitions)
    assert p.flush(15) == 0


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw-probe"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        c.close()


class Raw:
    """A blocking raw-protocol connection (kproto's codecs on a socket)."""

    def __init__(self, bootstrap: str, client_id: str = "raw-tests"):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.client_id = client_id
        self.cid = 0

    def call(self, request, version: int):
        from kproto import api
        self.cid += 1
        self.sock.sendall(api.encode_request(request, version, self.cid, self.client_id))
        size = struct.unpack(">i", self._read(4))[0]
        cid, response = api.decode_response(self._read(size), request.API_KEY, version)
        assert cid == self.cid
        return response

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def find_coordinator(raw: Raw, group: str):
    from kproto.messages.find_coordinator_request import FindCoordinatorRequest
    return raw.call(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4).coordinators[0]


def wait_coordinator(raw: Raw, group: str) -> None:
    """Until the group's coordinator is known and has loaded the group's partition: the first
    lookup creates __consumer_offsets, whose logs are made after the metadata change, and the
    coordinator answers COORDINATOR_LOAD_IN_PROGRESS (14) until then, as Kafka's does."""
    from kproto.messages.describe_groups_request import DescribeGroupsRequest
    deadline = time.monotonic() + 10
    while (find_coordinator(raw, group).error_code != 0
           or raw.call(DescribeGroupsRequest(groups=[group]), 5).groups[0].error_code == 14):
        assert time.monotonic() < deadline
        time.sleep(0.1)


def join(raw: Raw, group: str, member_id: str = "", instance_id=None, protocols=None, session_ms=SESSION_MS,
         rebalance_ms=10000, protocol_type="consumer", topic="t", version=9):
    from kproto.messages.join_group_request import JoinGroupRequest
    P = JoinGroupRequest.JoinGroupRequestProtocol
    if protocols is None:
        protocols = [P(name="range", metadata=subscription(topic))]
    return raw.call(JoinGroupRequest(group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
                                     member_id=member_id, group_instance_id=instance_id,
                                     protocol_type=protocol_type, protocols=protocols, reason=None), version)


def sync(raw: Raw, group: str, generation: int, member_id: str, assignments=(), instance_id=None):
    from kproto.messages.sync_group_request import SyncGroupRequest
    A = SyncGroupRequest.SyncGroupRequestAssignment
    return raw.call(SyncGroupRequest(group_id=group, generation_id=generation, member_id=member_id,
                                     group_instance_id=instance_id, protocol_type="consumer", protocol_name="range",
                                     assignments=[A(member_id=m, assignment=a) for m, a in assignments]), 5)


def heartbeat(raw: Raw, group: str, generation: int, member_id: str, instance_id=None) -> int:
    from kproto.messages.heartbeat_request import HeartbeatRequest
    return raw.call(HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id,
                                     group_instance_id=instance_id), 4).error_code


def commit(raw: Raw, group: str, generation: int, member_id: str, topic: str, offsets, instance_id=None,
           version=9):
    from kproto.messages.offset_commit_request import OffsetCommitRequest
    T, P = OffsetCommitRequest.OffsetCommitRequestTopic, OffsetCommitRequest.OffsetCommitRequestPartition
    resp = raw.call(OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
        group_instance_id=instance_id, topics=[T(name=topic, partitions=[
            P(partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata=m)
            for p, o, m in offsets])]), version)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def raw_member(bootstrap: str, group: str, topic: str, instance_id=None, client_id="raw-member"):
    """A raw connection that joined and synced as the only member: (raw, member id, generation)."""
    raw = Raw(bootstrap, client_id)
    wait_coordinator(raw, group)
    first = join(raw, group, instance_id=instance_id, topic=topic)
    member_id = first.member_id
    if first.error_code == 79:   # MEMBER_ID_REQUIRED
        first = join(raw, group, member_id=member_id, topic=topic)
    assert first.error_code == 0, first
    member_id = first.member_id
    res = sync(raw, group, first.generation_id, member_id, [(member_id, b"")], instance_id=instance_id)
    assert res.error_code == 0
    return raw, member_id, first.generation_id


# ============================================================================ fixtures

@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from broker.launch.process import BrokerProcess
    proc = BrokerProcess(str(tmp_path_factory.mktemp("kproto-groups")),
                         settings={"group.initial.rebalance.delay.ms": "100"})
    proc.start()
    yield proc
    proc.stop()
    if REPORT:
        print("\ngroup test measurements:", json.dumps(REPORT, indent=1, sort_keys=True))


def _topic(request) -> str:
    return "grp-" + "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]


# ============================================================================ three consumers per client library

@pytest.mark.timeout(90)
# (confluent by default; the other two libraries under `pytest -m long`)
@pytest.mark.parametrize("client", ["confluent", pytest.param("kafka-python", marks=pytest.mark.long),
                                    pytest.param("aiokafka", marks=pytest.mark.long)])
def test_three_consumers_share_close_and_kill(broker, request, client):
    """3 consumers over 6 partitions get 2 each; one closes and the other two
    cover all 6 in one rebalance; one is killed with SIGKILL and its
    partitions move after the session timeout; every record is consumed."""
    topic = _topic(request)
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 6)
    produce(broker.bootstrap, topic, 300, 6)
    workers = [Worker(client, broker.bootstrap, topic, group, f"{client}-{i}") for i in range(3)]
    a, b, c = workers
    measures = REPORT.setdefault(client, {})
    try:
        wait_for(lambda: all(len(w.parts()) == 2 for w in workers)
                 and set().union(*(w.parts() for w in workers)) == set(range(6)), 40, "2 partitions each", workers)
        wait_for(lambda: len({r for w in workers for r in w.records}) >= 300, 30, "phase 1 consumed", workers)

        # one closes: the two others take over all 6 partitions in one rebalance
        events_before = {w.name: len(w.assign_events) for w in (a, c)}
        closed_at = time.monotonic()
        b.close()
        assert b.closed, "".join(b.stderr[-20:])
        wait_for(lambda: a.parts() | c.parts() == set(range(6)) and len(a.parts()) == len(c.parts()) == 3,
                 20, "takeover after close", workers)
        measures["takeover_after_close_s"] = round(time.monotonic() - closed_at, 2)
        time.sleep(1.0)   # a second rebalance, if there were one, would show by now
        for w in (a, c):
            assert len(w.assign_events) == events_before[w.name] + 1, (w.name, w.assign_events)
        produce(broker.bootstrap, topic, 300, 6)
        wait_for(lambda: len({r for w in workers for r in w.records}) >= 600, 30, "phase 2 consumed", workers)

        # one is killed while records keep arriving: its partitions move only once its
        # session times out, and what it consumed without committing is consumed again
        trickle = threading.Thread(target=lambda: [produce(broker.bootstrap, topic, 30, 6) or time.sleep(0.05)
                                                   for _ in range(10)])
        trickle.start()
        time.sleep(0.2)
        killed_parts = c.parts()
        killed_at = time.monotonic()
        c.kill()
        wait_for(lambda: a.parts() == set(range(6)), SESSION_MS / 1000 + 20, "takeover after kill", workers)
        moved_after = time.monotonic() - killed_at
        measures["takeover_after_kill_s"] = round(moved_after, 2)
        assert moved_after > SESSION_MS / 1000 - 2 * HEARTBEAT_MS / 1000 - 0.5, moved_after
        assert killed_parts <= a.parts()
        trickle.join()
        wait_for(lambda: len({r for w in workers for r in w.records}) >= 900, 30, "phase 3 consumed", workers)
    finally:
        for w in workers:
            w.close()
    hw = high_watermarks(broker.bootstrap, topic, 6)
    produced = {(p, o) for p in range(6) for o in range(hw[p])}
    consumed = [r for w in workers for r in w.records]
    assert sum(hw.values()) == 900
    missing = produced - set(consumed)
    assert not missing, f"{len(missing)} records skipped: {sorted(missing)[:10]}"
    measures["duplicates"] = len(consumed) - len(set(consumed))
    # everything consumed is committed
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(6)])])[group].result(15)
    assert {tp.partition: tp.offset for tp in res.topic_partitions} == hw



# ============================================================================ assignment strategies and static members

@pytest.mark.timeout(60)
def test_cooperative_sticky_keeps_partitions_across_rebalances(broker, request):
    """librdkafka's cooperative-sticky assignor (incremental rebalances) through the same classic protocol."""
    from confluent_kafka.admin import AdminClient
    topic = _topic(request)
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 6)
    produce(broker.bootstrap, topic, 60, 6)
    workers = [Worker("confluent", broker.bootstrap, topic, group, f"coop-{i}", strategy="cooperative-sticky")
               for i in range(3)]
    a, b, c = workers
    try:
        wait_for(lambda: all(len(w.parts()) == 2 for w in workers)
                 and set().union(*(w.parts() for w in workers)) == set(range(6)), 40, "2 partitions each", workers)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        desc = admin.describe_consumer_groups([group])[group].result(15)
        assert desc.partition_assignor == "cooperative-sticky" and len(desc.members) == 3
        kept = {w.name: w.parts() for w in (a, c)}
        revokes = {w.name: len(w.revoke_events) for w in (a, c)}
        b.close()
        wait_for(lambda: a.parts() | c.parts() == set(range(6)), 20, "takeover after close", workers)
        time.sleep(1.0)
        for w in (a, c):
            # incremental: the survivors only gained partitions, nothing was taken away from them
            assert len(w.revoke_events) == revokes[w.name], (w.name, w.revoke_events)
            assert kept[w.name] < w.parts()
        wait_for(lambda: {r for w in workers for r in w.records} >= {(p, o) for p in range(6) for o in range(10)},
                 20, "all records", workers)
    finally:
        for w in workers:
            w.close()


@pytest.mark.timeout(60)
def test_static_member_restart_keeps_partitions_without_rebalance(broker, request):
    """group.instance.id: a member that restarts within its session timeout gets its partitions back
    and nobody else rebalances."""
    from confluent_kafka.admin import AdminClient
    topic = _topic(request)
    group = f"g-{topic}"
    session = 15000
    create_topic(broker.bootstrap, topic, 6)
    workers = [Worker("confluent", broker.bootstrap, topic, group, f"static-{i}", instance_id=f"inst-{i}",
                      session_ms=session) for i in range(3)]
    try:
        wait_for(lambda: all(len(w.parts()) == 2 for w in workers)
                 and set().union(*(w.parts() for w in workers)) == set(range(6)), 40, "2 partitions each", workers)
        time.sleep(0.5)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        before = admin.describe_consumer_groups([group])[group].result(15)
        old_ids = {m.group_instance_id: m.member_id for m in before.members}
        others = [workers[0], workers[2]]
        seen = {w.name: (len(w.assign_events), len(w.revoke_events), w.parts()) for w in others}
        restarted_parts = workers[1].parts()
        workers[1].close()          # a static member does not send LeaveGroup when it closes
        restarted_at = time.monotonic()
        workers[1] = Worker("confluent", broker.bootstrap, topic, group, "static-1b", instance_id="inst-1",
                            session_ms=session)
        wait_for(lambda: workers[1].parts() == restarted_parts, 20, "the same partitions back", workers)
        REPORT.setdefault("static", {})["reassigned_after_restart_s"] = round(time.monotonic() - restarted_at, 2)
        time.sleep(2.0)
        for w in others:
            assert (len(w.assign_events), len(w.revoke_events), w.parts()) == seen[w.name], w.name
        after = admin.describe_consumer_groups([group])[group].result(15)
        new_ids = {m.group_instance_id: m.member_id for m in after.members}
        assert str(after.state).endswith("STABLE") and set(new_ids) == {"inst-0", "inst-1", "inst-2"}
        assert new_ids["inst-1"] != old_ids["inst-1"] and new_ids["inst-0"] == old_ids["inst-0"]
    finally:
        for w in workers:
            w.close()


# ============================================================================ administration

@pytest.mark.timeout(60)
def test_admin_client_sees_what_consumers_see(broker, request):
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.error import KafkaException
    topic = _topic(request)
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 4)
    produce(broker.bootstrap, topic, 40, 4)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    workers = [Worker("confluent", broker.bootstrap, topic, group, f"adm-{i}") for i in range(2)]
    try:
        wait_for(lambda: all(len(w.parts()) == 2 for w in workers)
                 and len({r for w in workers for r in w.records}) == 40, 40, "consumed", workers)
        listed = admin.list_consumer_groups().result(15).valid
        assert any(g.group_id == group and g.state == ConsumerGroupState.STABLE for g in listed)
        assert not any(g.group_id == group for g in admin.list_consumer_groups(
            states={ConsumerGroupState.EMPTY}).result(15).valid)
        desc = admin.describe_consumer_groups([group])[group].result(15)
        assert desc.state == ConsumerGroupState.STABLE and desc.partition_assignor == "range"
        assert not desc.is_simple_consumer_group
        by_client = {m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in desc.members}
        assert by_client == {w.name: w.parts() for w in workers}
        assert all(m.host == "/127.0.0.1" for m in desc.members)
        offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
        consumed_up_to = {}
        for w in workers:
            for p, o in w.records:
                consumed_up_to[p] = max(consumed_up_to.get(p, 0), o + 1)
        assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == consumed_up_to == \
            {p: 10 for p in range(4)}
        with pytest.raises(KafkaException) as err:
            admin.delete_consumer_groups([group])[group].result(15)
        assert "NON_EMPTY_GROUP" in str(err.value) or "not empty" in str(err.value).lower()
    finally:
        for w in workers:
            w.close()
    # the group is Empty now: offsets can be altered and deleted, then the group itself
    assert admin.describe_consumer_groups([group])[group].result(15).state == ConsumerGroupState.EMPTY
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, 0, 3)])])[group].result(15)
    # confluent-kafka has no OffsetDelete: kafka-python's admin client sends it
    import kafka
    from kafka.admin import KafkaAdminClient
    kp_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        deleted = kp_admin.delete_group_offsets(group, [kafka.TopicPartition(topic, 1)])
        assert all(not isinstance(v, Exception) for v in dict(deleted).values()), deleted
        # one OffsetFetch v8+ for two groups (one of which does not exist)
        both = kp_admin.list_group_offsets({group: None, "no-such-group": None})
        assert {tp.partition: om.offset for tp, om in both[group].items()} == {0: 3, 2: 10, 3: 10}
        assert not both["no-such-group"]
    finally:
        kp_admin.close()
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(4)])])[group].result(15)
    assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {0: 3, 1: -1001, 2: 10, 3: 10}
    # a consumer of the group starts where the altered offsets say
    w = Worker("confluent", broker.bootstrap, topic, group, "adm-again")
    try:
        wait_for(lambda: len(w.records) >= 17, 30, "resumed consumption", [w])
        time.sleep(0.3)
        assert sorted(w.records) == [(0, o) for o in range(3, 10)] + [(1, o) for o in range(10)]
    finally:
        w.close()
    admin.delete_consumer_groups([group])[group].result(15)
    assert not any(g.group_id == group for g in admin.list_consumer_groups().result(15).valid)
    assert admin.describe_consumer_groups([group])[group].result(15).state == ConsumerGroupState.DEAD


# ============================================================================ restarts

def _committed(admin, group, topic, partitions):
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(partitions)])])[group].result(15)
    return {(tp.partition, tp.offset, tp.metadata) for tp in res.topic_partitions}


@pytest.mark.timeout(90)
def test_committed_offsets_survive_broker_restarts(tmp_path):
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    from broker.launch.process import BrokerProcess
    b = BrokerProcess(str(tmp_path / "data"), settings={"group.initial.rebalance.delay.ms": "100"}).start()
    try:
        topic = "restart-t"
        create_topic(b.bootstrap, topic, 3)
        produce(b.bootstrap, topic, 30, 3)
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "rg", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 30
        while got < 20 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got += 1
                c.commit(message=m, asynchronous=False)
        c.close()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            "rg-admin", [TopicPartition(topic, 2, 7, metadata="set by admin")])])["rg-admin"].result(15)
        before = {g: _committed(admin, g, topic, 3) for g in ("rg", "rg-admin")}
        assert sum(o for _p, o, _m in before["rg"] if o > 0) == 20
        assert (2, 7, "set by admin") in before["rg-admin"]
        for clean in (True, False):
            b.restart(clean=clean)
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            after = {g: _committed(admin, g, topic, 3) for g in ("rg", "rg-admin")}
            assert after == before, f"after {'clean' if clean else 'kill -9'} restart"
            desc = admin.describe_consumer_groups(["rg"])["rg"].result(15)
            assert str(desc.state).endswith("EMPTY")
        # a consumer of the group continues where the commits say
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "rg", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        c.subscribe([topic])
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < 10 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                seen.append((m.partition(), m.offset()))
        c.close()
        committed = {p: o for p, o, _m in before["rg"]}
        assert len(seen) == 10 and all(o >= max(committed[p], 0) for p, o in seen)

        # a consumer that keeps running across a restart stays in its generation: the
        # group is reloaded as Stable and its heartbeats are accepted
        w = Worker("confluent", b.bootstrap, topic, "rg-live", "live", session_ms=10000)
        try:
            wait_for(lambda: len(w.parts()) == 3 and len(set(w.records)) >= 30, 30, "consumed", [w])
            assigned = len(w.assign_events)
            b.restart(clean=True)
            produce(b.bootstrap, topic, 30, 3)
            wait_for(lambda: len(set(w.records)) >= 60, 30, "consumed after the restart", [w])
            assert len(w.assign_events) == assigned and not w.revoke_events
        finally:
            w.close()
    finally:
        b.stop()


# ============================================================================ bad input

@pytest.mark.timeout(60)
def test_bad_requests_get_kafkas_errors_and_the_group_stays_usable(broker, request):
    from kproto.messages.describe_groups_request import DescribeGroupsRequest
    from kproto.messages.find_coordinator_request import FindCoordinatorRequest
    from kproto.messages.leave_group_request import LeaveGroupRequest
    from kproto.messages.offset_fetch_request import OffsetFetchRequest
    topic = _topic(request)
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 2)
    raw, member, gen = raw_member(broker.bootstrap, group, topic)
    other = Raw(broker.bootstrap, "raw-other")
    # error-cases: "offset commit with correct member, generation+1" / "generation-1 (older)"
    assert commit(other, group, gen + 1, member, topic, [(0, 1, "")]) == {(topic, 0): 22}
    assert commit(other, group, gen - 1, member, topic, [(0, 1, "")]) == {(topic, 0): 22}
    # error-cases: "offset commit with unknown member id, current generation"
    assert commit(other, group, gen, "nobody", topic, [(0, 1, "")]) == {(topic, 0): 25}
    # error-cases: "offset commit with generation -1 and empty member id to a group that has members"
    assert commit(other, group, -1, "", topic, [(0, 1, "")]) == {(topic, 0): 25}
    # error-cases: "offset commit for unknown topic" / "for partition 9 of a 1-partition topic"
    assert commit(other, group, gen, member, "no-such-topic", [(0, 1, "")]) == {("no-such-topic", 0): 3}
    assert commit(other, group, gen, member, topic, [(9, 1, "")]) == {(topic, 9): 3}
    # offset.metadata.max.bytes (4096): OFFSET_METADATA_TOO_LARGE, the other partition is stored
    assert commit(other, group, gen, member, topic, [(0, 5, "m" * 4097), (1, 6, "ok")]) == \
        {(topic, 0): 12, (topic, 1): 0}
    # OffsetCommit v0 went to ZooKeeper: a KRaft broker answers UNSUPPORTED_VERSION
    assert commit(other, group, -1, "", topic, [(0, 1, "")], version=0) == {(topic, 0): 35}
    # error-cases: JoinGroup rows
    assert join(other, group, protocols=[]).error_code == 23
    assert join(other, group, session_ms=1000).error_code == 26
    assert join(other, group, session_ms=1800001).error_code == 26
    assert join(other, "", topic=topic).error_code == 24
    assert join(other, group, protocol_type="connect").error_code == 23
    assert join(other, group, member_id="never-issued").error_code == 25
    # error-cases: "heartbeat with wrong generation" / "with unknown member id" / "to a group that does not exist"
    assert heartbeat(other, group, gen + 1, member) == 22
    assert heartbeat(other, group, gen, "nobody") == 25
    assert heartbeat(other, "no-such-group", 1, "x") == 25
    # error-cases: "find coordinator with KeyType 5 (invalid)" and "for empty group id"
    bad = other.call(FindCoordinatorRequest(key_type=5, coordinator_keys=["x"]), 4).coordinators[0]
    assert bad.error_code == 42 and bad.error_message.startswith("This most likely occurs because")
    assert other.call(FindCoordinatorRequest(key_type=0, coordinator_keys=[""]), 4).coordinators[0].error_code == 0
    # error-cases: "find transaction coordinator (KeyType 1) before __transaction_state exists": 15, which
    # creates the topic; the retry finds it
    txn = other.call(FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"]), 4).coordinators[0]
    if txn.error_code == 15:
        txn = other.call(FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"]), 4).coordinators[0]
    assert txn.error_code == 0 and txn.port == broker.port
    old = other.call(FindCoordinatorRequest(key=group, key_type=0), 3)
    assert (old.error_code, old.error_message, old.port) == (0, "NONE", broker.port)
    # error-cases: "describe a group that does not exist" / "leave group with unknown member id"
    dead = other.call(DescribeGroupsRequest(groups=["no-such-group"]), 5).groups[0]
    assert (dead.error_code, dead.group_state, dead.protocol_type) == (0, "Dead", "")
    MI = LeaveGroupRequest.MemberIdentity
    leave = other.call(LeaveGroupRequest(group_id=group, members=[MI(member_id="nobody")]), 5)
    assert leave.error_code == 0 and leave.members[0].error_code == 25
    # error-cases: "offset fetch for a group that does not exist"
    G, T = OffsetFetchRequest.OffsetFetchRequestGroup, OffsetFetchRequest.OffsetFetchRequestTopics
    fetched = other.call(OffsetFetchRequest(groups=[G(group_id="no-such-group", member_id=None, member_epoch=-1,
                                                      topics=[T(name=topic, partition_indexes=[0])])],
                                            require_stable=True), 9).groups[0]
    assert fetched.error_code == 0 and fetched.topics[0].partitions[0].committed_offset == -1

    # the member and its group were not disturbed
    assert heartbeat(raw, group, gen, member) == 0
    assert commit(raw, group, gen, member, topic, [(0, 1, "fine")]) == {(topic, 0): 0}
    fetched = raw.call(OffsetFetchRequest(groups=[G(group_id=group, member_id=None, member_epoch=-1, topics=None)],
                                          require_stable=True), 9).groups[0]
    assert {(p.partition_index, p.committed_offset, p.metadata) for t in fetched.topics for p in t.partitions} == \
        {(0, 1, "fine"), (1, 6, "ok")}
    desc = raw.call(DescribeGroupsRequest(groups=[group], include_authorized_operations=True), 5).groups[0]
    assert desc.group_state == "Stable" and [m.member_id for m in desc.members] == [member]
    assert desc.authorized_operations == 3400   # READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
    leave = raw.call(LeaveGroupRequest(group_id=group, members=[MI(member_id=member, reason="done")]), 5)
    assert leave.members[0].error_code == 0
    # and a real consumer takes the group over from where the commits say
    produce(broker.bootstrap, topic, 20, 2)
    w = Worker("confluent", broker.bootstrap, topic, group, "after-bad")
    try:
        wait_for(lambda: len(w.records) >= 13, 30, "consumption", [w])
        time.sleep(0.3)
        assert sorted(w.records) == [(0, o) for o in range(1, 10)] + [(1, o) for o in range(6, 10)]
    finally:
        w.close()
    raw.close()
    other.close()


@pytest.mark.timeout(60)
def test_fenced_static_member(broker, request):
    """A second incarnation of a static member fences the first: its heartbeats and
    commits get FENCED_INSTANCE_ID, and the group does not rebalance."""
    topic = _topic(request)
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 1)
    first, old_id, gen = raw_member(broker.bootstrap, group, topic, instance_id="inst")
    second = Raw(broker.bootstrap, "raw-second")
    res = join(second, group, instance_id="inst", topic=topic)
    assert res.error_code == 0 and res.generation_id == gen and res.member_id != old_id
    assert res.skip_assignment and res.leader == res.member_id     # v9: a static leader keeps the assignment
    assert heartbeat(first, group, gen, old_id, instance_id="inst") == 82
    assert commit(first, group, gen, old_id, topic, [(0, 1, "")], instance_id="inst") == {(topic, 0): 82}
    assert join(first, group, member_id=old_id, instance_id="inst", topic=topic).error_code == 82
    assert heartbeat(second, group, gen, res.member_id, instance_id="inst") == 0
    assert sync(second, group, gen, res.member_id, instance_id="inst").error_code == 0
    first.close()
    second.close()




@pytest.mark.timeout(60)
def test_oversized_member_metadata(broker, request):
    """JoinGroup metadata too large for a group metadata record: the join works, the
    leader's SyncGroup fails with UNKNOWN_SERVER_ERROR (Kafka's mapping of the append's
    MESSAGE_TOO_LARGE) and the group rebalances; a sane rejoin then succeeds."""
    from kproto.messages.join_group_request import JoinGroupRequest
    P = JoinGroupRequest.JoinGroupRequestProtocol
    topic = _topic(request)
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 1)
    raw = Raw(broker.bootstrap)
    wait_coordinator(raw, group)
    huge = [P(name="range", metadata=subscription(topic) + b"\0" * (1100 * 1024))]
    res = join(raw, group, protocols=huge)
    res = join(raw, group, member_id=res.member_id, protocols=huge)
    assert res.error_code == 0 and len(res.members[0].metadata) > 1 << 20
    member = res.member_id
    assert sync(raw, group, res.generation_id, member, [(member, b"")]).error_code == -1
    res = join(raw, group, member_id=member, topic=topic)
    assert res.error_code == 0 and res.generation_id == 2
    assert sync(raw, group, 2, member, [(member, b"a")]).error_code == 0
    assert heartbeat(raw, group, 2, member) == 0
    raw.close()


# ============================================================================ every advertised version

# Kafka 3.9's ranges (api-versions.json), with Kafka 4.3's newest versions of OffsetCommit,
# OffsetFetch and DescribeGroups (tests/test_api_4x_versions.py covers those)
KAFKA_39_RANGES = {8: (0, 10), 9: (0, 10), 10: (0, 6), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6),
                   16: (0, 5), 42: (0, 2), 47: (0, 0)}


@pytest.mark.timeout(60)
def test_every_advertised_version_works(broker, request):
    from kproto.messages.api_versions_request import ApiVersionsRequest
    from kproto.messages.delete_groups_request import DeleteGroupsRequest
    from kproto.messages.describe_groups_request import DescribeGroupsRequest
    from kproto.messages.find_coordinator_request import FindCoordinatorRequest
    from kproto.messages.leave_group_request import LeaveGroupRequest
    from kproto.messages.list_groups_request import ListGroupsRequest
    from kproto.messages.offset_commit_request import OffsetCommitRequest
    from kproto.messages.offset_delete_request import OffsetDeleteRequest
    from kproto.messages.offset_fetch_request import OffsetFetchRequest
    topic = _topic(request)
    create_topic(broker.bootstrap, topic, 2)
    raw = Raw(broker.bootstrap)
    wait_coordinator(raw, "any")
    advertised = {k.api_key: (k.min_version, k.max_version) for k in raw.call(ApiVersionsRequest(), 3).api_keys}
    assert {k: advertised.get(k) for k in KAFKA_39_RANGES} == KAFKA_39_RANGES

    # the first transaction coordinator lookup creates __transaction_state (answered 15, as Kafka)
    raw.call(FindCoordinatorRequest(key_type=1, coordinator_keys=["g"]), 4)
    for v in range(7):
        req = FindCoordinatorRequest(key="g", key_type=0) if v < 4 else \
            FindCoordinatorRequest(key_type=1 if v == 5 else 0, coordinator_keys=["g", "h"])
        res = raw.call(req, v)
        found = [(c.error_code, c.port) for c in res.coordinators] if v >= 4 else [(res.error_code, res.port)]
        assert all(f == (0, broker.port) for f in found), (v, res)

    for v in range(10):
        group = f"{topic}-j{v}"
        res = join(raw, group, topic=topic, version=v)
        if v >= 4:
            assert res.error_code == 79
            res = join(raw, group, member_id=res.member_id, topic=topic, version=v)
        assert res.error_code == 0 and res.generation_id == 1 and res.leader == res.member_id, (v, res)
        assert res.protocol_name == "range" and (v < 7 or res.protocol_type == "consumer")
        member, gen = res.member_id, res.generation_id
        from kproto.messages.sync_group_request import SyncGroupRequest
        A = SyncGroupRequest.SyncGroupRequestAssignment
        sv = min(v, 5)
        res = raw.call(SyncGroupRequest(group_id=group, generation_id=gen, member_id=member, group_instance_id=None,
                                        protocol_type="consumer", protocol_name="range",
                                        assignments=[A(member_id=member, assignment=b"as")]), sv)
        assert res.error_code == 0 and bytes(res.assignment) == b"as", (sv, res)
        from kproto.messages.heartbeat_request import HeartbeatRequest
        hv = min(v, 4)
        assert raw.call(HeartbeatRequest(group_id=group, generation_id=gen, member_id=member), hv).error_code == 0
        lv = min(v, 5)
        MI = LeaveGroupRequest.MemberIdentity
        req = LeaveGroupRequest(group_id=group, member_id=member) if lv < 3 else \
            LeaveGroupRequest(group_id=group, members=[MI(member_id=member)])
        res = raw.call(req, lv)
        assert res.error_code == 0 and (lv < 3 or [m.error_code for m in res.members] == [0]), (lv, res)

    T, P = OffsetCommitRequest.OffsetCommitRequestTopic, OffsetCommitRequest.OffsetCommitRequestPartition
    FT, FG, FGT = (OffsetFetchRequest.OffsetFetchRequestTopic, OffsetFetchRequest.OffsetFetchRequestGroup,
                   OffsetFetchRequest.OffsetFetchRequestTopics)
    for v in range(1, 10):
        group = f"{topic}-c{v}"
        res = raw.call(OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                           retention_time_ms=-1, topics=[T(name=topic, partitions=[
                                               P(partition_index=1, committed_offset=v,
                                                 committed_leader_epoch=0 if v >= 6 else -1,
                                                 commit_timestamp=-1, committed_metadata=f"v{v}")])]), v)
        assert [p.error_code for t in res.topics for p in t.partitions] == [0], (v, res)
        if v >= 8:
            res = raw.call(OffsetFetchRequest(groups=[FG(group_id=group, member_id=None, member_epoch=-1,
                                                         topics=[FGT(name=topic, partition_indexes=[0, 1])])],
                                              require_stable=True), v)
            parts = res.groups[0].topics[0].partitions
        else:
            res = raw.call(OffsetFetchRequest(group_id=group, topics=[FT(name=topic, partition_indexes=[0, 1])],
                                              require_stable=v >= 7), v)
            parts = res.topics[0].partitions
        got = [(p.partition_index, p.committed_offset, p.metadata, p.error_code) for p in parts]
        assert got == [(0, -1, "", 0), (1, v, f"v{v}", 0)], (v, got)
    # version 0 of both went to ZooKeeper: refused by a KRaft broker, as Kafka does
    res = raw.call(OffsetFetchRequest(group_id=f"{topic}-c1", topics=[FT(name=topic, partition_indexes=[1])]), 0)
    assert res.topics[0].partitions[0].error_code == 35

    for v in range(6):
        res = raw.call(DescribeGroupsRequest(groups=[f"{topic}-c1", "no-such"]), v)
        assert [(g.group_state, g.error_code) for g in res.groups] == [("Empty", 0), ("Dead", 0)], (v, res)
        filters = {"states_filter": ["Empty"]} if v >= 4 else {}
        if v >= 5:
            filters["types_filter"] = ["classic"]
        res = raw.call(ListGroupsRequest(**filters), v)
        listed = {g.group_id: g for g in res.groups}
        assert res.error_code == 0 and f"{topic}-c1" in listed
        if v >= 4:
            assert listed[f"{topic}-c1"].group_state == "Empty"
            empty_only = {g.group_id for g in raw.call(ListGroupsRequest(states_filter=["Stable"]), v).groups}
            assert f"{topic}-c1" not in empty_only
        if v >= 5:
            assert listed[f"{topic}-c1"].group_type == "classic"
            assert raw.call(ListGroupsRequest(types_filter=["consumer"]), v).groups == []

    OT, OP = OffsetDeleteRequest.OffsetDeleteRequestTopic, OffsetDeleteRequest.OffsetDeleteRequestPartition
    res = raw.call(OffsetDeleteRequest(group_id=f"{topic}-c9", topics=[
        OT(name=topic, partitions=[OP(partition_index=1), OP(partition_index=7)])]), 0)
    assert res.error_code == 0
    assert {p.partition_index: p.error_code for t in res.topics for p in t.partitions} == {1: 0, 7: 3}
    # its last offset gone, the Empty group is gone too (GroupMetadataManager.cleanupGroupMetadata)
    assert raw.call(DescribeGroupsRequest(groups=[f"{topic}-c9"]), 5).groups[0].group_state == "Dead"
    assert raw.call(OffsetDeleteRequest(group_id="no-such", topics=[]), 0).error_code == 69   # GROUP_ID_NOT_FOUND
    for v in range(3):
        res = raw.call(DeleteGroupsRequest(groups_names=[f"{topic}-c{v + 1}", "no-such"]), v)
        assert [(r.group_id, r.error_code) for r in res.results] == [(f"{topic}-c{v + 1}", 0), ("no-such", 69)]
    raw.close()


@pytest.mark.timeout(60)
def test_offsets_topic_holds_kafkas_records(broker, request):
    """Read __consumer_offsets back with a plain consumer and parse the keys and
    values by hand with Kafka's layouts (version prefix, then the struct)."""
    from confluent_kafka import Consumer, TopicPartition

    from broker.groups.placement import partition_for
    topic = _topic(request)
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 1)
    raw, member, gen = raw_member(broker.bootstrap, group, topic, client_id="layout")
    assert commit(raw, group, gen, member, topic, [(0, 42, "meta")]) == {(topic, 0): 0}
    raw.close()

    def string(buf, pos):
        n = struct.unpack_from(">h", buf, pos)[0]
        return (None if n < 0 else buf[pos + 2:pos + 2 + n].decode()), pos + 2 + max(n, 0)

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "layout-reader", "enable.auto.commit": False})
    c.assign([TopicPartition("__consumer_offsets", partition_for(group, 50), 0)])
    offset_value = metadata_value = None
    deadline = time.monotonic() + 15
    while (offset_value is None or metadata_value is None) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None or m.error() or m.value() is None:
            continue
        key, value = m.key(), m.value()
        key_version = struct.unpack_from(">h", key)[0]
        if key_version == 1:
            g, pos = string(key, 2)
            t, pos = string(key, pos)
            if (g, t, struct.unpack_from(">i", key, pos)[0]) == (group, topic, 0):
                offset_value = value
        elif key_version == 2 and string(key, 2)[0] == group:
            metadata_value = value
    c.close()
    # OffsetCommitValue v3: offset, leader epoch, metadata, commit timestamp
    assert struct.unpack_from(">hqi", offset_value) == (3, 42, -1)
    assert string(offset_value, 14) == ("meta", 20) and len(offset_value) == 28
    # GroupMetadataValue v3: protocol type, generation, protocol, leader, state timestamp, members
    assert struct.unpack_from(">h", metadata_value)[0] == 3
    ptype, pos = string(metadata_value, 2)
    generation = struct.unpack_from(">i", metadata_value, pos)[0]
    protocol, pos = string(metadata_value, pos + 4)
    leader, pos = string(metadata_value, pos)
    assert (ptype, generation, protocol, leader) == ("consumer", gen, "range", member)
    count = struct.unpack_from(">i", metadata_value, pos + 8)[0]
    member_id, pos = string(metadata_value, pos + 12)
    instance_id, pos = string(metadata_value, pos)
    client_id, pos = string(metadata_value, pos)
    client_host, pos = string(metadata_value, pos)
    assert (count, member_id, instance_id, client_id, client_host) == (1, member, None, "layout", "/127.0.0.1")


# ============================================================================ Kafka's default initial rebalance delay

@pytest.mark.timeout(60)
def test_default_initial_rebalance_delay_and_its_extension(tmp_path):
    """group-flow.json initial_delay_extension with the default group.initial.rebalance.delay.ms
    (3000): members joining at 0 s and 1 s are both answered at about 6 s."""
    from broker.launch.process import BrokerProcess
    b = BrokerProcess(str(tmp_path / "data")).start()
    try:
        probe = Raw(b.bootstrap)
        # error-cases: "find group coordinator (KeyType 0) before __consumer_offsets exists"
        first = find_coordinator(probe, "delay-g")
        assert (first.error_code, first.node_id, first.host) == (15, -1, "")
        wait_coordinator(probe, "delay-g")
        create_topic(b.bootstrap, "delay-t", 3)
        answers = {}
        start = time.monotonic()

        def member(name, delay):
            time.sleep(delay)
            raw = Raw(b.bootstrap, name)
            res = join(raw, "delay-g", topic="delay-t", rebalance_ms=30000)
            assert res.error_code == 79 and res.member_id.startswith(name + "-")
            sent = time.monotonic()
            res = join(raw, "delay-g", member_id=res.member_id, topic="delay-t", rebalance_ms=30000)
            answers[name] = (sent - start, time.monotonic() - start, res)
            raw.close()

        threads = [threading.Thread(target=member, args=(n, d)) for n, d in (("c1", 0.0), ("c2", 1.0))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        (s1, t1, r1), (s2, t2, r2) = answers["c1"], answers["c2"]
        REPORT["default_delay"] = {"c1_answered_after_s": round(t1 - s1, 2), "c2_answered_after_s": round(t2 - s2, 2)}
        assert 5.9 <= t1 - s1 <= 6.8 and abs(t1 - t2) < 0.3
        assert r1.generation_id == r2.generation_id == 1 and r1.leader == r2.leader == r1.member_id
        assert len(r1.members) == 2 and r2.members == []
        probe.close()
    finally:
        b.stop()


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "worker":
        worker_main(sys.argv[2:])

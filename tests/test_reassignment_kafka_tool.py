"""Kafka's kafka-reassign-partitions.sh against a kproto cluster that grows
by one broker: --generate proposes an assignment over the four brokers,
--execute starts moving a partition onto the new broker, --verify reports it
completed, and Metadata shows the new replica set; a move onto a broker that
is down stays in progress (--list, --verify) until --cancel reverts it. Needs an Apache Kafka
installation in KAFKA_HOME (skipped otherwise).

The first move runs with --throttle: --execute sets the brokers' replication rates and the
topic's throttled-replica lists, and --verify, once the move completed, clears them all."""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from tests.test_reassignment_processes import QUIET, SETTINGS, _partition, _wait
from tools.cluster_client import create_topic

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka import KafkaAdminClient, TopicPartition  # noqa: E402

from tools.quorum_cluster import QuorumCluster  # noqa: E402

KAFKA_HOME = os.environ.get("KAFKA_HOME")

pytestmark = [
    pytest.mark.skipif(not KAFKA_HOME, reason="KAFKA_HOME is not set: this test runs kafka-reassign-partitions.sh"),
    pytest.mark.timeout(600),
]


def reassign(bootstrap: str, *args: str) -> str:
    cmd = [os.path.join(KAFKA_HOME, "bin", "kafka-reassign-partitions.sh"), "--bootstrap-server", bootstrap, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout


def _throttles(admin, brokers) -> dict:
    """The throttle configs set on the topic tool-moved and on each broker (DescribeConfigs)."""
    from confluent_kafka.admin import ConfigResource
    out = {}
    for key, res in [("topic", ConfigResource("topic", "tool-moved"))] + [
            (b, ConfigResource("broker", str(b))) for b in brokers]:
        cfg = admin.describe_configs([res])[res].result(20)
        out[key] = {k: e.value for k, e in cfg.items() if "throttled" in k and not e.is_default
                    and e.source in (1, 2)}   # DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG
    return out


def test_generate_execute_verify_onto_an_added_broker(tmp_path):
    c = QuorumCluster(3, settings=SETTINGS)
    try:
        c.format()
        c.start()
        admin = AdminClient({"bootstrap.servers": c.bootstrap, **QUIET})
        _wait(lambda: create_topic(admin, "tool-moved"), 60, "the topic created")
        _wait(lambda: len(_partition(admin, "tool-moved")[2]) == 3, 30, "an ISR of 3")
        c.add_broker(4)
        _wait(lambda: 4 in admin.list_topics(timeout=10).brokers, 40, "broker 4 registered")

        move = tmp_path / "move.json"
        move.write_text(json.dumps({"version": 1, "topics": [{"topic": "tool-moved"}]}))
        out = reassign(c.bootstrap, "--topics-to-move-json-file", str(move), "--broker-list", "1,2,3,4",
                       "--generate")
        current = json.loads(out.split("Current partition replica assignment\n")[1].splitlines()[0])
        proposed = json.loads(out.split("Proposed partition reassignment configuration\n")[1].splitlines()[0])
        leader, replicas, _isr = _partition(admin, "tool-moved")
        assert current["partitions"][0]["replicas"] == replicas
        assert len(proposed["partitions"][0]["replicas"]) == 3
        assert set(proposed["partitions"][0]["replicas"]) <= {1, 2, 3, 4}

        target = [4] + [b for b in replicas if b != leader]
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "tool-moved", "partition": 0, "replicas": target, "log_dirs": ["any"] * 3}]}))
        out = reassign(c.bootstrap, "--reassignment-json-file", str(plan), "--execute", "--throttle", "50000000")
        assert "Successfully started partition reassignment for tool-moved-0" in out
        assert "The inter-broker throttle limit was set to 50000000 B/s" in out
        throttles = _throttles(admin, replicas + [4])
        assert throttles["topic"]["leader.replication.throttled.replicas"] == ",".join(f"0:{b}" for b in sorted(replicas))
        assert throttles["topic"]["follower.replication.throttled.replicas"] == "0:4"
        assert all(throttles[b] == {"leader.replication.throttled.rate": "50000000",
                                    "follower.replication.throttled.rate": "50000000"} for b in replicas + [4])
        deadline = time.monotonic() + 60
        while True:
            out = reassign(c.bootstrap, "--reassignment-json-file", str(plan), "--verify")
            if "Reassignment of partition tool-moved-0 is completed." in out:
                break
            assert "Reassignment of partition tool-moved-0 is still in progress." in out, out
            assert time.monotonic() < deadline, out
            time.sleep(1)
        assert "Clearing broker-level throttles on brokers 1,2,3,4" in out, out
        assert "Clearing topic-level throttles on topic tool-moved" in out, out
        assert _throttles(admin, [1, 2, 3, 4]) == {"topic": {}, 1: {}, 2: {}, 3: {}, 4: {}}
        _leader, replicas, _isr = _partition(admin, "tool-moved")
        assert replicas == target

        # a move onto a broker that is down stays in progress: --list shows it, --cancel reverts it
        admin.create_topics([NewTopic("tool-stuck", 1, replica_assignment=[[1, 2]])])["tool-stuck"].result(30)
        _wait(lambda: len(_partition(admin, "tool-stuck")[2]) == 2, 30, "an ISR of 2")
        c.nodes[4].kill()
        _wait(lambda: 4 not in admin.list_topics(timeout=10).brokers, 30, "broker 4 fenced")
        # (the tool's --execute refuses a fenced broker, as against Kafka: the admin API takes it)
        ka = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=30000)
        try:
            assert ka.alter_partition_reassignments({TopicPartition("tool-stuck", 0): [1, 4]}) == {
                TopicPartition("tool-stuck", 0): None}
        finally:
            ka.close()
        stuck = tmp_path / "stuck.json"
        stuck.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "tool-stuck", "partition": 0, "replicas": [1, 4], "log_dirs": ["any"] * 2}]}))
        out = reassign(c.bootstrap, "--list")
        assert "tool-stuck-0: replicas: 1,4,2. adding: 4. removing: 2." in out, out
        # (--preserve-throttles: clearing throttles asks every broker the tool lists, and the
        # cancelled move's broker is down)
        out = reassign(c.bootstrap, "--reassignment-json-file", str(stuck), "--verify", "--preserve-throttles")
        assert "Reassignment of partition tool-stuck-0 is still in progress." in out, out
        out = reassign(c.bootstrap, "--reassignment-json-file", str(stuck), "--cancel", "--preserve-throttles")
        assert "Successfully cancelled partition reassignment for: tool-stuck-0" in out, out
        _wait(lambda: _partition(admin, "tool-stuck")[1] == [1, 2], 20, "the reassignment cancelled")
        assert "No partition reassignments found." in reassign(c.bootstrap, "--list")
    finally:
        c.cleanup()

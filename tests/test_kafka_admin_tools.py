"""Kafka's own admin tools against kproto for the APIs of issue #16:
kafka-topics.sh --describe paging through DescribeTopicPartitions,
kafka-features.sh (UpdateFeatures), kafka-client-metrics.sh (KIP-714
subscriptions) and kafka-log-dirs.sh over two log directories. Needs an
Apache Kafka installation in KAFKA_HOME (skipped otherwise)."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from kproto.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from tests.wire_client import WireClient
from broker.launch.process import BrokerProcess

KAFKA_HOME = os.environ.get("KAFKA_HOME")

pytestmark = [
    pytest.mark.skipif(not KAFKA_HOME, reason="KAFKA_HOME is not set: these tests run Kafka's bin/*.sh tools"),
    pytest.mark.timeout(300),
]


@pytest.fixture(scope="module")
def jbod(tmp_path_factory):
    root = tmp_path_factory.mktemp("kproto-tools")
    dirs = [str(root / "d1"), str(root / "d2")]
    proc = BrokerProcess(str(root / "unused"), settings={"log.dirs": ",".join(dirs)})
    proc.start()
    proc.dirs = dirs
    yield proc
    proc.stop()


def tool(name: str, bootstrap: str, *args: str) -> str:
    cmd = [os.path.join(KAFKA_HOME, "bin", name), "--bootstrap-server", bootstrap, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout


def test_topics_describe_pages(jbod):
    with WireClient(jbod.bootstrap) as c:
        resp = c.call(CreateTopicsRequest(topics=[CreatableTopic(name="wide", num_partitions=300,
                                                                 replication_factor=1)], timeout_ms=10000), 7)
        assert resp.topics[0].error_code == 0
    out = tool("kafka-topics.sh", jbod.bootstrap, "--describe", "--topic", "wide",
               "--partition-size-limit-per-response", "40").splitlines()
    # a header line, then every partition once and in order over eight pages
    assert out[0].startswith("Topic: wide\t") and "PartitionCount: 300" in out[0]
    assert [line.split("Partition: ")[1].split("\t")[0] for line in out[1:]] == [str(i) for i in range(300)]


def test_features(jbod):
    out = tool("kafka-features.sh", jbod.bootstrap, "describe")
    assert "Feature: metadata.version\tSupportedMinVersion: 3.0-IV1\tSupportedMaxVersion: 3.9-IV0\t" \
           "FinalizedVersionLevel: 3.9-IV0" in out
    assert "Feature: kraft.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 0" in out


def test_client_metrics(jbod):
    tool("kafka-client-metrics.sh", jbod.bootstrap, "--alter", "--name", "tools-sub", "--metrics",
         "org.apache.kafka.producer.", "--interval", "1000", "--match", "client_id=abc.*")
    out = tool("kafka-client-metrics.sh", jbod.bootstrap, "--describe", "--name", "tools-sub")
    assert "interval.ms=1000" in out and "match=client_id=abc.*" in out
    tool("kafka-client-metrics.sh", jbod.bootstrap, "--delete", "--name", "tools-sub")
    assert tool("kafka-client-metrics.sh", jbod.bootstrap, "--list").split() == []


def test_log_dirs(jbod):
    with WireClient(jbod.bootstrap) as c:
        c.call(CreateTopicsRequest(topics=[CreatableTopic(name="two", num_partitions=2, replication_factor=1)],
                                   timeout_ms=10000), 7)
    out = tool("kafka-log-dirs.sh", jbod.bootstrap, "--describe", "--topic-list", "two")
    report = json.loads(out.strip().splitlines()[-1])
    dirs = {d["logDir"]: sorted(p["partition"] for p in d["partitions"]) for d in report["brokers"][0]["logDirs"]}
    assert sorted(dirs) == sorted(jbod.dirs)
    assert sorted(sum(dirs.values(), [])) == ["two-0", "two-1"] and all(len(v) == 1 for v in dirs.values())


MOVE_DIR_JAVA = r"""
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.TopicPartitionReplica;
import java.util.*;
public class MoveDir {
  public static void main(String[] a) throws Exception {
    Properties p = new Properties(); p.put("bootstrap.servers", a[0]);
    try (Admin admin = Admin.create(p)) {
      TopicPartitionReplica r = new TopicPartitionReplica(a[1], 0, 1);
      System.out.println("before " + admin.describeReplicaLogDirs(List.of(r)).all().get().get(r).getCurrentReplicaLogDir());
      admin.alterReplicaLogDirs(Map.of(r, a[2])).all().get();
      System.out.println("after " + admin.describeReplicaLogDirs(List.of(r)).all().get().get(r).getCurrentReplicaLogDir());
      try { admin.alterReplicaLogDirs(Map.of(r, "/nowhere")).all().get(); }
      catch (Exception e) { System.out.println("error " + e.getCause().getClass().getSimpleName()); }
    }
  }
}
"""


def test_java_admin_moves_a_replica_between_log_dirs(jbod, tmp_path):
    with WireClient(jbod.bootstrap) as c:
        c.call(CreateTopicsRequest(topics=[CreatableTopic(name="moving", num_partitions=1, replication_factor=1)],
                                   timeout_ms=10000), 7)
    src = next(d for d in jbod.dirs if os.path.isdir(os.path.join(d, "moving-0")))
    dest = next(d for d in jbod.dirs if d != src)
    (tmp_path / "MoveDir.java").write_text(MOVE_DIR_JAVA)
    proc = subprocess.run(["java", "-cp", os.path.join(KAFKA_HOME, "libs", "*"), str(tmp_path / "MoveDir.java"),
                           jbod.bootstrap, "moving", dest], capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("before", "after", "error"))]
    assert lines == [f"before {src}", f"after {dest}", "error LogDirNotFoundException"], proc.stdout + proc.stderr
    assert os.path.isdir(os.path.join(dest, "moving-0")) and not os.path.exists(os.path.join(src, "moving-0"))

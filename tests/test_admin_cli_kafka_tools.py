"""The admin CLI's JSON beside what Kafka's own tools print for the same broker, a kproto one and
an Apache Kafka one from KAFKA_HOME (the CLI speaks the protocol, so it must read a real Kafka
as Kafka's tools do):
`kproto topic describe` against `kafka-topics.sh --describe` (partitions, leaders, replicas, ISR,
non-default configs), `kproto group describe` against `kafka-consumer-groups.sh --describe`
(committed offset, log end offset, lag per partition) and `kproto cluster quorum` against
`kafka-metadata-quorum.sh describe --status` (leader, epoch). Needs an Apache Kafka installation
in KAFKA_HOME; skips without it."""
from __future__ import annotations


import pytest

from tests.test_admin_cli import fails, kp, ok
from tests.test_kafka_cli_groups import KAFKA_HOME, tool

pytestmark = [
    pytest.mark.skipif(not KAFKA_HOME, reason="KAFKA_HOME is not set: these tests run Kafka's bin/kafka-*.sh "
                                              "from an Apache Kafka installation"),
    pytest.mark.timeout(300),
]


@pytest.fixture(scope="module")
def kafka_broker():
    """Apache Kafka from KAFKA_HOME, single-node KRaft on loopback, shared by this module."""
    from compat_tests.targets import KafkaHomeBroker
    kafka = KafkaHomeBroker(KAFKA_HOME)
    try:
        yield kafka.start()
    finally:
        kafka.stop()


@pytest.fixture(params=["kproto", "kafka"])
def target(request):
    """Each comparison runs against kproto and against Apache Kafka."""
    return request.getfixturevalue("broker" if request.param == "kproto" else "kafka_broker")


def _fields(line: str) -> dict[str, str]:
    """`Topic: t\tPartition: 0\tLeader: 1 ...` -> {"Topic": "t", ...}."""
    out = {}
    for cell in line.strip().split("\t"):
        k, _, v = cell.partition(":")
        out[k.strip()] = v.strip()
    return out


def test_topic_describe_matches_kafka_topics(target):
    ok(kp(target, "topic", "create", "cmp-t", "-p", "3", "-c", "retention.ms=3600000", "-c", "cleanup.policy=compact"))
    ours = ok(kp(target, "topic", "describe", "cmp-t", "--format", "json")).json[0]
    out = tool("kafka-topics.sh", "--bootstrap-server", target.bootstrap, "--describe", "--topic", "cmp-t")
    lines = [ln for ln in out.splitlines() if ln.strip()]
    head = _fields(lines[0])
    assert int(head["PartitionCount"]) == ours["partition_count"]
    assert int(head["ReplicationFactor"]) == ours["replication_factor"]
    kafka_configs = {kv.split("=", 1)[0] for kv in head["Configs"].split(",") if kv}
    assert kafka_configs == {c["name"] for c in ours["configs"] if c["source"] != "DEFAULT_CONFIG"}
    rows = [_fields(ln) for ln in lines[1:] if "Partition:" in ln]
    theirs = {int(r["Partition"]): (int(r["Leader"]), r["Replicas"], r["Isr"]) for r in rows}
    assert theirs == {p["partition"]: (p["leader"], ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])))
                      for p in ours["partitions"]}


def test_group_describe_matches_kafka_consumer_groups(target):
    ok(kp(target, "topic", "create", "cmp-g", "-p", "2"))
    ok(kp(target, "produce", "cmp-g", "-p", "0", stdin=b"a\nb\nc\n"))
    ok(kp(target, "produce", "cmp-g", "-p", "1", stdin=b"d\n"))
    ok(kp(target, "consume", "cmp-g", "-p", "0", "--from-beginning", "-n", "2", "-g", "cmp-group"))
    ours = ok(kp(target, "group", "describe", "cmp-group", "--format", "json")).json[0]
    # --timeout: the tool's 5 s default also covers its JVM's slow first request on a busy machine
    out = tool("kafka-consumer-groups.sh", "--bootstrap-server", target.bootstrap, "--describe", "--group", "cmp-group",
               "--timeout", "60000")
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("cmp-group ")]
    theirs = {(r[1], int(r[2])): (r[3], r[4], r[5]) for r in rows}

    def cell(v):
        return "-" if v is None else str(v)
    assert theirs == {(r["topic"], r["partition"]): (cell(r["current_offset"]), cell(r["log_end_offset"]), cell(r["lag"]))
                      for r in ours["offsets"]}, out
    fails(kp(target, "group", "describe", "cmp-no-such-group"), 1, "GROUP_ID_NOT_FOUND")


def test_cluster_quorum_matches_kafka_metadata_quorum(target):
    ours = ok(kp(target, "cluster", "quorum", "--format", "json")).json
    out = tool("kafka-metadata-quorum.sh", "--bootstrap-server", target.bootstrap, "describe", "--status")
    status = dict(ln.split(":", 1) for ln in out.splitlines() if ":" in ln)
    assert int(status["LeaderId"]) == ours["leader_id"]
    assert int(status["LeaderEpoch"]) == ours["leader_epoch"]

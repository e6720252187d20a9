"""The Java clients (kafka-clients, as Spark, Kafka Connect and most JVM services use them).

AdminClient: describe cluster, describe topics, list offsets, describe
configs; KafkaProducer with its default settings (idempotent, acks=all);
KafkaConsumer by assign + seek (Spark's Kafka source) and by subscribe in a
group; the transactional producer. Group and transaction scenarios skip
while the broker does not advertise the APIs they need.
"""
from __future__ import annotations

import pytest

from compat_tests import observations, wire

T0 = 1_700_000_000_000
COUNT = 1000


def _node_view(nodes, bootstrap):
    return [{"id": n["id"], "rack": n["rack"], "is_bootstrap": f"{n['host']}:{n['port']}" == bootstrap}
            for n in nodes]


@pytest.mark.compat("describe cluster", client="java")
def test_describe_cluster(target, java_client, compat):
    result = java_client.step(target.bootstrap, "describe_cluster")
    assert "error" not in result, result
    meta = wire.call(target.bootstrap, "Metadata", 12, topics=[], allow_auto_topic_creation=False,
                     include_topic_authorized_operations=False)
    obs = {"nodes": _node_view(result["nodes"], target.bootstrap),
           "controller_is_a_node": result["controller"] in [n["id"] for n in result["nodes"]],
           "cluster_id_as_in_metadata": result["cluster_id"] == meta["cluster_id"]}
    recorded = observations.load("metadata-response.json")["response"]
    compat.observe(obs, recorded={
        "nodes": [{"id": b["NodeId"], "rack": b["Rack"], "is_bootstrap": True} for b in recorded["Brokers"]],
        "controller_is_a_node": True, "cluster_id_as_in_metadata": True})


@pytest.mark.compat("describe topics", client="java")
def test_describe_topics(target, java_client, compat, topic):
    partitions = 3 if target.supports("CreateTopics") else 1
    target.create_topic(topic, partitions)
    result = java_client.step(target.bootstrap, "describe_topics", topics=[topic, topic + "-missing"])
    assert "error" not in result, result
    meta = target.wait_for_topic(topic, partitions)
    desc = result["topics"][topic]
    obs = {"internal": desc["internal"],
           "topic_id_as_in_metadata": desc["topic_id"] is not None and _uuid_b64(meta["topic_id"]) == desc["topic_id"],
           "partitions": desc["partitions"],
           "missing": result["topics"][topic + "-missing"]["error"]["code"]}
    # The recorded 3-partition topic: leader 1, replicas [1], isr [1] each.
    recorded = observations.load("metadata-response.json")["response"]["Topics"][0]["Partitions"]
    by_index = sorted(recorded, key=lambda p: p["PartitionIndex"])[:partitions]
    compat.observe(obs, recorded={
        "internal": False, "topic_id_as_in_metadata": True,
        "partitions": [{"partition": p["PartitionIndex"], "leader": p["LeaderId"], "replicas": p["ReplicaNodes"],
                        "isr": p["IsrNodes"]} for p in by_index],
        "missing": int(observations.error_case(
            "metadata for unknown topic, AllowAutoTopicCreation=false")["error_code"])})


def _uuid_b64(text_uuid) -> str:
    """kafka-python's UUID -> the Java client's base64 form of a topic id."""
    import base64
    import uuid
    raw = uuid.UUID(str(text_uuid)).bytes
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@pytest.fixture
def thousand(target, java_client, topic):
    """A 1-partition topic holding 1000 records from an idempotent producer with defaults."""
    target.create_topic(topic, 1)
    result = java_client.step(target.bootstrap, "produce", topic=topic, summary=True,
                              generate={"count": COUNT, "partition": 0, "timestamp_start": T0,
                                        "timestamp_step": 10})
    return topic, result


@pytest.mark.compat("idempotent producer (defaults: enable.idempotence=true, acks=all), 1000 records",
                    client="java")
def test_idempotent_producer_defaults(target, java_client, compat, thousand):
    topic, produced = thousand
    defaults = java_client.step(target.bootstrap, "producer_config",
                                keys=["enable.idempotence", "acks", "max.in.flight.requests.per.connection"])
    compat.observe(defaults["config"], expected={"enable.idempotence": "true", "acks": "-1",
                                                 "max.in.flight.requests.per.connection": "5"},
                   what="the producer's defaults")
    assert "error" not in produced, produced
    obs = {"errors": produced["errors"], "records": produced["records"],
           "retries": produced["metrics"]["record-retry-total"]}
    compat.observe(obs, expected={"errors": 0, "records": {"0": {"count": COUNT, "first_offset": 0,
                                                                 "last_offset": COUNT - 1}},
                                  "retries": 0.0})
    # The broker stored idempotent batches: a producer id and sequences from 0.
    resp = wire.call(target.bootstrap, "Fetch", 12, replica_id=-1, max_wait_ms=100, min_bytes=1,
                     max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                     topics=[{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                               "fetch_offset": 0, "log_start_offset": -1,
                                                               "partition_max_bytes": 1 << 20}]}],
                     forgotten_topics_data=[], rack_id="")
    batches = wire.record_batches(resp["responses"][0]["partitions"][0]["records"])
    compat.observe({"producer_id_set": all(b["producer_id"] >= 0 for b in batches),
                    "first_sequence": batches[0]["base_sequence"]},
                   expected={"producer_id_set": True, "first_sequence": 0}, what="stored batches")


@pytest.mark.compat("consumer assign + seek (as Spark reads)", client="java")
def test_consumer_assign_seek(target, java_client, compat, thousand):
    topic, _ = thousand
    steps = [
        {"op": "consume_assign", "topic": topic, "partitions": [0], "seek": "beginning", "until_end": True,
         "timeout_ms": 30000},
        {"op": "consume_assign", "topic": topic, "partitions": [0], "seek": {"0": 990}, "until_end": True,
         "timeout_ms": 15000},
        {"op": "consume_assign", "topic": topic, "partitions": [0], "seek": {"timestamp": T0 + 5005},
         "max_records": 2, "timeout_ms": 15000},
    ]
    full, tail, by_time = java_client.run(target.bootstrap, steps)
    for r in (full, tail, by_time):
        assert "error" not in r, r
    obs = {
        "offsets": {"beginning": full["beginning_offsets"], "end": full["end_offsets"]},
        "all": {"count": len(full["records"]),
                "in_order": [r["offset"] for r in full["records"]] == list(range(COUNT)),
                "contents_ok": all(r["key"] == f"k{r['offset']}" and r["value"] == f"v{r['offset']}"
                                   and r["timestamp"] == T0 + 10 * r["offset"]
                                   and r["timestamp_type"] == "CreateTime" for r in full["records"]),
                "position": full["positions"]["0"]},
        "seek_990": [r["offset"] for r in tail["records"]],
        "seek_by_time": {"found": by_time["offsets_for_times"], "read": [r["offset"] for r in by_time["records"]]},
        "leader_epochs": sorted({r["leader_epoch"] for r in full["records"]}),
    }
    compat.observe(obs, expected={
        "offsets": {"beginning": {"0": 0}, "end": {"0": COUNT}},
        "all": {"count": COUNT, "in_order": True, "contents_ok": True, "position": COUNT},
        "seek_990": list(range(990, COUNT)),
        # T0 + 5005 falls between record 500 (T0+5000) and 501: the first at or after it
        "seek_by_time": {"found": {"0": 501}, "read": [501, 502]},
        "leader_epochs": [0],
    })


@pytest.mark.compat("list offsets (earliest, latest, by timestamp, max timestamp)", client="java")
def test_list_offsets(target, java_client, compat, thousand):
    topic, _ = thousand
    specs = ["earliest", "latest", "max_timestamp", {"timestamp": T0}, {"timestamp": T0 + 4990},
             {"timestamp": T0 + 4991}, {"timestamp": T0 + 10 * COUNT + 1}]
    results = java_client.run(target.bootstrap, [{"op": "list_offsets", "topic": topic, "partitions": [0],
                                                  "spec": s} for s in specs])
    obs = []
    for r in results:
        one = r["partitions"]["0"] if "error" not in r else r
        obs.append(one.get("error", {}).get("name") or [one["offset"], one["timestamp"], one["leader_epoch"]])
    # Kafka answers -1/-1 and no leader epoch for a timestamp past the last
    # record (error-cases.csv: "list offsets timestamp in the future").
    future = observations.error_case("list offsets timestamp in the future")
    assert future["notes"].startswith("Offset=-1 Timestamp=-1 LeaderEpoch=-1")
    compat.observe(obs, expected=[
        [0, -1, 0],
        [COUNT, -1, 0],
        [COUNT - 1, T0 + 10 * (COUNT - 1), 0],
        [0, T0, 0],
        [499, T0 + 4990, 0],
        [500, T0 + 5000, 0],
        [-1, -1, None],
    ])


def _config_view(configs: list[dict], keys) -> dict:
    by_name = {c["name"]: c for c in configs}
    return {k: {"value": by_name[k]["value"], "source": by_name[k]["config_source_name"],
                "read_only": by_name[k]["read_only"], "sensitive": by_name[k]["is_sensitive"]} for k in keys}


# The Java client names source 1 (TOPIC_CONFIG on the wire) DYNAMIC_TOPIC_CONFIG.
JAVA_SOURCE_NAMES = {"TOPIC_CONFIG": "DYNAMIC_TOPIC_CONFIG"}

TOPIC_KEYS = ["cleanup.policy", "compression.type", "retention.ms", "max.message.bytes", "min.insync.replicas",
              "segment.bytes", "message.timestamp.type", "retention.bytes", "min.compaction.lag.ms"]


@pytest.mark.compat("describe configs (topic: defaults and overrides)", client="java")
def test_describe_topic_configs(target, java_client, compat, topic):
    target.require("DescribeConfigs", "CreateTopics")
    data = observations.load("topic-configs.json")
    overrides = {"retention.ms": "3600000", "cleanup.policy": "compact", "max.message.bytes": "2000000"}
    target.create_topic(topic, 1)
    target.create_topic(topic + "-override", 1, overrides)
    results = java_client.run(target.bootstrap, [
        {"op": "describe_configs", "type": "topic", "name": name, "keys": TOPIC_KEYS}
        for name in (topic, topic + "-override")])
    for r in results:
        assert "error" not in r, r
    obs = [{"count": r["count"], "configs": r["configs"]} for r in results]
    recorded = []
    for case in ("default_topic", "override_topic"):
        result = data[case]["result"]
        view = _config_view(result["configs"], TOPIC_KEYS)
        for entry in view.values():
            entry["source"] = JAVA_SOURCE_NAMES.get(entry["source"], entry["source"])
        recorded.append({"count": result["config_count"], "configs": view})
    compat.observe(obs, recorded=recorded)


BROKER_KEYS = ["message.max.bytes", "auto.create.topics.enable", "num.partitions", "log.retention.hours",
               "log.segment.bytes", "offsets.topic.replication.factor", "group.initial.rebalance.delay.ms",
               "transaction.max.timeout.ms", "compression.type", "log.cleanup.policy", "min.insync.replicas",
               "default.replication.factor", "group.min.session.timeout.ms", "group.max.session.timeout.ms",
               "node.id", "process.roles"]


@pytest.mark.compat("describe configs (broker)", client="java")
def test_describe_broker_configs(target, java_client, compat):
    target.require("DescribeConfigs")
    recorded = observations.load("broker-configs.json")["result"]
    cluster = java_client.step(target.bootstrap, "describe_cluster")
    node = str(cluster["nodes"][0]["id"])
    result = java_client.step(target.bootstrap, "describe_configs", type="broker", name=node, keys=BROKER_KEYS)
    assert "error" not in result, result
    compat.observe({"count": result["count"], "configs": result["configs"]},
                   recorded={"count": recorded["config_count"],
                             "configs": _config_view(recorded["configs"], BROKER_KEYS)})


@pytest.mark.compat("consumer group: subscribe, commit, describe, list offsets", client="java")
def test_consumer_group(target, java_client, compat, topic):
    target.require("FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit",
                   "OffsetFetch", "ListGroups", "DescribeGroups")
    partitions = 3 if target.supports("CreateTopics") else 1
    target.create_topic(topic, partitions)
    group = topic + "-group"
    records = [{"key": f"k{i}", "value": f"v{i}", "partition": i % partitions} for i in range(30)]
    steps = [
        {"op": "produce", "topic": topic, "records": records},
        {"op": "consume_subscribe", "topic": topic, "topics": [topic], "group": group, "max_records": 30,
         "timeout_ms": 30000, "commit": True},
        {"op": "list_group_offsets", "group": group},
        {"op": "describe_groups", "groups": [group]},
        {"op": "list_groups"},
    ]
    produced, consumed, offsets, described, listed = java_client.run(target.bootstrap, steps, timeout=120)
    for r in (produced, consumed, offsets, described, listed):
        assert "error" not in r, r
    per_partition = {str(p): 30 // partitions + (1 if p < 30 % partitions else 0) for p in range(partitions)}
    def by_partition(offsets):   # "topic/p" -> offset, without the (per-target) topic name
        return {key.removeprefix(topic + "/"): offset for key, offset in offsets.items()}
    obs = {
        "consumed": len(consumed["records"]),
        "assignment_size": len(consumed["assignment"]),
        "committed": by_partition(consumed["committed"]),
        "group_offsets": by_partition(offsets["offsets"]),
        "described": {"state": described["groups"][group].get("state"),
                      "members": len(described["groups"][group].get("members", []))},
        "listed": sum(g["group_id"] == group for g in listed["groups"]),
    }
    compat.observe(obs, expected={
        "consumed": 30, "assignment_size": partitions, "committed": per_partition,
        "group_offsets": per_partition,
        # the consumer left the group when it closed
        "described": {"state": "Empty", "members": 0},
        "listed": 1,
    })


@pytest.mark.compat("transactional producer: commit and abort, read_committed consumer", client="java")
def test_transactions(target, java_client, compat, topic):
    target.require("FindCoordinator", "InitProducerId", "AddPartitionsToTxn", "EndTxn")
    target.create_topic(topic, 1)
    txn_config = {"transactional.id": topic + "-txn", "transaction.timeout.ms": "60000"}
    steps = [
        {"op": "produce", "topic": topic, "config": txn_config, "transaction": "commit",
         "records": [{"key": "c", "value": f"committed-{i}", "partition": 0} for i in range(5)]},
        {"op": "produce", "topic": topic, "config": txn_config, "transaction": "abort",
         "records": [{"key": "a", "value": f"aborted-{i}", "partition": 0} for i in range(2)]},
        {"op": "produce", "topic": topic, "records": [{"key": "p", "value": "plain", "partition": 0}]},
        {"op": "consume_assign", "topic": topic, "partitions": [0], "seek": "beginning", "until_end": True,
         "config": {"isolation.level": "read_committed"}, "timeout_ms": 20000},
        {"op": "consume_assign", "topic": topic, "partitions": [0], "seek": "beginning", "until_end": True,
         "config": {"isolation.level": "read_uncommitted"}, "timeout_ms": 20000},
        {"op": "list_offsets", "topic": topic, "partitions": [0], "spec": "latest", "isolation": "read_committed"},
    ]
    commit, abort, plain, committed, uncommitted, latest = java_client.run(target.bootstrap, steps, timeout=120)
    for r in (commit, abort, plain, committed, uncommitted, latest):
        assert "error" not in r, r
    obs = {
        "commit_offsets": [r.get("offset") for r in commit["records"]],
        "abort_offsets": [r.get("offset") for r in abort["records"]],
        "plain_offset": plain["records"][0].get("offset"),
        "read_committed": [[r["offset"], r["value"]] for r in committed["records"]],
        "read_uncommitted": [[r["offset"], r["value"]] for r in uncommitted["records"]],
        "end": committed["end_offsets"]["0"],
        "last_stable": latest["partitions"]["0"]["offset"],
    }
    # As txn-flow.json records: data 0-4, COMMIT marker 5, aborted data 6-7,
    # ABORT marker 8, the plain record 9.
    compat.observe(obs, expected={
        "commit_offsets": [0, 1, 2, 3, 4], "abort_offsets": [6, 7], "plain_offset": 9,
        "read_committed": [[i, f"committed-{i}"] for i in range(5)] + [[9, "plain"]],
        "read_uncommitted": [[i, f"committed-{i}"] for i in range(5)] + [[6, "aborted-0"], [7, "aborted-1"],
                                                                          [9, "plain"]],
        "end": 10, "last_stable": 10,
    })

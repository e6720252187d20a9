"""Cluster and topic metadata as each client sees it, and the API version table."""
from __future__ import annotations

import json
import socket
import struct
import subprocess

import pytest

from compat_tests import observations, wire
from compat_tests.clients import CLIENTS

# Versions Kafka 4.0 no longer serves (KIP-896); kproto does not implement
# them either. Listed in docs/compatibility.md under deliberate differences.
RAISED_MIN_VERSIONS = {"Produce": 3, "Fetch": 4, "ListOffsets": 1, "OffsetForLeaderEpoch": 2}
# Versions above Kafka 3.9's: an API's newest version is Kafka 3.9's or Kafka 4.3.1's (#31, the
# codec's newest; docs/compatibility.md's API table gives each reason), and the APIs Kafka 3.9 does
# not advertise are Kafka 4.x's (share groups), served at 4.3.1's newest version.


@pytest.mark.compat("ApiVersions: advertised ranges vs Kafka 3.9", client="protocol")
def test_api_versions(target, compat):
    from kproto import api as codec
    kafka = observations.kafka_api_versions()
    advertised = target.api_versions
    unknown = sorted(set(advertised) - set(kafka))
    if target.name == "kproto":
        newer = {k: codec.APIS[k][0] for k in unknown if k in codec.APIS}
        assert sorted(newer) == unknown, f"advertised API keys no Kafka has: {sorted(set(unknown) - set(newer))}"
        assert all(advertised[k][1] == codec.version_range(k)[1] for k in unknown), \
            {newer[k]: advertised[k] for k in unknown}
    else:
        assert not unknown, f"advertised API keys Kafka 3.9 does not have: {unknown}"
    known = [k for k in sorted(advertised) if k in kafka]
    obs = {kafka[k][0]: list(advertised[k]) for k in known}
    expected = {}
    for key in known:
        name, lo, hi = kafka[key]
        # kproto may serve from Kafka 3.9's minimum or from Kafka 4.0's
        allowed = range(lo, RAISED_MIN_VERSIONS.get(name, lo) + 1)
        newest = advertised[key][1] if advertised[key][1] in (hi, codec.version_range(key)[1]) else hi
        expected[name] = [advertised[key][0] if advertised[key][0] in allowed else lo, newest]
    if target.name == "kproto":
        compat.observe(obs, expected=expected)
    else:
        # Kafka 3.9 itself still serves the old versions.
        compat.observe(obs, recorded={kafka[k][0]: [kafka[k][1], kafka[k][2]] for k in sorted(advertised)},
                       compare_targets=False)


def _raw_api_versions(bootstrap: str, version: int) -> tuple[int, list, bytes]:
    """An ApiVersions request at any version (header v2, v3+ body), answer parsed as v0."""
    host, port = bootstrap.rsplit(":", 1)
    client_id = b"compat"
    body = b"\x07compat\x041.0\x00"    # compact strings "compat", "1.0", no tags
    frame = struct.pack(">hhih", 18, version, 99, len(client_id)) + client_id + b"\x00" + body
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        data = s.recv(size, socket.MSG_WAITALL)
        # the connection stays usable: a normal request on it is answered
        req = wire.PAIRS["ApiVersions"][0][3](client_software_name="compat", client_software_version="1.0")
        req.with_header(correlation_id=100, client_id="compat")
        s.sendall(req.encode(header=True, framed=True))
        usable = len(s.recv(4, socket.MSG_WAITALL)) == 4
    correlation, error, count = struct.unpack_from(">ihi", data)
    keys = [list(struct.unpack_from(">hhh", data, 10 + 6 * i)) for i in range(count)]
    assert correlation == 99
    return error, keys, usable


@pytest.mark.compat("ApiVersions above the supported version", client="protocol")
def test_api_versions_unsupported_version(target, compat):
    recorded = observations.load("api-versions.json")["request_v5_unsupported"]
    error, keys, usable = _raw_api_versions(target.bootstrap, 5)
    compat.observe({"error": error, "api_keys": keys, "connection_usable": usable}, recorded={
        "error": recorded["error_code"],
        "api_keys": [[k["api_key"], k["min_version"], k["max_version"]] for k in recorded["api_keys"]],
        "connection_usable": recorded["connection_usable_after"]})


def _operations(value) -> int:
    """kafka-python decodes the authorized-operations bit field to a set of bit numbers."""
    if value is None:
        return -2147483648
    if isinstance(value, int):
        return value
    return sum(1 << bit for bit in value)


def _metadata(bootstrap, topics, ops=False, version=12):
    return wire.call(bootstrap, "Metadata", version, topics=topics, allow_auto_topic_creation=False,
                     include_topic_authorized_operations=ops)


@pytest.mark.compat("Metadata v12: brokers, controller, topic, partitions", client="protocol")
def test_metadata_response(target, compat, topic):
    partitions = 3 if target.supports("CreateTopics") else 1
    target.create_topic(topic, partitions)
    resp = _metadata(target.bootstrap, [{"name": topic, "topic_id": None}])
    with_ops = _metadata(target.bootstrap, [{"name": topic, "topic_id": None}], ops=True)
    t = resp["topics"][0]
    obs = {
        "brokers": [[b["node_id"], f"{b['host']}:{b['port']}" == target.bootstrap, b["rack"]]
                    for b in resp["brokers"]],
        "controller_is_a_broker": resp["controller_id"] in [b["node_id"] for b in resp["brokers"]],
        "cluster_id_length": len(resp["cluster_id"] or ""),
        "topic": [t["error_code"], t["name"] == topic, t["is_internal"], _operations(t["authorized_operations"])],
        "partitions": sorted([p["partition_index"], p["error_code"], p["leader_id"], p["leader_epoch"],
                              p["replica_nodes"], p["isr_nodes"], p["offline_replicas"]] for p in t["partitions"]),
        "authorized_operations_when_asked": _operations(with_ops["topics"][0]["authorized_operations"]),
    }
    data = observations.load("metadata-response.json")
    rec = data["response"]
    rt = rec["Topics"][0]
    compat.observe(obs, recorded={
        "brokers": [[b["NodeId"], True, b["Rack"]] for b in rec["Brokers"]],
        "controller_is_a_broker": True,
        "cluster_id_length": len(rec["ClusterId"]),
        "topic": [rt["ErrorCode"], True, rt["IsInternal"], rt["TopicAuthorizedOperations"]],
        "partitions": sorted([p["PartitionIndex"], p["ErrorCode"], p["LeaderId"], p["LeaderEpoch"],
                              p["ReplicaNodes"], p["IsrNodes"], p["OfflineReplicas"]]
                             for p in rt["Partitions"])[:partitions],
        "authorized_operations_when_asked": data["with_IncludeTopicAuthorizedOperations_true"][
            "TopicAuthorizedOperations"],
    })


@pytest.mark.compat("Metadata: unknown topic, unknown topic id, invalid name", client="protocol")
def test_metadata_errors(target, compat):
    import uuid
    unknown = _metadata(target.bootstrap, [{"name": "compat-no-such-topic", "topic_id": None}])["topics"][0]
    by_id = _metadata(target.bootstrap, [{"name": None,
                                          "topic_id": uuid.UUID("12345678-1234-1234-1234-123456789abc")}])
    invalid = _metadata(target.bootstrap, [{"name": "bad/name", "topic_id": None}])["topics"][0]
    data = observations.load("metadata-response.json")
    rec_id = data["unknown_topic_id"]["Topics"][0]
    compat.observe({
        "unknown_name": [unknown["error_code"], unknown["partitions"]],
        "unknown_id": [by_id["topics"][0]["error_code"], by_id["topics"][0]["name"]],
        "invalid_name": invalid["error_code"],
    }, recorded={
        "unknown_name": [int(observations.error_case(
            "metadata for unknown topic, AllowAutoTopicCreation=false")["error_code"]), []],
        "unknown_id": [rec_id["ErrorCode"], rec_id["Name"]],
        "invalid_name": int(observations.error_case(
            'metadata for invalid topic name "bad/name"')["error_code"]),
    })


# ------------------------------------------------------------ per client

def _confluent_view(bootstrap, topic):
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=15)
    brokers = [[b.id, f"{b.host}:{b.port}"] for b in md.brokers.values()]
    parts = [[p.id, p.leader, list(p.replicas), list(p.isrs)] for p in md.topics[topic].partitions.values()]
    return brokers, md.controller_id, parts


def _kafka_python_view(bootstrap, topic):
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        cluster = admin.describe_cluster()
        (desc,) = admin.describe_topics([topic])
    finally:
        admin.close()
    brokers = [[b["broker_id"], f"{b['host']}:{b['port']}"] for b in cluster["brokers"]]
    parts = [[p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"]] for p in desc["partitions"]]
    return brokers, cluster["controller_id"], parts


def _aiokafka_view(bootstrap, topic):
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient

    async def run():
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            cluster = await admin.describe_cluster()
            desc = await admin.describe_topics([topic])
        finally:
            await admin.close()
        return cluster, desc
    cluster, desc = asyncio.run(run())
    (d,) = desc
    brokers = [[b["node_id"], f"{b['host']}:{b['port']}"] for b in cluster["brokers"]]
    parts = [[p["partition"], p["leader"], p["replicas"], p["isr"]] for p in d["partitions"]]
    return brokers, cluster["controller_id"], parts


def _kcat_view(bootstrap, topic):
    out = subprocess.run(["kcat", "-L", "-J", "-b", bootstrap, "-t", topic], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    md = json.loads(out)
    brokers = [[b["id"], b["name"]] for b in md["brokers"]]
    (t,) = md["topics"]
    parts = [[p["partition"], p["leader"], [r["id"] for r in p["replicas"]], [r["id"] for r in p["isrs"]]]
             for p in t["partitions"]]
    return brokers, md.get("controllerid"), parts


def _java_view(java, bootstrap, topic):
    cluster, topics = java.run(bootstrap, [{"op": "describe_cluster"}, {"op": "describe_topics", "topics": [topic]}])
    brokers = [[n["id"], f"{n['host']}:{n['port']}"] for n in cluster["nodes"]]
    parts = [[p["partition"], p["leader"], p["replicas"], p["isr"]] for p in topics["topics"][topic]["partitions"]]
    return brokers, cluster["controller"], parts


@pytest.mark.compat("cluster and topic metadata", client="{client}")
@pytest.mark.parametrize("client", CLIENTS)
def test_client_metadata_view(target, clients, compat, topic, client):
    clients.need(client)
    partitions = 3 if target.supports("CreateTopics") else 1
    target.create_topic(topic, partitions)
    view = {"confluent": _confluent_view, "kafka-python": _kafka_python_view, "aiokafka": _aiokafka_view,
            "kcat": _kcat_view}.get(client)
    if client == "java":
        brokers, controller, parts = _java_view(clients.java, target.bootstrap, topic)
    else:
        brokers, controller, parts = view(target.bootstrap, topic)
    node_ids = [b[0] for b in brokers]
    obs = {"brokers": [[b[0], b[1] == target.bootstrap] for b in brokers],
           "controller_is_a_broker": controller in node_ids,
           "partitions": sorted(parts)}
    compat.observe(obs, expected={
        "brokers": [[node_ids[0], True]], "controller_is_a_broker": True,
        "partitions": [[p, node_ids[0], [node_ids[0]], [node_ids[0]]] for p in range(partitions)]})

"""DescribeQuorum v0-2 from a single node: a one-voter quorum led by itself, answered as Kafka's
quorum leader answers; `kafka-metadata-quorum.sh describe --status/--replication` against it (needs
KAFKA_HOME)."""
from __future__ import annotations

import os
import sys
import re
import subprocess
import time
import uuid

import pytest

from kproto.api import ApiKey
from kproto.messages.api_versions_request import ApiVersionsRequest
from kproto.messages.describe_quorum_request import DescribeQuorumRequest, PartitionData, TopicData

from tests.wire_client import WireClient
from broker.launch.process import BrokerProcess, free_port

KAFKA_HOME = os.environ.get("KAFKA_HOME")


def request(topic="__cluster_metadata", partitions=(0,)):
    return DescribeQuorumRequest(topics=[TopicData(topic_name=topic, partitions=[
        PartitionData(partition_index=p) for p in partitions])])


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A node with a static one-voter quorum on a fixed controller port, restarted once (epoch 2)."""
    data = str(tmp_path_factory.mktemp("quorum"))
    cport = free_port()
    port = free_port()
    settings = {"listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
                "controller.quorum.voters": f"1@127.0.0.1:{cport}"}
    BrokerProcess(data, port=port, settings=settings).start().stop()
    proc = BrokerProcess(data, port=port, settings=settings).start()
    proc.cport = cport
    yield proc
    proc.stop()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_quorum_versions(node, version):
    with WireClient(node.bootstrap) as c:
        before = int(time.time() * 1000)
        r = c.call(request(), version)
    assert r.error_code == 0
    (t,) = r.topics
    (p,) = t.partitions
    assert (t.topic_name, p.partition_index, p.error_code, p.leader_id, p.leader_epoch) == (
        "__cluster_metadata", 0, 0, 1, 2)
    # LeaderChange (epoch 1), 4 bootstrap records, LeaderChange (epoch 2): the log end is 6 and
    # everything is committed
    assert p.high_watermark == 6
    (v,) = p.current_voters
    assert (v.replica_id, v.log_end_offset, p.observers) == (1, 6, [])
    if version >= 1:
        assert v.last_fetch_timestamp == v.last_caught_up_timestamp >= before
    if version >= 2:
        assert v.replica_directory_id == uuid.UUID(int=0)      # static quorum: no directory ids
        assert [(n.node_id, [(l.name, l.host, l.port) for l in n.listeners]) for n in r.nodes] == [
            (1, [("CONTROLLER", "127.0.0.1", node.cport)])]


def test_describe_quorum_of_another_partition(node):
    with WireClient(node.bootstrap) as c:
        r = c.call(request("other", (0, 3)), 2)
    assert r.error_code == 0
    assert [(t.topic_name, [(p.partition_index, p.error_code, p.error_message) for p in t.partitions])
            for t in r.topics] == [("other", [(0, 3, "This server does not host this topic-partition."),
                                              (3, 3, "This server does not host this topic-partition.")])]
    with WireClient(node.bootstrap) as c:
        r = c.call(request(partitions=(1,)), 0)
    assert r.topics[0].partitions[0].error_code == 3


def test_api_versions_advertises_describe_quorum(node):
    with WireClient(node.bootstrap) as c:
        r = c.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    (k,) = [k for k in r.api_keys if k.api_key == ApiKey.DESCRIBE_QUORUM]
    assert (k.min_version, k.max_version) == (0, 2)   # as Kafka 3.9 (observations/api-versions.json)
    # a static quorum (controller.quorum.voters) is kraft.version 0: not among the finalized features
    assert "kraft.version" not in {f.name for f in r.finalized_features}


def _quorum_tool(node, *args):
    tool = os.path.join(KAFKA_HOME, "bin", "kafka-metadata-quorum.sh")
    p = subprocess.run([tool, "--bootstrap-server", node.bootstrap, "describe", *args],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


@pytest.mark.skipif(not KAFKA_HOME, reason="KAFKA_HOME is not set: runs Kafka's kafka-metadata-quorum.sh")
def test_kafka_metadata_quorum_status(node):
    out = _quorum_tool(node, "--status")
    cluster = re.search(r"cluster (\S+),", node.ready_line).group(1)
    assert out.splitlines() == [
        f"ClusterId:              {cluster}",
        "LeaderId:               1",
        "LeaderEpoch:            2",
        "HighWatermark:          6",
        "MaxFollowerLag:         0",
        "MaxFollowerLagTimeMs:   0",
        f'CurrentVoters:          [{{"id": 1, "directoryId": null, "endpoints": ["CONTROLLER://127.0.0.1:{node.cport}"]}}]',
        "CurrentObservers:       []",
    ]


@pytest.mark.skipif(not KAFKA_HOME, reason="KAFKA_HOME is not set: runs Kafka's kafka-metadata-quorum.sh")
def test_kafka_metadata_quorum_replication(node):
    lines = _quorum_tool(node, "--replication").splitlines()
    assert re.split(r"\s+", lines[0].strip()) == [
        "NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
    row = re.split(r"\s+", lines[1].strip())
    assert row[:4] == ["1", "AAAAAAAAAAAAAAAAAAAAAA", "6", "0"] and row[6] == "Leader"
    assert row[4] == row[5] and int(row[4]) > 1.7e12
    assert len(lines) == 2


def test_dynamic_quorum_formatted_standalone(tmp_path):
    """`storage format --standalone` then two starts: quorum-state version 1, the voter set written
    to the log in the first epoch (as Kafka's leader does), DescribeQuorum with the directory id."""
    from broker.metadata import control
    from broker.quorum import state_file
    from broker.storage.checkpoints import read_meta_properties, uuid_from_str
    from kproto import records as rec
    data = tmp_path / "data"
    port, cport = free_port(), free_port()
    settings = {"log.dirs": str(data), "controller.quorum.voters": "",
                "controller.quorum.bootstrap.servers": f"127.0.0.1:{cport}",
                "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}"}
    props = tmp_path / "server.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in {
        **settings, "process.roles": "broker,controller", "node.id": "1", "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"}.items()))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    f = subprocess.run([sys.executable, "-m", "broker.launch.cli", "storage", "format", "-t", "K_iKt0NETNuvBO7rTe6QYg",
                        "-c", str(props), "--standalone"], capture_output=True, text=True, env=env, timeout=60)
    assert f.returncode == 0, f.stderr
    directory_id = read_meta_properties(str(data / "meta.properties"))["directory.id"]
    BrokerProcess(str(data), port=port, settings=settings).start().stop()
    proc = BrokerProcess(str(data), port=port, settings=settings).start()
    try:
        with WireClient(proc.bootstrap) as c:
            r = c.call(request(), 2)
            av = c.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    finally:
        proc.stop()
    # a dynamic quorum reports kraft.version 1 among the finalized features, as Kafka 3.9 does
    assert {f.name: f.max_version_level for f in av.finalized_features}.get("kraft.version") == 1
    p = r.topics[0].partitions[0]
    (v,) = p.current_voters
    assert (p.leader_id, p.leader_epoch, v.replica_id, v.replica_directory_id) == (
        1, 2, 1, uuid_from_str(directory_id))
    assert [(n.node_id, [(l.name, l.host, l.port) for l in n.listeners]) for n in r.nodes] == [
        (1, [("CONTROLLER", "127.0.0.1", cport)])]
    part = data / "__cluster_metadata-0"
    assert state_file.read(str(part)).to_json() == (
        b'{"leaderId":1,"leaderEpoch":2,"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}')
    log = (part / "00000000000000000000.log").read_bytes()
    types = [[control.decode_control(x)[0] for x in rec.iter_records(log[pos:pos + h.size])]
             for pos, h in rec.iter_batch_headers(log) if h.is_control]
    assert types == [[control.LEADER_CHANGE, control.KRAFT_VERSION, control.KRAFT_VOTERS], [control.LEADER_CHANGE]]

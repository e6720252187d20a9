"""Kafka's quickstart server.properties (one static voter, PLAINTEXT + CONTROLLER listeners) runs
unchanged: the node binds its CONTROLLER listener and answers there as Kafka 3.9's controller
(broker/quorum/sole_controller.py): ApiVersions with the controller's API set, DescribeCluster
endpoint_type 2, DescribeQuorum, the connection closed for an API a controller does not serve;
`kafka-metadata-quorum.sh --bootstrap-controller` and `kafka-cluster.sh cluster-id
--bootstrap-controller` work (those need Kafka)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from kproto.api import ApiKey
from kproto.messages.api_versions_request import ApiVersionsRequest
from kproto.messages.describe_cluster_request import DescribeClusterRequest
from kproto.messages.describe_configs_request import DescribeConfigsRequest, DescribeConfigsResource
from kproto.messages.describe_quorum_request import DescribeQuorumRequest, PartitionData, TopicData
from kproto.messages.metadata_request import MetadataRequest

from tests.wire_client import WireClient
from broker.launch.process import BrokerProcess, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KAFKA = os.environ.get("KAFKA_HOME") or os.path.expanduser("~/.cache/kproto-ref/kafka")
QUICKSTART = os.path.join(KAFKA, "config", "kraft", "server.properties")
OBSERVED = json.load(open(os.path.join(ROOT, "tests", "fixtures", "kafka39-controller-api-versions.json")))
# config/kraft/server.properties of Kafka 3.9 without its comments (used when Kafka is not here)
QUICKSTART_KEYS = """process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


class QuickstartNode(BrokerProcess):
    """`kproto serve --config server.properties`, the file Kafka's quickstart uses with only the
    ports and log.dirs changed (and kproto's metrics listener off, so nodes do not share 9644)."""

    def __init__(self, tmp_path, dynamic: bool = False):
        self.cport = free_port()
        super().__init__(str(tmp_path / "logs"), port=free_port())
        self.dynamic = dynamic
        if dynamic:   # config/kraft/reconfig-server.properties: the same with a dynamic quorum
            sample = os.path.join(KAFKA, "config", "kraft", "reconfig-server.properties")
            text = open(sample).read() if os.path.exists(sample) else QUICKSTART_KEYS.replace(
                "controller.quorum.voters=1@", "controller.quorum.bootstrap.servers=")
        else:
            text = open(QUICKSTART).read() if os.path.exists(QUICKSTART) else QUICKSTART_KEYS
        text = text.replace(":9092", f":{self.port}").replace(":9093", f":{self.cport}")
        text = re.sub(r"(?m)^log\.dirs=.*$", f"log.dirs={self.data_dir}", text)
        self.properties = str(tmp_path / "server.properties")
        with open(self.properties, "w") as f:
            f.write(text)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "broker.launch.cli", "serve", "--config", self.properties,
                "--log-level", self.log_level, "--set", "kproto.metrics.listener=off"]

    def format(self) -> None:
        env = dict(os.environ, PYTHONPATH=ROOT)
        uuid = subprocess.run([sys.executable, "-m", "broker.launch.cli", "storage", "random-uuid"], env=env,
                              capture_output=True, text=True, timeout=60, check=True).stdout.strip()
        subprocess.run([sys.executable, "-m", "broker.launch.cli", "storage", "format", "-t", uuid, "-c", self.properties]
                       + (["--standalone"] if self.dynamic else []),
                       env=env, capture_output=True, text=True, timeout=60, check=True)
        self.cluster_id = uuid

    @property
    def controller(self) -> str:
        return f"localhost:{self.cport}"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = QuickstartNode(tmp_path_factory.mktemp("quickstart"))
    n.format()
    n.start(timeout=60)
    yield n
    n.stop()


def _api_versions(address):
    with WireClient(address) as c:
        return c.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)


def test_controller_api_versions_are_kafkas_controller_set(node):
    r = _api_versions(node.controller)
    assert r.error_code == 0
    ours = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    kafka = {k: (lo, hi) for k, lo, hi in OBSERVED["api_keys"]}
    # only what a Kafka controller advertises, in Kafka 3.9's version ranges or up to Kafka 4.3's
    # newest version (#31: AddRaftVoter 1, AlterPartitionReassignments 1, ...; docs/compatibility.md)
    from kproto.api import version_range
    assert set(ours) <= set(kafka), sorted(set(ours) - set(kafka))
    assert {k: v for k, v in ours.items() if kafka[k] != v and v != (kafka[k][0], version_range(k)[1])} == {}
    # the admin APIs a controller serves (KIP-919 tools, kafka-features, configs, ACLs...)
    assert {ApiKey.API_VERSIONS, ApiKey.DESCRIBE_QUORUM, ApiKey.DESCRIBE_CLUSTER, ApiKey.CREATE_TOPICS,
            ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.UPDATE_FEATURES, ApiKey.CREATE_ACLS} <= set(ours)
    # and share.version finalized at 1, as on a fresh Kafka 4.2+ cluster (share groups on; test_features)
    assert sorted((f.name, f.min_version_level, f.max_version_level) for f in r.finalized_features) == sorted(
        [tuple(f) for f in OBSERVED["finalized_features"]] + [("share.version", 1, 1)])
    # the broker listener keeps the broker's set
    broker = {k.api_key for k in _api_versions(node.bootstrap).api_keys}
    assert {ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.FETCH} <= broker


def test_controller_describe_cluster(node):
    with WireClient(node.controller) as c:
        r = c.call(DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=2), 1)
        wrong = c.call(DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=1), 1)
    assert (r.error_code, r.endpoint_type, r.cluster_id, r.controller_id, r.cluster_authorized_operations) == (
        0, 2, node.cluster_id, 1, 8096)
    assert [(b.broker_id, b.host, b.port) for b in r.brokers] == [(1, "localhost", node.cport)]
    kafka = OBSERVED["describe_cluster_endpoint_type_1"]
    assert (wrong.error_code, wrong.error_message, wrong.brokers) == (
        kafka["error_code"], kafka["error_message"], [])


def test_controller_describe_quorum(node):
    req = DescribeQuorumRequest(topics=[TopicData(topic_name="__cluster_metadata",
                                                  partitions=[PartitionData(partition_index=0)])])
    with WireClient(node.controller) as c:
        r = c.call(req, 2)
    (p,) = r.topics[0].partitions
    assert (p.error_code, p.leader_id, [v.replica_id for v in p.current_voters]) == (0, 1, [1])
    assert [(n.node_id, [(x.name, x.host, x.port) for x in n.listeners]) for n in r.nodes] == [
        (1, [("CONTROLLER", "localhost", node.cport)])]


def test_controller_closes_the_connection_for_a_broker_api(node):
    with WireClient(node.controller) as c:
        with pytest.raises(ConnectionError):
            c.call(MetadataRequest(topics=None), 12)
    # Kafka's SocketServer wording, in the log
    said = "Received request api key METADATA with version 12 which is not enabled"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(said in line for line in node.stderr_lines):
        time.sleep(0.1)
    assert any(said in line for line in node.stderr_lines), node.stderr_lines[-5:]


def listening_ports(pid: int) -> set:
    """The TCP ports a process listens on (/proc: its socket inodes in LISTEN state)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in list(f)[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:   # 0A: LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_listens_on_its_broker_and_controller_ports(node):
    assert listening_ports(node.proc.pid) == {node.port, node.cport}


def test_embedded_default_has_no_controller_listener(tmp_path):
    proc = BrokerProcess(str(tmp_path / "data")).start()
    try:
        assert listening_ports(proc.proc.pid) == {proc.port}
    finally:
        proc.stop()


def test_describe_configs_listeners_all_listen(node):
    req = DescribeConfigsRequest(resources=[DescribeConfigsResource(
        resource_type=4, resource_name="1", configuration_keys=["listeners"])])
    with WireClient(node.bootstrap) as c:
        r = c.call(req, 4)
    (value,) = [x.value for x in r.results[0].configs]
    assert value == f"PLAINTEXT://:{node.port},CONTROLLER://:{node.cport}"
    for port in (node.port, node.cport):   # every listener named there answers ApiVersions
        assert _api_versions(f"127.0.0.1:{port}").error_code == 0


def _kafka_tool(name, *args):
    p = subprocess.run([os.path.join(KAFKA, "bin", name), *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m"})
    assert p.returncode == 0, (p.stdout, p.stderr[-2000:])
    return p.stdout


needs_kafka = pytest.mark.skipif(not os.path.exists(os.path.join(KAFKA, "bin", "kafka-metadata-quorum.sh")),
                                 reason="no Kafka at KAFKA_HOME (~/.cache/kproto-ref/kafka): runs Kafka's tools")


@needs_kafka
def test_kafka_tools_bootstrap_controller(node):
    status = _kafka_tool("kafka-metadata-quorum.sh", "--bootstrap-controller", node.controller,
                         "describe", "--status").splitlines()
    assert status[:3] == [f"ClusterId:              {node.cluster_id}", "LeaderId:               1",
                          "LeaderEpoch:            1"]
    assert status[6:] == [
        f'CurrentVoters:          [{{"id": 1, "directoryId": null, "endpoints": ["CONTROLLER://localhost:{node.cport}"]}}]',
        "CurrentObservers:       []"]
    rows = _kafka_tool("kafka-metadata-quorum.sh", "--bootstrap-controller", node.controller,
                       "describe", "--replication").splitlines()
    assert len(rows) == 2 and rows[1].split()[0:2] == ["1", "AAAAAAAAAAAAAAAAAAAAAA"]
    assert rows[1].split()[-1] == "Leader"
    assert _kafka_tool("kafka-cluster.sh", "cluster-id", "--bootstrap-controller", node.controller) == (
        f"Cluster ID: {node.cluster_id}\n")


def test_sasl_controller_listener_with_an_authorizer(tmp_path):
    """A SASL_PLAINTEXT controller listener: logins as on a broker listener; with an authorizer,
    DescribeCluster there needs ALTER on the cluster and DescribeQuorum DESCRIBE (Kafka's
    ControllerApis), so a user without cluster ACLs is refused and a super user is answered."""
    from kproto.messages.sasl_authenticate_request import SaslAuthenticateRequest
    from kproto.messages.sasl_handshake_request import SaslHandshakeRequest
    from tests.security_helpers import PLAIN_JAAS
    port, cport = free_port(), free_port()
    proc = BrokerProcess(str(tmp_path / "data"), port=port, settings={
        "process.roles": "broker,controller", "node.id": "1", "controller.quorum.voters": f"1@127.0.0.1:{cport}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS"}).start(timeout=60)   # (ANONYMOUS: the ACL set-up)

    def ask(user, password):
        with WireClient(f"127.0.0.1:{cport}") as c:
            assert c.call(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
            assert c.call(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()), 2).error_code == 0
            cluster = c.call(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=2), 1)
            quorum = c.call(DescribeQuorumRequest(topics=[TopicData(
                topic_name="__cluster_metadata", partitions=[PartitionData(partition_index=0)])]), 2)
        return cluster, quorum
    try:
        with WireClient(f"127.0.0.1:{cport}") as c:   # ApiVersions before the login, as Kafka
            keys = {k.api_key for k in c.call(ApiVersionsRequest(client_software_name="t",
                                                                  client_software_version="1"), 3).api_keys}
        assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} <= keys
        cluster, quorum = ask("alice", "alice-secret")
        assert (cluster.error_code, cluster.brokers) == (31, [])   # CLUSTER_AUTHORIZATION_FAILED
        assert quorum.error_code == 31
        from kproto.messages.create_acls_request import CreateAclsRequest
        with WireClient(proc.bootstrap) as c:   # DESCRIBE on the cluster: enough for DescribeQuorum only
            r = c.call(CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
                resource_type=4, resource_name="kafka-cluster", resource_pattern_type=3, principal="User:alice",
                host="*", operation=8, permission_type=3)]), 3)
        assert r.results[0].error_code == 0
        cluster, quorum = ask("alice", "alice-secret")
        assert (cluster.error_code, quorum.error_code) == (31, 0)
        cluster, quorum = ask("admin", "admin-secret")
        assert (cluster.error_code, [(b.broker_id, b.port) for b in cluster.brokers]) == (0, [(1, cport)])
        assert (quorum.error_code, quorum.topics[0].partitions[0].leader_id) == (0, 1)
    finally:
        proc.stop()


def test_kafka_dynamic_sample_config_binds_its_controller_listener(tmp_path):
    """Kafka's reconfig-server.properties (controller.quorum.bootstrap.servers, formatted
    --standalone): no static voters are derived from `listeners`, so the node is a dynamic quorum
    of one (the replicated path) with its controller listener."""
    n = QuickstartNode(tmp_path, dynamic=True)
    n.format()
    n.start(timeout=60)
    try:
        assert listening_ports(n.proc.pid) == {n.port, n.cport}
        with WireClient(n.controller) as c:
            r = c.call(DescribeQuorumRequest(topics=[TopicData(
                topic_name="__cluster_metadata", partitions=[PartitionData(partition_index=0)])]), 2)
        (v,) = r.topics[0].partitions[0].current_voters
        assert v.replica_id == 1 and v.replica_directory_id.int != 0   # a dynamic voter's directory id
        assert [(x.node_id, [(e.name, e.port) for e in x.listeners]) for x in r.nodes] == [
            (1, [("CONTROLLER", n.cport)])]
        with WireClient(n.controller) as c:   # not a controller API: the connection closes, as on Kafka
            with pytest.raises(ConnectionError):
                c.call(MetadataRequest(topics=None), 12)
    finally:
        n.stop()

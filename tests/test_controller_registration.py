"""Controllers register with the active controller (ControllerRegistration, KIP-919) and the
controller listener answers admin clients as Kafka's ControllerApis: ApiVersions with the
controller's APIs, DescribeCluster with endpoint_type=2 (the registered controllers, controller id =
the active controller), DescribeQuorum; so `kafka-metadata-quorum.sh --bootstrap-controller` and
`kafka-cluster.sh --bootstrap-controller` work. Three real `kproto serve` processes (combined
roles) with an authorizer that allows everything until an ACL names the cluster.

One cluster for the module; the scenarios run in order."""
import os
import subprocess
import time

import pytest

from kproto.errors import ErrorCode
from kproto.messages.api_versions_request import ApiVersionsRequest
from kproto.messages.controller_registration_request import ControllerRegistrationRequest
from kproto.messages.create_acls_request import CreateAclsRequest
from kproto.messages.describe_cluster_request import DescribeClusterRequest
from kproto.messages.describe_quorum_request import DescribeQuorumRequest, PartitionData, TopicData
from tests.wire_client import WireClient
from tools.quorum_cluster import QuorumCluster

KAFKA_HOME = os.environ.get("KAFKA_HOME") or os.path.expanduser("~/.cache/kproto-ref/kafka")
CLUSTER_RESOURCE, LITERAL, ALLOW, DENY = 4, 3, 3, 2
OP_ALTER, OP_DESCRIBE, OP_CLUSTER_ACTION = 7, 8, 9


@pytest.fixture(scope="module")
def cluster():
    c = QuorumCluster(3, settings={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true"})
    c.format()
    c.start()
    yield c
    c.cleanup()


def controller(c, i):
    return f"127.0.0.1:{c.controller_ports[i]}"


def describe_controllers(address, endpoint_type=2, version=1, operations=False):
    with WireClient(address, timeout=5.0) as w:
        return w.call(DescribeClusterRequest(endpoint_type=endpoint_type,
                                             include_cluster_authorized_operations=operations), version)


def quorum_leader(address, partition=0):
    """(error code of the partition, leader id) from DescribeQuorum on a controller listener."""
    with WireClient(address, timeout=5.0) as w:
        p = w.call(DescribeQuorumRequest(topics=[TopicData(topic_name="__cluster_metadata", partitions=[
            PartitionData(partition_index=partition)])]), 2).topics[0].partitions[0]
    return p.error_code, p.leader_id


def registered(c, nodes, expected_ids, timeout, hosts=None):
    """DescribeCluster (controllers) on each of `nodes`, polled until every one lists
    `expected_ids` at their controller ports (hosts: {id: advertised host} where not 127.0.0.1) and
    names the same live controller: that answer."""
    hosts = hosts if hosts is not None else getattr(c, "advertised_hosts", {})
    want = [(i, hosts.get(i, "127.0.0.1"), c.controller_ports[i]) for i in expected_ids]
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        try:
            answers = [describe_controllers(controller(c, i)) for i in nodes]
            seen = [(r.error_code, r.controller_id, [(b.broker_id, b.host, b.port) for b in r.brokers])
                    for r in answers]
            ids = {r.controller_id for r in answers}
            if all(s[0] == 0 and s[2] == want for s in seen) and len(ids) == 1 and ids <= set(nodes):
                return answers[0]
        except (OSError, EOFError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"controllers {expected_ids} not listed by {nodes} within {timeout} s: {seen}")


def test_every_controller_registers_and_the_controller_listener_answers_admin_clients(cluster):
    c = cluster
    r = registered(c, [1, 2, 3], [1, 2, 3], 30)
    assert r.endpoint_type == 2 and r.cluster_id == c.cluster_id
    # the cluster operations as a Kafka 3.9 controller reports them (observed)
    assert describe_controllers(controller(c, 1), operations=True).cluster_authorized_operations == 8096
    # the controller id is the active controller, as DescribeQuorum at its listener reports it
    assert quorum_leader(controller(c, r.controller_id)) == (0, r.controller_id)
    follower = next(i for i in (1, 2, 3) if i != r.controller_id)
    assert quorum_leader(controller(c, follower))[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert quorum_leader(controller(c, r.controller_id), partition=1)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # a request for brokers at a controller: Kafka's MISMATCHED_ENDPOINT_TYPE (INVALID_REQUEST in v0)
    wrong = describe_controllers(controller(c, follower), endpoint_type=1)
    assert wrong.error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE and wrong.brokers == []
    assert wrong.error_message == ("The request was sent to an endpoint of type CONTROLLER, but we wanted an "
                                   "endpoint of type BROKER")
    assert describe_controllers(controller(c, follower), endpoint_type=1, version=0).error_code == \
        ErrorCode.INVALID_REQUEST
    # ApiVersions: the controller's API set (no Produce, no Metadata), with the finalized features
    with WireClient(controller(c, follower), timeout=5.0) as w:
        av = w.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    keys = {k.api_key for k in av.api_keys}
    assert {18, 52, 55, 60, 62, 70, 80}.issubset(keys) and not keys & {0, 3, 10}, sorted(keys)
    assert "metadata.version" in {f.name for f in av.finalized_features}


def _tool(*args, ok=True):
    p = subprocess.run([os.path.join(KAFKA_HOME, "bin", args[0]), *args[1:]], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m"})
    if not ok:
        assert p.returncode != 0, p.stdout
        return p.stderr
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def test_kafka_tools_with_bootstrap_controller(cluster):
    if not os.path.exists(os.path.join(KAFKA_HOME, "bin", "kafka-metadata-quorum.sh")):
        pytest.skip("no Kafka at KAFKA_HOME (~/.cache/kproto-ref/kafka)")
    c = cluster
    leader = registered(c, [1, 2, 3], [1, 2, 3], 30).controller_id
    status = _tool("kafka-metadata-quorum.sh", "--bootstrap-controller", controller(c, 1), "describe", "--status")
    assert f"LeaderId:               {leader}\n" in status, status
    for i in (1, 2, 3):
        assert f'{{"id": {i}, "directoryId": null, "endpoints": ["CONTROLLER://127.0.0.1:{c.controller_ports[i]}"]}}' \
            in status, status
    rows = _tool("kafka-metadata-quorum.sh", "--bootstrap-controller", controller(c, 2), "describe",
                 "--replication").splitlines()
    roles = {line.split()[0]: line.split()[-1] for line in rows[1:] if line.strip()}
    assert roles == {str(i): ("Leader" if i == leader else "Follower") for i in (1, 2, 3)}, rows
    assert _tool("kafka-cluster.sh", "cluster-id", "--bootstrap-controller", controller(c, 3)).strip() == \
        f"Cluster ID: {c.cluster_id}"
    # RemoveRaftVoter reaches the active controller; a static quorum refuses it as Kafka 3.9 does (a
    # valid voter key: with the zero directory id Kafka refuses it first, INVALID_REQUEST)
    err = _tool("kafka-metadata-quorum.sh", "--bootstrap-controller", controller(c, 3), "remove-controller",
                "--controller-id", "3", "--controller-directory-id", "b8pVHLAGT_OMDdxdqrdWaQ", ok=False)
    assert "UnsupportedVersionException: Cluster doesn't support removing voter because the kraft.version " \
        "feature is 0" in err, err[-2000:]


def test_new_active_controller_answers_and_a_restarted_controller_registers_again(cluster):
    c = cluster
    old = registered(c, [1, 2, 3], [1, 2, 3], 30).controller_id
    c.nodes[old].kill()
    survivors = [i for i in (1, 2, 3) if i != old]
    r = registered(c, survivors, [1, 2, 3], 20)   # the registrations are in the committed metadata
    assert r.controller_id in survivors
    # it comes back advertising its controller listener under another name: its new registration
    # (a new incarnation) replaces the old one on every node
    node = c.nodes[old]
    with open(node.properties, "a") as f:
        f.write(f"\nadvertised.listeners=PLAINTEXT://127.0.0.1:{c.ports[old]},"
                f"CONTROLLER://localhost:{c.controller_ports[old]}\n")
    node.start(60)
    registered(c, [1, 2, 3], [1, 2, 3], 30, hosts={old: "localhost"})
    c.advertised_hosts = {old: "localhost"}


def test_describe_cluster_at_a_controller_needs_alter_on_the_cluster(cluster):
    c = cluster
    registered(c, [1, 2, 3], [1, 2, 3], 30)
    # ACLs on the cluster for everybody on the controller listener (User:ANONYMOUS): raft and
    # DescribeQuorum still allowed, ALTER denied
    C = CreateAclsRequest.AclCreation
    acls = [C(resource_type=CLUSTER_RESOURCE, resource_name="kafka-cluster", resource_pattern_type=LITERAL,
              principal="User:ANONYMOUS", host="*", operation=op, permission_type=perm)
            for op, perm in ((OP_CLUSTER_ACTION, ALLOW), (OP_DESCRIBE, ALLOW), (OP_ALTER, DENY))]
    with WireClient(f"127.0.0.1:{c.ports[1]}", timeout=10.0) as w:
        resp = w.call(CreateAclsRequest(creations=acls), 3)
    assert [x.error_code for x in resp.results] == [0, 0, 0], resp
    deadline = time.monotonic() + 15
    while True:
        codes = [describe_controllers(controller(c, i)).error_code for i in (1, 2, 3)]
        if codes == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 3 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert codes == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 3
    leaders = {quorum_leader(controller(c, i)) for i in (1, 2, 3)}
    assert any(code == 0 for code, _ in leaders), leaders   # DESCRIBE: allowed


def test_controller_registrations_survive_a_metadata_snapshot():
    import uuid

    from broker.metadata.image import MetadataImage
    from broker.metadata.snapshotter import image_records
    from kproto.metadata.register_controller_record import ControllerEndpoint, RegisterControllerRecord
    image = MetadataImage()
    incarnation = uuid.uuid4()
    image.apply(RegisterControllerRecord(controller_id=2, incarnation_id=incarnation, zk_migration_ready=False,
                                         end_points=[ControllerEndpoint(name="CONTROLLER", host="h", port=9,
                                                                        security_protocol=0)], features=[]))
    again = MetadataImage()
    for record in image_records(image, 21, 1):
        again.apply(record)
    assert again.controllers[2].incarnation_id == incarnation
    assert [(e.name, e.host, e.port) for e in again.controllers[2].end_points] == [("CONTROLLER", "h", 9)]


def _fake_quorum(mv):
    import types

    from broker.metadata.image import MetadataImage
    image = MetadataImage()
    image.features["metadata.version"] = mv
    return types.SimpleNamespace(image=image, listener_security=None, is_active_controller=True,
                                 active_controller_id=1, node_id=1, controller_rpcs={},
                                 k=types.SimpleNamespace(controller_listener_names=["CONTROLLER"]),
                                 broker=types.SimpleNamespace(cluster_id="c"))


def test_controller_registrations_need_metadata_version_3_7():
    """Kafka's MetadataVersion.isControllerRegistrationSupported: 3.7-IV0 (level 15) and later."""
    import types

    import trio

    from broker.quorum.controller_apis import ControllerApis
    header = types.SimpleNamespace(request_api_key=60, request_api_version=1)
    request = DescribeClusterRequest(endpoint_type=2, include_cluster_authorized_operations=False)

    async def main():
        old = ControllerApis(_fake_quorum(14))   # 3.6-IV2
        r = await old.serve(header, request, None)
        assert (r.error_code, r.error_message) == (ErrorCode.UNSUPPORTED_VERSION, "Direct-to-controller "
                                                   "communication is not supported with the current MetadataVersion.")
        reg = await old.handle_registration(ControllerRegistrationRequest(controller_id=2, listeners=[],
                                                                          features=[]))
        assert reg.error_code == ErrorCode.UNSUPPORTED_VERSION
        new = ControllerApis(_fake_quorum(15))
        r = await new.serve(header, request, None)
        assert (r.error_code, r.controller_id, r.brokers) == (0, 1, [])

    trio.run(main)

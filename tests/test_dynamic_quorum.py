"""A dynamic KRaft quorum (KIP-853) of real `kproto serve` processes, set up as a Kafka 3.9 operator
does it: controller.quorum.bootstrap.servers instead of controller.quorum.voters; controller 1
formatted `--standalone`, controllers 2 and 3 `--no-initial-controllers` (observers until
AddRaftVoter makes them voters), or all three `--initial-controllers`. AddRaftVoter /
RemoveRaftVoter are sent with kproto's codecs (tools/dynamic_quorum.py), as
`kafka-metadata-quorum.sh add-controller / remove-controller` sends them."""
import os
import re
import subprocess
import time

import pytest

pytest.importorskip("confluent_kafka")
from tests.test_quorum_cluster import create_until_ok, describe_quorum, metadata, topics_seen  # noqa: E402
from broker.storage.checkpoints import uuid_from_str  # noqa: E402
from tools.dynamic_quorum import DynamicQuorum  # noqa: E402

DUPLICATE_VOTER, VOTER_NOT_FOUND = 126, 127
KAFKA_HOME = os.environ.get("KAFKA_HOME")


def quorum(cluster, via):
    return describe_quorum(f"127.0.0.1:{cluster.ports[via]}")


def wait_for(check, timeout_s, what):
    t0 = time.monotonic()
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() - t0 < timeout_s, f"{what}: not within {timeout_s} s"
        time.sleep(0.1)


def voters_and_observers(cluster, via):
    try:
        q = quorum(cluster, via)
    except Exception:   # noqa: BLE001
        return None
    return q, sorted(v.replica_id for v in q.current_voters), sorted(o.replica_id for o in q.observers)


def add_until_done(cluster, node_id, timeout_s=20, address=None):
    """AddRaftVoter until accepted (the leader refuses a new voter that has not caught up yet)."""
    t0 = time.monotonic()
    while True:
        answer = cluster.add_controller(node_id, address=address)
        if answer[0] == 0 or time.monotonic() - t0 > timeout_s:
            return answer
        time.sleep(0.2)


def test_standalone_then_add_controllers_kill_restart_remove():
    c = DynamicQuorum(3)
    try:
        dirs = c.format_dynamic("standalone")
        c.start()
        create_until_ok(c, "before", [1], 15)
        # controllers 2 and 3 follow the log as observers (they found the leader through the bootstrap servers)
        q, voters, observers = wait_for(lambda: (r := voters_and_observers(c, 1)) and r[2] == [2, 3] and r,
                                        15, "observers 2 and 3")
        assert voters == [1]
        # observers are shown with the directory ids they fetch with (Fetch v17), as Kafka shows them
        assert {o.replica_id: o.replica_directory_id for o in q.observers} == {
            i: uuid_from_str(dirs[i]) for i in (2, 3)}
        assert add_until_done(c, 2) == (0, None)   # on the leader's controller listener
        # on a broker listener that is not the leader's: forwarded to the active controller (Kafka 3.9)
        assert add_until_done(c, 3, address=f"127.0.0.1:{c.ports[2]}") == (0, None)
        assert c.add_controller(2)[0] == DUPLICATE_VOTER   # already a voter: Kafka's refusal
        _q, voters, observers = voters_and_observers(c, 3)
        assert (voters, observers) == ([1, 2, 3], [])
        q = quorum(c, 1)
        assert {v.replica_id: v.replica_directory_id for v in q.current_voters} == {
            i: uuid_from_str(d) for i, d in dirs.items()}
        assert sorted(set(topics_seen(f"127.0.0.1:{c.ports[3]}", ["before"]))) == ["before"]

        # kill -9 the leader of the 3-voter dynamic quorum: the other two elect one, writes go on
        leader = q.leader_id
        c.nodes[leader].kill()
        survivors = [i for i in (1, 2, 3) if i != leader]
        took = create_until_ok(c, "after-kill", survivors, 15)
        print(f"dynamic quorum: kill -9 of leader {leader} -> next CreateTopics committed: {took:.2f} s")
        q = quorum(c, survivors[0])
        assert q.leader_id in survivors and q.leader_epoch > 1

        # a full restart keeps the voter set and the metadata
        c.stop()
        c.start()
        create_until_ok(c, "after-restart", [1, 2, 3], 20)
        for i in (1, 2, 3):
            assert {"before", "after-kill", "after-restart"} <= topics_seen(
                f"127.0.0.1:{c.ports[i]}", ["before", "after-kill", "after-restart"])
        assert voters_and_observers(c, 1)[1] == [1, 2, 3]

        # RemoveRaftVoter: 3 leaves the voter set and goes on as an observer
        assert c.remove_controller(3, dirs[2])[0] == VOTER_NOT_FOUND   # another node's directory id
        assert c.remove_controller(3, address=f"127.0.0.1:{c.ports[3]}") == (0, None)   # (through a broker listener)
        wait_for(lambda: (r := voters_and_observers(c, 1)) and r[1:] == ([1, 2], [3]), 15,
                 "voters [1, 2], observer 3")
        create_until_ok(c, "after-remove", [3], 15)
    finally:
        c.cleanup()


def test_initial_controllers_with_a_broker():
    # 3 controllers formatted --initial-controllers and a broker that knows only the bootstrap servers
    c = DynamicQuorum(4, controllers=3)
    try:
        dirs = c.format_dynamic("initial")
        c.start()
        took = create_until_ok(c, "via-broker", [4], 20)
        print(f"--initial-controllers: first CreateTopics through the broker after start: {took:.2f} s")
        q, voters, observers = wait_for(lambda: (r := voters_and_observers(c, 4)) and r[2] == [4] and r,
                                        15, "broker 4 as an observer")
        assert voters == [1, 2, 3]
        assert {v.replica_id: v.replica_directory_id for v in q.current_voters} == {
            i: uuid_from_str(d) for i, d in dirs.items()}
        assert sorted(metadata(f"127.0.0.1:{c.ports[4]}").brokers) == [4]
        # AddRaftVoter for a voter already there: DUPLICATE_VOTER
        assert c.add_controller(1)[0] == DUPLICATE_VOTER
    finally:
        c.cleanup()


def test_broker_listener_serves_add_and_remove_raft_voter_as_kafka_does_for_a_static_quorum(broker):
    """The embedded single-node default (a static one-voter quorum): ApiVersions advertises AddRaftVoter
    v0-1 and RemoveRaftVoter v0 as Kafka 4.3's brokers do, and both are refused as Kafka's raft client
    refuses them for a static quorum, its checks in Kafka's order (every answer here is what a
    single-node Kafka 3.9 gave to the same requests on its broker listener)."""
    import uuid

    from kproto.messages.add_raft_voter_request import AddRaftVoterRequest, Listener
    from kproto.messages.api_versions_request import ApiVersionsRequest
    from kproto.messages.describe_cluster_request import DescribeClusterRequest
    from kproto.messages.remove_raft_voter_request import RemoveRaftVoterRequest
    from tests.wire_client import WireClient
    with WireClient(broker.bootstrap) as client:
        keys = {k.api_key: (k.min_version, k.max_version)
                for k in client.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                                     3).api_keys}
        assert keys[80] == (0, 1) and keys[81] == (0, 0)   # AddRaftVoter v1: Kafka 4.2+ (AckWhenCommitted)
        cluster_id = client.call(DescribeClusterRequest(), 0).cluster_id
        endpoint = [Listener(name="CONTROLLER", host="127.0.0.1", port=9093)]

        def add(**kw):
            r = client.call(AddRaftVoterRequest(**{"cluster_id": cluster_id, "timeout_ms": 1000, "voter_id": 2,
                                                   "voter_directory_id": uuid.uuid4(), "listeners": endpoint,
                                                   **kw}), 0)
            return r.error_code, r.error_message

        def remove(**kw):
            r = client.call(RemoveRaftVoterRequest(**{"cluster_id": cluster_id, "voter_id": 1,
                                                      "voter_directory_id": uuid.uuid4(), **kw}), 0)
            return r.error_code, r.error_message

        assert add() == (35, "Cluster doesn't support adding voter because the kraft.version feature is 0")
        assert remove() == (35, "Cluster doesn't support removing voter because the kraft.version feature is 0")
        assert add(cluster_id="other") == (104, 'The given id "other" doesn\'t match the cluster id ""')   # (sic)
        assert add(cluster_id=None)[0] == 35
        assert add(voter_directory_id=uuid.UUID(int=0)) == (42, "Add voter request didn't include a valid voter")
        assert remove(voter_directory_id=uuid.UUID(int=0)) == (42, "Remove voter request didn't include a valid voter")
        code, message = add(listeners=[Listener(name="OTHER", host="127.0.0.1", port=9093)])
        assert (code, message) == (42, "Add voter request didn't include the endpoint (Endpoints(endpoints={"
                                       "ListenerName(OTHER)=127.0.0.1/<unresolved>:9093})) for the default "
                                       "listener ListenerName(CONTROLLER)")
        assert add(voter_id=-1) == (42, "Add voter request didn't include a valid voter")


KAFKA = KAFKA_HOME or os.path.expanduser("~/.cache/kproto-ref/kafka")


def _quorum_tool(*args, ok=True):
    p = subprocess.run([os.path.join(KAFKA, "bin", "kafka-metadata-quorum.sh"), *args], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m"})
    assert (p.returncode == 0) == ok, (p.stdout, p.stderr[-2000:])
    return p.stdout if ok else p.stderr


@pytest.mark.skipif(not os.path.exists(os.path.join(KAFKA, "bin", "kafka-metadata-quorum.sh")),
                    reason="no Kafka at KAFKA_HOME (~/.cache/kproto-ref/kafka): runs Kafka's kafka-metadata-quorum.sh")
def test_kafka_metadata_quorum_add_and_remove_controller():
    """Kafka 3.9's own procedure, with its tool: add-controller --command-config <the node's
    server.properties> (node id, directory id from meta.properties, controller endpoint), against a
    controller and through a broker; describe; remove-controller."""
    c = DynamicQuorum(3)
    try:
        dirs = c.format_dynamic("standalone")
        c.start()
        wait_for(lambda: (r := voters_and_observers(c, 1)) and r[2] == [2, 3], 20, "observers 2 and 3")
        status = _quorum_tool("--bootstrap-controller", c.controller_address(1), "describe", "--status")
        assert (f'CurrentVoters:          [{{"id": 1, "directoryId": "{dirs[1]}", "endpoints": '
                f'["CONTROLLER://127.0.0.1:{c.controller_ports[1]}"]}}]') in status, status
        assert (f'CurrentObservers:       [{{"id": 2, "directoryId": "{dirs[2]}"}}, '
                f'{{"id": 3, "directoryId": "{dirs[3]}"}}]') in status, status
        for i, where in ((2, ["--bootstrap-controller", c.controller_address(1)]),
                         (3, ["--bootstrap-server", f"127.0.0.1:{c.ports[2]}"])):
            out = _quorum_tool(*where, "--command-config", c.nodes[i].properties, "add-controller")
            assert out == (f"Added controller {i} with directory id {dirs[i]} and endpoints: "
                           f"CONTROLLER://127.0.0.1:{c.controller_ports[i]}\n"), out
        err = _quorum_tool("--bootstrap-controller", c.controller_address(2), "--command-config",
                           c.nodes[2].properties, "add-controller", ok=False)
        assert "DuplicateVoterException: The voter id for ReplicaKey(id=2, " in err, err[-2000:]
        rows = _quorum_tool("--bootstrap-controller", c.controller_address(3), "describe", "--replication")
        table = [re.split(r"\s+", line.strip()) for line in rows.splitlines()[1:]]
        assert {r[0]: (r[1], r[-1]) for r in table} == {
            "1": (dirs[1], "Leader"), "2": (dirs[2], "Follower"), "3": (dirs[3], "Follower")}, rows
        out = _quorum_tool("--bootstrap-controller", c.controller_address(1), "remove-controller",
                           "--controller-id", "3", "--controller-directory-id", dirs[3])
        assert out == f"Removed  KRaft controller 3 with directory id {dirs[3]}\n", out   # (Kafka's two spaces)
        wait_for(lambda: (r := voters_and_observers(c, 1)) and r[1:] == ([1, 2], [3]), 15, "voters [1, 2]")
        create_until_ok(c, "after", [3], 15)
    finally:
        c.cleanup()

"""A 3-node KRaft cluster of real `kproto serve` processes (combined broker,controller, formatted
with `kproto storage format`, Kafka's default quorum timeouts): metadata changes sent to any node
go through the elected controller, and the cluster survives what a Kafka cluster survives.

One cluster for the module (starting processes is the slow part); the scenarios run in order:
(b) SIGSTOP the leader past the election timeout, (a) kill -9 the active controller, (d) restart
the whole cluster, (c) two of three down."""
import signal
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kproto.messages.describe_quorum_request import DescribeQuorumRequest, PartitionData, TopicData  # noqa: E402
from tests.wire_client import WireClient  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

QUIET = {"log_level": 0, "logger": lambda *a, **k: None}


def admin(address):
    return AdminClient({"bootstrap.servers": address, "socket.connection.setup.timeout.ms": 1000,
                        "reconnect.backoff.max.ms": 200, **QUIET})


def create(address, name, timeout=10.0):
    """CreateTopics through `address`; returns None or the error."""
    client = admin(address)   # kept alive until the answer (a destroyed client fails its futures)
    fs = client.create_topics([NewTopic(name, 1, 1)], operation_timeout=timeout, request_timeout=timeout + 2)
    try:
        fs[name].result(timeout=timeout + 5)
        return None
    except Exception as exc:   # noqa: BLE001
        return exc


def metadata(address):
    return admin(address).list_topics(timeout=5)


def topics_seen(address, names, timeout=5.0):
    """The topics `address` lists, once it lists all of `names` (followers learn commits a fetch later)."""
    t0 = time.monotonic()
    while True:
        topics = set(metadata(address).topics)
        if set(names) <= topics or time.monotonic() - t0 > timeout:
            return topics
        time.sleep(0.05)


def brokers_listed(address, expected, timeout):
    """The broker ids Metadata lists, polled until they are `expected` or the timeout passes."""
    deadline = time.monotonic() + timeout
    while True:
        listed = sorted(metadata(address).brokers)
        if listed == expected or time.monotonic() > deadline:
            return listed
        time.sleep(0.2)


def create_until_ok(cluster, name, nodes, deadline_s):
    """Retry CreateTopics on the given nodes until it succeeds; seconds taken."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        for i in nodes:
            err = create(f"127.0.0.1:{cluster.ports[i]}", name, timeout=5.0)
            if err is None or "already exists" in str(err):
                return time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"{name} not created within {deadline_s} s")


def describe_quorum(address):
    with WireClient(address, timeout=3.0) as c:
        return c.call(DescribeQuorumRequest(topics=[TopicData(topic_name="__cluster_metadata", partitions=[
            PartitionData(partition_index=0)])]), 2).topics[0].partitions[0]


def leader_of(cluster, nodes):
    """The active controller, as DescribeQuorum on the given nodes reports it."""
    for _ in range(100):
        for i in nodes:
            try:
                leader = describe_quorum(f"127.0.0.1:{cluster.ports[i]}").leader_id
            except Exception:   # noqa: BLE001
                continue
            if leader in nodes:
                return leader
        time.sleep(0.1)
    raise AssertionError("no active controller")


@pytest.fixture(scope="module")
def cluster():
    # Kafka's quorum timeouts; a shorter broker session so fencing shows within the test
    c = QuorumCluster(3, settings={"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"})
    c.format()
    c.start()
    yield c
    c.cleanup()


def test_three_node_quorum_survives_leader_loss_restart_and_refuses_writes_without_majority(cluster):
    everyone = [1, 2, 3]
    # every node takes metadata writes (forwarded to the active controller) and lists all brokers
    for i in everyone:
        create_until_ok(cluster, f"before-{i}", [i], 15)
    for i in everyone:
        # (a broker is listed once its first heartbeat unfenced it, as Kafka lists unfenced brokers)
        assert brokers_listed(f"127.0.0.1:{cluster.ports[i]}", everyone, 15) == everyone
        assert {"before-1", "before-2", "before-3"} <= topics_seen(f"127.0.0.1:{cluster.ports[i]}",
                                                                   ["before-1", "before-2", "before-3"])

    # (b) SIGSTOP the leader longer than the election timeout: the others elect a new one; when the
    # old one comes back it follows, and what was committed is all there
    old = leader_of(cluster, everyone)
    cluster.nodes[old].signal(signal.SIGSTOP)
    try:
        others = [i for i in everyone if i != old]
        create_until_ok(cluster, "while-stopped", others, 10)
        new = leader_of(cluster, others)
        assert new != old
    finally:
        cluster.nodes[old].signal(signal.SIGCONT)
    time.sleep(1.0)
    create_until_ok(cluster, "after-cont", [old], 10)
    want = ["before-1", "while-stopped", "after-cont"]
    assert set(want) <= topics_seen(f"127.0.0.1:{cluster.ports[old]}", want)

    # (a) kill -9 the active controller: a new one is elected and CreateTopics succeeds within 3 s
    victim = leader_of(cluster, everyone)
    cluster.nodes[victim].kill()
    survivors = [i for i in everyone if i != victim]
    took = create_until_ok(cluster, "after-kill", survivors, 10)
    print(f"kill -9 of the active controller -> next CreateTopics committed: {took:.2f} s")
    # the followers notice after controller.quorum.fetch.timeout.ms (2 s), then elect within the
    # election timeout (1 s); a split vote costs one more round. The kill loop of
    # tools/bench/quorum_cluster.py reports the distribution (the 3 s target is measured there); this
    # test bounds it loosely (two split votes on a busy 2-core machine) since speed is a bench figure
    assert took < 10.0
    want = ["before-1", "before-2", "before-3", "while-stopped", "after-cont", "after-kill"]
    assert set(want) <= topics_seen(f"127.0.0.1:{cluster.ports[survivors[0]]}", want)
    # the dead broker is fenced after broker.session.timeout.ms: Metadata stops listing it
    t0 = time.monotonic()
    while victim in metadata(f"127.0.0.1:{cluster.ports[survivors[0]]}").brokers:
        assert time.monotonic() - t0 < 10, "the dead broker was never fenced"
        time.sleep(0.2)
    cluster.nodes[victim].start()
    create_until_ok(cluster, "rejoined", [victim], 10)
    t0 = time.monotonic()
    while sorted(metadata(f"127.0.0.1:{cluster.ports[survivors[0]]}").brokers) != everyone:
        assert time.monotonic() - t0 < 10, "the restarted broker did not come back"
        time.sleep(0.2)

    # (d) restart the whole cluster (kill -9 all): the same metadata comes back on every node
    cluster.stop()
    cluster.start()
    create_until_ok(cluster, "after-restart", everyone, 15)
    for i in everyone:
        want = ["before-1", "before-2", "before-3", "while-stopped", "after-cont", "after-kill",
                "rejoined", "after-restart"]
        topics = topics_seen(f"127.0.0.1:{cluster.ports[i]}", want)
        assert set(want) <= topics, (i, topics)

    # (c) two of three down: metadata writes fail cleanly (REQUEST_TIMED_OUT), nothing half-applied;
    # reads of existing metadata still work
    alive = leader_of(cluster, everyone)
    for i in everyone:
        if i != alive:
            cluster.nodes[i].kill()
    address = f"127.0.0.1:{cluster.ports[alive]}"
    err = create(address, "no-majority", timeout=3.0)
    assert err is not None
    assert err.args[0].name() in ("REQUEST_TIMED_OUT", "NOT_CONTROLLER"), err
    md = metadata(address)
    assert "after-restart" in md.topics
    time.sleep(3.5)   # the leader resigns (no fetch from a majority): nothing uncommitted remains
    assert "no-majority" not in metadata(address).topics


def test_three_controllers_and_two_brokers_brokers_follow_as_observers():
    c = QuorumCluster(5, controllers=3)
    try:
        c.format()
        c.start()
        create_until_ok(c, "on-broker", [4], 40)
        t0 = time.monotonic()
        while True:
            md = metadata(f"127.0.0.1:{c.ports[5]}")
            if sorted(md.brokers) == [4, 5] and "on-broker" in md.topics:
                break
            assert time.monotonic() - t0 < 10, (sorted(md.brokers), sorted(md.topics))
            time.sleep(0.1)
        q = describe_quorum(f"127.0.0.1:{c.ports[4]}")
        assert q.leader_id in (1, 2, 3)
        assert sorted(v.replica_id for v in q.current_voters) == [1, 2, 3]
        assert sorted(o.replica_id for o in q.observers) == [4, 5]
        assert all(v.log_end_offset > 0 for v in q.current_voters) and q.high_watermark > 0
        assert all(o.last_fetch_timestamp > 1_000_000_000_000 for o in q.observers)   # wall-clock ms
        # AddRaftVoter on a broker listener goes to the active controller, whose static quorum
        # (kraft.version 0) refuses it as Kafka 3.9's does
        import uuid

        from kproto.messages.add_raft_voter_request import AddRaftVoterRequest, Listener
        with WireClient(f"127.0.0.1:{c.ports[5]}", timeout=10.0) as client:
            r = client.call(AddRaftVoterRequest(cluster_id=c.cluster_id, timeout_ms=5000, voter_id=6,
                                                voter_directory_id=uuid.uuid4(),
                                                listeners=[Listener(name="CONTROLLER", host="127.0.0.1", port=1)]), 0)
        assert (r.error_code, r.error_message) == (
            35, "Cluster doesn't support adding voter because the kraft.version feature is 0")
    finally:
        c.cleanup()

"""Broker registration of real `kproto serve` processes, as Kafka 3.9's controller does it
(ClusterControlManager.registerBroker: DUPLICATE_BROKER_REGISTRATION while the registered
incarnation's session is valid; a new incarnation registers fenced and is unfenced once caught up):

- a second process started with the node.id of a live broker is refused: the first stays
  registered (Metadata lists it with its own address throughout), the second logs one warning
  naming the duplicate id, and registers once the first is killed -9 and its session expired;
- a node killed -9 and restarted at once is fenced, and its leaderships moved, before it is back in
  Metadata; every partition always has a leader that Metadata lists; meanwhile the restarted
  process does not act as the leader its old registration still is (NOT_LEADER_OR_FOLLOWER).

Short sessions (2 s; 12 s for the restart, whose new process must be up within it), so each
test runs in about 20-30 s."""
from __future__ import annotations

import os
import threading
import time

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

from tests.wire_client import WireClient  # noqa: E402
from broker.launch.process import free_port  # noqa: E402
from tools.cluster_client import QUIET, create_topic, wait_until  # noqa: E402
from tools.quorum_cluster import QuorumCluster, QuorumNode  # noqa: E402

SESSION_MS = 2000
SETTINGS = {"broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": str(SESSION_MS),
            "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "default.replication.factor": "3", "min.insync.replicas": "2",
            # fencing by the 2 s session alone: with kproto's failure detection the killed node is
            # fenced within 0.3 s, before its restarted process is up, and the window this file
            # checks (the old registration still leading, the new process answering) never opens
            "kproto.broker.failure.detection.ms": "-1"}
DUPLICATE_LINE = "DUPLICATE_BROKER_REGISTRATION"


def _metadata(host: str, port: int, topic: str | None = None):
    """(brokers {id: port}, {partition: leader}, {partition: leader epoch}) as a Metadata v12
    answer says."""
    from kproto.messages.metadata_request import MetadataRequest
    topics = None if topic is None else [MetadataRequest.MetadataRequestTopic(name=topic)]
    with WireClient(f"{host}:{port}", timeout=5) as c:
        resp = c.call(MetadataRequest(topics=topics, allow_auto_topic_creation=False), 12)
    brokers = {b.node_id: b.port for b in resp.brokers}
    leaders, epochs = {}, {}
    for t in resp.topics:
        if t.name == topic and t.error_code == 0:
            leaders = {p.partition_index: p.leader_id for p in t.partitions}
            epochs = {p.partition_index: p.leader_epoch for p in t.partitions}
    return brokers, leaders, epochs


# `kproto serve` whose modules are imported before it is told to go (the file named by its first
# argument appears): what a loaded machine spends starting a Python process is mostly imports
_PREWARMED = """
import os, sys, time
import broker.broker, broker.config, broker.quorum.startup
from broker.launch.cli import main
go = sys.argv[1]
open(go + ".imported", "w").close()
while not os.path.exists(go):
    time.sleep(0.01)
main(sys.argv[2:])
"""


def _kill_and_restart_at_once(cluster: QuorumCluster, node_id: int) -> QuorumNode:
    """kill -9 node `node_id` and start it again at once, as a supervisor does: the new process
    (its own session, so its own scheduler autogroup) has imported kproto before the old one
    is killed. The window this file checks, the restarted process up while its old
    registration still leads, is the session minus the restart time; at load 35-45 a cold
    start took 14-20 s, longer than the session, and the window never opened."""
    old = cluster.nodes[node_id]
    new = QuorumNode(node_id, old.properties, old.data_dir, old.port, old.controller_port, old.log_level)
    new.new_session = True
    go = os.path.join(cluster.base_dir, f"go{node_id}-{time.monotonic_ns()}")
    cold = new.command()
    new.command = lambda: [cold[0], "-c", _PREWARMED, go] + cold[3:]   # cold: python -m broker.launch.cli ...
    starting = threading.Thread(target=new.start, args=(60,), daemon=True)
    starting.start()
    wait_until(lambda: os.path.exists(go + ".imported"), 60, "the new process imported kproto",
               detail=lambda: "".join(new.stderr_lines[-10:]))
    old.kill()
    open(go, "w").close()
    starting.join(60)
    assert new.ready_line, "the restarted process did not start: " + "".join(new.stderr_lines[-10:])
    return new


def _isrs(host: str, port: int, topic: str) -> dict[int, list[int]]:
    """{partition: ISR} as a Metadata v12 answer says."""
    from kproto.messages.metadata_request import MetadataRequest
    with WireClient(f"{host}:{port}", timeout=5) as c:
        resp = c.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                      allow_auto_topic_creation=False), 12)
    return {p.partition_index: list(p.isr_nodes) for t in resp.topics if t.name == topic and t.error_code == 0
            for p in t.partitions}


def _isrs_full(host: str, port: int, topic: str, partitions: int) -> bool:
    isrs = _isrs(host, port, topic)
    return len(isrs) == partitions and all(len(isr) == 3 for isr in isrs.values())


def _duplicate(cluster: QuorumCluster, node_id: int) -> QuorumNode:
    """A second process with node `node_id`'s node.id: its own listener port and log dir."""
    node = cluster.nodes[node_id]
    port = free_port()
    data = os.path.join(cluster.base_dir, f"duplicate{node_id}")
    props = os.path.join(cluster.base_dir, f"duplicate{node_id}.properties")
    with open(node.properties) as f:
        text = f.read()
    text = text.replace(f":{cluster.ports[node_id]}", f":{port}").replace(f"log.dirs={node.data_dir}\n",
                                                                          f"log.dirs={data}\n")
    with open(props, "w") as f:
        f.write(text)
    dup = QuorumNode(node_id, props, data, port, None, "WARNING")
    cluster._format(dup)
    return dup


def test_a_second_process_with_a_live_node_id_is_refused_until_the_first_is_gone():
    with QuorumCluster(3, settings=SETTINGS) as c:
        first = c.add_broker(4)
        host, other = c.host, c.ports[1]
        wait_until(lambda: _metadata(host, other)[0].get(4) == first.port, 60, "broker 4 registered")
        dup = _duplicate(c, 4)
        dup.start(60)
        try:
            wait_until(lambda: any(DUPLICATE_LINE in line for line in dup.stderr_lines), 30,
                       "the duplicate's warning", detail=lambda: "".join(dup.stderr_lines[-10:]))
            # for longer than a session, the first stays registered with its own address
            end = time.monotonic() + SESSION_MS / 1000 * 1.5
            while time.monotonic() < end:
                assert _metadata(host, other)[0].get(4) == first.port, "the first process lost its registration"
                time.sleep(0.1)
            lines = [line for line in dup.stderr_lines if DUPLICATE_LINE in line]
            assert len(lines) == 1 and "node.id 4" in lines[0], lines
            first.kill()
            # the first's session expires (it is fenced), then the second registers
            wait_until(lambda: _metadata(host, other)[0].get(4) == dup.port, 60,
                       "the second process registered", detail=lambda: "".join(dup.stderr_lines[-10:]))
        finally:
            dup.kill()


@pytest.mark.long
def test_a_node_killed_and_restarted_at_once_is_fenced_before_it_is_back():
    # a 12 s session: the restarted process must be up and asked while its old registration still
    # leads; pre-imported, it still took 6 s to start and reach the quorum at load 45
    with QuorumCluster(3, settings={**SETTINGS, "broker.session.timeout.ms": "12000"}) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap, **QUIET})
        topic = "restarts"
        host = c.host
        # every broker unfenced before the topic is placed: created while only the first is, all
        # six would be led by it with the others outside their ISR (Kafka's ISR at creation is
        # the unfenced replicas), and killing it would leave them leaderless, as Kafka would
        wait_until(lambda: set(_metadata(host, c.ports[1])[0]) == set(c.nodes), 60, "every broker unfenced")
        wait_until(lambda: create_topic(admin, topic, partitions=6), 60, "the topic created")
        # and every follower in the ISR before the kill: a partition whose ISR is its leader
        # alone has no leader once that one is fenced (Kafka 3.9 without unclean election)
        wait_until(lambda: _isrs_full(host, c.ports[1], topic, 6), 60, "every partition with an ISR of 3",
                   detail=lambda: str(_isrs(host, c.ports[1], topic)))
        # the victim leads something, and a survivor is asked meanwhile
        _, leaders, epochs_before = _metadata(host, c.ports[1], topic)
        victim = max(set(leaders.values()), key=list(leaders.values()).count)
        mine = [i for i, v in leaders.items() if v == victim]
        watcher = next(i for i in c.nodes if i != victim)
        c.nodes[victim] = _kill_and_restart_at_once(c, victim)
        seen = []   # (listed, leads anything)
        refused = []   # Produce answers of the restarted process while its old registration leads
        moved = False   # every partition the victim led has another leader, at a new leader epoch
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                brokers, leaders, epochs = _metadata(host, c.ports[watcher], topic)
            except OSError:
                time.sleep(0.05)
                continue
            # every partition has a leader, and Metadata lists it
            assert leaders and all(v in brokers for v in leaders.values()), (brokers, leaders)
            seen.append((victim in brokers, victim in leaders.values()))
            # only the fencing of the old registration moves these leaderships (the victim was
            # their leader, and a broker back at once would keep them at the same epoch)
            moved = moved or all(leaders[i] != victim and epochs[i] > epochs_before[i] for i in mine)
            led = [i for i, v in leaders.items() if v == victim]
            if led and not moved and not any(not listed for listed, _ in seen):
                # the restarted process, not registered yet, does not act as that leader
                code = _produce_code(host, c.ports[victim], topic, led[0])
                assert code != 0, "the restarted process accepted a write before it registered"
                refused.append(code)
            if seen[-1][0] and moved:
                break
            time.sleep(0.05)
        # (the fenced moment itself may fall between two polls: a restarted broker is unfenced
        # within tens of ms once registered, so moved leaderships are what shows it was fenced)
        assert moved, f"the restarted node was never fenced: it re-registered over its live session ({seen[-5:]})"
        assert all(not leads for listed, leads in seen if not listed), "fenced with its leaderships not moved"
        assert seen[-1][0], "the restarted node is not back in Metadata"
        assert 6 in refused, refused   # NOT_LEADER_OR_FOLLOWER while its old registration was the leader


def _produce_code(host: str, port: int, topic: str, partition: int) -> int:
    from kproto import records as rec
    from tests.wire_client import produce
    try:
        with WireClient(f"{host}:{port}", timeout=5) as c:
            return produce(c, topic, rec.build_batch([(b"k", b"v", [], int(time.time() * 1000))]),
                           partition, acks=1).error_code
    except OSError:
        return -1   # not listening yet

"""Leadership on a 3-node cluster of real `kproto serve` processes: a broker stopped with SIGTERM
(controlled shutdown) gives up its leaderships and shows as an offline replica; ElectLeaders
answers per partition as Kafka 3.9 does; when the broker returns, auto.leader.rebalance.enable
gives its partitions back to it (leader.imbalance.check.interval.seconds=1 here). With
KAFKA_HOME, Kafka's own kafka-topics.sh --under-replicated-partitions / --unavailable-partitions
and kafka-leader-election.sh run against it too."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

from kproto.errors import ErrorCode  # noqa: E402
from kproto.messages.elect_leaders_request import ElectLeadersRequest, TopicPartitions  # noqa: E402
from tests.wire_client import WireClient  # noqa: E402
from tests.wire_client import metadata as wire_metadata  # noqa: E402
from tools.cluster_client import QUIET, create_topic, wait_brokers_unfenced, wait_until  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

KAFKA_HOME = os.environ.get("KAFKA_HOME")
SETTINGS = {"broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "3000",
            "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "default.replication.factor": "3",
            "min.insync.replicas": "2", "leader.imbalance.check.interval.seconds": "1"}
TOPIC = "led"
E = ErrorCode


def _parts(bootstrap):
    with WireClient(bootstrap) as c:
        return {p.partition_index: p for p in wire_metadata(c, TOPIC, version=12).partitions}


def _elect(bootstrap, election_type, partitions, version=2):
    tps = None if partitions is None else [TopicPartitions(topic=t, partitions=ps) for t, ps in partitions]
    with WireClient(bootstrap, timeout=60) as c:
        resp = c.call(ElectLeadersRequest(election_type=election_type, topic_partitions=tps, timeout_ms=30000),
                      version)
    return resp.error_code, {(r.topic, p.partition_id): p.error_code
                             for r in resp.replica_election_results for p in r.partition_result}


def _tool(name, bootstrap, *args):
    proc = subprocess.run([os.path.join(KAFKA_HOME, "bin", name), "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture
def cluster():
    with QuorumCluster(3, settings=SETTINGS) as c:
        yield c


def test_leaders_move_away_on_sigterm_and_back_when_the_broker_returns(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
    # every broker unfenced first: a broker registers fenced (Kafka's placement uses fenced brokers
    # too, but never as leaders, so a topic created earlier is not led by its preferred replicas)
    wait_brokers_unfenced(admin, cluster.broker_count)
    wait_until(lambda: create_topic(admin, TOPIC, 3), 60, "the topic created")
    boot = cluster.nodes[1].bootstrap
    wait_until(lambda: len(_parts(boot)) == 3 and all(len(p.isr_nodes) == 3 for p in _parts(boot).values()), 30,
               "ISRs of 3")
    parts = _parts(boot)
    assert all(p.leader_id == p.replica_nodes[0] for p in parts.values())   # created led by preferred
    index, p0 = next((i, p) for i, p in parts.items() if p.replica_nodes[0] != 1)
    victim = p0.replica_nodes[0]
    others = [i for i, p in parts.items() if p.replica_nodes[0] != victim]

    code, results = _elect(boot, 0, [(TOPIC, [index, 99]), ("nope", [0])])
    assert code == 0
    assert results == {(TOPIC, index): E.ELECTION_NOT_NEEDED, (TOPIC, 99): E.UNKNOWN_TOPIC_OR_PARTITION,
                       ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}

    node = cluster.nodes[victim]
    node.signal(signal.SIGTERM)
    assert node.proc.wait(60) == 0
    p = _parts(boot)[index]
    assert p.leader_id not in (victim, -1) and victim not in p.isr_nodes and p.leader_epoch > p0.leader_epoch, p
    wait_until(lambda: victim in _parts(boot)[index].offline_replicas, 10, "an offline replica")

    # the preferred replica is down: it cannot lead; the others need no election; a led partition
    # needs no unclean election
    code, results = _elect(boot, 0, [(TOPIC, sorted(parts))])
    assert results == {(TOPIC, i): (E.PREFERRED_LEADER_NOT_AVAILABLE if i == index else E.ELECTION_NOT_NEEDED)
                       for i in parts}, results
    code, results = _elect(boot, 1, [(TOPIC, [index])])
    assert results == {(TOPIC, index): E.ELECTION_NOT_NEEDED}
    code, results = _elect(boot, 0, None)   # every partition: only those that needed an election
    assert results == {(TOPIC, index): E.PREFERRED_LEADER_NOT_AVAILABLE}, results

    if KAFKA_HOME:
        rc, out = _tool("kafka-topics.sh", boot, "--describe", "--topic", TOPIC, "--under-replicated-partitions")
        assert rc == 0 and len([ln for ln in out.splitlines() if "Partition:" in ln]) == 3, out
        rc, out = _tool("kafka-topics.sh", boot, "--describe", "--topic", TOPIC, "--unavailable-partitions")
        assert rc == 0 and "Partition:" not in out, out
        rc, out = _tool("kafka-leader-election.sh", boot, "--election-type", "preferred",
                        "--all-topic-partitions")
        assert f"{TOPIC}-{index}" in out and "PreferredLeaderNotAvailable" in out.replace(" ", ""), out

    node.start()
    # back in the ISR, then leader of its partition again (auto.leader.rebalance.enable)
    wait_until(lambda: _parts(boot)[index].leader_id == victim, 60, "the preferred leader back")
    after = _parts(boot)
    assert victim in after[index].isr_nodes and not after[index].offline_replicas
    assert all(after[i].leader_id == after[i].replica_nodes[0] for i in others)
    code, results = _elect(boot, 0, None)
    assert code == 0 and results == {}, results

    # the whole cluster stopped at once (as `kproto cluster` does): nobody waits for long for a
    # controller that is going too
    started = time.monotonic()
    for n in cluster.nodes.values():
        n.signal(signal.SIGTERM)
    assert [n.proc.wait(60) for n in cluster.nodes.values()] == [0, 0, 0]
    assert time.monotonic() - started < 20, time.monotonic() - started

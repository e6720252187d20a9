"""Controlled shutdown with real `kproto serve` processes (a 3-node KRaft cluster of combined
broker,controller nodes): SIGTERM to the leader of a replicated partition while an idempotent
acks=all producer writes at full speed. Before the process exits the controller has moved the
leadership to another ISR member and taken it out of the ISR, so the produce pause is short
(no wait for broker.session.timeout.ms, as after kill -9); every acknowledged record is read back
exactly once, in order.

KPROTO_SHUTDOWN_ROUNDS=N repeats the SIGTERM (1 in CI); KPROTO_SHUTDOWN_KILL_TOO=1 also does as
many kill -9 rounds and prints both pauses (p50) side by side."""
from __future__ import annotations

import os
import signal
import statistics
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

from kproto import records as rec  # noqa: E402
from kproto.errors import ErrorCode  # noqa: E402
from tests.wire_client import WireClient, produce_req  # noqa: E402
from tests.wire_client import metadata as wire_metadata  # noqa: E402
from tools.cluster_client import (QUIET, AckedProducer, assert_exactly_once_in_order, create_topic,  # noqa: E402
                                  longest_ack_gap, partition_state, read_partition, wait_until, wait_brokers_unfenced)
from tools.quorum_cluster import QuorumCluster  # noqa: E402

ROUNDS = int(os.environ.get("KPROTO_SHUTDOWN_ROUNDS", "1"))
KILL_TOO = os.environ.get("KPROTO_SHUTDOWN_KILL_TOO") == "1"
SESSION_MS = 8000
SETTINGS = {"broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": str(SESSION_MS),
            "replica.lag.time.max.ms": "5000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "offsets.topic.replication.factor": "3",
            "default.replication.factor": "3", "min.insync.replicas": "2"}
TOPIC = "shutdown"


def _wire_partition(bootstrap):
    """The partition as Metadata v12 answers it (leader epoch and offline replicas included)."""
    with WireClient(bootstrap) as c:
        return wire_metadata(c, TOPIC, version=12).partitions[0]


@pytest.fixture
def cluster():
    with QuorumCluster(3, settings=SETTINGS) as c:
        yield c


def test_sigterm_of_a_leader_moves_leadership_before_it_exits(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
    wait_brokers_unfenced(admin, cluster.broker_count)   # leaders spread over all brokers
    wait_until(lambda: create_topic(admin, TOPIC), 60, "the topic created")
    wait_until(lambda: len(partition_state(admin, TOPIC)[2]) == 3, 30, "an ISR of 3")

    producer = AckedProducer(cluster.bootstrap, TOPIC).start()   # as fast as the client goes
    acked, errors = producer.acked, producer.errors
    pauses = {"sigterm": [], "kill -9": []}
    try:
        plan = ["sigterm"] * ROUNDS + (["kill -9"] * ROUNDS if KILL_TOO else [])
        for how in plan:
            producer.wait_for_acks(2000, 60)
            leader, _replicas, _isr = partition_state(admin, TOPIC)
            node = cluster.nodes[leader]
            epoch_before = _wire_partition(cluster.nodes[leader % 3 + 1].bootstrap).leader_epoch
            at = time.monotonic()
            if how == "sigterm":
                node.signal(signal.SIGTERM)
                rc = node.proc.wait(60)
                exited = time.monotonic() - at
                # before it went, the leadership moved and it left the ISR: a survivor says so at once
                survivor = cluster.nodes[leader % 3 + 1].bootstrap
                p = _wire_partition(survivor)
                assert rc == 0, (rc, node.stderr_lines[-20:])
                assert p.leader_id not in (leader, -1) and leader not in p.isr_nodes, (leader, p)
                assert p.leader_epoch > epoch_before, (epoch_before, p)
                assert exited < SESSION_MS / 1000, exited   # it did not wait to be fenced
                # once it is gone it is fenced: an offline replica
                wait_until(lambda: leader in _wire_partition(survivor).offline_replicas, 10, "an offline replica")
                # the other survivor sends a producer on to the new leader (KIP-951)
                follower = next(i for i in cluster.nodes if i not in (leader, p.leader_id))
                with WireClient(cluster.nodes[follower].bootstrap) as c:
                    resp = c.call(produce_req(TOPIC, rec.build_batch([(None, b"x", [], 0)])), 10)
                pr = resp.responses[0].partition_responses[0]
                assert pr.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, pr
                assert (pr.current_leader.leader_id, pr.current_leader.leader_epoch) == (p.leader_id, p.leader_epoch)
                assert [(e.node_id, e.port) for e in resp.node_endpoints] == [
                    (p.leader_id, cluster.nodes[p.leader_id].port)]
            else:
                node.kill()
                wait_until(lambda: partition_state(admin, TOPIC)[0] not in (leader, -1), 60, "a new leader")
            producer.wait_for_acks(500, 60, "acks after the leader left")
            pauses[how].append(longest_ack_gap(producer.ack_times, at, time.monotonic()))
            node.start()
            wait_until(lambda: len(partition_state(admin, TOPIC)[2]) == 3, 60, "the old leader back in the ISR")
    finally:
        producer.stop(90)
    assert not errors, errors[:3]

    values = read_partition(cluster.bootstrap, TOPIC, len(acked), 120)
    assert_exactly_once_in_order(values, acked)
    line = ", ".join(f"{how} pause p50 {statistics.median(v):.3f} s (n={len(v)}, max {max(v):.3f} s)"
                     for how, v in pauses.items() if v)
    print(f"\n{len(acked)} records acknowledged and read back once, in order; {line}")
    # the pause is the leadership move, not broker.session.timeout.ms
    assert max(pauses["sigterm"]) < SESSION_MS / 1000, pauses

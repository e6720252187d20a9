"""A large leadership change reconciled in slices of the event loop (issue 26,
broker/partitions/sliced_reconcile.py), on a 3-node cluster of real `kproto serve` processes.

Node V leads 400 RF=3 partitions and is killed -9; the controller fences it and moves all 400
leaderships to node H in one metadata batch. H applies the batch whole (its Metadata names it
leader of all 400 at once) but becomes leader of them a slice at a time; KPROTO_TEST_HOLD_ROLES
holds the slices after the first, so the window is open for as long as the test needs. Inside
it H answers ApiVersions and Metadata (its loop serves), and a produce to each partition is
either accepted (its role reconciled) or NOT_LEADER_OR_FOLLOWER, the retriable error Kafka's
broker gives for a partition it does not lead yet: some of each. Before, the 400 roles changed
in the step that applied the batch, and every produce was accepted at once. Once the hold is
lifted, every partition accepts."""
from __future__ import annotations

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

from kproto.errors import ErrorCode  # noqa: E402
from kproto.messages.api_versions_request import ApiVersionsRequest  # noqa: E402
from kproto.messages.produce_request import ProduceRequest  # noqa: E402
from kproto.records import build_batch  # noqa: E402
from tests.test_paused_controller import _controller  # noqa: E402
from tests.wire_client import PRODUCE_V, WireClient, metadata  # noqa: E402
from tools.cluster_client import QUIET, create_topic, wait_brokers_unfenced, wait_until  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 400   # a bit over three slices (SLICE_PARTITIONS 128)
SETTINGS = {"broker.session.timeout.ms": "30000", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100"}


def _leaders(c: WireClient) -> list[int]:
    return [p.leader_id for p in sorted(metadata(c, "roles").partitions, key=lambda p: p.partition_index)]


def _produce_each(c: WireClient, acks: int = 1) -> list[int]:
    """One record to every partition in one request: the error of each, in order."""
    batch = build_batch([(None, b"x")])
    req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name="roles", partition_data=[
            ProduceRequest.PartitionProduceData(index=i, records=batch) for i in range(PARTITIONS)])])
    answers = c.call(req, PRODUCE_V).responses[0].partition_responses
    return [p.error_code for p in sorted(answers, key=lambda p: p.index)]


def test_a_large_leadership_change_is_reconciled_in_slices_while_the_node_serves(tmp_path, monkeypatch):
    hold = tmp_path / "hold-roles"
    monkeypatch.setenv("KPROTO_TEST_HOLD_ROLES", str(hold))   # (inherited by the nodes)
    with QuorumCluster(3, settings=SETTINGS) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        wait_brokers_unfenced(admin, 3)
        controller = _controller(cluster)
        assert controller > 0
        victim, heir = [i for i in cluster.nodes if i != controller]
        wait_until(lambda: create_topic(admin, "roles", PARTITIONS,
                                        replica_assignment=[[victim, heir, controller]] * PARTITIONS),
                   30, "topic created")
        with WireClient(cluster.nodes[heir].bootstrap) as c:
            wait_until(lambda: _leaders(c) == [victim] * PARTITIONS, 30, f"node {victim} leads every partition")
        with WireClient(cluster.nodes[victim].bootstrap) as v:
            # acks=all: the heir and the controller follow every partition (their logs are made)
            wait_until(lambda: set(_produce_each(v, acks=-1)) == {ErrorCode.NONE}, 60,
                       "a record in every partition on all three replicas")
        with WireClient(cluster.nodes[heir].bootstrap) as c:
            hold.touch()
            cluster.nodes[victim].kill()
            wait_until(lambda: _leaders(c) == [heir] * PARTITIONS, 20, f"node {heir} named leader of every partition")
            # the loop serves while the roles are held half-way
            assert c.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3).error_code == 0
            errors = _produce_each(c)
            assert set(errors) <= {ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER}, errors
            accepted = errors.count(ErrorCode.NONE)
            assert 0 < accepted < PARTITIONS, f"{accepted} of {PARTITIONS} partitions led while the slices are held"
            hold.unlink()
            wait_until(lambda: set(_produce_each(c)) == {ErrorCode.NONE}, 20, "every partition led once released")

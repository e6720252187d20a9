"""Authorization of the reassignment APIs as Kafka's: AlterPartitionReassignments
needs ALTER on the cluster, ListPartitionReassignments DESCRIBE; without them the
answer is CLUSTER_AUTHORIZATION_FAILED with Kafka's message (a broker with
StandardAuthorizer, SASL/PLAIN principals; fixtures of test_security_acl)."""
from __future__ import annotations

from kproto.messages.alter_partition_reassignments_request import (
    AlterPartitionReassignmentsRequest, ReassignablePartition, ReassignableTopic)
from kproto.messages.list_partition_reassignments_request import ListPartitionReassignmentsRequest

from broker.security.acls import CLUSTER
from tests.test_security_acl import CLUSTER_AUTH, acl_broker, create_topic, grant, login, pki  # noqa: F401


def _alter(c):
    req = AlterPartitionReassignmentsRequest(timeout_ms=5000, topics=[ReassignableTopic(
        name="authz-moved", partitions=[ReassignablePartition(partition_index=0, replicas=[1])])])
    return c.call(req, 0)


def _list(c):
    return c.call(ListPartitionReassignmentsRequest(timeout_ms=5000, topics=None), 0)


def test_alter_needs_cluster_alter_and_list_needs_cluster_describe(acl_broker):  # noqa: F811
    create_topic(acl_broker.bootstrap, "authz-moved")
    with login(acl_broker, "bob") as c:
        r = _alter(c)
        assert (r.error_code, r.error_message) == (CLUSTER_AUTH, "Cluster authorization failed.")
        r = _list(c)
        assert (r.error_code, r.error_message) == (CLUSTER_AUTH, "Cluster authorization failed.")
    grant(acl_broker, CLUSTER, "kafka-cluster", "User:bob", "DESCRIBE")
    with login(acl_broker, "bob") as c:
        assert _list(c).error_code == 0
        assert _alter(c).error_code == CLUSTER_AUTH
    grant(acl_broker, CLUSTER, "kafka-cluster", "User:bob", "ALTER")
    with login(acl_broker, "bob") as c:
        r = _alter(c)
        assert r.error_code == 0 and r.responses[0].partitions[0].error_code == 0   # [1]: already so

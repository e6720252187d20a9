"""The ACL authorizer (Kafka's StandardAuthorizer semantics): the rules
themselves, CreateAcls/DescribeAcls/DeleteAcls through a real admin client,
ACLs surviving a restart, principals from SASL and from client
certificates, and an authorization matrix: for every API a principal
without the ACL gets Kafka's error and one with it gets through."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from kproto import records as rec
from kproto.messages.add_offsets_to_txn_request import AddOffsetsToTxnRequest
from kproto.messages.add_partitions_to_txn_request import AddPartitionsToTxnRequest
from kproto.messages.alter_user_scram_credentials_request import AlterUserScramCredentialsRequest
from kproto.messages.create_acls_request import CreateAclsRequest
from kproto.messages.create_partitions_request import CreatePartitionsRequest
from kproto.messages.create_topics_request import CreateTopicsRequest
from kproto.messages.delete_groups_request import DeleteGroupsRequest
from kproto.messages.delete_topics_request import DeleteTopicsRequest
from kproto.messages.describe_acls_request import DescribeAclsRequest
from kproto.messages.describe_configs_request import DescribeConfigsRequest
from kproto.messages.describe_groups_request import DescribeGroupsRequest
from kproto.messages.describe_log_dirs_request import DescribeLogDirsRequest
from kproto.messages.describe_producers_request import DescribeProducersRequest
from kproto.messages.describe_transactions_request import DescribeTransactionsRequest
from kproto.messages.end_txn_request import EndTxnRequest
from kproto.messages.find_coordinator_request import FindCoordinatorRequest
from kproto.messages.heartbeat_request import HeartbeatRequest
from kproto.messages.incremental_alter_configs_request import IncrementalAlterConfigsRequest
from kproto.messages.init_producer_id_request import InitProducerIdRequest
from kproto.messages.join_group_request import JoinGroupRequest
from kproto.messages.list_groups_request import ListGroupsRequest
from kproto.messages.metadata_request import MetadataRequest
from kproto.messages.offset_commit_request import OffsetCommitRequest
from kproto.messages.offset_fetch_request import OffsetFetchRequest
from kproto.messages.offset_for_leader_epoch_request import OffsetForLeaderEpochRequest
from kproto.messages.sasl_authenticate_request import SaslAuthenticateRequest
from kproto.messages.sasl_handshake_request import SaslHandshakeRequest
from kproto.messages.txn_offset_commit_request import TxnOffsetCommitRequest
from broker.security.acls import (ALLOW, CLUSTER, DENY, GROUP, LITERAL, OPS, PREFIXED, TOPIC, TRANSACTIONAL_ID,
                                  Acl, Authorizer)
from tests.security_certs import Pki
from tests.security_helpers import SecureBroker, TlsWireClient, tls_context
from tests.wire_client import WireClient, delete_records, fetch, list_offset, metadata, produce

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH, TXN_AUTH = 29, 30, 31, 53


# -- the rules ---------------------------------------------------------------------------------

class _Config:
    def __init__(self, **static):
        self.static_configs = static


class _Image:
    def __init__(self, acls):
        self.acls = {uuid.uuid4(): a for a in acls}


def _authorizer(acls, **static):
    return Authorizer(_Config(**static), _Image(acls))


def _acl(rtype, name, principal, op, perm=ALLOW, pattern=LITERAL, host="*"):
    return Acl(rtype, name, pattern, principal, host, OPS[op], perm)


def test_rules_allow_deny_and_implied_operations():
    a = _authorizer([_acl(TOPIC, "orders", "User:alice", "READ"),
                     _acl(TOPIC, "orders", "User:alice", "WRITE", DENY),
                     _acl(TOPIC, "pay-", "User:bob", "ALL", pattern=PREFIXED),
                     _acl(TOPIC, "pay-secret", "User:*", "ALL", DENY),
                     _acl(TOPIC, "*", "User:carol", "DESCRIBE", host="10.0.0.1"),
                     _acl(TOPIC, "cfg", "User:dave", "ALTER_CONFIGS")])
    ok = lambda p, op, name, host="127.0.0.1": a.authorize(p, host, OPS[op], TOPIC, name)  # noqa: E731
    assert ok("User:alice", "READ", "orders") and ok("User:alice", "DESCRIBE", "orders")
    assert not ok("User:alice", "WRITE", "orders")              # deny wins
    assert ok("User:bob", "WRITE", "pay-eu") and not ok("User:bob", "WRITE", "pays")
    assert not ok("User:bob", "READ", "pay-secret")             # a wildcard-principal DENY
    assert ok("User:carol", "DESCRIBE", "anything", "10.0.0.1") and not ok("User:carol", "DESCRIBE", "x")
    assert ok("User:dave", "DESCRIBE_CONFIGS", "cfg") and not ok("User:dave", "DESCRIBE", "cfg")
    assert not ok("User:alice", "READ", "unknown")              # no ACL: denied by default
    assert a.authorized_operations("User:alice", "h", TOPIC, "orders") == (1 << OPS["READ"]) | (1 << OPS["DESCRIBE"])


def test_rules_super_users_and_allow_everyone_if_no_acl_found():
    a = _authorizer([_acl(TOPIC, "guarded", "User:alice", "READ")],
                    **{"super.users": "User:root;User:ops", "allow.everyone.if.no.acl.found": "true"})
    assert a.authorize("User:ops", "h", OPS["ALTER"], CLUSTER, "kafka-cluster")
    assert a.authorize("User:bob", "h", OPS["READ"], TOPIC, "open")          # no ACL on it at all
    assert not a.authorize("User:bob", "h", OPS["READ"], TOPIC, "guarded")   # ACLs exist, none for bob


# -- a broker with an authorizer ---------------------------------------------------------------

@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory, pki):
    b = SecureBroker(str(tmp_path_factory.mktemp("data")), pki, listeners=("SASL_PLAINTEXT", "SSL"), settings={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",   # the PLAINTEXT listener sets the test up
        "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=([^,]*).*$/$1@$2/L,DEFAULT",
        "auto.create.topics.enable": "false",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": MATRIX_JAAS,
    })
    b.start()
    yield b
    b.stop()


def login(broker, user: str) -> WireClient:
    c = WireClient(broker.address("SASL_PLAINTEXT"))
    assert c.call(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    password = PASSWORDS.get(user, "pw")
    resp = c.call(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()), 2)
    assert resp.error_code == 0
    return c


def grant(broker, rtype, name, principal, op, perm=ALLOW, pattern=LITERAL):
    C = CreateAclsRequest.AclCreation
    with WireClient(broker.bootstrap) as c:
        resp = c.call(CreateAclsRequest(creations=[C(resource_type=rtype, resource_name=name,
                                                     resource_pattern_type=pattern, principal=principal, host="*",
                                                     operation=OPS[op], permission_type=perm)]), 3)
    assert resp.results[0].error_code == 0, resp.results[0].error_message


def create_topic(bootstrap: str, name: str) -> None:
    R = CreateTopicsRequest
    with WireClient(bootstrap) as c:
        code = c.call(R(topics=[R.CreatableTopic(name=name, num_partitions=1, replication_factor=1)],
                        timeout_ms=5000), 7).topics[0].error_code
    assert code in (0, 36), code


def one_record(value=b"v"):
    return rec.build_batch([(None, value, [], int(time.time() * 1000))])


# Each case: (name, [ACLs bob needs], call(client, topic, group, txn) -> error code, refused code)
def _produce(c, t, g, x):
    return produce(c, t, one_record()).error_code


def _fetch(c, t, g, x):
    return fetch(c, t, 0).responses[0].partitions[0].error_code


def _list_offsets(c, t, g, x):
    return list_offset(c, t, -1).error_code


def _metadata(c, t, g, x):
    return metadata(c, t).error_code


def _offset_for_leader_epoch(c, t, g, x):
    R = OffsetForLeaderEpochRequest
    resp = c.call(R(replica_id=-1, topics=[R.OffsetForLeaderTopic(topic=t, partitions=[
        R.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)])]), 4)
    return resp.topics[0].partitions[0].error_code


def _delete_records(c, t, g, x):
    return delete_records(c, t, 0).error_code


def _describe_producers(c, t, g, x):
    R = DescribeProducersRequest
    return c.call(R(topics=[R.TopicRequest(name=t, partition_indexes=[0])]), 0).topics[0].partitions[0].error_code


def _create_topics(c, t, g, x):
    R = CreateTopicsRequest
    return c.call(R(topics=[R.CreatableTopic(name=t + "-new", num_partitions=1, replication_factor=1)],
                    timeout_ms=5000), 7).topics[0].error_code


def _delete_topics(c, t, g, x):
    return c.call(DeleteTopicsRequest(topic_names=[t], timeout_ms=5000), 5).responses[0].error_code


def _create_partitions(c, t, g, x):
    R = CreatePartitionsRequest
    return c.call(R(topics=[R.CreatePartitionsTopic(name=t, count=2, assignments=None)], timeout_ms=5000),
                  3).results[0].error_code


def _describe_topic_configs(c, t, g, x):
    R = DescribeConfigsRequest
    return c.call(R(resources=[R.DescribeConfigsResource(resource_type=2, resource_name=t,
                                                         configuration_keys=None)]), 4).results[0].error_code


def _describe_broker_configs(c, t, g, x):
    R = DescribeConfigsRequest
    return c.call(R(resources=[R.DescribeConfigsResource(resource_type=4, resource_name="1",
                                                         configuration_keys=None)]), 4).results[0].error_code


def _alter_topic_configs(c, t, g, x):
    R = IncrementalAlterConfigsRequest
    return c.call(R(resources=[R.AlterConfigsResource(resource_type=2, resource_name=t, configs=[
        R.AlterableConfig(name="retention.ms", config_operation=0, value="100000")])]), 1).responses[0].error_code


def _find_group_coordinator(c, t, g, x):
    return c.call(FindCoordinatorRequest(key=g, key_type=0), 3).error_code


def _find_txn_coordinator(c, t, g, x):
    return c.call(FindCoordinatorRequest(key=x, key_type=1), 3).error_code


def _join_group(c, t, g, x):
    R = JoinGroupRequest
    return c.call(R(group_id=g, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
                    protocol_type="consumer", protocols=[R.JoinGroupRequestProtocol(name="range", metadata=b"")]),
                  5).error_code


def _heartbeat(c, t, g, x):
    return c.call(HeartbeatRequest(group_id=g, generation_id=1, member_id="m"), 4).error_code


def _offset_commit(c, t, g, x):
    R = OffsetCommitRequest
    resp = c.call(R(group_id=g, generation_id_or_member_epoch=-1, member_id="", topics=[
        R.OffsetCommitRequestTopic(name=t, partitions=[R.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=0)])]), 8)
    return resp.topics[0].partitions[0].error_code


def _offset_fetch(c, t, g, x):
    R = OffsetFetchRequest
    return c.call(R(group_id=g, topics=[R.OffsetFetchRequestTopic(name=t, partition_indexes=[0])]), 7).error_code


def _describe_groups(c, t, g, x):
    return c.call(DescribeGroupsRequest(groups=[g]), 5).groups[0].error_code


def _delete_groups(c, t, g, x):
    return c.call(DeleteGroupsRequest(groups_names=[g]), 2).results[0].error_code


def _init_txn_producer(c, t, g, x):
    return c.call(InitProducerIdRequest(transactional_id=x, transaction_timeout_ms=10000), 4).error_code


def _init_idempotent_producer(c, t, g, x):
    return c.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=10000), 4).error_code


def _add_partitions_to_txn(c, t, g, x):
    R = AddPartitionsToTxnRequest
    resp = c.call(R(v3_and_below_transactional_id=x, v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
                    v3_and_below_topics=[R.AddPartitionsToTxnTopic(name=t, partitions=[0])]), 3)
    return resp.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def _add_offsets_to_txn(c, t, g, x):
    return c.call(AddOffsetsToTxnRequest(transactional_id=x, producer_id=1, producer_epoch=0, group_id=g),
                  3).error_code


def _txn_offset_commit(c, t, g, x):
    R = TxnOffsetCommitRequest
    resp = c.call(R(transactional_id=x, group_id=g, producer_id=1, producer_epoch=0, topics=[
        R.TxnOffsetCommitRequestTopic(name=t, partitions=[R.TxnOffsetCommitRequestPartition(
            partition_index=0, committed_offset=0)])]), 3)
    return resp.topics[0].partitions[0].error_code


def _end_txn(c, t, g, x):
    return c.call(EndTxnRequest(transactional_id=x, producer_id=1, producer_epoch=0, committed=True), 3).error_code


def _describe_transactions(c, t, g, x):
    return c.call(DescribeTransactionsRequest(transactional_ids=[x]), 0).transaction_states[0].error_code


def _create_acls(c, t, g, x):
    C = CreateAclsRequest.AclCreation
    return c.call(CreateAclsRequest(creations=[C(resource_type=TOPIC, resource_name=t, resource_pattern_type=LITERAL,
                                                 principal="User:bob", host="*", operation=OPS["READ"],
                                                 permission_type=ALLOW)]), 3).results[0].error_code


def _describe_acls(c, t, g, x):
    return c.call(DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                      principal_filter=None, host_filter=None, operation=1, permission_type=1),
                  3).error_code


def _describe_log_dirs(c, t, g, x):
    return c.call(DescribeLogDirsRequest(topics=None), 4).error_code


def _alter_scram(c, t, g, x):
    R = AlterUserScramCredentialsRequest
    return c.call(R(deletions=[], upsertions=[R.ScramCredentialUpsertion(
        name="u-" + t[-8:], mechanism=1, iterations=4096, salt=b"salt", salted_password=b"x" * 32)]),
        0).results[0].error_code


def _consumer_group_heartbeat(c, t, g, x):
    from kproto.messages.consumer_group_heartbeat_request import ConsumerGroupHeartbeatRequest as R
    return c.call(R(group_id=g, member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout_ms=30000,
                    subscribed_topic_names=[t], server_assignor=None, topic_partitions=[]), 1).error_code


def _consumer_group_describe(c, t, g, x):
    from kproto.messages.consumer_group_describe_request import ConsumerGroupDescribeRequest as R
    return c.call(R(group_ids=[g]), 0).groups[0].error_code


def _describe_topic_partitions(c, t, g, x):
    from kproto.messages.describe_topic_partitions_request import DescribeTopicPartitionsRequest as R
    return c.call(R(topics=[R.TopicRequest(name=t)], response_partition_limit=100), 0).topics[0].error_code


def _elect_leaders(c, t, g, x):
    from kproto.messages.elect_leaders_request import ElectLeadersRequest as R, TopicPartitions
    resp = c.call(R(election_type=0, topic_partitions=[TopicPartitions(topic=t, partitions=[0])]), 2)
    code = resp.replica_election_results[0].partition_result[0].error_code
    assert resp.error_code in (0, code), (resp.error_code, code)   # refused: the same code at both levels
    return code


def _alter_share_offsets(c, t, g, x):
    from kproto.messages.alter_share_group_offsets_request import AlterShareGroupOffsetsRequest as A
    from kproto.messages.find_coordinator_request import FindCoordinatorRequest
    for _ in range(50):               # until the coordinator and __share_group_state are up (14, 15, 16)
        c.call(FindCoordinatorRequest(key_type=0, coordinator_keys=[g]), 4)
        r = c.call(A(group_id=g, topics=[A.AlterShareGroupOffsetsRequestTopic(
            topic_name=t, partitions=[A.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0)])]),
            0)
        if r.error_code not in (14, 15, 16):
            break
        time.sleep(0.2)
    return r.error_code or r.responses[0].partitions[0].error_code


def _delete_share_offsets(c, t, g, x):
    """Made by an AlterShareGroupOffsets first (with the topic refused: an empty share group all the
    same), the share group's offsets of t deleted."""
    from kproto.messages.delete_share_group_offsets_request import DeleteShareGroupOffsetsRequest as D
    _alter_share_offsets(c, t, g, x)
    r = c.call(D(group_id=g, topics=[D.DeleteShareGroupOffsetsRequestTopic(topic_name=t)]), 0)
    return r.error_code or r.responses[0].error_code


def _read_share_state_summary(c, t, g, x):
    """An inter-broker share-state RPC (87): CLUSTER_ACTION, else every partition refused."""
    from kproto.messages.read_share_group_state_summary_request import ReadShareGroupStateSummaryRequest as R
    return c.call(R(group_id=g, topics=[R.ReadStateSummaryData(topic_id=uuid.uuid4(), partitions=[
        R.PartitionData(partition=0, leader_epoch=-1)])]), 1).results[0].partitions[0].error_code


def _find_share_coordinator(c, t, g, x):
    key = f"{g}:{uuid.uuid4().hex[:22]}:0"
    return c.call(FindCoordinatorRequest(key_type=2, coordinator_keys=[key]), 6).coordinators[0].error_code


T, G, X, C = TOPIC, GROUP, TRANSACTIONAL_ID, CLUSTER
# (name, ACLs bob holds up front, the call, Kafka's refusal, the ACL that lets him through)
MATRIX = [
    ("produce", [], _produce, TOPIC_AUTH, (T, "WRITE")),
    ("fetch", [], _fetch, TOPIC_AUTH, (T, "READ")),
    ("list_offsets", [], _list_offsets, TOPIC_AUTH, (T, "DESCRIBE")),
    ("metadata", [], _metadata, TOPIC_AUTH, (T, "DESCRIBE")),
    ("offset_for_leader_epoch", [], _offset_for_leader_epoch, TOPIC_AUTH, (T, "DESCRIBE")),
    ("delete_records", [], _delete_records, TOPIC_AUTH, (T, "DELETE")),
    ("describe_producers", [], _describe_producers, TOPIC_AUTH, (T, "READ")),
    ("create_topics", [], _create_topics, TOPIC_AUTH, (C, "CREATE")),
    ("delete_topics", [], _delete_topics, TOPIC_AUTH, (T, "DELETE")),
    ("create_partitions", [], _create_partitions, TOPIC_AUTH, (T, "ALTER")),
    ("describe_topic_configs", [], _describe_topic_configs, TOPIC_AUTH, (T, "DESCRIBE_CONFIGS")),
    ("describe_broker_configs", [], _describe_broker_configs, CLUSTER_AUTH, (C, "DESCRIBE_CONFIGS")),
    ("alter_topic_configs", [], _alter_topic_configs, TOPIC_AUTH, (T, "ALTER_CONFIGS")),
    ("find_group_coordinator", [], _find_group_coordinator, GROUP_AUTH, (G, "DESCRIBE")),
    ("find_txn_coordinator", [], _find_txn_coordinator, TXN_AUTH, (X, "DESCRIBE")),
    ("join_group", [], _join_group, GROUP_AUTH, (G, "READ")),
    ("heartbeat", [], _heartbeat, GROUP_AUTH, (G, "READ")),
    ("offset_commit_group", [(T, "READ")], _offset_commit, GROUP_AUTH, (G, "READ")),
    ("offset_commit_topic", [(G, "READ")], _offset_commit, TOPIC_AUTH, (T, "READ")),
    ("offset_fetch", [], _offset_fetch, GROUP_AUTH, (G, "DESCRIBE")),
    ("describe_groups", [], _describe_groups, GROUP_AUTH, (G, "DESCRIBE")),
    ("delete_groups", [], _delete_groups, GROUP_AUTH, (G, "DELETE")),
    ("init_transactional_producer", [], _init_txn_producer, TXN_AUTH, (X, "WRITE")),
    ("init_idempotent_producer", [], _init_idempotent_producer, CLUSTER_AUTH, (C, "IDEMPOTENT_WRITE")),
    ("add_partitions_to_txn_txn", [(T, "WRITE")], _add_partitions_to_txn, TXN_AUTH, (X, "WRITE")),
    ("add_partitions_to_txn_topic", [(X, "WRITE")], _add_partitions_to_txn, TOPIC_AUTH, (T, "WRITE")),
    ("add_offsets_to_txn", [(X, "WRITE")], _add_offsets_to_txn, GROUP_AUTH, (G, "READ")),
    ("txn_offset_commit", [(G, "READ"), (T, "READ")], _txn_offset_commit, TXN_AUTH, (X, "WRITE")),
    ("end_txn", [], _end_txn, TXN_AUTH, (X, "WRITE")),
    ("describe_transactions", [], _describe_transactions, TXN_AUTH, (X, "DESCRIBE")),
    ("create_acls", [], _create_acls, CLUSTER_AUTH, (C, "ALTER")),
    ("describe_acls", [], _describe_acls, CLUSTER_AUTH, (C, "DESCRIBE")),
    ("describe_log_dirs", [], _describe_log_dirs, CLUSTER_AUTH, (C, "DESCRIBE")),
    ("alter_user_scram_credentials", [], _alter_scram, CLUSTER_AUTH, (C, "ALTER")),
    ("consumer_group_heartbeat", [(T, "DESCRIBE")], _consumer_group_heartbeat, GROUP_AUTH, (G, "READ")),
    ("consumer_group_heartbeat_topic", [(G, "READ")], _consumer_group_heartbeat, TOPIC_AUTH, (T, "DESCRIBE")),
    ("consumer_group_describe", [], _consumer_group_describe, GROUP_AUTH, (G, "DESCRIBE")),
    ("describe_topic_partitions", [], _describe_topic_partitions, TOPIC_AUTH, (T, "DESCRIBE")),
    ("elect_leaders", [], _elect_leaders, CLUSTER_AUTH, (C, "ALTER")),
    ("alter_share_group_offsets", [(T, "READ")], _alter_share_offsets, GROUP_AUTH, (G, "READ")),
    ("alter_share_group_offsets_topic", [(G, "READ")], _alter_share_offsets, TOPIC_AUTH, (T, "READ")),
    ("delete_share_group_offsets", [(T, "READ"), (G, "READ")], _delete_share_offsets, GROUP_AUTH, (G, "DELETE")),
    ("read_share_group_state_summary", [], _read_share_state_summary, CLUSTER_AUTH, (C, "CLUSTER_ACTION")),
    ("find_share_coordinator", [], _find_share_coordinator, CLUSTER_AUTH, (C, "CLUSTER_ACTION")),
    ("delete_share_group_offsets_topic", [(G, "READ"), (G, "DELETE")], _delete_share_offsets, TOPIC_AUTH,
     (T, "READ")),
]


MATRIX_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
               + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + " "
               + " ".join(f'user_u-{c[0]}="pw"' for c in MATRIX) + ";")


@pytest.mark.parametrize("case", MATRIX, ids=[c[0] for c in MATRIX])
def test_authorization_matrix(acl_broker, case):
    name, granted, call, refused, (rtype, op) = case
    topic, group, txn = f"acl-{name}", f"grp-{name}", f"txn-{name}"
    create_topic(acl_broker.bootstrap, topic)
    names = {T: topic, G: group, X: txn, C: "kafka-cluster"}
    user = "u-" + name     # a principal of its own: no other case's ACL helps it
    for held_type, held_op in granted:
        grant(acl_broker, held_type, names[held_type], "User:" + user, held_op)
    with login(acl_broker, user) as c:
        assert call(c, topic, group, txn) == refused
    grant(acl_broker, rtype, names[rtype], "User:" + user, op)
    with login(acl_broker, user) as c:
        code = call(c, topic, group, txn)
    assert code != refused, f"{name}: still refused ({code}) with {op} on {rtype}"
    assert code not in (TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH, TXN_AUTH), f"{name}: {code}"


def test_metadata_hides_topics_the_principal_may_not_describe(acl_broker):
    create_topic(acl_broker.bootstrap, "visible-to-alice")
    create_topic(acl_broker.bootstrap, "hidden-from-alice")
    grant(acl_broker, T, "visible-", "User:alice", "READ", pattern=PREFIXED)
    with login(acl_broker, "alice") as c:
        resp = c.call(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                      include_topic_authorized_operations=True), 12)
    names = {t.name: t.topic_authorized_operations for t in resp.topics}
    assert "visible-to-alice" in names and "hidden-from-alice" not in names
    assert names["visible-to-alice"] == (1 << OPS["READ"]) | (1 << OPS["DESCRIBE"])


def test_list_groups_shows_only_describable_groups(acl_broker):
    with WireClient(acl_broker.bootstrap) as c:
        for g in ("lg-mine", "lg-other"):
            _join_group(c, None, g, None)
    grant(acl_broker, G, "lg-mine", "User:alice", "DESCRIBE")
    with login(acl_broker, "alice") as c:
        groups = {g.group_id for g in c.call(ListGroupsRequest(), 4).groups}
    assert "lg-mine" in groups and "lg-other" not in groups


def test_deny_acl_beats_allow_for_a_real_client(acl_broker, topic_name):
    from confluent_kafka import Producer
    create_topic(acl_broker.bootstrap, topic_name)
    grant(acl_broker, T, topic_name, "User:alice", "ALL")
    grant(acl_broker, T, topic_name, "User:alice", "WRITE", DENY)
    p = Producer({"bootstrap.servers": acl_broker.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret",
                  "enable.idempotence": False})
    errors = []
    p.produce(topic_name, b"x", on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert errors and errors[0] is not None and errors[0].code() == TOPIC_AUTH


def test_admin_client_creates_describes_and_deletes_acls(acl_broker):
    admin = AdminClient({"bootstrap.servers": acl_broker.bootstrap})
    b1 = AclBinding(ResourceType.TOPIC, "adm-", ResourcePatternType.PREFIXED, "User:carol", "*",
                    AclOperation.READ, AclPermissionType.ALLOW)
    b2 = AclBinding(ResourceType.GROUP, "adm-g", ResourcePatternType.LITERAL, "User:carol", "*",
                    AclOperation.READ, AclPermissionType.ALLOW)
    for fut in admin.create_acls([b1, b2], request_timeout=10).values():
        fut.result(timeout=15)
    flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:carol", None,
                           AclOperation.ANY, AclPermissionType.ANY)
    found = admin.describe_acls(flt, request_timeout=10).result(timeout=15)
    assert sorted(b.name for b in found) == ["adm-", "adm-g"]
    match = AclBindingFilter(ResourceType.TOPIC, "adm-orders", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert [b.name for b in admin.describe_acls(match, request_timeout=10).result(timeout=15)] == ["adm-"]
    deleted = admin.delete_acls([flt], request_timeout=10)[flt].result(timeout=15)
    assert len(deleted) == 2
    assert admin.describe_acls(flt, request_timeout=10).result(timeout=15) == []
    bad = AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL, "User:x", "*",
                     AclOperation.ALTER, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as exc:
        admin.create_acls([bad], request_timeout=10)[bad].result(timeout=15)
    assert exc.value.args[0].code() == 42   # INVALID_REQUEST


def test_principal_from_the_client_certificate(acl_broker, pki):
    create_topic(acl_broker.bootstrap, "cert-topic")
    cert = pki.pem_files("eve", "Eve", ou="Payments")
    with TlsWireClient(acl_broker.address("SSL"), tls_context(pki, cert)) as c:
        assert metadata(c, "cert-topic").error_code == TOPIC_AUTH
    grant(acl_broker, T, "cert-topic", "User:eve@payments", "DESCRIBE")   # the mapping rule's result
    with TlsWireClient(acl_broker.address("SSL"), tls_context(pki, cert)) as c:
        assert metadata(c, "cert-topic").error_code == 0


def test_rules_for_apis_served_by_other_modules():
    """ConsumerGroupHeartbeat, DescribeTopicPartitions and cluster admin APIs, run through the
    authorizer with a stand-in handler (their handlers live elsewhere)."""
    import asyncio
    from types import SimpleNamespace

    from kproto.api import ApiKey
    from kproto.messages.consumer_group_heartbeat_request import ConsumerGroupHeartbeatRequest
    from kproto.messages.describe_topic_partitions_request import DescribeTopicPartitionsRequest as DTP
    from kproto.messages.describe_topic_partitions_response import DescribeTopicPartitionsResponse as DTPR
    from kproto.messages.elect_leaders_request import ElectLeadersRequest
    from broker.security import authz

    a = _authorizer([_acl(GROUP, "g1", "User:alice", "READ"), _acl(TOPIC, "t1", "User:alice", "DESCRIBE")])
    session = SimpleNamespace(principal="User:alice", peer_host="127.0.0.1")
    served = []

    def ctx(key):
        return SimpleNamespace(api_key=int(key), api_version=0, conn=SimpleNamespace(session=session, peer=None))

    async def handler(c, req):
        served.append(req)
        if c.api_key == ApiKey.DESCRIBE_TOPIC_PARTITIONS:
            return DTPR(topics=[DTPR.DescribeTopicPartitionsResponseTopic(name=t.name, partitions=[])
                                for t in req.topics])
        return "served"

    def run(key, req):
        return asyncio.run(authz.run(a, ctx(key), req, handler))

    hb = ConsumerGroupHeartbeatRequest(group_id="g2", member_id="m", member_epoch=0, subscribed_topic_names=["t1"])
    assert run(ApiKey.CONSUMER_GROUP_HEARTBEAT, hb).error_code == GROUP_AUTH
    hb.group_id, hb.subscribed_topic_names = "g1", ["t1", "t2"]
    assert run(ApiKey.CONSUMER_GROUP_HEARTBEAT, hb).error_code == TOPIC_AUTH
    hb.subscribed_topic_names = ["t1"]
    assert run(ApiKey.CONSUMER_GROUP_HEARTBEAT, hb) == "served"
    resp = run(ApiKey.DESCRIBE_TOPIC_PARTITIONS, DTP(topics=[DTP.TopicRequest(name="t1"), DTP.TopicRequest(name="t2")],
                                                     response_partition_limit=10))
    assert [(t.name, t.error_code) for t in resp.topics] == [("t1", 0), ("t2", TOPIC_AUTH)]
    assert run(ApiKey.ELECT_LEADERS, ElectLeadersRequest()).error_code == CLUSTER_AUTH


def test_every_served_api_has_an_authorization_rule():
    """A new handler without a rule would be served only to cluster operators: make that a choice."""
    from broker.handlers import HANDLERS, load_all
    from broker.security import authz
    from kproto.api import ApiKey
    load_all()
    missing = [ApiKey(k).name for k in sorted(HANDLERS) if k not in authz.WRAPPERS and k not in authz.UNCHECKED]
    assert missing == []

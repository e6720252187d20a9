"""Inter-broker and controller traffic over SASL_SSL, with an authorizer, on three real
`kproto serve` processes (combined broker,controller nodes): every listener is SASL_SSL
(PLAIN), `allow.everyone.if.no.acl.found=false`, `super.users=User:broker`. Raft between the
controllers, broker registration and heartbeats, Envelope forwarding, replica fetchers and
AlterPartition all log in as User:broker over TLS (broker/security/outbound.py).

- topics with RF=3 reach an ISR of 3, acks=all produces succeed, kill -9 of a leader fails
  over and every acknowledged record is read back;
- CreateTopics sent to every node (two of them forward it to the active controller in an
  Envelope carrying the client's principal): refused for a user without the ACL, allowed for
  one with CREATE on the cluster;
- a broker whose inter-broker password is wrong cannot replicate: the ISR of the partitions it
  follows shrinks without it and its log says why (an authentication error)."""
from __future__ import annotations

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("cryptography")
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,  # noqa: E402
                                   NewTopic, ResourcePatternType, ResourceType)

from tools.certs import Pki  # noqa: E402
from tools.cluster_client import QUIET, create_topic, wait_until, wait_brokers_unfenced  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
USERS = 'user_broker="broker-secret" user_alice="alice-secret" user_bob="bob-secret"'
FAST = {"broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "3000",
        "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
        "replica.fetch.backoff.ms": "100", "offsets.topic.replication.factor": "3",
        "default.replication.factor": "3", "min.insync.replicas": "2"}


def _jaas(password: str = "broker-secret") -> str:
    return f'{PLAIN} required username="broker" password="{password}" {USERS};'


def _settings(pki) -> dict:
    server = pki.pem_files("node", "kproto-node", server=True)
    return {
        **FAST,
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": server["combined"],
        "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.ca_path,
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN", "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": _jaas(),
        "listener.name.controller.plain.sasl.jaas.config": _jaas(),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false", "super.users": "User:broker",
    }


def _client(pki, bootstrap: str, user: str, password: str) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": password, "ssl.ca.location": pki.ca_path, **QUIET}


def _partitions(admin, topic):
    md = admin.list_topics(topic, timeout=5)
    return {i: (p.leader, sorted(p.replicas), sorted(p.isrs)) for i, p in md.topics[topic].partitions.items()}


def _error_code(admin, topic):
    """CreateTopics' error code for topic (0 when created)."""
    try:
        admin.create_topics([NewTopic(topic, 1, 3)], request_timeout=15)[topic].result(20)
        return 0
    except confluent_kafka.KafkaException as exc:
        return exc.args[0].code()


def _outbound(pki, user, password):
    from broker.config import BrokerConfig
    from broker.security.outbound import Outbound
    config = BrokerConfig.load(None, {
        "log.dirs": "/tmp/unused", "listeners": "PLAINTEXT://127.0.0.1:1", "ssl.truststore.type": "PEM",
        "ssl.truststore.location": pki.ca_path,
        "listener.name.controller.plain.sasl.jaas.config":
            f'{PLAIN} required username="{user}" password="{password}";'})
    return Outbound(config, "CONTROLLER", "SASL_SSL", "PLAIN", "test")


def _exchange(pki, cluster, login, request, version, password=None):
    """[(controller node, answer or None when the connection closed)] for request sent to every
    controller listener, logged in as `login`."""
    import trio

    from kproto import api
    out = _outbound(pki, login, password or f"{login}-secret")

    async def one(port):
        stream = await out.connect("127.0.0.1", port, "test")
        async with stream:
            await stream.send_all(api.encode_request(request, version, 5, "test"))
            data = b""
            with trio.move_on_after(10):
                while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        return None
                    data += chunk
            return api.decode_response(data[4:], request.API_KEY, version)[1] if data else None
    return [(i, trio.run(one, port)) for i, port in cluster.controller_ports.items()]


def _envelope(pki, cluster, principal, topic, login="broker"):
    """CreateTopics in an Envelope naming `principal`: the active controller's topic error codes,
    or the Envelope's own error code as a string when it was refused."""
    from kproto import api
    from kproto.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
    from kproto.messages.envelope_request import EnvelopeRequest

    from broker.quorum.secure import serialize_principal
    inner = CreateTopicsRequest(topics=[CreatableTopic(name=topic, num_partitions=1, replication_factor=3,
                                                       assignments=[], configs=[])],
                                timeout_ms=15000, validate_only=False)
    envelope = EnvelopeRequest(request_data=api.encode_request(inner, 7, 9, "client")[4:],
                               request_principal=serialize_principal(principal),
                               client_host_address=b"\x7f\x00\x00\x01")
    for _node, resp in _exchange(pki, cluster, login, envelope, 0):
        if resp is None:
            continue
        if resp.error_code:
            return str(resp.error_code)
        codes = [t.error_code for t in api.decode_response(resp.response_data, 19, 7)[1].topics]
        if codes != [41]:   # NOT_CONTROLLER: the active controller is another node
            return codes
    return None


def _vote_refused(pki, cluster) -> bool:
    """A Vote from a user without CLUSTER_ACTION: every controller answers CLUSTER_AUTHORIZATION_FAILED."""
    from kproto.messages.vote_request import VoteRequest
    vote = VoteRequest(cluster_id=cluster.cluster_id, topics=[])
    return all(resp is not None and resp.error_code == 31 for _node, resp in _exchange(pki, cluster, "alice", vote, 0))


@pytest.fixture
def pki(tmp_path):
    return Pki(str(tmp_path / "pki"))


def test_sasl_ssl_cluster_replicates_authorizes_and_fails_over(pki):
    cluster = QuorumCluster(3, settings=_settings(pki), listener="SASL_SSL")
    try:
        cluster.format()
        cluster.start(timeout=90)
        broker = AdminClient(_client(pki, cluster.bootstrap, "broker", "broker-secret"))
        wait_until(lambda: create_topic(broker, "secure", 1), 60, "a topic created by the super user")
        wait_until(lambda: _partitions(broker, "secure")[0][2] == [1, 2, 3], 30,
                   "an ISR of 3 (replica fetchers log in)")

        # forwarded CreateTopics: refused without an ACL, allowed with CREATE on the cluster, whichever
        # node receives it (two of the three forward it to the active controller in an Envelope)
        acl = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:bob", "*",
                         AclOperation.CREATE, AclPermissionType.ALLOW)
        broker.create_acls([acl], request_timeout=15)[acl].result(20)
        for i, port in cluster.ports.items():
            one = f"127.0.0.1:{port}"
            alice = AdminClient(_client(pki, one, "alice", "alice-secret"))
            assert _error_code(alice, f"alice-{i}") == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
            bob = AdminClient(_client(pki, one, "bob", "bob-secret"))
            wait_until(lambda: _error_code(bob, f"bob-{i}") in (0, confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS),
                       30, f"bob's topic created through node {i}")

        # at the controller: an Envelope from a broker is handled as the principal it names; from
        # anyone else it is refused (CLUSTER_ACTION), and so are raft requests
        assert _envelope(pki, cluster, "User:alice", "via-envelope-a") == [29]   # TOPIC_AUTHORIZATION_FAILED
        assert _envelope(pki, cluster, "User:bob", "via-envelope-b") == [0]
        assert _envelope(pki, cluster, "User:broker", "via-envelope-c", login="alice") == "31"
        assert _vote_refused(pki, cluster)
        from kproto.messages.remove_raft_voter_request import RemoveRaftVoterRequest
        remove = RemoveRaftVoterRequest(cluster_id=cluster.cluster_id, voter_id=1)
        assert all(r is not None and r.error_code == 31   # an operator's API: ALTER on the cluster
                   for _n, r in _exchange(pki, cluster, "alice", remove, 0))
        from broker.security.outbound import AuthenticationFailed
        from kproto.messages.vote_request import VoteRequest
        with pytest.raises(AuthenticationFailed, match="Invalid username or password"):
            _exchange(pki, cluster, "broker", VoteRequest(cluster_id=cluster.cluster_id, topics=[]), 0, "wrong")

        producer = confluent_kafka.Producer({**_client(pki, cluster.bootstrap, "broker", "broker-secret"),
                                             "acks": "all", "enable.idempotence": True, "linger.ms": 5})
        acked, errors = [], []

        def produce(values):
            for v in values:
                producer.produce("secure", v, on_delivery=lambda err, msg: (errors if err else acked).append(
                    err or msg.value()))
            assert producer.flush(60) == 0

        produce([f"before-{n}".encode() for n in range(200)])
        assert not errors and len(acked) == 200

        leader = _partitions(broker, "secure")[0][0]
        cluster.nodes[leader].kill()
        others = ",".join(f"127.0.0.1:{p}" for i, p in cluster.ports.items() if i != leader)
        survivor = AdminClient(_client(pki, others, "broker", "broker-secret"))
        wait_until(lambda: _partitions(survivor, "secure")[0][0] not in (leader, -1), 30, "a new leader")
        produce([f"after-{n}".encode() for n in range(200)])
        assert not errors and len(acked) == 400

        consumer = confluent_kafka.Consumer({**_client(pki, others, "broker", "broker-secret"),
                                             "group.id": "reader", "auto.offset.reset": "earliest"})
        consumer.assign([confluent_kafka.TopicPartition("secure", 0, 0)])
        seen = []
        deadline = time.monotonic() + 60
        while len(seen) < 400 and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is not None and not m.error():
                seen.append(m.value())
        consumer.close()
        assert seen == acked
    finally:
        cluster.cleanup()


SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_a_wrong_inter_broker_password_stops_replication_visibly(pki):
    # the brokers replicate with SCRAM-SHA-256, whose credentials `storage format --add-scram` put
    # in the bootstrap metadata; node 3 logs in to the others' broker listeners with a wrong password
    # (its controller login and the accounts it accepts are right): it registers, but cannot fetch
    settings = {**_settings(pki), "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
                "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
                    f'{SCRAM_LOGIN} required username="broker" password="broker-secret";'}
    wrong = {"listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
             f'{SCRAM_LOGIN} required username="broker" password="wrong";'}
    cluster = QuorumCluster(3, settings=settings, listener="SASL_SSL", node_settings={3: wrong})
    try:
        cluster.format(("--add-scram", "SCRAM-SHA-256=[name=broker,password=broker-secret]"))
        cluster.start(timeout=90)
        admin = AdminClient(_client(pki, cluster.bootstrap, "broker", "broker-secret"))
        wait_brokers_unfenced(admin, 3)   # leaders spread: node 3 must follow some partition
        wait_until(lambda: create_topic(admin, "lagging", 3), 60, "the topic created")

        def shrunk():
            parts = _partitions(admin, "lagging")
            followed = [p for p in parts.values() if p[0] != 3]
            return followed and all(p[2] == sorted(set(p[1]) - {3}) for p in followed)
        wait_until(shrunk, 40, "the ISR without node 3 on the partitions it follows")
        led = [p for p in _partitions(admin, "lagging").values() if p[0] == 3]
        assert all(p[2] == [1, 2, 3] for p in led)   # the others replicate from node 3 as usual
        log = "".join(cluster.nodes[3].stderr_lines)
        assert "Error sending fetch request" in log and "invalid credentials with SASL mechanism SCRAM-SHA-256" \
            in log, log[-2000:]
    finally:
        cluster.cleanup()

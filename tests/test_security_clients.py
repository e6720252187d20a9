"""Every Python client the project tests (confluent-kafka, kafka-python,
aiokafka) logs in over SASL_SSL with every mechanism (PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512, OAUTHBEARER) and produces; the records are read back. The
Java client's turn is in test_security_kafka_cli.py (KAFKA_HOME)."""
from __future__ import annotations

import asyncio
import base64
import json
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from tests.security_certs import Pki
from tests.security_helpers import SecureBroker, tls_context

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
CLIENTS = ("confluent", "kafka-python", "aiokafka")
USER, PASSWORD = "alice", "alice-secret"   # a PLAIN user of SecureBroker; SCRAM credentials added below


def unsecured_jwt(sub: str) -> str:
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{enc({'alg': 'none'})}.{enc({'sub': sub, 'iat': time.time(), 'exp': time.time() + 600})}."


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("clients")
    pki = Pki(str(d / "pki"))
    b = SecureBroker(str(d / "data"), pki, listeners=("SASL_SSL",))
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    ups = [UserScramCredentialUpsertion(USER, ScramCredentialInfo(m, 4096), PASSWORD.encode())
           for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
    for fut in admin.alter_user_scram_credentials(ups, request_timeout=10).values():
        fut.result(timeout=15)
    yield b, pki
    b.stop()


def produce_confluent(b, pki, mech, topic, value):
    conf = {"bootstrap.servers": b.address("SASL_SSL"), "security.protocol": "SASL_SSL",
            "ssl.ca.location": pki.ca_path, "sasl.mechanism": mech}
    if mech == "OAUTHBEARER":
        conf.update({"enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": f"principal={USER}"})
    else:
        conf.update({"sasl.username": USER, "sasl.password": PASSWORD})
    p = Producer(conf)
    p.produce(topic, value)
    assert p.flush(20) == 0


def _python_oauth_provider(base):
    class Provider(base):
        def token(self):
            return unsecured_jwt(USER)
    return Provider()


def produce_kafka_python(b, pki, mech, topic, value):
    from kafka import KafkaProducer
    from kafka.net.sasl.oauth import AbstractTokenProvider
    kw = dict(bootstrap_servers=b.address("SASL_SSL"), security_protocol="SASL_SSL", ssl_context=tls_context(pki),
              sasl_mechanism=mech)
    if mech == "OAUTHBEARER":
        kw["sasl_oauth_token_provider"] = _python_oauth_provider(AbstractTokenProvider)
    else:
        kw.update(sasl_plain_username=USER, sasl_plain_password=PASSWORD)
    p = KafkaProducer(**kw)
    p.send(topic, value).get(timeout=20)
    p.close()


def produce_aiokafka(b, pki, mech, topic, value):
    from aiokafka import AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        async def token(self):
            return unsecured_jwt(USER)

    async def run():
        kw = dict(bootstrap_servers=b.address("SASL_SSL"), security_protocol="SASL_SSL",
                  ssl_context=tls_context(pki), sasl_mechanism=mech)
        if mech == "OAUTHBEARER":
            kw["sasl_oauth_token_provider"] = Provider()
        else:
            kw.update(sasl_plain_username=USER, sasl_plain_password=PASSWORD)
        p = AIOKafkaProducer(**kw)
        await p.start()
        try:
            await p.send_and_wait(topic, value)
        finally:
            await p.stop()
    asyncio.run(run())


PRODUCERS = {"confluent": produce_confluent, "kafka-python": produce_kafka_python, "aiokafka": produce_aiokafka}


@pytest.mark.parametrize("mech", MECHANISMS)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_logs_in_over_sasl_ssl(env, client, mech):
    b, pki = env
    topic = f"clients-{client}-{mech}".lower()
    value = f"{client} via {mech}".encode()
    PRODUCERS[client](b, pki, mech, topic, value)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": topic, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got, deadline = None, time.monotonic() + 15
    while got is None and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got = m.value()
    c.close()
    assert got == value

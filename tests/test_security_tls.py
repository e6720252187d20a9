"""TLS listeners configured with Kafka's ssl.* keys, through real clients:
PEM and PKCS12 key stores, inline PEM, client authentication and the
principal taken from the certificate, protocol settings, reload of renewed
certificates, and garbage on a TLS port."""
from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient

from broker.security.principal import SslPrincipalMapper
from tests.security_certs import Pki
from tests.security_helpers import SecureBroker, TlsWireClient, client_config, closed_quickly, roundtrip, tls_context
from tests.wire_client import api_versions_ok


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, pki):
    """SSL listeners with the global PEM store, and listeners whose ssl.* settings are their own
    (listener.name.<l>.ssl.*): inline PEM, an encrypted key, PKCS12 stores, TLS 1.3 only, one cipher."""
    inline = pki.pem_files("inline", "localhost", server=True)
    encrypted = pki.pem_files("enc", "localhost", server=True, password="keypass")
    p12 = pki.pkcs12_file("server-p12", "localhost", "storepass", server=True)
    trust = pki.pkcs12_file("trust", "trust-anchor", "trustpass")
    names = ("SSL", "CLIENTAUTH", "INLINE", "ENCRYPTED", "PKCS", "TLS13", "CIPHER")
    settings = {"listener.security.protocol.map": ",".join(["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
                                                           + [f"{n}:SSL" for n in names]),
                "listener.name.clientauth.ssl.client.auth": "required",
                "listener.name.inline.ssl.keystore.key": inline["key_pem"],
                "listener.name.inline.ssl.keystore.certificate.chain": inline["cert_pem"],
                "listener.name.encrypted.ssl.keystore.location": encrypted["combined"],
                "listener.name.encrypted.ssl.key.password": "keypass",
                "listener.name.pkcs.ssl.keystore.type": "PKCS12",
                "listener.name.pkcs.ssl.keystore.location": p12,
                "listener.name.pkcs.ssl.keystore.password": "storepass",
                "listener.name.pkcs.ssl.truststore.type": "PKCS12",
                "listener.name.pkcs.ssl.truststore.location": trust,
                "listener.name.pkcs.ssl.truststore.password": "trustpass",
                "listener.name.pkcs.ssl.client.auth": "required",
                "listener.name.tls13.ssl.enabled.protocols": "TLSv1.3",
                "listener.name.cipher.ssl.enabled.protocols": "TLSv1.2",
                "listener.name.cipher.ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}
    b = SecureBroker(str(tmp_path_factory.mktemp("data")), pki, listeners=names, settings=settings)
    b.start()
    yield b
    b.stop()


def test_ssl_listener_produce_and_consume_with_librdkafka(tls_broker, pki, topic_name):
    got = roundtrip(client_config(tls_broker, "SSL", pki), topic_name, 50, b"value-%d")
    assert got == [b"value-%d" % i for i in range(50)]


def test_several_listeners_each_advertise_themselves(tls_broker, pki):
    admin = AdminClient(client_config(tls_broker, "SSL", pki))
    md = admin.list_topics(timeout=10)
    assert [f"{b.host}:{b.port}" for b in md.brokers.values()] == [tls_broker.address("SSL")]
    plain = AdminClient({"bootstrap.servers": tls_broker.address("PLAINTEXT")}).list_topics(timeout=10)
    assert [f"{b.host}:{b.port}" for b in plain.brokers.values()] == [tls_broker.address("PLAINTEXT")]


def test_kafka_python_and_aiokafka_over_ssl(tls_broker, pki, topic_name):
    from kafka import KafkaConsumer, KafkaProducer
    ctx = tls_context(pki)
    p = KafkaProducer(bootstrap_servers=tls_broker.address("SSL"), security_protocol="SSL", ssl_context=ctx)
    p.send(topic_name, b"from-kafka-python").get(timeout=20)
    p.close()

    import asyncio
    from aiokafka import AIOKafkaConsumer

    async def consume():
        c = AIOKafkaConsumer(topic_name, bootstrap_servers=tls_broker.address("SSL"), security_protocol="SSL",
                             ssl_context=tls_context(pki), auto_offset_reset="earliest")
        await c.start()
        try:
            msg = await asyncio.wait_for(c.getone(), 20)
            return msg.value
        finally:
            await c.stop()
    assert asyncio.run(consume()) == b"from-kafka-python"
    KafkaConsumer  # imported to show the same package serves both directions


def test_client_auth_required_refuses_a_client_without_certificate(tls_broker, pki):
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with TlsWireClient(tls_broker.address("CLIENTAUTH"), tls_context(pki)) as c:
            api_versions_ok(c)
    cert = pki.pem_files("alice", "alice", ou="eng")
    with TlsWireClient(tls_broker.address("CLIENTAUTH"), tls_context(pki, cert)) as c:
        assert api_versions_ok(c)


def test_client_certificate_from_another_ca_is_refused(tls_broker, pki, tmp_path):
    other = Pki(str(tmp_path / "other"), ca_cn="other-ca")
    cert = other.pem_files("mallory", "mallory")
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with TlsWireClient(tls_broker.address("CLIENTAUTH"), tls_context(pki, cert)) as c:
            api_versions_ok(c)
    with TlsWireClient(tls_broker.address("SSL"), tls_context(pki)) as c:
        assert api_versions_ok(c)


def test_tls_garbage_and_plaintext_on_a_tls_port_close_the_connection(tls_broker, pki):
    assert closed_quickly(tls_broker.address("SSL"), os.urandom(2000))
    assert closed_quickly(tls_broker.address("SSL"), b"\x00\x00\x00\x0f\x00\x12\x00\x03\x00\x00\x00\x01\x00\x00")
    # a client stuck half-way through its ClientHello holds up nobody else
    import socket
    host, port = tls_broker.address("SSL").rsplit(":", 1)
    with socket.create_connection((host, int(port))) as stuck:
        stuck.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        with TlsWireClient(tls_broker.address("SSL"), tls_context(pki)) as c:
            assert api_versions_ok(c)


def test_principal_mapping_rules():
    m = SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/L, RULE:^CN=([^,]*).*$/$1/U, DEFAULT")
    assert m.principal_name("CN=Alice,OU=Eng,O=kproto-tests") == "alice@eng"
    assert m.principal_name("CN=bob,O=x") == "BOB"
    assert SslPrincipalMapper("DEFAULT").principal_name("CN=a,O=b") == "CN=a,O=b"
    from broker.security.principal import NoMatchingRule
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper("RULE:^CN=x$/y/").principal_name("CN=a")


def _start(tmp_path, settings: dict, listeners=("SSL",)) -> SecureBroker:
    b = SecureBroker(str(tmp_path / "data"), None, listeners=listeners, settings=settings)
    b.start()
    return b


def test_inline_pem_key_and_chain(tls_broker, pki, topic_name):
    conf = {"bootstrap.servers": tls_broker.address("INLINE"), "security.protocol": "SSL",
            "ssl.ca.location": pki.ca_path}
    assert roundtrip(conf, topic_name, 3, b"value-%d") == [b"value-%d" % i for i in range(3)]



def test_encrypted_pem_key_with_key_password(tls_broker, pki):
    with TlsWireClient(tls_broker.address("ENCRYPTED"), tls_context(pki)) as c:
        assert api_versions_ok(c)



def test_pkcs12_keystore_and_truststore(tls_broker, pki):
    cert = pki.pem_files("carol", "carol")
    with TlsWireClient(tls_broker.address("PKCS"), tls_context(pki, cert)) as c:
        assert api_versions_ok(c)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):   # the listener requires a certificate
        with TlsWireClient(tls_broker.address("PKCS"), tls_context(pki)) as c:
            api_versions_ok(c)



def test_bad_keystore_stops_start_up_naming_the_problem(tmp_path):
    bad = tmp_path / "store.jks"
    bad.write_bytes(b"\xfe\xed\xfe\xed" + os.urandom(64))
    cmd = [sys.executable, "-m", "broker.launch.cli", "serve", "--set", f"log.dirs={tmp_path / 'd'}",
           "--set", "listeners=SSL://127.0.0.1:0", "--set", "inter.broker.listener.name=SSL",
           "--set", f"ssl.keystore.location={bad}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 1
    assert "JKS" in out.stderr and "Traceback" not in out.stderr


def test_enabled_protocols_refuse_older_tls(tls_broker, pki):
    old = tls_context(pki)
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with TlsWireClient(tls_broker.address("TLS13"), old) as c:
            api_versions_ok(c)
    with TlsWireClient(tls_broker.address("TLS13"), tls_context(pki)) as c:
        assert c.sock.version() == "TLSv1.3"
        assert api_versions_ok(c)



def test_renewed_certificate_is_picked_up_without_restart(tmp_path, pki):
    store = str(tmp_path / "server.pem")
    shutil.copy(pki.pem_files("first", "localhost", server=True)["combined"], store)
    b = _start(tmp_path, {"ssl.keystore.type": "PEM", "ssl.keystore.location": store})
    try:
        with TlsWireClient(b.address("SSL"), tls_context(pki)) as c:
            assert api_versions_ok(c)
        renewed = Pki(str(tmp_path / "renewed"), ca_cn="renewed-ca")
        shutil.copy(renewed.pem_files("second", "localhost", server=True)["combined"], store + ".tmp")
        os.replace(store + ".tmp", store)
        deadline = time.monotonic() + 15
        while True:
            try:
                with TlsWireClient(b.address("SSL"), tls_context(renewed)) as c:
                    assert api_versions_ok(c)
                break
            except ssl.SSLError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        with pytest.raises(ssl.SSLError):
            TlsWireClient(b.address("SSL"), tls_context(pki))
    finally:
        b.stop()


def test_listener_keystore_changed_with_kafka_configs_alter(tmp_path, pki):
    """kafka-configs.sh --entity-type brokers --alter --add-config listener.name.ssl.ssl.keystore.location=..."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    b = _start(tmp_path, {"ssl.keystore.type": "PEM",
                          "ssl.keystore.location": pki.pem_files("old", "localhost", server=True)["combined"]})
    try:
        other = Pki(str(tmp_path / "other"), ca_cn="other-ca")
        new_store = other.pem_files("new", "localhost", server=True)["combined"]
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry("listener.name.ssl.ssl.keystore.location", new_store,
                        incremental_operation=AlterConfigOpType.SET)])
        for fut in admin.incremental_alter_configs([res]).values():
            fut.result(timeout=15)
        deadline = time.monotonic() + 10
        while True:
            try:
                with TlsWireClient(b.address("SSL"), tls_context(other)) as c:
                    assert api_versions_ok(c)
                break
            except ssl.SSLError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
    finally:
        b.stop()


def test_cipher_suites_in_java_names_restrict_tls12(tls_broker, pki):
    other = tls_context(pki)
    other.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256")
    other.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with TlsWireClient(tls_broker.address("CIPHER"), other) as c:
            api_versions_ok(c)
    with TlsWireClient(tls_broker.address("CIPHER"), tls_context(pki)) as c:
        assert c.sock.version() == "TLSv1.2"
        assert c.sock.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
        assert api_versions_ok(c)


def test_jks_keystore_and_truststore(tmp_path, pki):
    """Java KeyStores, read with pyjks (an optional dependency)."""
    jks = pytest.importorskip("jks")
    from cryptography.hazmat.primitives import serialization
    key, cert = pki.issue("localhost", server=True)
    der = lambda c: c.public_bytes(serialization.Encoding.DER)  # noqa: E731
    pkcs8 = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
    entry = jks.PrivateKeyEntry.new("server", [der(cert), der(pki.ca_cert)], pkcs8, "pkcs8")
    jks.KeyStore.new("jks", [entry]).save(str(tmp_path / "server.jks"), "storepass")
    jks.KeyStore.new("jks", [jks.TrustedCertEntry.new("ca", der(pki.ca_cert))]).save(
        str(tmp_path / "trust.jks"), "trustpass")
    b = _start(tmp_path, {"ssl.keystore.location": str(tmp_path / "server.jks"),   # type JKS: the default
                          "ssl.keystore.password": "storepass", "ssl.key.password": "storepass",
                          "ssl.truststore.location": str(tmp_path / "trust.jks"),
                          "ssl.truststore.password": "trustpass", "ssl.client.auth": "required"})
    try:
        with TlsWireClient(b.address("SSL"), tls_context(pki, pki.pem_files("dora", "dora"))) as c:
            assert api_versions_ok(c)
    finally:
        b.stop()

"""A broker's own logins to its peers (broker/security/outbound.py), against a real broker with
SASL_SSL and SASL_PLAINTEXT listeners: PLAIN, SCRAM-SHA-256/512 (credentials in the metadata log)
and OAUTHBEARER (unsecured token) succeed with the JAAS username/password and the connection then
serves requests; a wrong password, an untrusted certificate and a missing client certificate
(mTLS) fail with AuthenticationFailed and the server's reason. Also the start-up refusals of the
inter-broker / controller SASL settings (one line, Kafka's wording) and the Envelope principal
serde (Kafka's DefaultKafkaPrincipalBuilder bytes)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import trio

pytest.importorskip("cryptography")

from kproto import api  # noqa: E402
from kproto.messages.metadata_request import MetadataRequest  # noqa: E402

from broker.config import BrokerConfig  # noqa: E402
from broker.config.types import ConfigError  # noqa: E402
from broker.quorum.secure import deserialize_principal, serialize_principal  # noqa: E402
from broker.security.outbound import AuthenticationFailed, Outbound, inter_broker  # noqa: E402
from tests.security_helpers import SecureBroker  # noqa: E402
from tools.certs import Pki  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("outbound")
    pki = Pki(str(root / "pki"))
    b = SecureBroker(str(root / "data"), pki, listeners=("SASL_SSL", "SASL_PLAINTEXT", "SSL"),
                     settings={"listener.name.ssl.ssl.client.auth": "required",
                               # KIP-368 session lifetime on the SASL_PLAINTEXT listener only
                               "listener.name.sasl_plaintext.connections.max.reauth.ms": "1500"})
    b.start()
    # SCRAM credentials for "carol" (AlterUserScramCredentials over the PLAINTEXT listener)
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    admin = AdminClient({"bootstrap.servers": b.address("PLAINTEXT"), "log_level": 0})
    for mech in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        up = UserScramCredentialUpsertion("carol", ScramCredentialInfo(mech, 4096), b"carol-secret")
        for fut in admin.alter_user_scram_credentials([up], request_timeout=10).values():
            fut.result(15)
    yield b, pki
    b.stop()


def _config(pki, listener, mechanism, jaas, **extra):
    values = {"log.dirs": "/tmp/unused", "listeners": "PLAINTEXT://127.0.0.1:1",
              "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.ca_path,
              f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config": jaas, **extra}
    return BrokerConfig.load(None, values)


def _login(broker, pki, listener, mechanism, jaas, **extra):
    """Connect as the broker would, then ask for Metadata on the logged-in connection."""
    config = _config(pki, listener, mechanism, jaas, **extra)
    protocol = listener if listener in ("SSL", "SASL_SSL", "SASL_PLAINTEXT") else "PLAINTEXT"
    out = Outbound(config, listener, protocol, mechanism if protocol.startswith("SASL") else None, "test")
    host, port = broker.address(listener).rsplit(":", 1)

    async def go():
        stream = await out.connect(host, int(port), "outbound-test")
        async with stream:
            await stream.send_all(api.encode_request(MetadataRequest(topics=[]), 12, 7, "outbound-test"))
            data = b""
            while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
                data += await stream.receive_some(65536)
            corr, resp = api.decode_response(data[4:], 3, 12)
            return corr, resp
    corr, resp = trio.run(go)
    assert corr == 7 and resp.brokers
    return True


@pytest.mark.parametrize("listener", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_plain_login_with_the_listener_jaas_username(setup, listener):
    b, pki = setup
    assert _login(b, pki, listener, "PLAIN", f'{PLAIN} required username="alice" password="alice-secret";')


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_login(setup, mech):
    b, pki = setup
    assert _login(b, pki, "SASL_SSL", mech, f'{SCRAM} required username="carol" password="carol-secret";')


def test_oauthbearer_unsecured_login(setup):
    b, pki = setup
    assert _login(b, pki, "SASL_SSL", "OAUTHBEARER", f'{OAUTH} required unsecuredLoginStringClaim_sub="broker";')


@pytest.mark.parametrize("mech,jaas", [
    ("PLAIN", f'{PLAIN} required username="alice" password="wrong";'),
    ("SCRAM-SHA-256", f'{SCRAM} required username="carol" password="wrong";')])
def test_a_wrong_password_is_an_authentication_failure(setup, mech, jaas):
    b, pki = setup
    with pytest.raises(AuthenticationFailed, match="failed: Authentication failed"):
        _login(b, pki, "SASL_SSL", mech, jaas)


def test_an_untrusted_server_certificate_fails_the_handshake(setup, tmp_path):
    b, _pki = setup
    other = Pki(str(tmp_path / "other"), ca_cn="another-ca")
    with pytest.raises(AuthenticationFailed, match="SSL handshake"):
        _login(b, other, "SASL_SSL", "PLAIN", f'{PLAIN} required username="alice" password="alice-secret";')


def test_mtls_uses_the_keystore_as_client_certificate(setup, tmp_path):
    b, pki = setup
    jaas = f'{PLAIN} required username="alice" password="alice-secret";'
    with pytest.raises((AuthenticationFailed, EOFError, trio.BrokenResourceError)):
        _login(b, pki, "SSL", "PLAIN", jaas)   # ssl.client.auth=required: no certificate, no connection
    mine = pki.pem_files("client", "broker-2")
    assert _login(b, pki, "SSL", "PLAIN", jaas, **{"ssl.keystore.type": "PEM",
                                                  "ssl.keystore.location": mine["combined"]})


def test_principal_serde_is_kafkas(setup):
    data = serialize_principal("User:alice")
    # int16 version 0, compact strings "User" and "alice", token_authenticated false, no tagged fields
    assert data == b"\x00\x00" + b"\x05User" + b"\x06alice" + b"\x00" + b"\x00"
    assert deserialize_principal(data) == ("User:alice", False)
    assert deserialize_principal(serialize_principal("User:t", True)) == ("User:t", True)
    assert deserialize_principal(b"") is None


CLUSTER = {"process.roles": "broker,controller", "node.id": "1",
           "controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9094",
           "listeners": "SASL_SSL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
           "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "SASL_SSL",
           "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL",
           "sasl.enabled.mechanisms": "PLAIN", "log.dirs": "/tmp/unused"}


def test_inter_broker_mechanism_must_be_enabled():
    # sasl.mechanism.inter.broker.protocol left at GSSAPI
    with pytest.raises(ConfigError, match="sasl.mechanism.inter.broker.protocol must be included in "
                                          "sasl.enabled.mechanisms when SASL is used for inter-broker"):
        BrokerConfig.load(None, dict(CLUSTER))
    # the listener's own sasl.enabled.mechanisms is the one that counts
    with pytest.raises(ConfigError, match="sasl.mechanism.inter.broker.protocol must be included"):
        BrokerConfig.load(None, {**CLUSTER, "sasl.mechanism.inter.broker.protocol": "PLAIN",
                                 "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-256"})
    config = BrokerConfig.load(None, {**CLUSTER, "sasl.mechanism.inter.broker.protocol": "PLAIN"})
    with pytest.raises(ConfigError, match="JAAS"):
        inter_broker(config)   # a cluster node must be able to log in to its peers
    jaas = f'{PLAIN} required username="broker" password="p" user_broker="p";'
    config = BrokerConfig.load(None, {**CLUSTER, "sasl.mechanism.inter.broker.protocol": "PLAIN",
                                      "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas})
    out = inter_broker(config)
    assert (out.listener, out.protocol, out.mechanism, out.username) == ("SASL_SSL", "SASL_SSL", "PLAIN", "broker")


def test_start_up_refusals_are_one_line(tmp_path):
    def serve(extra):
        props = tmp_path / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in {**CLUSTER, "log.dirs": str(tmp_path / "d"),
                                                           **extra}.items()))
        out = subprocess.run([sys.executable, "-m", "broker.launch.cli", "serve", "--config", str(props)],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
        return [line for line in out.stderr.splitlines() if line.strip()]
    lines = serve({"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                   "sasl.mechanism.controller.protocol": "PLAIN"})
    assert any("sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms" in line
               for line in lines), lines
    lines = serve({"inter.broker.listener.name": "INTERNAL"})
    assert any("Listener with name INTERNAL defined in inter.broker.listener.name not found" in line
               for line in lines), lines


def test_a_session_with_a_lifetime_is_renewed_before_it_ends(setup):
    """connections.max.reauth.ms on the server: a connection whose session ended is closed at its next
    request (the server's side), so the broker's connections log in again before that."""
    from broker.replication.client import BrokerConnection
    b, pki = setup
    jaas = f'{PLAIN} required username="alice" password="alice-secret";'
    out = Outbound(_config(pki, "SASL_PLAINTEXT", "PLAIN", jaas), "SASL_PLAINTEXT", "SASL_PLAINTEXT", "PLAIN", "test")
    host, port = b.address("SASL_PLAINTEXT").rsplit(":", 1)
    request = api.encode_request(MetadataRequest(topics=[]), 12, 1, "t")

    async def go():
        raw = await out.connect(host, int(port), "t")   # kept past its session's end: closed by the server
        conn = BrokerConnection(host, int(port), "t", out.connect)
        assert (await conn.request(MetadataRequest(topics=[]), 12)).brokers
        first = conn._stream
        await trio.sleep(1.7)
        assert (await conn.request(MetadataRequest(topics=[]), 12)).brokers
        assert conn._stream is not first
        await conn.aclose()
        await raw.send_all(request)
        with trio.fail_after(10):
            try:
                data = await raw.receive_some(65536)
            except trio.BrokenResourceError:
                data = b""
        await raw.aclose()
        return data
    assert trio.run(go) == b""

"""Delegation tokens: created by a SASL-authenticated user, used to log in
with SCRAM (`tokenauth=true`, token id and base64 HMAC), renewed, described
and expired with Kafka's errors; refused without a secret key or on a
PLAINTEXT connection."""
from __future__ import annotations

import base64
import hashlib
import hmac
import os

import pytest

from kproto.messages.create_delegation_token_request import CreateDelegationTokenRequest
from kproto.messages.describe_delegation_token_request import DescribeDelegationTokenRequest
from kproto.messages.expire_delegation_token_request import ExpireDelegationTokenRequest
from kproto.messages.metadata_request import MetadataRequest
from kproto.messages.renew_delegation_token_request import RenewDelegationTokenRequest
from kproto.messages.sasl_authenticate_request import SaslAuthenticateRequest
from kproto.messages.sasl_handshake_request import SaslHandshakeRequest
from tests.security_helpers import SecureBroker
from tests.wire_client import WireClient


@pytest.fixture(scope="module")
def token_broker(tmp_path_factory):
    b = SecureBroker(str(tmp_path_factory.mktemp("data")), None, listeners=("SASL_PLAINTEXT",),
                     settings={"delegation.token.secret.key": "a-long-secret"})
    b.start()
    yield b
    b.stop()


def plain(broker, user, password) -> WireClient:
    c = WireClient(broker.address("SASL_PLAINTEXT"))
    c.call(SaslHandshakeRequest(mechanism="PLAIN"), 1)
    assert c.call(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()), 2).error_code == 0
    return c


def scram_token_login(broker, token_id: str, mac: bytes):
    """A SCRAM-SHA-256 client exchange with the tokenauth extension: (client, final response)."""
    password = base64.b64encode(mac).decode()
    c = WireClient(broker.address("SASL_PLAINTEXT"))
    assert c.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 1).error_code == 0
    nonce = base64.b64encode(os.urandom(12)).decode()
    first_bare = f"n={token_id},r={nonce},tokenauth=true"
    resp = c.call(SaslAuthenticateRequest(auth_bytes=("n,," + first_bare).encode()), 2)
    if resp.error_code:
        return c, resp
    server_first = bytes(resp.auth_bytes).decode()
    fields = dict(p.split("=", 1) for p in server_first.split(","))
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored = hashlib.sha256(client_key).digest()
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    proof = bytes(a ^ b for a, b in zip(client_key, hmac.new(stored, auth_message, "sha256").digest()))
    final = f"{without_proof},p={base64.b64encode(proof).decode()}"
    return c, c.call(SaslAuthenticateRequest(auth_bytes=final.encode()), 2)


def create(c, renewers=()):
    R = CreateDelegationTokenRequest
    return c.call(R(renewers=[R.CreatableRenewers(principal_type="User", principal_name=n) for n in renewers],
                    max_lifetime_ms=-1), 3)


def test_token_lifecycle_and_login(token_broker):
    with plain(token_broker, "alice", "alice-secret") as c:
        made = create(c, renewers=["bob"])
        assert made.error_code == 0 and made.principal_name == "alice" and len(made.hmac) == 64
        token_id, mac = made.token_id, bytes(made.hmac)
        described = c.call(DescribeDelegationTokenRequest(owners=None), 3)
        assert [t.token_id for t in described.tokens] == [token_id]
        assert described.tokens[0].renewers[0].principal_name == "bob"
    tc, final = scram_token_login(token_broker, token_id, mac)
    with tc:
        assert final.error_code == 0 and bytes(final.auth_bytes).startswith(b"v=")
        assert final.session_lifetime_ms > 0
        assert tc.call(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12).brokers
        # a token-authenticated connection may not manage tokens
        assert create(tc).error_code == 64
    with plain(token_broker, "bob", "bob-secret") as c:
        renewed = c.call(RenewDelegationTokenRequest(hmac=mac, renew_period_ms=60_000), 2)
        assert renewed.error_code == 0 and renewed.expiry_timestamp_ms > 0
    with plain(token_broker, "admin", "admin-secret") as c:
        assert c.call(ExpireDelegationTokenRequest(hmac=mac, expiry_time_period_ms=-1), 2).error_code == 63
    with plain(token_broker, "alice", "alice-secret") as c:
        assert c.call(ExpireDelegationTokenRequest(hmac=mac, expiry_time_period_ms=-1), 2).error_code == 0
        assert c.call(RenewDelegationTokenRequest(hmac=mac, renew_period_ms=1000), 2).error_code == 62
    tc, final = scram_token_login(token_broker, token_id, mac)
    with tc:
        assert final.error_code == 58


def test_tokens_refused_on_plaintext_and_without_a_secret(token_broker, tmp_path):
    with WireClient(token_broker.bootstrap) as c:
        assert create(c).error_code == 64     # DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    b = SecureBroker(str(tmp_path / "data"), None, listeners=("SASL_PLAINTEXT",))
    b.start()
    try:
        with plain(b, "alice", "alice-secret") as c:
            assert create(c).error_code == 61  # DELEGATION_TOKEN_AUTH_DISABLED
    finally:
        b.stop()

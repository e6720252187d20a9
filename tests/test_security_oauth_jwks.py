"""OAUTHBEARER with signed JWTs checked against a JWKS (KIP-768, Kafka's
OAuthBearerValidatorCallbackHandler): good tokens log in (librdkafka with an
oauth_cb, and raw frames), bad signature / expired / wrong issuer or
audience / unknown key are refused, and a rotated key set is picked up."""
from __future__ import annotations

import base64
import json
import time

import pytest
from confluent_kafka import Producer
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils

from kproto.messages.sasl_authenticate_request import SaslAuthenticateRequest
from kproto.messages.sasl_handshake_request import SaslHandshakeRequest
from tests.security_helpers import SecureBroker
from tests.wire_client import WireClient

HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
ISSUER, AUDIENCE = "https://issuer.example", "kafka-broker"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _n(i: int) -> str:
    return b64(i.to_bytes((i.bit_length() + 7) // 8, "big"))


class Signer:
    def __init__(self, kid: str, kind: str = "RSA"):
        self.kid, self.kind = kid, kind
        self.key = rsa.generate_private_key(65537, 2048) if kind == "RSA" else ec.generate_private_key(ec.SECP256R1())

    def jwk(self) -> dict:
        pub = self.key.public_key().public_numbers()
        if self.kind == "RSA":
            return {"kty": "RSA", "kid": self.kid, "alg": "RS256", "use": "sig", "n": _n(pub.n), "e": _n(pub.e)}
        return {"kty": "EC", "kid": self.kid, "crv": "P-256", "x": b64(pub.x.to_bytes(32, "big")),
                "y": b64(pub.y.to_bytes(32, "big"))}

    def token(self, sub="alice", exp_in=300.0, iss=ISSUER, aud=AUDIENCE, kid=None) -> str:
        alg = "RS256" if self.kind == "RSA" else "ES256"
        header = b64(json.dumps({"alg": alg, "typ": "JWT", "kid": kid or self.kid}).encode())
        claims = b64(json.dumps({"sub": sub, "iss": iss, "aud": aud, "iat": int(time.time()),
                                 "exp": time.time() + exp_in}).encode())
        data = f"{header}.{claims}".encode()
        if self.kind == "RSA":
            sig = self.key.sign(data, padding.PKCS1v15(), hashes.SHA256())
        else:
            r, s = utils.decode_dss_signature(self.key.sign(data, ec.ECDSA(hashes.SHA256())))
            sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{header}.{claims}.{b64(sig)}"


def write_jwks(path, signers) -> None:
    path.write_text(json.dumps({"keys": [s.jwk() for s in signers]}))


@pytest.fixture(scope="module")
def keys():
    return {"rsa": Signer("k1"), "ec": Signer("k2", "EC"), "later": Signer("k3"), "stranger": Signer("k1")}


@pytest.fixture(scope="module")
def jwks_broker(tmp_path_factory, keys):
    d = tmp_path_factory.mktemp("jwks")
    jwks = d / "jwks.json"
    write_jwks(jwks, [keys["rsa"], keys["ec"]])
    b = SecureBroker(str(d / "data"), None, listeners=("SASL_PLAINTEXT",), settings={
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": HANDLER,
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        "sasl.oauthbearer.jwks.endpoint.url": jwks.as_uri(),
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
    })
    b.jwks_path = jwks
    b.start()
    yield b
    b.stop()


def login(broker, token: str):
    with WireClient(broker.address("SASL_PLAINTEXT")) as c:
        assert c.call(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1).error_code == 0
        resp = c.call(SaslAuthenticateRequest(auth_bytes=f"n,,\x01auth=Bearer {token}\x01\x01".encode()), 2)
        if resp.error_code == 0 and resp.auth_bytes:
            assert json.loads(bytes(resp.auth_bytes)) == {"status": "invalid_token"}
            final = c.call(SaslAuthenticateRequest(auth_bytes=b"\x01"), 2)
            assert final.error_code == 58
            return False
        return resp.error_code == 0


@pytest.mark.parametrize("kind", ["rsa", "ec"])
def test_signed_tokens_log_in(jwks_broker, keys, kind):
    assert login(jwks_broker, keys[kind].token())


@pytest.mark.parametrize("case", ["bad_signature", "expired", "wrong_issuer", "wrong_audience", "garbage",
                                  "unsigned"])
def test_bad_tokens_are_refused(jwks_broker, keys, case):
    k = keys["rsa"]
    token = {"bad_signature": keys["stranger"].token(),
             "expired": k.token(exp_in=-120),
             "wrong_issuer": k.token(iss="https://evil.example"),
             "wrong_audience": k.token(aud="someone-else"),
             "garbage": "a.b.c",
             "unsigned": k.token().rsplit(".", 1)[0] + "."}[case]
    assert not login(jwks_broker, token)


def test_rotated_key_set_is_fetched_for_an_unknown_key_id(jwks_broker, keys):
    assert not login(jwks_broker, keys["later"].token())
    write_jwks(jwks_broker.jwks_path, [keys["rsa"], keys["ec"], keys["later"]])
    assert login(jwks_broker, keys["later"].token())


def test_librdkafka_with_an_oauth_callback(jwks_broker, keys, topic_name):
    def oauth_cb(_config):
        return keys["rsa"].token(sub="svc-producer"), time.time() + 300
    p = Producer({"bootstrap.servers": jwks_broker.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb})
    delivered = []
    p.produce(topic_name, b"signed", on_delivery=lambda err, msg: delivered.append(err))
    p.flush(20)
    assert delivered == [None]

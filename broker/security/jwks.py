"""OAUTHBEARER with signed tokens (KIP-768): Kafka's
OAuthBearerValidatorCallbackHandler, configured with
sasl.oauthbearer.jwks.endpoint.url (https://, http:// or file:), checks the
JWS signature against the key set (RS256/384/512, ES256/384/512, PS*),
exp/iat with sasl.oauthbearer.clock.skew.seconds, the issuer
(sasl.oauthbearer.expected.issuer), the audience
(sasl.oauthbearer.expected.audience), and takes the principal from
sasl.oauthbearer.sub.claim.name. The key set is refreshed every
sasl.oauthbearer.jwks.endpoint.refresh.ms and when a token names an
unknown key id."""
from __future__ import annotations

import base64
import json
import logging
import time
import urllib.request

from broker.config.types import ConfigError
from broker.security.sasl import TokenInvalid, check_claims
from broker.security.settings import listener_value

log = logging.getLogger("kproto.oauth")


def _b64url(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def _int(s: str) -> int:
    return int.from_bytes(_b64url(s), "big")


def public_key(jwk: dict):
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    kty = jwk.get("kty")
    if kty == "RSA":
        return rsa.RSAPublicNumbers(_int(jwk["e"]), _int(jwk["n"])).public_key()
    if kty == "EC":
        curve = {"P-256": ec.SECP256R1(), "P-384": ec.SECP384R1(), "P-521": ec.SECP521R1()}[jwk["crv"]]
        return ec.EllipticCurvePublicNumbers(_int(jwk["x"]), _int(jwk["y"]), curve).public_key()
    raise ValueError(f"unsupported key type {kty}")


def verify_signature(alg: str, key, signing_input: bytes, signature: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, utils
    hashes_by_bits = {"256": hashes.SHA256(), "384": hashes.SHA384(), "512": hashes.SHA512()}
    if alg[2:] not in hashes_by_bits:
        return False
    h = hashes_by_bits[alg[2:]]
    try:
        if alg.startswith("RS"):
            key.verify(signature, signing_input, padding.PKCS1v15(), h)
        elif alg.startswith("PS"):
            key.verify(signature, signing_input, padding.PSS(mgf=padding.MGF1(h), salt_length=h.digest_size), h)
        elif alg.startswith("ES"):
            half = len(signature) // 2
            der = utils.encode_dss_signature(int.from_bytes(signature[:half], "big"),
                                             int.from_bytes(signature[half:], "big"))
            key.verify(der, signing_input, ec.ECDSA(h))
        else:
            return False
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


class JwksValidator:
    def __init__(self, url: str, refresh_ms: int, skew_s: int, issuer, audience, sub_claim, scope_claim):
        self.url = url
        self.refresh_s = refresh_ms / 1000.0
        self.skew_ms = skew_s * 1000
        self.issuer = issuer
        self.audience = audience
        self.sub_claim = sub_claim
        self.scope_claim = scope_claim
        self.keys: dict = {}
        self.fetched = 0.0
        self._refresh()

    def _refresh(self) -> None:
        try:
            with urllib.request.urlopen(self.url, timeout=10) as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            if not self.keys:
                raise ConfigError(f"Could not read the JWKS from {self.url}: {exc}") from None
            log.warning("keeping the previous JWKS: %s", exc)
            return
        keys = {}
        for jwk in data.get("keys", []):
            try:
                keys[jwk.get("kid")] = (jwk, public_key(jwk))
            except (KeyError, ValueError) as exc:
                log.warning("skipping JWK %s: %s", jwk.get("kid"), exc)
        self.keys = keys
        self.fetched = time.monotonic()

    def __call__(self, token: str):
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenInvalid("malformed JWT")
        try:
            header = json.loads(_b64url(parts[0]))
            claims = json.loads(_b64url(parts[1]))
            signature = _b64url(parts[2])
        except ValueError:
            raise TokenInvalid("malformed JWT") from None
        alg, kid = header.get("alg", ""), header.get("kid")
        if time.monotonic() - self.fetched > self.refresh_s or (kid is not None and kid not in self.keys):
            self._refresh()
        candidates = [self.keys[kid]] if kid in self.keys else list(self.keys.values()) if kid is None else []
        signing_input = f"{parts[0]}.{parts[1]}".encode()
        if not any(verify_signature(alg, key, signing_input, signature) for _jwk, key in candidates):
            raise TokenInvalid("signature verification failed")
        return check_claims(claims, self.sub_claim, self.scope_claim, [], self.skew_ms,
                            issuer=self.issuer, audience=self.audience)


def jwks_validator(config, listener: str) -> JwksValidator:
    get = lambda key: listener_value(config, listener, key)  # noqa: E731
    url = get("sasl.oauthbearer.jwks.endpoint.url")
    if not url:
        raise ConfigError("sasl.oauthbearer.jwks.endpoint.url must be set for "
                          "OAuthBearerValidatorCallbackHandler")
    audience = get("sasl.oauthbearer.expected.audience")
    return JwksValidator(url, int(get("sasl.oauthbearer.jwks.endpoint.refresh.ms") or 3600000),
                         int(get("sasl.oauthbearer.clock.skew.seconds") or 30),
                         get("sasl.oauthbearer.expected.issuer"), list(audience) if audience else None,
                         get("sasl.oauthbearer.sub.claim.name") or "sub",
                         get("sasl.oauthbearer.scope.claim.name") or "scope")

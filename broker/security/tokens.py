"""Delegation tokens (KIP-48) as Kafka's KRaft DelegationTokenControlManager:
DelegationTokenRecord in the metadata log (owner, requester, renewers,
timestamps, token id); the HMAC is HMAC-SHA512(delegation.token.secret.key,
token id) and is never stored. A client logs in with SCRAM, the token id as
user name, the base64 HMAC as password and the `tokenauth=true` extension;
its principal is then the token's owner."""
from __future__ import annotations

import base64
import hashlib
import hmac as _hmac
import os

from broker.config.types import Password
from broker.security.sasl import SCRAM_MECHANISMS, salted_password, scram_keys

TOKEN_ITERATIONS = 4096


def secret(config) -> bytes | None:
    for key in ("delegation.token.secret.key", "delegation.token.master.key"):
        value = config.get(key)
        if isinstance(value, Password):
            value = value.value
        if value:
            return value.encode()
    return None


def token_hmac(config, token_id: str) -> bytes:
    return _hmac.new(secret(config), token_id.encode(), hashlib.sha512).digest()


def new_token_id() -> str:
    return base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


class TokenCredentials:
    """SCRAM credentials of live tokens, derived once per token and mechanism."""

    def __init__(self, config, image):
        self.config = config
        self.image = image
        self._cache: dict[tuple[str, str], tuple] = {}

    def lookup(self, token_id: str, mechanism: str, now_ms: int):
        token = getattr(self.image, "delegation_tokens", {}).get(token_id)
        if token is None or secret(self.config) is None or token.expiration_timestamp < now_ms:
            return None
        key = (token_id, mechanism)
        if key not in self._cache:
            password = base64.b64encode(token_hmac(self.config, token_id)).decode()
            salt = os.urandom(16)
            hash_name = SCRAM_MECHANISMS[mechanism][1]
            stored, server = scram_keys(salted_password(password, salt, TOKEN_ITERATIONS, hash_name), hash_name)
            self._cache[key] = (salt, stored, server, TOKEN_ITERATIONS)
        return self._cache[key]

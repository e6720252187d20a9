"""HTTP basic authentication for the registry, backed by the cluster's
SCRAM users (kafka-configs --alter --add-config 'SCRAM-SHA-256=[...]'): a
password is right when it salts and hashes to the stored key of the user's
SCRAM-SHA-512 or SCRAM-SHA-256 credential (RFC 5802), so no second user
list exists. A verified (user, password) is remembered until the credential
changes: PBKDF2 with 4096 rounds costs milliseconds per request otherwise."""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from broker.schema_registry import errors

# mechanism id in the metadata image -> hash (broker/security/sasl.py's SCRAM_MECHANISMS)
MECHANISMS = ((2, "sha512"), (1, "sha256"))


class BasicAuth:
    def __init__(self, broker):
        self.broker = broker
        self._verified: dict[tuple, bytes] = {}

    def __call__(self, headers: dict) -> str:
        """The user name; 401 when the header is missing or the password is wrong."""
        value = headers.get("authorization", "")
        scheme, _, encoded = value.partition(" ")
        if scheme.lower() != "basic":
            raise errors.unauthorized()
        try:
            user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise errors.unauthorized() from None
        if not sep or not self._check(user, password):
            raise errors.unauthorized()
        return user

    def _check(self, user: str, password: str) -> bool:
        scram = getattr(self.broker.image, "scram", {}) or {}
        for mech_id, hash_name in MECHANISMS:
            cred = scram.get((user, mech_id))
            if cred is None:
                continue
            salt, stored_key, _server_key, iterations = cred[:4]
            key = (user, mech_id, hashlib.sha256(password.encode()).digest())
            if self._verified.get(key) == bytes(stored_key):
                return True
            salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), bytes(salt), iterations)
            client_key = hmac.new(salted, b"Client Key", hash_name).digest()
            if hmac.compare_digest(hashlib.new(hash_name, client_key).digest(), bytes(stored_key)):
                if len(self._verified) > 10000:
                    self._verified.clear()
                self._verified[key] = bytes(stored_key)
                return True
            return False
        return False

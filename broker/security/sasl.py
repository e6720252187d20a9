"""SASL server mechanisms: PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER, as
Kafka's SaslServer implementations answer (same messages on failure).

A mechanism is a small state machine: `evaluate(token) -> bytes` gives the
server's next message and sets `complete`/`principal`; `AuthFailed(message)`
is the SaslAuthenticationException whose text goes back to the client."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time

SCRAM_MECHANISMS = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
SCRAM_MECHANISM_NAMES = {v[0]: k for k, v in SCRAM_MECHANISMS.items()}


class AuthFailed(Exception):
    """The client's credentials were refused; args[0] is what Kafka tells the client."""


class InvalidCredentials(AuthFailed):
    """A SaslException in Kafka: the client gets the generic message."""


def generic_failure(mechanism: str) -> str:
    return ("Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {mechanism}")


class Plain:
    name = "PLAIN"

    def __init__(self, verify):
        self.verify = verify  # (username, password) -> bool
        self.complete = False
        self.principal = None
        self.lifetime_ms = None

    def evaluate(self, token: bytes) -> bytes:
        parts = bytes(token).split(b"\x00")
        if len(parts) != 3:
            raise AuthFailed("Invalid SASL/PLAIN response: expected 3 tokens, got " + str(len(parts)))
        authz, user, password = (p.decode("utf-8", "replace") for p in parts)
        if not user:
            raise AuthFailed("Authentication failed: username not specified")
        if not password:
            raise AuthFailed("Authentication failed: password not specified")
        if not self.verify(user, password):
            raise AuthFailed("Authentication failed: Invalid username or password")
        if authz and authz != user:
            raise AuthFailed("Authentication failed: Client requested an authorization id that is "
                             "different from username")
        self.complete = True
        self.principal = user
        return b""


def scram_keys(salted_password: bytes, hash_name: str) -> tuple[bytes, bytes]:
    """(stored key, server key) of a salted password (RFC 5802)."""
    client_key = hmac.new(salted_password, b"Client Key", hash_name).digest()
    stored = hashlib.new(hash_name, client_key).digest()
    server = hmac.new(salted_password, b"Server Key", hash_name).digest()
    return stored, server


def salted_password(password: str, salt: bytes, iterations: int, hash_name: str) -> bytes:
    return hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)


def _saslname(s: str) -> str:
    return s.replace("=2C", ",").replace("=3D", "=")


class Scram:
    def __init__(self, name: str, lookup, token_lookup=None):
        self.name = name
        self.hash = SCRAM_MECHANISMS[name][1]
        self.lookup = lookup  # username -> (salt, stored_key, server_key, iterations) | None
        # token id -> ((salt, stored_key, server_key, iterations), owner principal, expiry ms) | None
        self.token_lookup = token_lookup
        self.complete = False
        self.principal = None
        self.full_principal = None   # set for delegation tokens: the token owner's principal
        self.token_authenticated = False
        self.lifetime_ms = None
        self._state = "first"

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidCredentials("invalid UTF-8") from None
        if self._state == "first":
            return self._client_first(text)
        if self._state == "final":
            return self._client_final(text)
        raise InvalidCredentials("unexpected SCRAM message")

    def _client_first(self, text: str) -> bytes:
        # gs2-header: n,[a=authzid], then n=user,r=nonce[,extensions]
        parts = text.split(",")
        if len(parts) < 4 or parts[0] not in ("n", "y") or not parts[2].startswith("n=") \
                or not parts[3].startswith("r="):
            raise InvalidCredentials("Invalid SCRAM client first message")
        self._gs2 = ",".join(parts[:2]) + ","
        self._first_bare = ",".join(parts[2:])
        user = _saslname(parts[2][2:])
        authz = parts[1][2:] if parts[1].startswith("a=") else ""
        if authz and authz != user:
            raise AuthFailed("Authentication failed: Client requested an authorization id that is "
                             "different from username")
        extensions = dict(p.split("=", 1) for p in parts[4:] if "=" in p)
        if extensions.get("tokenauth", "").lower() == "true":
            found = self.token_lookup(user) if self.token_lookup else None
            cred = None
            if found is not None:
                cred, self.full_principal, self.lifetime_ms = found
                self.token_authenticated = True
        else:
            cred = self.lookup(user)
        if cred is None:
            raise InvalidCredentials("Authentication failed: Invalid user credentials")
        self._user = user
        self._salt, self._stored, self._server_key, iterations = cred
        self._nonce = parts[3][2:] + base64.b64encode(os.urandom(18)).decode()
        self._server_first = f"r={self._nonce},s={base64.b64encode(self._salt).decode()},i={iterations}"
        self._state = "final"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        fields = dict(p.split("=", 1) for p in text.split(",") if "=" in p)
        if "p=" not in text or fields.get("r") != self._nonce:
            raise InvalidCredentials("Invalid SCRAM client final message")
        if fields.get("c") != base64.b64encode(self._gs2.encode()).decode():
            raise InvalidCredentials("Invalid channel binding")
        without_proof = text[:text.rindex(",p=")]
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        try:
            proof = base64.b64decode(fields["p"], validate=True)
        except ValueError:
            raise InvalidCredentials("Invalid client proof") from None
        signature = hmac.new(self._stored, auth_message, self.hash).digest()
        if len(proof) != len(signature):
            raise InvalidCredentials("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self.hash, client_key).digest(), self._stored):
            raise InvalidCredentials("Invalid client credentials")
        self.complete = True
        self.principal = self._user
        self._state = "done"
        server_sig = hmac.new(self._server_key, auth_message, self.hash).digest()
        return b"v=" + base64.b64encode(server_sig)


def _b64url(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class OAuthBearer:
    """OAUTHBEARER (RFC 7628) with a token validator: Kafka's unsecured JWS
    validator by default, a JWKS signature validator when configured."""
    name = "OAUTHBEARER"

    def __init__(self, validate):
        self.validate = validate  # token -> (principal, expiry ms)
        self.complete = False
        self.principal = None
        self.lifetime_ms = None
        self._error = None

    def evaluate(self, token: bytes) -> bytes:
        data = bytes(token)
        if self._error is not None:
            if data == b"\x01":
                raise AuthFailed(self._error)
            raise InvalidCredentials("expected %x01 after an error")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidCredentials("invalid UTF-8") from None
        gs2, sep, rest = text.partition("\x01")
        if not sep or not gs2.startswith(("n,", "y,")) or not rest.endswith("\x01\x01"):
            raise InvalidCredentials("Invalid OAUTHBEARER client first message")
        kv = {}
        for item in rest[:-2].split("\x01"):
            k, eq, v = item.partition("=")
            if not eq:
                raise InvalidCredentials("Invalid OAUTHBEARER client first message")
            kv[k] = v
        auth = kv.get("auth", "")
        if not auth.lower().startswith("bearer "):
            raise InvalidCredentials("Invalid OAUTHBEARER client first message")
        try:
            principal, expiry_ms, scope = self.validate(auth[7:].strip())
        except TokenInvalid as exc:
            self._error = json.dumps({"status": "invalid_token"}, separators=(",", ":"))
            self.reason = str(exc)
            return self._error.encode()
        authz = gs2.split(",")[1]
        if authz.startswith("a=") and authz[2:] != principal:
            self._error = json.dumps({"status": "invalid_authorization_id"}, separators=(",", ":"))
            return self._error.encode()
        self.complete = True
        self.principal = principal
        self.lifetime_ms = expiry_ms
        return b""


class TokenInvalid(Exception):
    pass


def unsecured_validator(options: dict[str, str]):
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler: an unsigned JWS
    (alg none) whose exp has not passed, principal from `sub` or the claim
    named by unsecuredValidatorPrincipalClaimName."""
    claim_name = options.get("unsecuredValidatorPrincipalClaimName", "sub") or "sub"
    scope_claim = options.get("unsecuredValidatorScopeClaimName", "scope") or "scope"
    required = [s for s in options.get("unsecuredValidatorRequiredScope", "").split(",") if s]
    skew_ms = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0") or 0)

    def validate(token: str):
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenInvalid("not a JWS compact serialization")
        try:
            header = json.loads(_b64url(parts[0]))
            claims = json.loads(_b64url(parts[1]))
        except ValueError:
            raise TokenInvalid("malformed token") from None
        if header.get("alg") != "none" or parts[2]:
            raise TokenInvalid("unsecured tokens must be unsigned")
        return check_claims(claims, claim_name, scope_claim, required, skew_ms)
    return validate


def check_claims(claims, claim_name, scope_claim, required_scope, skew_ms, issuer=None, audience=None):
    if not isinstance(claims, dict):
        raise TokenInvalid("claims are not a JSON object")
    now = time.time() * 1000
    exp = claims.get("exp")
    if not isinstance(exp, (int, float)):
        raise TokenInvalid("exp claim missing")
    expiry_ms = int(exp * 1000)
    if now - skew_ms >= expiry_ms:
        raise TokenInvalid("token expired")
    iat = claims.get("iat")
    if isinstance(iat, (int, float)) and iat * 1000 > now + skew_ms:
        raise TokenInvalid("token issued in the future")
    principal = claims.get(claim_name)
    if not isinstance(principal, str) or not principal:
        raise TokenInvalid(f"{claim_name} claim missing")
    scope = claims.get(scope_claim, [])
    scopes = scope.split() if isinstance(scope, str) else list(scope) if isinstance(scope, list) else []
    missing = [s for s in required_scope if s not in scopes]
    if missing:
        raise TokenInvalid(f"missing required scope {missing}")
    if issuer is not None and claims.get("iss") != issuer:
        raise TokenInvalid("unexpected issuer")
    if audience:
        aud = claims.get("aud")
        auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if not any(a in audience for a in auds):
            raise TokenInvalid("unexpected audience")
    return principal, expiry_ms, scopes

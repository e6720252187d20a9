"""What a connection has proven about itself: its listener's security
protocol, its principal, and the SASL exchange in progress (handshake,
authenticate, KIP-368 re-authentication and session expiry)."""
from __future__ import annotations

import logging
import time

from kproto.api import ApiKey

from broker.security.principal import ANONYMOUS

log = logging.getLogger("kproto.security")

# what an unauthenticated SASL connection may send (Kafka's SaslServerAuthenticator)
PRE_LOGIN_APIS = frozenset((ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE))


class RespondThenClose(Exception):
    """Send `response`, wait `delay_s`, close the connection (a failed or illegal SASL step).
    Here rather than in authenticate.py: the dispatcher catches it on every listener, and a
    PLAINTEXT-only broker never loads the SASL exchange itself."""

    def __init__(self, reason: str, response, delay_s: float = 0.0):
        super().__init__(reason)
        self.response = response
        self.delay_s = delay_s


class Session:
    __slots__ = ("listener", "protocol", "peer_host", "principal", "sasl", "authenticated",
                 "mechanism_name", "mechanism", "handshake_version", "raw_tokens", "expires_at",
                 "reauthenticating", "security", "cert_principal", "throttle_until",
                 "token_authenticated", "quota_entity")

    def __init__(self, security, listener: str, protocol: str, peer_host: str):
        self.security = security
        self.listener = listener
        self.protocol = protocol
        self.peer_host = peer_host
        self.sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL")
        self.authenticated = not self.sasl
        self.principal = ANONYMOUS
        self.cert_principal = None
        self.mechanism_name = None
        self.mechanism = None
        self.handshake_version = None
        self.raw_tokens = False     # after SaslHandshake v0: bare SASL tokens, no request headers
        self.expires_at = None      # monotonic seconds; KIP-368 session end
        self.reauthenticating = False
        self.throttle_until = 0.0   # monotonic seconds: muted for a quota until then
        self.token_authenticated = False   # logged in with a delegation token
        self.quota_entity = None    # (user, client id) of its last request a quota covered

    def expired(self) -> bool:
        return self.expires_at is not None and time.monotonic() >= self.expires_at

    def gate(self, api_key: int) -> str | None:
        """Why this request must close the connection, or None to serve it."""
        if not self.sasl:
            return None
        if not self.authenticated:
            if api_key not in PRE_LOGIN_APIS:
                return (f"Unexpected Kafka request of type {ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else api_key} "
                        "during SASL handshake")
            return None
        if self.expired() and api_key != ApiKey.SASL_HANDSHAKE and not self.reauthenticating:
            return "the SASL session expired and was not re-authenticated"
        return None

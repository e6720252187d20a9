"""SaslHandshake and SaslAuthenticate on SASL listeners (Kafka's
SaslServerAuthenticator): mechanism negotiation, the token exchange, failed
logins (logged with the peer address, answered SASL_AUTHENTICATION_FAILED
after connection.failed.authentication.delay.ms, then the connection
closes), KIP-368 session lifetimes and re-authentication."""
from __future__ import annotations

import logging
import time

from kproto.errors import ErrorCode
from kproto.messages.sasl_authenticate_response import SaslAuthenticateResponse
from kproto.messages.sasl_handshake_response import SaslHandshakeResponse

from broker.security import sasl
from broker.security.session import RespondThenClose

log = logging.getLogger("kproto.security")


def handshake(ctx, req, session):
    security = session.security
    enabled = security.enabled_mechanisms(session.listener)
    mech = req.mechanism
    if session.authenticated:
        if ctx.api_version < 1:
            raise RespondThenClose("SaslHandshake v0 after authentication",
                                   SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                                         mechanisms=enabled))
        if mech != session.mechanism_name:
            raise RespondThenClose(f"re-authentication changed the mechanism from "
                                   f"{session.mechanism_name} to {mech}",
                                   SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                                         mechanisms=enabled))
        session.reauthenticating = True
    elif session.mechanism is not None:
        raise RespondThenClose("a second SaslHandshake",
                               SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                                     mechanisms=enabled))
    if mech not in enabled or mech not in ("PLAIN", "OAUTHBEARER") + tuple(sasl.SCRAM_MECHANISMS):
        log.warning("Failed authentication with %s (Unsupported SASL mechanism %s)", session.peer_host, mech)
        raise RespondThenClose(f"Unsupported SASL mechanism {mech}",
                               SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                                     mechanisms=enabled))
    session.mechanism_name = mech
    session.mechanism = security.new_mechanism(session.listener, mech)
    session.handshake_version = ctx.api_version
    session.raw_tokens = ctx.api_version == 0
    return SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=enabled)


def _delay_s(session) -> float:
    return session.security.config.get_int("connection.failed.authentication.delay.ms") / 1000.0


def evaluate(session, token: bytes) -> tuple[bytes, int]:
    """One token of the exchange -> (server token, session lifetime ms). Raises
    sasl.AuthFailed with the message the client gets."""
    mechanism = session.mechanism
    try:
        challenge = mechanism.evaluate(token)
    except sasl.InvalidCredentials:
        raise sasl.AuthFailed(sasl.generic_failure(session.mechanism_name)) from None
    if not mechanism.complete:
        return challenge, 0
    principal = getattr(mechanism, "full_principal", None) or "User:" + mechanism.principal
    if session.reauthenticating and principal != session.principal:
        raise sasl.AuthFailed(f"Cannot change principals during re-authentication from "
                              f"{session.principal}: {principal}")
    session.principal = principal
    session.token_authenticated = getattr(mechanism, "token_authenticated", False)
    session.authenticated = True
    session.reauthenticating = False
    session.mechanism = None
    session.raw_tokens = False
    lifetime = _session_lifetime_ms(session, mechanism)
    session.expires_at = time.monotonic() + lifetime / 1000.0 if lifetime else None
    return challenge, lifetime


def _session_lifetime_ms(session, mechanism) -> int:
    """KIP-368: the earlier of connections.max.reauth.ms and the credential's expiry."""
    max_reauth = session.security.reauth_ms(session.listener, session.mechanism_name)
    expiry = mechanism.lifetime_ms
    now_ms = int(time.time() * 1000)
    if expiry is None and max_reauth <= 0:
        return 0
    if expiry is None:
        return max_reauth
    left = max(expiry - now_ms, 0)
    return left if max_reauth <= 0 else min(left, max_reauth)


def authenticate(ctx, req, session):
    if session.mechanism is None:
        message = ("SaslAuthenticate request received after successful authentication"
                   if session.authenticated else "Unexpected SaslAuthenticate request before SaslHandshake")
        raise RespondThenClose(message, SaslAuthenticateResponse(
            error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message=message, auth_bytes=b""))
    try:
        challenge, lifetime = evaluate(session, req.auth_bytes)
    except sasl.AuthFailed as exc:
        log.warning("Failed authentication with %s (%s)", session.peer_host, exc)
        raise RespondThenClose(f"authentication failed: {exc}", SaslAuthenticateResponse(
            error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc), auth_bytes=b""),
            _delay_s(session)) from None
    resp = SaslAuthenticateResponse(error_code=ErrorCode.NONE, error_message=None, auth_bytes=challenge)
    if ctx.api_version >= 1:
        resp.session_lifetime_ms = lifetime
    return resp


def raw_token(session, frame) -> bytes | None:
    """A bare token after SaslHandshake v0: the server's bare token back, or
    None to close the connection (Kafka closes without a word on failure)."""
    try:
        challenge, _ = evaluate(session, bytes(frame))
    except sasl.AuthFailed as exc:
        log.warning("Failed authentication with %s (%s)", session.peer_host, exc)
        return None
    return challenge

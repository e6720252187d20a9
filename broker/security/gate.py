"""What the dispatcher asks before serving a frame on a SASL listener:
Kafka closes a connection that sends anything but ApiVersions,
SaslHandshake or SaslAuthenticate before logging in, a frame larger than
sasl.server.max.receive.size before logging in, and any request but
SaslHandshake once its KIP-368 session has expired."""
from __future__ import annotations

import struct

from broker.security import authenticate


def check(session, api_key: int, size: int, close_exc) -> None:
    reason = session.gate(api_key)
    if reason is None and not session.authenticated:
        limit = session.security.config.get_int("sasl.server.max.receive.size")
        if size > limit:
            reason = f"SASL frame of {size} bytes is larger than sasl.server.max.receive.size ({limit})"
    if reason is not None:
        raise close_exc(reason)


def raw_token(session, frame, close_exc) -> list:
    limit = session.security.config.get_int("sasl.server.max.receive.size")
    if len(frame) > limit:
        raise close_exc(f"SASL token of {len(frame)} bytes is larger than sasl.server.max.receive.size")
    token = authenticate.raw_token(session, frame)
    if token is None:
        raise close_exc("authentication failed")
    return [struct.pack(">i", len(token)) + token]

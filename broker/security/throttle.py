"""Quota accounting after each request: bytes produced (request size),
bytes fetched (response size), request handling time; a client over its
quota gets throttle_time_ms in the response and its connection muted
(no further request read) until the throttle time has passed."""
from __future__ import annotations

import time

from kproto.api import ApiKey

from broker.security.principal import ANONYMOUS
from broker.security.quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, user_name

_EXEMPT = frozenset((ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE))


def account(quotas, ctx, request_size: int, response_size: int, handling_s: float) -> int:
    """Record the request; the throttle time in ms."""
    session = getattr(ctx.conn, "session", None)
    if session is None or ctx.api_key in _EXEMPT:
        return 0
    user = user_name(session.principal if session.principal else ANONYMOUS)
    client_id = ctx.client_id or ""
    throttle = 0
    if ctx.api_key == ApiKey.PRODUCE:
        throttle = quotas.record(PRODUCER_BYTE_RATE, user, client_id, request_size)
    elif ctx.api_key == ApiKey.FETCH and response_size:
        throttle = quotas.record(CONSUMER_BYTE_RATE, user, client_id, response_size)
    throttle = max(throttle, quotas.record(REQUEST_PERCENTAGE, user, client_id, handling_s * 1000.0))
    if throttle > 0:
        until = time.monotonic() + throttle / 1000.0
        session.throttle_until = max(session.throttle_until or 0.0, until)
    return throttle


async def mute_if_throttled(session) -> None:
    """Kafka mutes a throttled channel: nothing more is read from it until the time is up."""
    import trio
    until = session.throttle_until
    if until:
        session.throttle_until = 0.0
        delay = until - time.monotonic()
        if delay > 0:
            await trio.sleep(delay)

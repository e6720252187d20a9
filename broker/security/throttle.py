"""Quota accounting after each request: bytes produced (request size),
request time (the broker's own work on the request: decoding, handling,
encoding; not the time it waited in purgatory); a client over its quota gets
throttle_time_ms in the response and its connection muted (no further
request read) until the throttle time has passed. Fetch records its bytes and
request time in its handler, before the response is settled, as Kafka does
(broker/handlers/fetch_quota.py); what it spends after that only counts."""
from __future__ import annotations

import time

from kproto.api import ApiKey

from broker.security.principal import ANONYMOUS
from broker.security.quotas import PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, user_name

_EXEMPT = frozenset((ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE))


def quota_entity(ctx) -> tuple[str, str] | None:
    """(user, client id) the request counts against; None for requests no quota covers."""
    session = getattr(ctx.conn, "session", None)
    if session is None or ctx.api_key in _EXEMPT:
        return None
    return user_name(session.principal if session.principal else ANONYMOUS), ctx.client_id or ""


def request_seconds(ctx, now: float | None = None) -> float:
    """The broker's time on the request so far: since its frame arrived, less the time it waited
    (Kafka counts network and request thread time, not purgatory time)."""
    now = time.perf_counter() if now is None else now
    return max(0.0, now - ctx.started - ctx.remote_s)


def account(quotas, ctx, request_size: int) -> int:
    """Record the request; the throttle time in ms."""
    entity = quota_entity(ctx)
    if entity is None:
        return 0
    user, client_id = entity
    ctx.conn.session.quota_entity = entity   # for the time writing the answer (record_network)
    now = time.perf_counter()
    if ctx.quota_recorded_at is not None:
        # the handler recorded up to then and decided the throttle (Fetch); encoding the
        # answer counts against the next requests, as Kafka's recordNoThrottle of network time
        quotas.record(REQUEST_PERCENTAGE, user, client_id, (now - ctx.quota_recorded_at) * 1000.0, check=False)
        throttle = ctx.quota_throttle_ms
    else:
        throttle = 0
        if ctx.api_key == ApiKey.PRODUCE:
            throttle = quotas.record(PRODUCER_BYTE_RATE, user, client_id, request_size)
        throttle = max(throttle, quotas.record(REQUEST_PERCENTAGE, user, client_id,
                                               request_seconds(ctx, now) * 1000.0))
    if throttle > 0:
        mute(ctx, throttle)
    return throttle


def record_network(quotas, session, seconds: float) -> None:
    """The time spent writing a connection's answers (and their metrics) counts against its
    client's request_percentage afterwards, as Kafka records network thread time (recordNoThrottle)."""
    entity = session.quota_entity
    if entity is not None and quotas is not None and quotas.active:
        quotas.record(REQUEST_PERCENTAGE, entity[0], entity[1], seconds * 1000.0, check=False)


def mute(ctx, throttle_ms: int) -> None:
    """Nothing more is read from the client's connection for throttle_ms after this answer."""
    session = getattr(ctx.conn, "session", None)
    if session is not None:
        until = time.monotonic() + throttle_ms / 1000.0
        session.throttle_until = max(session.throttle_until or 0.0, until)


async def mute_if_throttled(session) -> None:
    """Kafka mutes a throttled channel: nothing more is read from it until the time is up."""
    import trio
    until = session.throttle_until
    if until:
        session.throttle_until = 0.0
        delay = until - time.monotonic()
        if delay > 0:
            await trio.sleep(delay)

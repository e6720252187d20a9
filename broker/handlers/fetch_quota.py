"""consumer_byte_rate and request_percentage on a consumer's Fetch, applied as
Kafka 3.9's KafkaApis.handleFetchRequest applies them (KIP-219):

- the fetch reads at most what the client's quota allows in one window
  (max_bytes capped at consumer_byte_rate x (quota.window.num - 1) x
  quota.window.size.seconds, Kafka's getMaxValueInQuotaWindow);
- once read, the response size and the request time so far are recorded; when
  either quota is exceeded the bytes are taken back out of the rate (they are
  not sent) and the client gets an empty response carrying throttle_time_ms,
  its fetch session left as it was (Kafka's getThrottledResponse); its
  connection is then muted for that long (broker/security/throttle.py).

So a consumer never gets more than its quota plus one response ahead, where
serving first and muting after would let every fetch through at the price of
a later pause. Follower fetches are not subject to client quotas."""
from __future__ import annotations

import time

from kproto.errors import ErrorCode
from kproto.messages.fetch_response import FetchResponse

from broker.partitions.fetch_sessions import INVALID_SESSION_ID, next_epoch
from broker.security.quotas import CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE

_HEADER_BYTES = 8   # the size prefix and correlation id, counted as the dispatcher counts a response


def _quotas(ctx):
    quotas = getattr(ctx.broker, "quotas", None)
    return quotas if quotas is not None and quotas.active else None


def _entity(ctx):
    """(user, client id) the fetch counts against (once some client quota is set)."""
    from broker.security.throttle import quota_entity   # imported at the first quota
    return quota_entity(ctx)


def cap_max_bytes(ctx, req, v: int) -> None:
    """Before reading: no more than one quota window's worth (fetchMaxBytes / fetchMinBytes)."""
    quotas = _quotas(ctx)
    entity = _entity(ctx) if quotas is not None else None
    if entity is None or v < 3:
        return
    cap = quotas.max_value_in_window(CONSUMER_BYTE_RATE, *entity)
    if cap is not None:
        req.max_bytes = max(0, min(req.max_bytes, int(cap)))
        req.min_bytes = min(req.min_bytes, req.max_bytes)


def _response_size(v: int, topics: list) -> int:
    out, regions = bytearray(), []
    FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics).encode_into(
        out, v, regions, strict=False)
    return _HEADER_BYTES + len(out) + sum(r.length for _pos, r in regions)


def throttle_ms(ctx, v: int, topics: list) -> int:
    """Record the answer about to be sent (its topics) and the request time so far; the throttle
    time in ms, > 0 when the answer must be the empty throttled one (its bytes then unrecorded)."""
    ctx.quota_recorded_at = time.perf_counter()
    quotas = _quotas(ctx)
    entity = _entity(ctx) if quotas is not None else None
    if entity is None:
        return 0
    user, client_id = entity
    from broker.security.throttle import request_seconds   # (loaded by _entity)
    request_throttle = quotas.record(REQUEST_PERCENTAGE, user, client_id,
                                     request_seconds(ctx, ctx.quota_recorded_at) * 1000.0)
    size = 0
    bandwidth_throttle = 0
    if quotas.quota(CONSUMER_BYTE_RATE, user, client_id)[0] is not None:
        size = _response_size(v, topics)
        bandwidth_throttle = quotas.record(CONSUMER_BYTE_RATE, user, client_id, size)
    throttle = max(request_throttle, bandwidth_throttle)
    if throttle > 0 and size:
        quotas.unrecord(CONSUMER_BYTE_RATE, user, client_id, size)
    ctx.quota_throttle_ms = throttle
    return throttle


def throttled_response(context, throttle: int) -> FetchResponse:
    """Kafka's FetchContext.getThrottledResponse: no partitions; a full fetch creates no session
    (the client sends a full fetch again), an incremental one keeps its session, whose epoch
    this request advanced, unless another fetch of it came in meanwhile."""
    error, session_id = ErrorCode.NONE, INVALID_SESSION_ID
    if context.kind == "incremental":
        session_id = context.session.id
        if context.session.epoch != next_epoch(context.request_epoch):
            error = ErrorCode.INVALID_FETCH_SESSION_EPOCH
    return FetchResponse(throttle_time_ms=throttle, error_code=error, session_id=session_id, responses=[])

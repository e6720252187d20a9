"""Client telemetry (KIP-714): GetTelemetrySubscriptions, PushTelemetry and
ListConfigResources (broker/handlers/configs.py) lists client-metrics resources among the others.

Kafka advertises the two telemetry APIs only when a telemetry receiver is
configured; kproto has one built in and advertises them while a client-metrics
subscription exists, so clients of a broker without subscriptions see the
same ApiVersions as from a default Kafka and never push.
"""
from __future__ import annotations

from kproto.api import ApiKey
from kproto.errors import KafkaError

from broker.metrics.subscriptions import has_subscriptions
from broker.handlers import advertised_when, handles

# (the responses' codecs and broker/metrics/client_metrics.py are imported at the first telemetry
# request: a broker without client-metrics subscriptions never gets one, issue #26)


def manager(broker):
    """The broker's ClientMetricsManager (broker/metrics/client_metrics.py), made at first use."""
    m = getattr(broker, "client_metrics", None)
    if m is None:
        from broker.metrics import client_metrics as cm
        max_bytes = broker.config.get_int("telemetry.max.bytes") or 1048576
        m = broker.client_metrics = cm.ClientMetricsManager(broker.image, max_bytes)
    return m


def _client(ctx) -> dict:
    conn = ctx.conn
    software = getattr(conn, "client_software", None) or (None, None)
    peer = getattr(conn, "peer", None) or (None, None)
    return {"client_id": ctx.client_id, "client_software_name": software[0],
            "client_software_version": software[1],
            "client_source_address": str(peer[0]) if peer[0] is not None else None,
            "client_source_port": str(peer[1]) if len(peer) > 1 and peer[1] is not None else None}


@handles(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, 0)
async def get_telemetry_subscriptions(ctx, req):
    from kproto.messages.get_telemetry_subscriptions_response import GetTelemetrySubscriptionsResponse
    from broker.metrics import client_metrics as cm
    m = manager(ctx.broker)
    try:
        inst = m.get_subscriptions(req.client_instance_id, _client(ctx))
    except KafkaError as exc:
        return GetTelemetrySubscriptionsResponse(throttle_time_ms=0, error_code=exc.code,
                                                 client_instance_id=req.client_instance_id,
                                                 accepted_compression_types=[], requested_metrics=[])
    # "*" subscribes to everything; on the wire that is one empty prefix
    requested = [""] if inst.metrics == [cm.ALL_SUBSCRIBED_METRICS] else list(inst.metrics)
    return GetTelemetrySubscriptionsResponse(
        throttle_time_ms=0, error_code=0, client_instance_id=inst.instance_id,
        subscription_id=inst.subscription_id, accepted_compression_types=list(cm.ACCEPTED_COMPRESSION),
        push_interval_ms=inst.interval_ms, telemetry_max_bytes=m.max_bytes, delta_temporality=True,
        requested_metrics=requested)


@handles(ApiKey.PUSH_TELEMETRY, 0, 0)
async def push_telemetry(ctx, req):
    from kproto.messages.push_telemetry_response import PushTelemetryResponse
    try:
        manager(ctx.broker).push(req.client_instance_id, req.subscription_id, req.terminating,
                                 req.compression_type, req.metrics, _client(ctx))
    except KafkaError as exc:
        return PushTelemetryResponse(throttle_time_ms=0, error_code=exc.code)
    return PushTelemetryResponse(throttle_time_ms=0, error_code=0)


def _subscribed(broker) -> bool:
    return has_subscriptions(broker.image)


advertised_when(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, _subscribed)
advertised_when(ApiKey.PUSH_TELEMETRY, _subscribed)


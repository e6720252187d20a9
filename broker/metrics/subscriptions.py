"""Whether the metadata holds client-metrics subscriptions (KIP-714 CLIENT_METRICS config
resources): what ApiVersions asks to decide whether it advertises the telemetry APIs. Kept apart
from client_metrics.py, whose manager only a broker with subscriptions needs (start-up CPU,
issue #26)."""
from __future__ import annotations

CLIENT_METRICS_RESOURCE = 16


def has_subscriptions(image) -> bool:
    return any(rtype == CLIENT_METRICS_RESOURCE and configs for (rtype, _n), configs in image.configs.items())

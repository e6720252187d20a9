"""Prometheus metrics, consumer lag and health checks on an HTTP listener
of their own (`kproto.metrics.listener`, default http://127.0.0.1:9644).

registry.py  the counters the request path updates inline (no locks, no labels)
collector.py the metric families built from them and from broker state at scrape time
cluster.py   the ReplicaManager, controller and raft-metrics families (replicas, image, quorum)
families.py  gauge / counter / metric family helpers
lag.py       consumer lag per group, topic and partition
http.py      the listener: /metrics, /ready, /health
"""
from __future__ import annotations

from time import perf_counter

import trio

from broker.metrics.registry import BrokerMetrics

LISTENER_KEY = "kproto.metrics.listener"
DEFAULT_LISTENER = "http://127.0.0.1:9644"
_OFF = ("", "off", "none", "false", "disabled")

__all__ = ["BrokerMetrics", "LISTENER_KEY", "DEFAULT_LISTENER", "parse_listener", "watch_event_loop"]


def parse_listener(value: str | None) -> tuple[str, int] | None:
    """`http://HOST:PORT` (or `HOST:PORT`) -> (host, port); None when off.
    Port 0 picks a free port (the ready line names it)."""
    if value is None:
        value = DEFAULT_LISTENER
    text = value.strip()
    if text.lower() in _OFF:
        return None
    if "://" in text:
        scheme, text = text.split("://", 1)
        if scheme.lower() != "http":
            raise ValueError(f"Invalid value {value} for configuration {LISTENER_KEY}: only http:// is served")
    text = text.rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"Invalid value {value} for configuration {LISTENER_KEY}: expected http://HOST:PORT or off")
    return host.strip("[]") or "0.0.0.0", int(port)


# how often the event-loop delay histogram samples: often enough to catch a
# 5 ms stall with a handful of samples, rare enough to cost nothing (~100
# wake-ups a second). epoll rounds timeouts up to whole milliseconds, so
# samples of an idle loop read 0-1 ms.
DELAY_SAMPLE_INTERVAL = 0.01


async def sample_loop_delay(metrics: BrokerMetrics, interval: float = DELAY_SAMPLE_INTERVAL) -> None:
    """Scheduling delay percentiles: how late a short timer fires, into
    `metrics.loop_delay` (kproto_event_loop_delay_seconds). A request that
    arrives during a stall waits at least this long for its first byte to
    be read, so this is the broker's share of a tail latency."""
    observe = metrics.loop_delay.observe
    now = trio.current_time
    while True:
        planned = now() + interval
        await trio.sleep_until(planned)
        observe(max(now() - planned, 0.0) * 1000.0)


async def watch_event_loop(metrics: BrokerMetrics, interval: float = 1.0) -> None:
    """Event-loop lag: how late a timer fires. A long blocking call on the
    trio thread (a cleaner slice, a big recovery) shows here; /health uses
    the heartbeat to tell a stuck loop."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample_loop_delay, metrics)
        await _watch_heartbeat(metrics, interval)


async def _watch_heartbeat(metrics: BrokerMetrics, interval: float) -> None:
    while True:
        planned = trio.current_time() + interval
        await trio.sleep_until(planned)
        lag = max(trio.current_time() - planned, 0.0)
        metrics.loop_lag_s = lag
        if lag > metrics.loop_lag_max_s:
            metrics.loop_lag_max_s = lag
        metrics.loop_heartbeat = perf_counter()

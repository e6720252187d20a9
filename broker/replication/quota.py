"""Replication throttles (KIP-73) as Kafka 3.9's ReplicationQuotaManager applies them.

Two quotas per broker, the leader's (bytes it sends to followers) and the follower's (bytes it
fetches from leaders). Each has
- a bound in bytes/s: the broker's dynamic `leader.replication.throttled.rate` /
  `follower.replication.throttled.rate`, else the cluster-wide dynamic default, else none
  (Long.MAX_VALUE), as BrokerConfigHandler reads them; a static value in server.properties is
  not one (Kafka ignores it too);
- the throttled partitions: a topic's `leader.replication.throttled.replicas` /
  `follower.replication.throttled.replicas`, entries `partition:brokerId` naming this broker,
  or `*` for every partition of the topic (TopicConfigHandler.parseThrottledPartitions);
- a byte rate measured as Kafka's SimpleRate over `replication.quota.window.num` samples of
  `replication.quota.window.size.seconds`.

The quota is exceeded while the measured rate is above the bound. Bytes of throttled partitions
are always recorded (in-sync replicas' too, so all replication traffic of those partitions
counts); only replicas out of the ISR are held back (replica_fetch.py on the leader, the Fetcher
in manager.py on the follower).
"""
from __future__ import annotations

import time

LONG_MAX = (1 << 63) - 1
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
ALL = "*"   # every partition of the topic (Kafka's ReplicationQuotaManager.ALL_REPLICAS)


def parse_throttled_partitions(value: str | None, broker_id: int):
    """The partitions a throttled-replicas list names for this broker: ALL for `*`, else the set
    of p of the `p:broker_id` entries (an empty set for "" or no entry of this broker). The value
    was validated when it was set (broker/config/validators.throttled_replicas)."""
    text = (value or "").strip()
    if text == "*":
        return ALL
    out = set()
    for entry in text.split(","):
        p, sep, b = entry.strip().partition(":")
        if sep and p.strip().isdigit() and b.strip().isdigit() and int(b) == broker_id:
            out.add(int(p))
    return out


class SimpleRate:
    """Kafka's SimpleRate over a SampledStat (WindowedSum), as in kafka-clients 3.9: samples of
    `window_ms` (a new one starts at the first record after the current one is full; at most
    `samples`, the oldest reused), a sample with no record for samples x window_ms is reset, and
    the rate is the live samples' sum over the time since the oldest sample started, at least
    one window (so a first burst is not divided by a tiny interval)."""

    __slots__ = ("samples", "window_ms", "_starts", "_last", "_values", "_current")

    def __init__(self, samples: int = 11, window_ms: int = 1000):
        self.samples = max(1, samples)
        self.window_ms = max(1, window_ms)
        self._starts: list[int] = []
        self._last: list[int] = []
        self._values: list[float] = []
        self._current = 0

    def _new(self, now_ms: int) -> None:
        self._starts.append(now_ms)
        self._last.append(now_ms)
        self._values.append(0.0)

    def record(self, value: float, now_ms: int) -> None:
        if not self._starts:
            self._new(now_ms)
        i = self._current
        if now_ms - self._starts[i] >= self.window_ms:   # the current sample is complete: advance
            i = self._current = (i + 1) % self.samples
            if i >= len(self._starts):
                self._new(now_ms)
            else:
                self._starts[i] = self._last[i] = now_ms
                self._values[i] = 0.0
        self._values[i] += value
        self._last[i] = now_ms

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for i, last in enumerate(self._last):
            if now_ms - last >= expire:
                self._starts[i] = self._last[i] = now_ms
                self._values[i] = 0.0

    def measure(self, now_ms: int) -> float:
        """Bytes per second."""
        self._purge(now_ms)
        if not self._starts:
            self._new(now_ms)
        total = sum(self._values)
        elapsed = now_ms - min(self._starts)
        return total / (max(elapsed, self.window_ms) / 1000)


class ReplicationQuota:
    """One of a broker's two replication quotas (leader or follower)."""

    def __init__(self, rate_key: str, replicas_key: str, samples: int = 11, window_s: int = 1,
                 clock=None, bound=None):
        self.rate_key = rate_key
        self.replicas_key = replicas_key
        # the bound is read when checked: a dynamic config change applies at once, whatever order
        # the metadata listeners run in
        self._bound = bound or (lambda: LONG_MAX)
        self.throttled: dict[str, object] = {}   # topic -> ALL or a set of partition indexes
        self.rate = SimpleRate(samples, window_s * 1000)
        self.recorded = 0   # bytes recorded since start (kproto's counter beside Kafka's byte-rate)
        self._clock = clock or (lambda: int(time.monotonic() * 1000))

    def is_throttled(self, topic: str, partition: int) -> bool:
        parts = self.throttled.get(topic)
        return parts is not None and (parts == ALL or partition in parts)

    @property
    def bound(self) -> int:
        return self._bound()

    def is_quota_exceeded(self) -> bool:
        bound = self._bound()
        if bound >= LONG_MAX:
            return False   # no rate set: nothing is ever held back
        return self.rate.measure(self._clock()) > bound

    def record(self, size: int) -> None:
        if size > 0:
            self.rate.record(size, self._clock())
            self.recorded += size

    def byte_rate(self) -> float:
        return self.rate.measure(self._clock())


    def should_throttle(self, topic: str, partition: int, in_sync: bool) -> bool:
        """Kafka's shouldLeaderThrottle / shouldFollowerThrottle: a replica out of sync, of a
        throttled partition, while the quota is exceeded."""
        return not in_sync and self.is_throttled(topic, partition) and self.is_quota_exceeded()


def rate_bound(config, key: str) -> int:
    """A broker's throttled rate: its dynamic per-broker value, else the dynamic cluster default,
    else Long.MAX_VALUE (no throttle)."""
    for layer in (getattr(config, "dynamic_broker_configs", None), getattr(config, "dynamic_default_configs", None)):
        value = layer.get(key) if layer else None
        if value is not None:
            try:
                return int(value)
            except ValueError:
                return LONG_MAX   # validated when set; an unreadable stored value throttles nothing
    return LONG_MAX


class ReplicationQuotas:
    """The leader and follower quotas of one broker: the bounds follow its config, the throttled
    partitions the topics' throttled-replica lists (refresh() after every metadata change)."""

    def __init__(self, broker_id: int, config, clock=None):
        self.broker_id = broker_id
        self.config = config
        samples = _int(config, "replication.quota.window.num", 11)
        window_s = _int(config, "replication.quota.window.size.seconds", 1)
        self.leader = ReplicationQuota(LEADER_RATE, LEADER_REPLICAS, samples, window_s, clock,
                                       lambda: rate_bound(config, LEADER_RATE))
        self.follower = ReplicationQuota(FOLLOWER_RATE, FOLLOWER_REPLICAS, samples, window_s, clock,
                                         lambda: rate_bound(config, FOLLOWER_RATE))

    def refresh(self, image) -> None:
        for quota in (self.leader, self.follower):
            throttled = {}
            for name, t in image.topics.items():
                value = (getattr(t, "configs", None) or {}).get(quota.replicas_key)
                if value:
                    parts = parse_throttled_partitions(value, self.broker_id)
                    if parts:
                        throttled[name] = parts
            quota.throttled = throttled


def _int(config, key: str, default: int) -> int:
    try:
        return int(config.get(key))
    except (KeyError, TypeError, ValueError):
        return default

"""Connection limits as Kafka's ConnectionQuotas: max.connections (the
broker stops accepting until a connection closes), max.connections.per.ip
with max.connections.per.ip.overrides (a connection over its address's
limit is closed right after accept), max.connection.creation.rate (the
broker pauses accepting for the throttle time) and the `ip` client quota
connection_creation_rate (a connection over it is closed after the
throttle time, without being served)."""
from __future__ import annotations

import logging
import time

import trio

from broker.security.quotas import CONNECTION_CREATION_RATE, Rate

log = logging.getLogger("kproto.connections")


class ConnectionLimits:
    def __init__(self, config):
        self.config = config
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self._freed = trio.Event()
        self._num = config.get_int("quota.window.num")
        self._size = config.get_int("quota.window.size.seconds")
        self._accept_rate = Rate(self._num, self._size)
        self._ip_rates: dict[str, Rate] = {}
        self.image = None   # set by the security manager: the `ip` connection_creation_rate quotas

    def _throttle_s(self, rate: Rate, limit: float, now: float) -> float:
        value = rate.value(now)
        if limit <= 0 or value <= limit:
            return 0.0
        return min((value - limit) / limit * rate.window_s(now), self._num * self._size)

    def accept_delay(self) -> float:
        """max.connection.creation.rate: record one accepted connection; seconds to pause accepting."""
        now = time.monotonic()
        self._accept_rate.record(1, now)
        return self._throttle_s(self._accept_rate, self.config.get_int("max.connection.creation.rate"), now)

    def ip_throttle(self, ip: str) -> float:
        """The `ip` entity's connection_creation_rate: seconds to hold the connection before closing
        it, 0 to serve it."""
        quotas = getattr(self.image, "client_quotas", None)
        if not quotas:
            return 0.0
        values = quotas.get(frozenset({("ip", ip)})) or quotas.get(frozenset({("ip", None)})) or {}
        limit = values.get(CONNECTION_CREATION_RATE)
        if limit is None:
            return 0.0
        now = time.monotonic()
        rate = self._ip_rates.get(ip)
        if rate is None:
            rate = self._ip_rates[ip] = Rate(self._num, self._size)
        rate.record(1, now)
        return self._throttle_s(rate, limit, now)

    def _per_ip_limit(self, ip: str) -> int:
        overrides = self.config.get("max.connections.per.ip.overrides") or ""
        for item in overrides.split(","):
            host, sep, count = item.strip().rpartition(":")
            if sep and host == ip:
                return int(count)
        return self.config.get_int("max.connections.per.ip")

    async def wait_for_slot(self) -> None:
        limit = self.config.get_int("max.connections")
        while self.total >= limit:
            self._freed = trio.Event() if self._freed.is_set() else self._freed
            await self._freed.wait()

    def opened(self, ip: str) -> bool:
        """Count a new connection; False when its address is over its limit (close it)."""
        count = self.per_ip.get(ip, 0)
        if count >= self._per_ip_limit(ip):
            log.info("Rejected connection from /%s, address already has the configured maximum of %d "
                     "connections.", ip, count)
            return False
        self.per_ip[ip] = count + 1
        self.total += 1
        return True

    def closed(self, ip: str) -> None:
        count = self.per_ip.get(ip, 0) - 1
        if count > 0:
            self.per_ip[ip] = count
        else:
            self.per_ip.pop(ip, None)
        self.total -= 1
        self._freed.set()

"""Connection limits as Kafka's ConnectionQuotas: max.connections (the
broker stops accepting until a connection closes), max.connections.per.ip
with max.connections.per.ip.overrides (a connection over its address's
limit is closed right after accept)."""
from __future__ import annotations

import logging

import trio

log = logging.getLogger("kproto.connections")


class ConnectionLimits:
    def __init__(self, config):
        self.config = config
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self._freed = trio.Event()

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

"""Writes that reach a node that is not the writer are sent on to the
writer's registry, as Confluent's followers forward them (the caller's
method, path, query, body and Authorization header), from a worker thread
so the event loop goes on serving.

One urllib3 connection pool per writer URL: forwarded requests reuse kept-
alive connections to the writer rather than opening one each (urllib3
notices a connection the writer closed while idle and opens a new one).
When the election names another writer, the old pool is closed."""
from __future__ import annotations

import ssl

import trio
import urllib3

from broker.schema_registry import errors

WAIT_FOR_WRITER_S = 15.0   # an election after a writer's death takes up to a session timeout
FORWARD_TIMEOUT_S = 60.0
POOL_SIZE = 8   # kept-alive connections to the writer (more concurrent forwards open extra ones, not kept)


class Forwarder:
    def __init__(self, election, metrics=None):
        self.election = election
        self.metrics = metrics   # RegistryMetrics: forwarded requests, connections opened to writers
        self.forwarded = 0
        self._pools: dict[str, urllib3.HTTPConnectionPool] = {}
        self._closed_connections = 0   # connections the pools closed so far had opened

    def _pool(self, url: str) -> urllib3.HTTPConnectionPool:
        pool = self._pools.get(url)
        if pool is None:
            self.close()   # (a new writer: connections to the old one are of no more use)
            kwargs = {"ssl_context": ssl.create_default_context()} if url.startswith("https:") else {}
            pool = self._pools[url] = urllib3.connection_from_url(
                url, maxsize=POOL_SIZE, block=False, retries=False,
                timeout=urllib3.Timeout(connect=5.0, read=FORWARD_TIMEOUT_S), **kwargs)
        return pool

    def close(self) -> None:
        for pool in self._pools.values():
            self._closed_connections += pool.num_connections
            pool.close()
        self._pools.clear()

    def connections(self) -> int:
        """Connections opened to writers so far."""
        return self._closed_connections + sum(p.num_connections for p in self._pools.values())

    async def forward(self, scope, raw: bytes, headers: dict):
        deadline = trio.current_time() + WAIT_FOR_WRITER_S
        last = "no writer elected"
        while trio.current_time() < deadline:
            url = await self.election.wait_writer(max(0.1, deadline - trio.current_time()))
            if url is None:
                break
            if self.election.is_writer():
                return None   # (elected meanwhile: the caller serves it here)
            if url == self.election.url:
                await trio.sleep(0.1)   # named writer but not confirmed yet: never forward to ourselves
                continue
            target = scope["path"] + (("?" + scope["query_string"].decode("latin-1"))
                                      if scope.get("query_string") else "")
            try:
                status, body = await trio.to_thread.run_sync(_send, self._pool(url), scope["method"], target, raw,
                                                             headers)
                self.forwarded += 1
                if self.metrics is not None:
                    self.metrics.forwarded = self.forwarded
                    self.metrics.forward_connections = self.connections()
                return status, body
            except (OSError, urllib3.exceptions.HTTPError) as exc:
                last = f"{url}: {exc}"
                await trio.sleep(0.2)   # the writer died: wait for the next election
        raise errors.forwarding_error(last)


def _send(pool: urllib3.HTTPConnectionPool, method: str, target: str, raw: bytes, headers: dict):
    forward = {"Content-Type": headers.get("content-type", "application/vnd.schemaregistry.v1+json")}
    if "authorization" in headers:
        forward["Authorization"] = headers["authorization"]
    resp = pool.urlopen(method, target, body=raw if method in ("POST", "PUT") else None, headers=forward,
                        redirect=False, assert_same_host=False)
    return resp.status, resp.data

"""Writes that reach a node that is not the writer are sent on to the
writer's registry, as Confluent's followers forward them (the caller's
method, path, query, body and Authorization header), from a worker thread
so the event loop goes on serving."""
from __future__ import annotations

import urllib.error
import urllib.request

import trio

from broker.schema_registry import errors

WAIT_FOR_WRITER_S = 15.0   # an election after a writer's death takes up to a session timeout
FORWARD_TIMEOUT_S = 60.0


class Forwarder:
    def __init__(self, election):
        self.election = election
        self.forwarded = 0

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
            target = url + scope["path"] + (("?" + scope["query_string"].decode("latin-1"))
                                            if scope.get("query_string") else "")
            try:
                status, body = await trio.to_thread.run_sync(_send, scope["method"], target, raw, headers)
                self.forwarded += 1
                return status, body
            except OSError as exc:
                last = f"{url}: {exc}"
                await trio.sleep(0.2)   # the writer died: wait for the next election
        raise errors.forwarding_error(last)


def _send(method: str, url: str, raw: bytes, headers: dict):
    forward = {"Content-Type": headers.get("content-type", "application/vnd.schemaregistry.v1+json")}
    if "authorization" in headers:
        forward["Authorization"] = headers["authorization"]
    req = urllib.request.Request(url, data=raw if method in ("POST", "PUT") else None, method=method,
                                 headers=forward)
    try:
        with urllib.request.urlopen(req, timeout=FORWARD_TIMEOUT_S) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()

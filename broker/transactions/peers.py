"""Requests from the transaction code to other brokers (WriteTxnMarkers to partition leaders,
AddPartitionsToTxn verify_only to transaction coordinators): a connection to each broker's
inter-broker listener, secured as the replication fetchers' are, one request at a time on each,
remade when the broker's endpoint changes. The versions a broker serves are asked once per
endpoint (ApiVersions; again after a request to it failed), so a request goes at the newest
version both sides know, as Kafka's NetworkClient picks it (a broker of an older release in a
rolling upgrade gets one it serves)."""
from __future__ import annotations

import logging

import trio

from kproto.errors import ErrorCode
from kproto.messages.api_versions_request import ApiVersionsRequest

log = logging.getLogger("kproto.transactions")

API_VERSIONS_VERSION = 3


class PeerConnections:
    def __init__(self, broker, client_id: str):
        self.broker = broker
        self.client_id = client_id   # a prefix: the node id is added
        self._conns: dict[int, tuple] = {}   # broker id -> (BrokerConnection, trio.Lock, endpoint)
        self._versions: dict[int, tuple] = {}   # broker id -> (endpoint, {api key: (min, max)})

    async def version(self, broker_id: int, endpoint, api_key: int, wanted: int, timeout: float) -> int:
        """The version to send api_key at to broker_id: the newest up to `wanted` that the broker
        serves; `wanted` when its versions are not known (it did not answer ApiVersions)."""
        known = self._versions.get(broker_id)
        if known is None or known[0] != endpoint:
            resp = await self.request(broker_id, endpoint, ApiVersionsRequest(
                client_software_name="kproto", client_software_version="1"), API_VERSIONS_VERSION, timeout)
            if resp is None or resp.error_code:
                return wanted
            known = self._versions[broker_id] = (endpoint, {k.api_key: (k.min_version, k.max_version)
                                                            for k in resp.api_keys})
        lo, hi = known[1].get(api_key, (0, wanted))
        return max(lo, min(hi, wanted))

    async def request(self, broker_id: int, endpoint, req, version: int, timeout: float):
        """The answer of broker_id at endpoint, or None when the request failed or timed out
        (logged; a timed-out connection is closed, to be reopened by the next request)."""
        entry = self._conns.get(broker_id)
        if entry is None or entry[2] != endpoint:
            entry = self._conns[broker_id] = (
                _connection(self.broker, endpoint, f"{self.client_id}-{self.broker.node_id}"), trio.Lock(), endpoint)
        conn, lock, _ep = entry
        what = type(req).__name__.removesuffix("Request")
        resp = None
        async with lock:
            with trio.move_on_after(timeout) as scope:
                try:
                    resp = await conn.request(req, version)
                except (OSError, EOFError, trio.BrokenResourceError) as exc:
                    log.debug("%s to broker %d failed: %s", what, broker_id, exc)
                except Exception:
                    log.exception("%s to broker %d failed", what, broker_id)
            if scope.cancelled_caught:
                await conn.aclose()
        return resp

    async def partition_errors(self, broker_id: int, endpoint, partitions, make_request, version: int,
                               timeout: float, read_errors) -> dict:
        """A request about `partitions` [(topic, index)] to broker_id: make_request({topic: [index]})
        builds it, read_errors(response) gives {(topic, index): error}. Every partition gets
        NETWORK_EXCEPTION when the broker has no endpoint or does not answer."""
        if endpoint is None:
            return {tp: ErrorCode.NETWORK_EXCEPTION for tp in partitions}
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        resp = await self.request(broker_id, endpoint, make_request(by_topic), version, timeout)
        if resp is None:
            self._versions.pop(broker_id, None)   # it may come back as another release: ask again
            return {tp: ErrorCode.NETWORK_EXCEPTION for tp in partitions}
        return read_errors(resp)

    async def aclose(self) -> None:
        for conn, _lock, _ep in list(self._conns.values()):
            await conn.aclose()
        self._conns.clear()


def _connection(broker, endpoint, client_id: str):
    repl = getattr(broker, "replication", None)
    make = getattr(repl, "connection", None)
    if make is not None:
        return make(endpoint[0], endpoint[1], client_id)
    from broker.replication.client import BrokerConnection
    return BrokerConnection(endpoint[0], endpoint[1], client_id)


def errors_by_partition(groups, topics: str, partitions: str, error: str) -> dict:
    """{(topic name, partition index): error} from a response's groups (markers, transactions),
    each with a list of topics (attribute `topics`), each with its partitions (`partitions`)
    carrying `partition_index` and an error code (`error`)."""
    return {(t.name, p.partition_index): getattr(p, error)
            for g in groups for t in getattr(g, topics) for p in getattr(t, partitions)}

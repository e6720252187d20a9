"""An in-process cluster of kproto brokers for replication tests and benchmarks, until every
node runs the KRaft quorum: node `controller` plays the active controller and
its metadata appends are copied to every live node's metadata log (what the
quorum does for committed records); a node that restarts first catches up on
the records it missed. Broker registrations are a shared dict on every image
(image.brokers), as the quorum keeps them; kill() fences a node.

Brokers talk to each other over real sockets (follower fetches,
AlterPartition); the tests' producer and consumer use kproto's own codecs."""
from __future__ import annotations

import shutil
import tempfile
import time
from types import SimpleNamespace

import trio

from kproto import records as rec
from kproto.messages.fetch_request import FetchRequest
from kproto.messages.produce_request import ProduceRequest

from broker.launch.embedded import _config
from broker.replication.client import BrokerConnection


def _free_port() -> int:
    from broker.launch.process import free_port
    return free_port()


class _Quorum:
    def __init__(self, cluster, node_id):
        self.cluster, self.node_id = cluster, node_id

    @property
    def is_active_controller(self) -> bool:
        return self.node_id == self.cluster.controller

    @property
    def active_controller_id(self) -> int:
        return self.cluster.controller

    async def run(self, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()   # (a real quorum runs its raft shell here)

    def wrap(self, api_key: int, handler):
        """Metadata-changing requests run on the controller node, as the quorum forwards them."""
        from broker.quorum.replicated import FORWARDED
        if api_key not in FORWARDED:
            return handler

        async def run(ctx, request):
            if self.is_active_controller:
                return await handler(ctx, request)
            own = ctx.broker
            ctx.broker = self.cluster.brokers[self.cluster.controller]
            try:
                return await handler(ctx, request)
            finally:
                ctx.broker = own
        return run


class Cluster:
    def __init__(self, n: int = 3, settings: dict | None = None, controller: int = 1):
        self.n = n
        self.settings = settings or {}
        self.controller = controller
        self.root = tempfile.mkdtemp(prefix="kproto-repl-")
        self.ports = {i: _free_port() for i in range(1, n + 1)}
        self.regs = {i: SimpleNamespace(broker_id=i, rack=None, fenced=True, in_controlled_shutdown=False,
                                        broker_epoch=i, end_points=[SimpleNamespace(
                                            name="PLAINTEXT", host="127.0.0.1", port=self.ports[i])])
                     for i in range(1, n + 1)}
        self.brokers = {}
        self.scopes = {}
        self.history: list[list] = []
        self.applied = {i: 0 for i in range(1, n + 1)}
        self.nursery = None

    def data_dir(self, i: int) -> str:
        return f"{self.root}/node{i}"

    async def start(self, nursery) -> None:
        self.nursery = nursery
        for i in range(1, self.n + 1):
            await self.start_node(i)

    async def start_node(self, i: int) -> None:
        from broker.broker import Broker
        settings = {"node.id": str(i), **self.settings}
        b = Broker(_config(self.data_dir(i), self.ports[i], settings, False))
        b.image.brokers = self.regs
        b.open_storage()
        b.quorum = _Quorum(self, i)
        for records in self.history[self.applied[i]:]:   # what it missed while down
            b.metadata.append(records)
        self.applied[i] = len(self.history)
        if i == self.controller:
            self._fan_out(b)
        self.brokers[i] = b
        scope = trio.CancelScope()
        self.scopes[i] = scope

        async def runner(task_status=trio.TASK_STATUS_IGNORED):
            with scope:
                await b.run(task_status=task_status)
        await self.nursery.start(runner)
        self.regs[i].fenced = False
        self.poke()

    def _fan_out(self, b) -> None:
        original = b.metadata.append

        def append(records):
            offset = original(records)
            self.history.append(list(records))
            self.applied[b.node_id] = len(self.history)
            for j, other in self.brokers.items():
                if j != b.node_id and j in self.scopes:
                    other.metadata.append(list(records))
                    self.applied[j] = len(self.history)
            return offset
        b.metadata.append = append

    def poke(self) -> None:
        c = self.brokers.get(self.controller)
        if c is not None:
            c.replication._sweep_needed = True

    def kill(self, i: int) -> None:
        """Stop node i at once (its tasks cancelled, files left as they are) and fence it."""
        self.scopes.pop(i).cancel()
        self.regs[i].fenced = True
        self.poke()

    def partition(self, topic: str, index: int = 0):
        c = self.brokers[self.controller]
        return c.image.topics[topic].partitions[index]

    async def wait_for(self, predicate, timeout: float = 15.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await trio.sleep(0.02)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class RawClient:
    """Produce (acks=all, idempotent fields set by hand) and fetch with kproto's codecs."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.conns: dict[int, BrokerConnection] = {}

    def conn(self, i: int) -> BrokerConnection:
        c = self.conns.get(i)
        if c is None:
            c = self.conns[i] = BrokerConnection("127.0.0.1", self.cluster.ports[i], "test-client")
        return c

    async def produce(self, node: int, topic: str, values: list[bytes], *, producer_id=-1, seq=-1,
                      acks=-1, timeout_ms=5000, partition=0):
        batch = rec.build_batch([(None, v) for v in values], producer_id=producer_id,
                                producer_epoch=0 if producer_id >= 0 else -1, base_sequence=seq)
        req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
        resp = await self.conn(node).request(req, 10)
        return resp.responses[0].partition_responses[0]

    async def fetch(self, node: int, topic_id, offset: int, max_wait_ms=0):
        req = FetchRequest(max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                               topic_id=topic_id, partitions=[FetchRequest.FetchPartition(
                                   partition=0, current_leader_epoch=-1, fetch_offset=offset,
                                   last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)])],
                           forgotten_topics_data=[], rack_id="")
        resp = await self.conn(node).request(req, 16)
        return resp.responses[0].partitions[0]

    async def read_all(self, node: int, topic_id) -> tuple[list[bytes], int]:
        """(values up to the high watermark, high watermark) read from node."""
        out, offset = [], 0
        while True:
            p = await self.fetch(node, topic_id, offset)
            assert p.error_code == 0, p
            data = bytes(p.records or b"")
            if not data:
                return out, p.high_watermark
            got = _values(data)
            for off, v in got:
                if off >= offset:
                    out.append(v)
                    offset = off + 1

    async def aclose(self):
        for c in self.conns.values():
            await c.aclose()


def run_with_cluster(body, nodes: int, settings: dict, controller: int, timeout: float = 60,
                     prepare=None) -> None:
    """trio.run a test body against a started Cluster: `await body(cluster, client)` (a RawClient)
    within timeout seconds; prepare(cluster), when given, runs before the start (racks, say).
    The client and the cluster are closed after, whatever happened."""
    async def main():
        cluster = Cluster(nodes, settings, controller=controller)
        if prepare is not None:
            prepare(cluster)
        client = RawClient(cluster)
        try:
            async with trio.open_nursery() as nursery:
                await cluster.start(nursery)
                with trio.fail_after(timeout):
                    await body(cluster, client)
                nursery.cancel_scope.cancel()
        finally:
            await client.aclose()
            cluster.close()
    trio.run(main)


def _values(data: bytes) -> list[tuple[int, bytes]]:
    out, pos = [], 0
    while pos + rec.LOG_OVERHEAD <= len(data):
        end = pos + rec.LOG_OVERHEAD + int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        if end > len(data):
            break
        for r in rec.iter_records(data[pos:end]):
            out.append((r.offset, bytes(r.value)))
        pos = end
    return out

"""How this broker's share-partitions and share-group admin reach the share coordinator (Kafka 4.3's
DefaultStatePersister): sent to the leader of the key's ("group:topicId:partition")
`__share_group_state` partition, in process when that is this broker (the same
`ShareCoordinatorService` methods the handlers of APIs 83-87 call), else over the inter-broker
listener. While the coordinator moves (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, no answer) the call is retried with the leadership read again, for at
most `RETRY_S` seconds; the last error is the answer then.

Writes are batched as Kafka 4.3's PersisterStateManager batches them: the writes of every
share-partition of this broker that wait for the same coordinator go in one WriteShareGroupState
per group, with at most one request in flight per coordinator (what waits meanwhile goes in the
next); each caller still gets its own key's result. The other RPCs go one key per call.
"""
from __future__ import annotations

import logging

import trio

from kproto.errors import ErrorCode as E
from kproto.messages.delete_share_group_state_request import DeleteShareGroupStateRequest as DelReq
from kproto.messages.initialize_share_group_state_request import InitializeShareGroupStateRequest as InitReq
from kproto.messages.read_share_group_state_request import ReadShareGroupStateRequest as ReadReq
from kproto.messages.read_share_group_state_summary_request import ReadShareGroupStateSummaryRequest as SumReq
from kproto.messages.write_share_group_state_request import WriteShareGroupStateRequest as WriteReq

from broker.share import state_store

log = logging.getLogger("kproto.share")

RETRY_S = 15.0
_BACKOFF_S = (0.05, 0.1, 0.2, 0.4, 0.5)
_MOVING = (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS)
# the versions sent: the highest each side serves (broker/handlers/share_state.py)
_VERSIONS = {InitReq: 0, ReadReq: 0, WriteReq: 1, DelReq: 0, SumReq: 1}


class _Failed:
    """The answer when no coordinator answered."""

    def __init__(self, error: int):
        self.error_code = error
        self.error_message = None


class _Write:
    """One key's pending WriteShareGroupState, answered through `done`."""
    __slots__ = ("group_id", "topic_id", "data", "deadline", "attempt", "result", "done")

    def __init__(self, group_id: str, topic_id, data, deadline: float):
        self.group_id = group_id
        self.topic_id = topic_id
        self.data = data                    # its WriteShareGroupStateRequest.PartitionData
        self.deadline = deadline            # trio time after which a moving coordinator is the answer
        self.attempt = 0
        self.result = _Failed(E.COORDINATOR_NOT_AVAILABLE)
        self.done = trio.Event()

    @property
    def key(self) -> tuple:
        return self.group_id, self.topic_id, self.data.partition


class Persister:
    def __init__(self, broker, coordinator):
        self.broker = broker
        self.coordinator = coordinator
        self._conns: dict[int, tuple] = {}     # broker id -> (BrokerConnection, trio.Lock, endpoint)
        # writes waiting for their coordinator, by its broker id (-1: not known yet); each coordinator
        # has at most one request in flight, carrying every write that waited meanwhile
        self._queues: dict[int, list] = {}
        self._sending: set = set()
        self._running = False
        self._nursery = None
        self._outstanding: set = set()          # writes not answered yet

    # -- batched writes (Kafka 4.3's PersisterStateManager: one request per coordinator and group) --

    async def run(self) -> None:
        """The sender tasks' home; writes are sent one key per call while it is not running."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery, self._running = nursery, True
                await trio.sleep_forever()
        finally:
            self._running, self._nursery = False, None
            for item in self._outstanding:      # stopping: COORDINATOR_NOT_AVAILABLE
                item.done.set()
            self._outstanding.clear()
            self._queues.clear()

    def _enqueue(self, item: _Write) -> None:
        dest = self._destination(item.group_id, item.topic_id, item.data.partition)
        self._queues.setdefault(dest, []).append(item)
        if dest not in self._sending:
            self._sending.add(dest)
            self._nursery.start_soon(self._sender, dest)

    def _destination(self, group_id, topic_id, partition: int) -> int:
        """The broker id leading the key's __share_group_state partition, or -1."""
        index = self.coordinator.index_for(group_id, topic_id, partition)
        topic = self.broker.image.topics.get(state_store.TOPIC)
        info = topic.partitions.get(index) if topic is not None and index is not None else None
        return -1 if info is None else info.leader

    async def _sender(self, dest: int) -> None:
        """Sends what waits for `dest`, one request per group, until nothing does. To another broker
        one request at a time (its connection carries one anyway): what waits meanwhile goes in the
        next. To this broker's own coordinator without waiting for the answer: it decides the next
        request while the last one replicates, and a write must not wait for another's round trip."""
        local = dest == self.broker.node_id or getattr(self.broker, "replication", None) is None
        try:
            while self._queues.get(dest):
                items = self._queues.pop(dest)
                by_group: dict = {}
                for item in items:
                    by_group.setdefault(item.group_id, []).append(item)
                for group_id, group_items in by_group.items():
                    if local:
                        self._nursery.start_soon(self._send_group, group_id, group_items)
                    else:
                        await self._send_group(group_id, group_items)
                if local:
                    await trio.sleep(0)     # let this tick's writes gather
        finally:
            self._sending.discard(dest)
            if self._queues.get(dest) and self._running:     # queued while this task was ending
                self._sending.add(dest)
                self._nursery.start_soon(self._sender, dest)

    async def _send_group(self, group_id: str, items: list) -> None:
        rounds: list[dict] = []             # a key at most once per request: its later writes go after
        for item in items:
            for r in rounds:
                if item.key not in r:
                    r[item.key] = item
                    break
            else:
                rounds.append({item.key: item})
        for r in rounds:
            topics: dict = {}
            for item in r.values():
                topics.setdefault(item.topic_id, []).append(item.data)
            req = WriteReq(group_id=group_id, topics=[WriteReq.WriteStateData(topic_id=tid, partitions=parts)
                                                      for tid, parts in topics.items()])
            first = next(iter(r.values()))
            try:
                resp = await self._send(group_id, first.topic_id, first.data.partition, req, "write")
            except Exception:           # answered as no coordinator (retried), never the sender's end
                log.exception("share state write of group %s failed", group_id)
                resp = None
            got = {}
            for t in getattr(resp, "results", None) or ():
                for p in t.partitions or ():
                    got[(group_id, t.topic_id, p.partition)] = p
            for key, item in r.items():
                res = got.get(key, _Failed(E.COORDINATOR_NOT_AVAILABLE))
                if res.error_code in _MOVING and trio.current_time() < item.deadline and self._running:
                    item.result = res
                    self._nursery.start_soon(self._retry_later, item)
                else:
                    if res.error_code != E.NONE:
                        log.info("share state write of %s:%s:%d: %s", *key, E(res.error_code).name)
                    item.result = res
                    item.done.set()

    async def _retry_later(self, item: _Write) -> None:
        await trio.sleep(_BACKOFF_S[min(item.attempt, len(_BACKOFF_S) - 1)])
        item.attempt += 1
        if self._running:
            self._enqueue(item)             # routed again: the coordinator may have moved
        else:
            item.done.set()

    # -- one key per call ------------------------------------------------------------------------

    async def initialize(self, group_id: str, topic_id, partition: int, state_epoch: int, start_offset: int):
        return await self._call(group_id, topic_id, partition, InitReq(group_id=group_id, topics=[
            InitReq.InitializeStateData(topic_id=topic_id, partitions=[InitReq.PartitionData(
                partition=partition, state_epoch=state_epoch, start_offset=start_offset)])]), "initialize")

    async def read(self, group_id: str, topic_id, partition: int, leader_epoch: int):
        return await self._call(group_id, topic_id, partition, ReadReq(group_id=group_id, topics=[
            ReadReq.ReadStateData(topic_id=topic_id, partitions=[ReadReq.PartitionData(
                partition=partition, leader_epoch=leader_epoch)])]), "read")

    async def write(self, group_id: str, topic_id, partition: int, leader_epoch: int, state_epoch: int,
                    start_offset: int, complete: int, batches):
        data = WriteReq.PartitionData(
            partition=partition, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
            delivery_complete_count=complete, state_batches=[WriteReq.StateBatch(
                first_offset=f, last_offset=last, delivery_state=s, delivery_count=c)
                for f, last, s, c in batches])
        if not self._running:          # no sender task (a broker starting, a unit test): one key alone
            return await self._call(group_id, topic_id, partition, WriteReq(group_id=group_id, topics=[
                WriteReq.WriteStateData(topic_id=topic_id, partitions=[data])]), "write")
        item = _Write(group_id, topic_id, data, trio.current_time() + RETRY_S)
        self._outstanding.add(item)
        self._enqueue(item)
        try:
            await item.done.wait()
        finally:
            self._outstanding.discard(item)
        return item.result

    async def summary(self, group_id: str, topic_id, partition: int):
        return await self._call(group_id, topic_id, partition, SumReq(group_id=group_id, topics=[
            SumReq.ReadStateSummaryData(topic_id=topic_id, partitions=[SumReq.PartitionData(
                partition=partition, leader_epoch=-1)])]), "summary")

    async def delete(self, group_id: str, topic_id, partition: int):
        return await self._call(group_id, topic_id, partition, DelReq(group_id=group_id, topics=[
            DelReq.DeleteStateData(topic_id=topic_id, partitions=[DelReq.PartitionData(partition=partition)])]),
            "delete")

    # -- routing ---------------------------------------------------------------------------------

    async def _call(self, group_id, topic_id, partition, req, method: str):
        """The key's PartitionResult from its coordinator (error_code, error_message and the rest)."""
        result = _Failed(E.COORDINATOR_NOT_AVAILABLE)
        with trio.move_on_after(RETRY_S):
            attempt = 0
            while True:
                result = await self._once(group_id, topic_id, partition, req, method)
                if result.error_code not in _MOVING:
                    return result
                await trio.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])
                attempt += 1
        log.info("share state %s of %s:%s:%d: %s", method, group_id, topic_id, partition,
                 E(result.error_code).name)
        return result

    async def _once(self, group_id, topic_id, partition, req, method: str):
        resp = await self._send(group_id, topic_id, partition, req, method)
        try:
            return resp.results[0].partitions[0]
        except (AttributeError, IndexError):
            return _Failed(E.COORDINATOR_NOT_AVAILABLE)

    async def _send(self, group_id, topic_id, partition, req, method: str):
        """`req` sent to the coordinator of the key (group, topic id, partition): its response, or
        None when no coordinator answered."""
        index = self.coordinator.index_for(group_id, topic_id, partition)
        topic = self.broker.image.topics.get(state_store.TOPIC)
        info = topic.partitions.get(index) if topic is not None and index is not None else None
        if info is None:                # being created (index_for's caller creates it)
            self.coordinator._shard(index)
            return None
        if info.leader == self.broker.node_id or getattr(self.broker, "replication", None) is None:
            return await getattr(self.coordinator, method)(req)
        if info.leader < 0:
            return None
        return await self._remote(info.leader, req)

    async def _remote(self, broker_id: int, req):
        repl = self.broker.replication
        endpoint = repl.endpoint_of(broker_id)          # its inter-broker listener
        if endpoint is None:
            return None
        entry = self._conns.get(broker_id)
        if entry is None or entry[2] != endpoint:
            if entry is not None:
                await entry[0].aclose()
            entry = self._conns[broker_id] = (
                repl.connection(endpoint[0], endpoint[1], f"share-persister-{self.broker.node_id}"),
                trio.Lock(), endpoint)
        conn, lock, _ep = entry
        async with lock:
            with trio.move_on_after(5) as scope:
                try:
                    return await conn.request(req, _VERSIONS[type(req)])
                except (OSError, EOFError, trio.BrokenResourceError) as exc:
                    log.debug("share state request to broker %d failed: %s", broker_id, exc)
                    return None
            if scope.cancelled_caught:
                await conn.aclose()
        return None

    async def aclose(self) -> None:
        for conn, _lock, _ep in list(self._conns.values()):
            await conn.aclose()
        self._conns.clear()

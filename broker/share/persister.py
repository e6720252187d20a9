"""How this broker's share-partitions and share-group admin reach the share coordinator (Kafka 4.3's
DefaultStatePersister): one key ("group:topicId:partition") per call, sent to the leader of the
key's `__share_group_state` partition, in process when that is this broker (the same
`ShareCoordinatorService` methods the handlers of APIs 83-87 call), else over the inter-broker
listener. While the coordinator moves (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, no answer) the call is retried with the leadership read again, for at
most `RETRY_S` seconds; the last error is the answer then.
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


class Persister:
    def __init__(self, broker, coordinator):
        self.broker = broker
        self.coordinator = coordinator
        self._conns: dict[int, tuple] = {}     # broker id -> (BrokerConnection, trio.Lock, endpoint)

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
        return await self._call(group_id, topic_id, partition, WriteReq(group_id=group_id, topics=[
            WriteReq.WriteStateData(topic_id=topic_id, partitions=[WriteReq.PartitionData(
                partition=partition, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
                delivery_complete_count=complete, state_batches=[WriteReq.StateBatch(
                    first_offset=f, last_offset=last, delivery_state=s, delivery_count=c)
                    for f, last, s, c in batches])])]), "write")

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
        index = self.coordinator.index_for(group_id, topic_id, partition)
        topic = self.broker.image.topics.get(state_store.TOPIC)
        info = topic.partitions.get(index) if topic is not None and index is not None else None
        if info is None:                # being created (index_for's caller creates it)
            self.coordinator._shard(index)
            return _Failed(E.COORDINATOR_NOT_AVAILABLE)
        if info.leader == self.broker.node_id or getattr(self.broker, "replication", None) is None:
            resp = await getattr(self.coordinator, method)(req)
        else:
            if info.leader < 0:
                return _Failed(E.COORDINATOR_NOT_AVAILABLE)
            resp = await self._remote(info.leader, req)
            if resp is None:
                return _Failed(E.COORDINATOR_NOT_AVAILABLE)
        try:
            return resp.results[0].partitions[0]
        except (AttributeError, IndexError):
            return _Failed(E.COORDINATOR_NOT_AVAILABLE)

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

"""Broker liveness for a multi-node cluster, as Kafka's KRaft controller keeps
it: every broker sends BrokerHeartbeat to the active controller every
broker.heartbeat.interval.ms; the active controller fences a broker it has
not heard from for broker.session.timeout.ms (FenceBrokerRecord) and unfences
it when it heartbeats again (UnfenceBrokerRecord). Fencing is what triggers
the elections of broker/replication/election.py (the partitions it led get
new leaders from their ISR).

Heartbeats go to the active controller's broker listener (kproto nodes run
in combined mode) and are not advertised to clients. Nothing runs on a
single-node broker (no quorum)."""
from __future__ import annotations

import logging
import time

import trio

from kproto.errors import ErrorCode, KafkaError
from kproto.messages.allocate_producer_ids_request import AllocateProducerIdsRequest
from kproto.messages.broker_heartbeat_request import BrokerHeartbeatRequest
from kproto.messages.broker_heartbeat_response import BrokerHeartbeatResponse
from kproto.metadata.fence_broker_record import FenceBrokerRecord
from kproto.metadata.unfence_broker_record import UnfenceBrokerRecord

from broker.replication.client import BrokerConnection

log = logging.getLogger("kproto.replication")
HEARTBEAT_VERSION = 1


class Liveness:
    def __init__(self, manager):
        self.manager = manager
        self.broker = manager.broker
        self.last_seen: dict[int, float] = {}   # broker id -> monotonic time of its last heartbeat
        self.active_since: float | None = None  # when this node became the active controller
        self._writing = False

    def _ms(self, key: str, default: int) -> int:
        return self.manager._cfg_int(key, default)

    # -- every broker -----------------------------------------------------------------------

    async def heartbeat_loop(self) -> None:
        conn = None
        while True:
            await trio.sleep(self._ms("broker.heartbeat.interval.ms", 2000) / 1000)
            quorum = getattr(self.broker, "quorum", None)
            if quorum is None:
                return
            reg = self.broker.image.brokers.get(self.broker.node_id)
            if reg is None:
                continue   # not registered yet
            req = BrokerHeartbeatRequest(broker_id=self.broker.node_id, broker_epoch=reg.broker_epoch,
                                         current_metadata_offset=self.broker.image.offset, want_fence=False,
                                         want_shut_down=False, offline_log_dirs=[])
            try:
                if quorum.is_active_controller:
                    self.handle(req)
                    continue
                ep = self.manager.endpoint_of(quorum.active_controller_id)
                if ep is None:
                    continue
                if conn is None or (conn.host, conn.port) != ep:
                    if conn is not None:
                        await conn.aclose()
                    conn = BrokerConnection(ep[0], ep[1], f"heartbeat-{self.broker.node_id}")
                with trio.move_on_after(self._ms("broker.session.timeout.ms", 9000) / 2000):
                    await conn.request(req, HEARTBEAT_VERSION)
            except (OSError, EOFError, trio.BrokenResourceError, KafkaError) as exc:
                log.debug("heartbeat: %s", exc)
                if conn is not None:
                    await conn.aclose()

    async def producer_id_loop(self) -> None:
        """A node that is not the active controller gets its producer id blocks from it ahead of need
        (AllocateProducerIds), since its InitProducerId cannot write the metadata log itself."""
        conn = None
        while True:
            await trio.sleep(0.2)
            quorum = getattr(self.broker, "quorum", None)
            pm = getattr(self.broker, "producer_ids", None)
            if quorum is None or pm is None or quorum.is_active_controller or not pm.needs_block():
                continue
            ep = self.manager.endpoint_of(quorum.active_controller_id)
            if ep is None:
                continue
            try:
                if conn is None or (conn.host, conn.port) != ep:
                    if conn is not None:
                        await conn.aclose()
                    conn = BrokerConnection(ep[0], ep[1], f"producer-ids-{self.broker.node_id}")
                with trio.move_on_after(5):
                    resp = await conn.request(AllocateProducerIdsRequest(
                        broker_id=self.broker.node_id, broker_epoch=-1), 0)
                    if resp.error_code == 0 and pm.needs_block():
                        pm.prefetched.append((resp.producer_id_start, resp.producer_id_start + resp.producer_id_len))
            except (OSError, EOFError, trio.BrokenResourceError) as exc:
                log.debug("AllocateProducerIds: %s", exc)
                if conn is not None:
                    await conn.aclose()
                conn = None

    # -- the active controller ----------------------------------------------------------------

    def handle(self, req) -> BrokerHeartbeatResponse:
        quorum = getattr(self.broker, "quorum", None)
        if quorum is None or not quorum.is_active_controller:
            return BrokerHeartbeatResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER,
                                           is_caught_up=False, is_fenced=True, should_shut_down=False)
        reg = self.broker.image.brokers.get(req.broker_id)
        if reg is None:
            return BrokerHeartbeatResponse(throttle_time_ms=0, error_code=ErrorCode.BROKER_ID_NOT_REGISTERED,
                                           is_caught_up=False, is_fenced=True, should_shut_down=False)
        if req.broker_epoch != reg.broker_epoch:
            return BrokerHeartbeatResponse(throttle_time_ms=0, error_code=ErrorCode.STALE_BROKER_EPOCH,
                                           is_caught_up=False, is_fenced=True, should_shut_down=False)
        self.last_seen[req.broker_id] = time.monotonic()
        if reg.fenced and not req.want_fence:
            self._append([UnfenceBrokerRecord(id=req.broker_id, epoch=reg.broker_epoch)],
                         f"broker {req.broker_id} unfenced")
        return BrokerHeartbeatResponse(throttle_time_ms=0, error_code=0, is_caught_up=True,
                                       is_fenced=bool(reg.fenced), should_shut_down=False)

    def _append(self, records, what: str) -> None:
        try:
            self.broker.controller.log.append(records)
            self.manager._sweep_needed = True
            log.info("%s", what)
        except KafkaError as exc:
            log.info("%s not written: %s", what, exc)

    def check(self) -> None:
        """Fence the brokers that missed their session (called by the controller loop)."""
        quorum = getattr(self.broker, "quorum", None)
        if quorum is None or not quorum.is_active_controller:
            self.active_since = None
            return
        now = time.monotonic()
        if self.active_since is None:
            self.active_since = now   # a new controller gives every broker a full session first
        self.last_seen[self.broker.node_id] = now
        session = self._ms("broker.session.timeout.ms", 9000) / 1000
        for bid, reg in list(self.broker.image.brokers.items()):
            if reg.fenced:
                continue
            seen = max(self.last_seen.get(bid, 0.0), self.active_since)
            if now - seen > session:
                self._append([FenceBrokerRecord(id=bid, epoch=reg.broker_epoch)],
                             f"broker {bid} fenced: no heartbeat for {now - seen:.1f} s")

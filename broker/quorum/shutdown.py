"""Controlled shutdown, as a Kafka 3.9 KRaft broker and controller do it.

Broker side (Kafka's BrokerLifecycleManager.beginControlledShutdown): on SIGTERM the broker keeps
serving and sends BrokerHeartbeat with want_shut_down=true until the active controller answers
should_shut_down (or the wait is over, see `wait_s`); then it stops (fetchers, listeners) and
exits. A node that is also the raft leader then resigns (EndQuorumEpoch), so the other
controllers elect a successor at once instead of after an election timeout.

Controller side (BrokerHeartbeatManager.calculateNextBrokerState and
ReplicationControlManager.handleBrokerInControlledShutdown):
- the first such heartbeat of an unfenced broker writes, in one batch, a
  BrokerRegistrationChangeRecord(in_controlled_shutdown=1) and the elections that move every
  partition it leads to another ISR member and take it out of every ISR (a partition whose only
  ISR member it is keeps it in the ISR, leaderless, as Kafka does; with unclean election enabled
  another replica is elected);
- shutdown is granted (should_shut_down) once the broker leads nothing and every active broker
  (unfenced, not shutting down) reported in its heartbeats a metadata offset that covers those
  records, so the new leaders act as leaders before the old one goes; the broker is then fenced
  (BrokerRegistrationChangeRecord fenced=1), so Metadata lists its replicas as offline;
- a fenced broker that wants to shut down may go at once.
"""
from __future__ import annotations

import logging

import trio

from kproto.errors import ErrorCode, KafkaError
from kproto.messages.broker_heartbeat_request import BrokerHeartbeatRequest
from kproto.messages.broker_heartbeat_response import BrokerHeartbeatResponse
from kproto.metadata.broker_registration_change_record import BrokerRegistrationChangeRecord

from broker.replication import election

log = logging.getLogger("kproto.shutdown")

FENCE = 1
IN_CONTROLLED_SHUTDOWN = 1


def _response(fenced: bool, go: bool) -> BrokerHeartbeatResponse:
    return BrokerHeartbeatResponse(error_code=0, is_caught_up=True, is_fenced=fenced,
                                   should_shut_down=go)


class ShutdownTracker:
    """The active controller's view of controlled shutdowns (in memory, as Kafka's
    BrokerHeartbeatManager: a new active controller starts from the registrations)."""

    def __init__(self, quorum):
        self.q = quorum
        self.offsets: dict[int, int] = {}          # broker id -> metadata offset of its last heartbeat
        self.shutdown_offset: dict[int, int] = {}  # broker id -> last offset of its leadership moves

    def note(self, req) -> None:
        self.offsets[req.broker_id] = req.current_metadata_offset

    def _brokers(self):
        return self.q.broker.controller.brokers()

    def _leads_anything(self, broker_id: int) -> bool:
        return any(p.leader == broker_id for t in self.q.image.topics.values() for p in t.partitions.values())

    def _lowest_active_offset(self, broker_id: int) -> float:
        low = float("inf")
        for bid, reg in self.q.image.brokers.items():
            if bid == broker_id or reg.fenced or getattr(reg, "in_controlled_shutdown", False):
                continue
            low = min(low, self.offsets.get(bid, -1))
        return low

    async def on_heartbeat(self, req, reg) -> BrokerHeartbeatResponse | None:
        """The answer to a heartbeat of a broker that wants to shut down or is shutting down;
        None for any other heartbeat (liveness answers it)."""
        in_shutdown = bool(getattr(reg, "in_controlled_shutdown", False))
        if not req.want_shut_down and not in_shutdown:
            return None
        q, bid = self.q, req.broker_id
        if reg.fenced:
            # nothing to move: a fenced broker may go at once (Kafka: FENCED -> SHUTDOWN_NOW)
            return _response(True, bool(req.want_shut_down))
        if not in_shutdown:
            return await self._begin(req, reg)
        if not req.want_shut_down:
            return _response(False, False)   # (Kafka keeps it in controlled shutdown)
        if self._leads_anything(bid):
            # a partition got it back as leader meanwhile (a race with another election): move it
            records = election.on_broker_gone(q.image, bid, self._brokers(), election.unclean_default(q.config))
            if records:
                try:
                    await self._propose(records, bid)
                except KafkaError as exc:
                    return BrokerHeartbeatResponse(error_code=exc.code, is_fenced=False)
            return _response(False, False)
        target = self.shutdown_offset.setdefault(bid, q.image.offset)
        if target > self._lowest_active_offset(bid):
            return _response(False, False)   # the new leaders have not all seen it yet
        try:
            await q.propose([BrokerRegistrationChangeRecord(broker_id=bid, broker_epoch=reg.broker_epoch,
                                                            fenced=FENCE)], timeout_ms=5000)
        except KafkaError as exc:
            return BrokerHeartbeatResponse(error_code=exc.code, is_fenced=False)
        log.info("broker %d: controlled shutdown granted", bid)
        return _response(True, True)

    async def _begin(self, req, reg) -> BrokerHeartbeatResponse:
        q, bid = self.q, req.broker_id
        brokers = dict(self._brokers())
        if bid in brokers:
            brokers[bid] = brokers[bid]._replace(in_controlled_shutdown=True)
        records = [BrokerRegistrationChangeRecord(broker_id=bid, broker_epoch=reg.broker_epoch,
                                                  in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN)]
        records += election.on_broker_gone(q.image, bid, brokers, election.unclean_default(q.config))
        log.info("broker %d: controlled shutdown begins, %d partition change(s)", bid, len(records) - 1)
        try:
            await self._propose(records, bid)
        except KafkaError as exc:
            return BrokerHeartbeatResponse(error_code=exc.code, is_fenced=False)
        return _response(False, False)

    async def _propose(self, records, bid: int) -> None:
        """Propose and await the commit, remembering the batch's last offset (what every active
        broker must have applied before the shutdown is granted)."""
        def remember(last_offset: int) -> None:
            self.shutdown_offset[bid] = last_offset
        await self.q.propose(records, 5000, on_proposed=remember)


def tracker(quorum) -> ShutdownTracker:
    t = getattr(quorum, "_shutdowns", None)
    if t is None:
        t = quorum._shutdowns = ShutdownTracker(quorum)
    return t


# ------------------------------------------------------------------ broker side

def enabled(broker) -> bool:
    q = getattr(broker, "quorum", None)
    if q is None or not q.k.is_broker:
        return False
    try:
        return broker.config.get_bool("controlled.shutdown.enable")
    except KeyError:
        return True


def wait_s(config) -> float:
    """How long a broker waits for the controller's go. Kafka's KRaft broker waits up to 5
    minutes; kproto waits controlled.shutdown.max.retries x controlled.shutdown.retry.backoff.ms
    (15 s by default), at least broker.session.timeout.ms, so a supervisor's stop timeout
    (systemd 90 s, Kubernetes 30 s) is not exceeded; a second SIGTERM stops at once."""
    try:
        retries = int(config.get("controlled.shutdown.max.retries"))
        backoff = int(config.get("controlled.shutdown.retry.backoff.ms"))
        session = int(config.get("broker.session.timeout.ms"))
    except (KeyError, TypeError, ValueError):
        return 15.0
    return max(retries * backoff, session) / 1000


async def controlled_shutdown(broker, timeout_s: float | None = None) -> bool:
    """Ask the active controller to move this broker's leaderships away; True once it said
    should_shut_down, False when the wait ran out."""
    q = broker.quorum
    q.liveness.want_shut_down = True
    timeout_s = wait_s(broker.config) if timeout_s is None else timeout_s
    started = trio.current_time()
    deadline = started + timeout_s
    poll_s = min(q.liveness.interval_s, 0.1)
    # with no controller answering for a whole session (the quorum lost its majority, e.g. every
    # node stops at once) nothing can move; the broker would be fenced by now anyway
    answered = started
    log.info("controlled shutdown: asking the controller to move leadership away")
    while trio.current_time() < deadline:
        reg = q.image.brokers.get(q.node_id)
        if reg is None or reg.incarnation_id != q.incarnation:
            return True   # not registered (another process's registration is not ours): nothing leads here
        req = BrokerHeartbeatRequest(broker_id=q.node_id, broker_epoch=reg.broker_epoch,
                                     current_metadata_offset=max(q.image.offset, 0),
                                     want_fence=False, want_shut_down=True, offline_log_dirs=[])
        try:
            resp = await q.to_controller(req, timeout_s=max(0.1, min(2.0, deadline - trio.current_time())))
        except Exception as exc:   # noqa: BLE001 - the next heartbeat tries again
            log.debug("controlled shutdown heartbeat: %s", exc)
            resp = None
        if resp is not None and resp.error_code == ErrorCode.NONE and resp.should_shut_down:
            log.info("controlled shutdown granted after %.2f s", trio.current_time() - started)
            return True
        if resp is not None and resp.error_code == ErrorCode.NONE:
            answered = trio.current_time()   # (a controller without a majority answers errors)
        elif trio.current_time() - answered > q.liveness.session_s:
            log.warning("controlled shutdown: no active controller for %.1f s; stopping", q.liveness.session_s)
            return False
        await trio.sleep(poll_s)
    log.warning("controlled shutdown: no go from the controller within %.1f s; stopping anyway", timeout_s)
    return False


async def resign_controller(broker, wait_s_: float = 2.0) -> None:
    """A raft leader that stops hands over (EndQuorumEpoch), as Kafka's KafkaRaftClient does on a
    graceful shutdown, and waits briefly for a successor so the request goes out."""
    q = getattr(broker, "quorum", None)
    if q is None or q.shell is None or not q.k.is_controller:
        return
    from raft.node import LEADER
    if q.node.role != LEADER or [v for v in q.node.voters if v != q.node_id] == []:
        return   # (a lone voter has no one to hand over to: resigning would only elect itself again)
    q.node.resign()
    q.shell._pump()
    with trio.move_on_after(wait_s_):
        while q.active_controller_id in (q.node_id, -1):
            await trio.sleep(0.05)


async def before_exit(broker, signals) -> None:
    """What `kproto serve` does between SIGTERM and stopping: controlled shutdown (unless
    disabled or not a multi-node broker), then the raft hand-over; a second signal cuts it short."""
    if getattr(broker, "quorum", None) is None:
        return
    async with trio.open_nursery() as nursery:
        async def second_signal():
            async for _sig in signals:
                log.warning("second signal: stopping without waiting")
                nursery.cancel_scope.cancel()
                return
        nursery.start_soon(second_signal)
        if enabled(broker):
            await controlled_shutdown(broker)
        await resign_controller(broker)
        nursery.cancel_scope.cancel()

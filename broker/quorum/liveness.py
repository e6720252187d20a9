"""Broker liveness and producer-id blocks in a multi-node quorum, over the controller listener, as
Kafka's brokers talk to the active controller:

- BrokerHeartbeat every `broker.heartbeat.interval.ms`; the active controller fences a registered
  broker whose heartbeats stop for `broker.session.timeout.ms` (FenceBrokerRecord, in one batch with
  the elections that take it out of every ISR and give its partitions new leaders, as Kafka's
  handleBrokerFenced: no metadata image ever has a fenced leader, which clients such as
  kafka-python cannot look up among the brokers Metadata lists) and unfences it
  at its next heartbeat with want_fence=false once the broker caught up with its registration
  (UnfenceBrokerRecord, with the elections of the leaderless partitions it may lead; the rules are
  broker/controller/registration.py's). A new active controller gives every broker a full session
  before fencing it. The image's `brokers[id].fenced` is what Metadata and placement use.
- Failure detection (kproto's, beyond Kafka): every broker fetches the metadata log from the
  active controller (the raft leader) without pause, each fetch held at most 500 ms. A broker
  that has neither fetched nor heartbeated for `kproto.broker.failure.detection.ms` (1500 by
  default) is taken for crashed and fenced then, without waiting for the 9 s session; sooner still
  when the connection it fetched on closed (a killed process's sockets close at once) and no fetch
  or heartbeat followed within 0.3 s. So the partitions of a node killed -9 get new leaders within
  about a second. Safety does not rest on it (fencing a live broker only moves leaderships; it is
  unfenced at its next heartbeat); -1 turns it off (Kafka's behaviour). A new controller applies
  it to voters at once (they fetch from it as soon as they hear of it, so one that has not within
  0.75 s went down with the old leader) and to other brokers from their first fetch to it, as an
  observer may take a while to find the new leader.
- OfflineLogDirs (KIP-858): a broker whose log dir failed says so in its next heartbeat, sent at
  once; the controller moves its replicas in that dir out of ISRs and leadership and records its
  online dirs (broker/controller/log_dirs.py).
- AssignReplicasToDirs (KIP-858): where a broker placed a replica among its log dirs
  (broker/controller/log_dirs.py).
- AllocateProducerIds: a node hands out producer ids from a block the active controller allocated
  with a ProducerIdsRecord (committed before the block is used, so no id is ever given twice); each
  node keeps the next block ready so InitProducerId does not wait on the quorum.
"""
from __future__ import annotations

import dataclasses
import logging

import trio

from kproto.errors import ErrorCode, KafkaError
from kproto.messages.allocate_producer_ids_request import AllocateProducerIdsRequest
from kproto.messages.allocate_producer_ids_response import AllocateProducerIdsResponse
from kproto.messages.broker_heartbeat_request import BrokerHeartbeatRequest
from kproto.messages.broker_heartbeat_response import BrokerHeartbeatResponse
from kproto.metadata.fence_broker_record import FenceBrokerRecord
from kproto.metadata.producer_ids_record import ProducerIdsRecord
from kproto.metadata.unfence_broker_record import UnfenceBrokerRecord

from broker.controller.producer_ids import BLOCK_SIZE, ProducerIdManager
from broker.controller import log_dirs, registration
from broker.metadata import serde
from broker.metadata.delta import PartitionDelta
from broker.quorum.image_undo import undo_of
from broker.replication import election
from broker.storage.checkpoints import uuid_to_str
from broker.storage.dir_assignments import OfflineDirReports, offline_dir_ids

log = logging.getLogger("kproto.quorum")

BROKER_HEARTBEAT = 63
FAILURE_DETECTION = "kproto.broker.failure.detection.ms"
# a crashed process's connections close at once; a live broker whose metadata fetch connection
# closed (a timeout, a network blip) reconnects and fetches again well within this
LINK_GRACE_S = 0.3
# a new raft leader tells the voters at once (BeginQuorumEpoch) and a live one fetches from it
# within milliseconds: one that has not after this long went down with the old leader
NEW_LEADER_FETCH_S = 0.75
DEFAULT_FAILURE_DETECTION_MS = 1500
# this node's loop woke this much later than asked (a 0.1 s sleep): it is loaded, and so, most
# likely, are the others; for LOADED_MEMORY_S after, silence alone does not fence early
LOOP_LAG_S = 0.25
LOADED_MEMORY_S = 30.0
ALLOCATE_PRODUCER_IDS = 67
# a fence's batch is made this many partitions looked at, and records encoded, per step of the loop
# (a slice of 1,000 took 83 ms of CPU in the bench at 3,000 partitions)
FENCE_SLICE_PARTITIONS = 300
FENCE_SLICE_RECORDS = 300


class Liveness:
    def __init__(self, quorum):
        self.q = quorum
        cfg = quorum.config
        self.session_s = cfg.get_int("broker.session.timeout.ms") / 1000
        self.interval_s = cfg.get_int("broker.heartbeat.interval.ms") / 1000
        self.last_seen: dict[int, float] = {}
        self._loaded_until = -1e9   # (trio clock) see LOOP_LAG_S
        self.register_offsets: dict[int, int] = {}   # broker id -> offset of its RegisterBrokerRecord
        self._active_since = None
        self.want_shut_down = False   # set by a controlled shutdown (broker/quorum/shutdown.py)
        self.caught_up = False   # a heartbeat answer said is_caught_up (then want_fence=false)
        self.broker_epoch = None   # from this process's successful BrokerRegistration
        self.offline_dirs = OfflineDirReports(cfg.get_long("log.dir.failure.timeout.ms") / 1000)
        self.detection_s = failure_detection_s(cfg)
        self._fencing: dict[int, float] = {}   # broker id -> when its fence was last proposed

    # ------------------------------------------------------- broker side

    async def heartbeat_loop(self):
        """BrokerLifecycleManager's heartbeats: with want_fence=true until an answer says the broker
        caught up with its registration (heartbeats every 10 ms meanwhile, so start-up is quick),
        then want_fence=false at once, then every broker.heartbeat.interval.ms."""
        failures = getattr(self.q.broker, "dir_failures", None)
        wait, failures_in_a_row = 0.05, 0
        while True:
            # a newly failed log dir is reported at once (BrokerLifecycleManager.propagateDirectoryFailure)
            with trio.move_on_after(wait):
                if failures is not None:
                    await failures.changed.wait()
                    failures.changed = trio.Event()
                else:
                    await trio.sleep_forever()
            offline = offline_dir_ids(self.q.broker)
            self.offline_dirs.noticed(offline, trio.current_time())
            overdue = self.offline_dirs.overdue(trio.current_time())
            if overdue and failures is not None:
                failures.halt(f"couldn't communicate offline log dir {uuid_to_str(overdue[0])} with controllers "
                              f"within log.dir.failure.timeout.ms")
            b = self.q.image.brokers.get(self.q.node_id)
            if b is not None and b.incarnation_id == self.q.incarnation:
                epoch = b.broker_epoch
            else:
                # the epoch the registration answer gave (Kafka's broker heartbeats right after it,
                # before its metadata shows the registration); none: not registered, and the
                # registration of another process with this node.id is not ours
                epoch = self.broker_epoch
                if epoch is None:
                    wait = 0.01
                    continue
            req = BrokerHeartbeatRequest(broker_id=self.q.node_id, broker_epoch=epoch,
                                         current_metadata_offset=max(self.q.image.offset, 0),
                                         want_fence=not self.caught_up, want_shut_down=self.want_shut_down,
                                         offline_log_dirs=offline)
            # after a failure: Kafka's backoff from 100 ms (at most the interval here)
            wait = min(self.interval_s, 0.1 * 2 ** min(failures_in_a_row, 8))
            failures_in_a_row += 1
            try:
                resp = await self.q.to_controller(req, timeout_s=self.interval_s)
                if resp is not None and resp.error_code == 0:
                    failures_in_a_row = 0
                    wait = self.interval_s
                    self.offline_dirs.answered(offline)
                    if not self.caught_up:
                        if resp.is_caught_up:
                            log.info("broker %d has caught up with the cluster metadata: asking to be unfenced",
                                     self.q.node_id)
                            self.caught_up = True
                            wait = 0
                        else:
                            wait = 0.01   # Kafka's 10 ms while STARTING
            except Exception as exc:   # noqa: BLE001 - the next heartbeat tries again
                log.debug("broker heartbeat: %s", exc)

    # --------------------------------------------------- controller side

    async def handle_heartbeat(self, req) -> BrokerHeartbeatResponse:
        q = self.q
        if not q.is_active_controller:
            return BrokerHeartbeatResponse(error_code=ErrorCode.NOT_CONTROLLER, is_fenced=True)
        b = q.image.brokers.get(req.broker_id)
        if b is None:
            return BrokerHeartbeatResponse(error_code=ErrorCode.BROKER_ID_NOT_REGISTERED, is_fenced=True)
        if req.broker_epoch != b.broker_epoch:
            # ClusterControlManager.checkBrokerEpoch: e.g. a previous incarnation's heartbeat, which
            # must not keep the current registration's session alive
            return BrokerHeartbeatResponse(error_code=ErrorCode.STALE_BROKER_EPOCH, is_fenced=True)
        self.last_seen[req.broker_id] = trio.current_time()
        from broker.quorum import shutdown
        shutdowns = shutdown.tracker(q)
        shutdowns.note(req)
        answer = await shutdowns.on_heartbeat(req, b)
        if answer is not None:
            return answer
        if req.offline_log_dirs:
            records = log_dirs.offline_records(q.image, req.broker_id, b.broker_epoch, req.offline_log_dirs,
                                               dict(q.broker.controller.brokers()),
                                               election.unclean_default(q.config))
            if records:
                log.info("broker %d: log dir(s) offline, %d partition change(s)", req.broker_id, len(records) - 1)
                try:
                    await q.propose(records, timeout_ms=5000)
                except KafkaError as exc:
                    return BrokerHeartbeatResponse(error_code=exc.code, is_fenced=b.fenced)
        register_offset = self.register_offset(req.broker_id, b)
        state = registration.next_state(b.fenced, req.want_fence, req.current_metadata_offset, register_offset)
        if state != (registration.FENCED if b.fenced else registration.UNFENCED):
            if state == registration.UNFENCED:
                records = self.unfence_records(req.broker_id, b.broker_epoch)
                what = (f"broker {req.broker_id} unfenced: caught up with its registration at offset "
                        f"{register_offset}, {len(records) - 1} partition change(s)")
            else:
                records = self.fence_records(req.broker_id, b.broker_epoch)
                what = f"broker {req.broker_id} fenced at its request, {len(records) - 1} partition change(s)"
            try:
                await q.propose(records, timeout_ms=5000)
                log.info("%s", what)
            except KafkaError as exc:
                return BrokerHeartbeatResponse(error_code=exc.code, is_fenced=b.fenced)
        return BrokerHeartbeatResponse(
            error_code=0, is_fenced=state == registration.FENCED,
            is_caught_up=registration.is_caught_up(req.current_metadata_offset, register_offset))

    # the controller's view of sessions (Kafka's BrokerHeartbeatManager, in memory)

    def has_valid_session(self, bid: int, now: float) -> bool:
        """BrokerHeartbeatManager.hasValidSession: registered, unfenced and heard from within the
        session. A controller that has not yet started its sessions (just elected) gives every
        broker a full one, as Kafka's activate()."""
        b = self.q.image.brokers.get(bid)
        if b is None or b.fenced:
            return False
        seen = self.last_seen.get(bid)
        if self._active_since is None or seen is None:
            return True
        return now - seen <= self.session_s

    def registered(self, bid: int, offset: int, now: float) -> None:
        """A registration was written at `offset`: it counts as contact (heartbeatManager.register)."""
        self.register_offsets[bid] = offset
        self.last_seen[bid] = now

    def register_offset(self, bid: int, b) -> int:
        """The offset of the broker's RegisterBrokerRecord, kept as each controller writes or
        replays it; a registration read from a snapshot has only its broker epoch, the first
        offset of the batch that registered that incarnation."""
        offset = self.register_offsets.get(bid)
        return offset if offset is not None and offset >= b.broker_epoch else b.broker_epoch

    def unfence_records(self, bid: int, epoch: int) -> list:
        """The batch that unfences broker `bid`, with the elections of the leaderless partitions it
        can lead (ReplicationControlManager.handleBrokerUnfenced)."""
        q = self.q
        brokers = dict(q.broker.controller.brokers())
        if bid in brokers:
            brokers[bid] = brokers[bid]._replace(fenced=False)
        elections = election.on_broker_unfenced(q.image, bid, brokers, election.unclean_default(q.config))
        return [UnfenceBrokerRecord(id=bid, epoch=epoch)] + elections

    async def fence_loop(self):
        """On the active controller: fence brokers whose session expired."""
        woke = trio.current_time()
        while True:
            await trio.sleep(0.1)
            q = self.q
            now = trio.current_time()
            slept, woke = now - woke, now
            if slept > 0.1 + LOOP_LAG_S:
                self._loaded_until = now + LOADED_MEMORY_S
            if not q.is_active_controller:
                self._active_since = None
                continue
            stalled = slept > self.session_s / 2 or (self.detection_s is not None and slept > self.detection_s / 2)
            if self._active_since is None or stalled:
                # a new controller, or this one was stopped or stalled (SIGSTOP, a blocked loop):
                # heartbeats could not reach it meanwhile, so everyone gets a full session
                self._active_since = now
                self.last_seen = {b: now for b in q.image.brokers}
            for bid, b in list(q.image.brokers.items()):
                seen = self.last_seen.setdefault(bid, now)
                if b.fenced:
                    continue
                why = None
                if now - seen > self.session_s:
                    why = f"no heartbeat for {now - seen:.1f} s"
                elif self.detection_s is not None and bid != q.node_id:
                    why = self._crashed(bid, now, now - seen, now < self._loaded_until)
                if why is not None and now - self._fencing.get(bid, -1e9) > 1.0:
                    # (once a second at most: the batch proposed may not be committed by the next tick)
                    self._fencing[bid] = now
                    await self._fence(bid, b.broker_epoch, seen, why)

    def _crashed(self, bid: int, now: float, silent: float, loaded: bool = False) -> str | None:
        """Why broker `bid` is taken for crashed (kproto.broker.failure.detection.ms), or None.
        ``loaded``: this node's own loop lagged lately. A closed connection is taken for a crash
        whatever the load, and so is a voter silent towards a new leader for twice the detection
        time; silence on an open connection is not then: the other nodes do the same work
        (every node hosts replicas of the same partitions and applies the same metadata), so their
        loops stall too, and silence says busy, not crashed. Fencing a busy broker moves its
        leaderships, a metadata change as large as the one that kept it busy: after creating
        10,000 RF=3 partitions brokers were fenced 5-13 times a minute, every partition without a
        leader at times. Those wait for broker.session.timeout.ms, as in Kafka."""
        if silent > LINK_GRACE_S:
            closed = self._link_closed_s(bid, now)
            if closed is not None and closed > LINK_GRACE_S:
                return (f"its metadata fetch connection closed {closed:.1f} s ago, no fetch or heartbeat "
                        f"since (kproto.broker.failure.detection.ms)")
        # a new leader's voters: one that went down with the old leader has no connection to close
        # here; a loaded one may take longer than usual to turn to the new leader
        new_leader = NEW_LEADER_FETCH_S if not loaded else max(NEW_LEADER_FETCH_S, 2 * self.detection_s)
        node = getattr(getattr(self.q, "shell", None), "node", None)
        if (node is not None and node.leader_id == node.id and bid in node.voters and silent > new_leader
                and now - self._active_since > new_leader):
            r = node.replicas.get(bid)
            if r is None or r.last_fetch_ms is None or r.last_fetch_ms <= self._active_since * 1000:
                return (f"a voter that has not fetched from this new leader in {now - self._active_since:.1f} s "
                        f"(kproto.broker.failure.detection.ms)")
        if loaded:
            return None
        if silent > self.detection_s:
            quiet = self._quorum_quiet_s(bid, now)
            if quiet is not None and quiet > self.detection_s:
                return (f"no heartbeat for {silent:.1f} s and no metadata fetch for {quiet:.1f} s "
                        f"(kproto.broker.failure.detection.ms)")
        return None

    def _quorum_quiet_s(self, bid: int, now: float) -> float | None:
        """How long broker `bid` has not fetched the metadata log from this node (the raft leader),
        or None when that says nothing: not leader, or a non-voter that has not fetched from this
        leader yet (it may still be looking for it)."""
        shell = getattr(self.q, "shell", None)
        node = getattr(shell, "node", None)
        if node is None or node.leader_id != node.id:
            return None
        r = node.replicas.get(bid)
        if r is None or r.last_fetch_ms is None:
            return None
        if bid not in node.voters and r.last_fetch_ms <= self._active_since * 1000:
            return None
        # fetches queued while this node was stalled count from the end of the stall
        return now - max(r.last_fetch_ms / 1000, self._active_since)

    def _link_closed_s(self, bid: int, now: float) -> float | None:
        """How long ago broker `bid`'s last metadata fetch connection to this node (the raft
        leader) closed, with no fetch from it since; None when it has one open."""
        shell = getattr(self.q, "shell", None)
        node = getattr(shell, "node", None)
        closed = getattr(shell, "fetch_links_closed", {}).get(bid)
        if node is None or closed is None or node.leader_id != node.id:
            return None
        r = node.replicas.get(bid)
        if r is not None and r.last_fetch_ms is not None and r.last_fetch_ms > closed:
            return None
        return now - max(closed / 1000, self._active_since, self.last_seen.get(bid, 0))

    async def _fence(self, bid: int, epoch: int, seen: float, why: str) -> None:
        """Fence broker `bid`: its batch made in slices (fence_records_sliced), proposed in one step,
        unless meanwhile this node stopped leading, the broker was fenced or registered again, or
        it heartbeated after all."""
        q = self.q
        made = await self.fence_records_sliced(bid, epoch)
        b = q.image.brokers.get(bid)
        if (made is None or not q.is_active_controller or b is None or b.fenced or b.broker_epoch != epoch
                or self.last_seen.get(bid, seen) > seen):
            return
        records, datas, undos = made
        log.info("broker %d fenced: %s, %d partition change(s)", bid, why, len(records) - 1)
        try:
            q.propose_nowait(records, datas, undos)
        except KafkaError:
            pass

    async def fence_records_sliced(self, bid: int, epoch: int):
        """fence_records(bid, epoch), their encodings and their undos (records, datas, undos: what
        propose_nowait takes), made a slice of the loop at a time; None if this node stopped being the active controller meanwhile. At 10,000 RF=3
        partitions the batch is 10,000 elections: computing and encoding them in the step that
        proposes held the controller's loop for 0.2-0.5 s. The batch is still proposed and applied
        whole, in one step (Kafka's controller writes it in one event, atomically): what the image
        changed meanwhile (the partitions its records name) is computed again in that step, and
        anything broader (a registration, a rebuilt image) makes the whole batch again there."""
        q = self.q
        image = q.image
        changed = PartitionDelta(q.node_id, elections=True)   # what the metadata changes meanwhile
        changed.take()

        def watch(records) -> None:
            changed.add(records, q.image)

        q.metadata.subscribe(watch)
        try:
            brokers = self._brokers_fencing(bid)
            default = election.unclean_default(q.config)
            made: dict[tuple[str, int], object] = {}
            visited = 0
            for t in list(image.topics.values()):
                for r in election.on_broker_gone(_OneTopic(t), bid, brokers, default):
                    made[(t.name, r.partition_id)] = r
                visited += len(t.partitions)
                if visited >= FENCE_SLICE_PARTITIONS:
                    visited = 0
                    await trio.sleep(0)
                    if not q.is_active_controller:
                        return None
            datas: dict[tuple[str, int], bytes] = {}
            undos: dict[tuple[str, int], object] = {}
            for key, r in made.items():
                datas[key] = serde.encode(r)
                undos[key] = undo_of(image, r)   # (the partition as it is: valid while the delta does not name it)
                if len(datas) % FENCE_SLICE_RECORDS == 0:
                    await trio.sleep(0)
                    if not q.is_active_controller:
                        return None
        finally:
            q.metadata.unsubscribe(watch)
        keys = changed.take()
        if keys is None or q.image is not image:
            records = self.fence_records(bid, epoch)
            return records, [serde.encode(r) for r in records], None
        brokers = self._brokers_fencing(bid)
        for key in keys:   # changed since their turn: made again now
            made.pop(key, None)
            datas.pop(key, None)
            undos.pop(key, None)
            t = image.topics.get(key[0])
            p = t.partitions.get(key[1]) if t is not None else None
            if p is None:
                continue
            one = _OneTopic(t, {key[1]: p})
            for r in election.on_broker_gone(one, bid, brokers, election.unclean_default(q.config)):
                made[key] = r
                datas[key] = serde.encode(r)
                undos[key] = undo_of(image, r)
        fence = FenceBrokerRecord(id=bid, epoch=epoch)
        return (list(made.values()) + [fence], list(datas.values()) + [serde.encode(fence)],
                list(undos.values()) + [undo_of(image, fence)])

    def _brokers_fencing(self, bid: int) -> dict:
        """The brokers as the controller sees them, `bid` fenced."""
        brokers = dict(self.q.broker.controller.brokers())
        if bid in brokers:
            brokers[bid] = brokers[bid]._replace(fenced=True)
        return brokers

    def fence_records(self, bid: int, epoch: int) -> list:
        """The batch that fences broker `bid`: its partitions' elections, then the fence."""
        q = self.q
        records = election.on_broker_gone(q.image, bid, self._brokers_fencing(bid), election.unclean_default(q.config))
        return records + [FenceBrokerRecord(id=bid, epoch=epoch)]

    async def handle_assign_dirs(self, req):
        """AssignReplicasToDirs (KIP-858), on the active controller."""
        from kproto.messages.assign_replicas_to_dirs_response import AssignReplicasToDirsResponse
        q = self.q
        if not q.is_active_controller:
            return AssignReplicasToDirsResponse(error_code=ErrorCode.NOT_CONTROLLER, directories=[])
        resp, records = log_dirs.assign(q.image, req, dict(q.broker.controller.brokers()),
                                        election.unclean_default(q.config))
        if records:
            try:
                await q.propose(records, timeout_ms=5000)
            except KafkaError as exc:
                return AssignReplicasToDirsResponse(error_code=exc.code, directories=[])
        return resp

    async def handle_allocate(self, req) -> AllocateProducerIdsResponse:
        q = self.q
        if not q.is_active_controller:
            return AllocateProducerIdsResponse(error_code=ErrorCode.NOT_CONTROLLER)
        start = q.image.next_producer_id
        try:
            await q.propose([ProducerIdsRecord(broker_id=req.broker_id, broker_epoch=req.broker_epoch,
                                               next_producer_id=start + BLOCK_SIZE)], timeout_ms=5000)
        except KafkaError as exc:
            return AllocateProducerIdsResponse(error_code=exc.code)
        return AllocateProducerIdsResponse(error_code=0, producer_id_start=start, producer_id_len=BLOCK_SIZE)


def failure_detection_s(cfg) -> float | None:
    """`kproto.broker.failure.detection.ms` in seconds (None: off). A kproto setting, read as given (Kafka
    passes unknown keys through too); a value that is not a whole number is a start-up error."""
    from broker.config.types import StartupError
    raw = cfg.static_configs.get(FAILURE_DETECTION) if hasattr(cfg, "static_configs") else None
    if raw is None or str(raw).strip() == "":
        return DEFAULT_FAILURE_DETECTION_MS / 1000
    try:
        ms = int(str(raw).strip())
    except ValueError:
        raise StartupError(f"Invalid value {raw} for configuration {FAILURE_DETECTION}: "
                           "Not a number of type INT") from None
    return None if ms < 0 else ms / 1000


class QuorumProducerIds(ProducerIdManager):
    """Producer ids from blocks the active controller allocated (committed), one block kept ready."""

    def __init__(self, quorum):
        super().__init__(quorum.node_id, quorum.metadata, quorum.image)
        self.q = quorum
        self._spare = None
        self._want = trio.Event() if _in_trio() else None

    def next_id(self) -> int:
        if self._next >= self._end:
            if self._spare is None:
                if self._want is not None:
                    self._want.set()
                raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "no producer id block yet")
            self._next, self._end = self._spare
            self._spare = None
            if self._want is not None:
                self._want.set()
        pid = self._next
        self._next += 1
        return pid

    async def run(self):
        self._want = trio.Event()
        while True:
            if self._spare is None:
                b = self.q.image.brokers.get(self.q.node_id)
                epoch = b.broker_epoch if b is not None else -1
                try:
                    resp = await self.q.to_controller(AllocateProducerIdsRequest(
                        broker_id=self.q.node_id, broker_epoch=epoch), timeout_s=5)
                    if resp is not None and resp.error_code == 0:
                        self._spare = (resp.producer_id_start, resp.producer_id_start + resp.producer_id_len)
                        continue
                except Exception as exc:   # noqa: BLE001
                    log.debug("producer id block: %s", exc)
                await trio.sleep(0.2)
                continue
            await self._want.wait()
            self._want = trio.Event()


def _in_trio() -> bool:
    try:
        trio.lowlevel.current_task()
        return True
    except RuntimeError:
        return False


class _OneTopic:
    """An image of one topic (or some of its partitions), for election.on_broker_gone."""
    __slots__ = ("topics",)

    def __init__(self, t, partitions: dict | None = None):
        if partitions is not None:
            t = dataclasses.replace(t, partitions=partitions)
        self.topics = {t.name: t}

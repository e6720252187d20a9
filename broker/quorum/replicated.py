"""The metadata quorum of a multi-voter cluster, in a `kproto serve` process: the QuorumShell
(broker/quorum/shell.py) drives a RaftNode over the node's real metadata files
(broker/quorum/raft_storage.py), and this module connects it to the broker.

- Committed records are applied to the node's MetadataImage on every node (voters and observers),
  and the MetadataLog's subscribers are told, as for a local append.
- Only the active controller (the raft leader) appends: ReplicatedMetadataLog.append proposes the
  records. The leader applies them at once to its own image (as Kafka's active controller works
  ahead of the commit, so the next validation sees them); if its leadership ends, the image is
  rebuilt from the committed log, so nothing uncommitted stays. The node's broker side acts on
  committed metadata only, as Kafka's brokers do: leader and follower roles and ISRs
  (Broker._reconcile_replicas: ReplicaManager and ReplicationManager) wait until the image holds
  nothing uncommitted (`image_committed`, `when_committed`). A controller paused past the broker session that
  resumes still believing it leads fences everyone and elects itself with an ISR of one; acting on
  that before the commit (which never comes) would acknowledge acks=all writes that the real
  leader does not have. A request that changed metadata is
  answered only once its records are committed (REQUEST_TIMED_OUT after the request timeout, e.g.
  with no majority; NOT_CONTROLLER if the leader changed and the records were lost).
- Forwarding: a metadata-changing request that reaches a node which is not the active controller
  is forwarded whole, in Kafka's Envelope (API 58), to the leader's controller listener; the leader
  handles it with its own handlers and the answer goes back to the client unchanged. (Kafka's
  brokers forward with Envelope too; the authorization is done on the receiving broker here.)
- Broker registration: every node with the broker role registers with the active controller
  (BrokerRegistration over the controller listener): a RegisterBrokerRecord with its advertised
  endpoints, so Metadata on every node lists all brokers (MetadataImage.brokers).

API for broker code: `await broker.quorum.propose(records)` (on the active controller: await the
commit), `await broker.quorum.to_controller(request)` (a controller RPC from any node, answered by
the active controller; register more with `broker.quorum.controller_rpcs[api_key] = handler`),
`broker.quorum.is_active_controller`, `broker.quorum.active_controller_id`, `broker.image.brokers`
(registered brokers, `fenced` flag).
"""
from __future__ import annotations

import contextvars
from collections import deque
from collections.abc import Callable
import logging
import random
import time
import uuid

import trio

from kproto import api
from kproto.errors import ErrorCode, KafkaError
from kproto.messages.envelope_request import EnvelopeRequest
from kproto.messages.envelope_response import EnvelopeResponse
from kproto.metadata.register_broker_record import RegisterBrokerRecord

from broker.config.kraft import is_dynamic
from broker.handlers import FORWARDED
from broker.metadata import serde
from broker.metadata.image import MetadataImage
from broker.metadata.log import MetadataLog
from broker.metadata import snapshotter as metadata_snapshots, snapshots
from broker.quorum.image_undo import ImageUndo
from broker.quorum.liveness import ALLOCATE_PRODUCER_IDS, BROKER_HEARTBEAT, Liveness, QuorumProducerIds
from broker.quorum.raft_storage import LogStorage
from broker.quorum.shell import _AUTH_ERRORS, _CONN_ERRORS, QuorumShell, _read_frame
from raft import messages as m
from raft.node import LEADER, RaftConfig, RaftNode

log = logging.getLogger("kproto.quorum")

ENVELOPE = 58
BROKER_REGISTRATION = 62
CONTROLLER_REGISTRATION = 70
ASSIGN_REPLICAS_TO_DIRS = 73
DEFAULT_TIMEOUT_MS = 30000
# committed records decoded per step of the event loop: a commit of more is decoded a slice at a
# time and applied whole once decoded (broker/quorum/replicated.py _load_loop)
LOAD_SLICE_RECORDS = 256

# the proposals made while handling the current request (awaited before it is answered)
_pending: contextvars.ContextVar = contextvars.ContextVar("kproto_quorum_pending", default=None)


def _bootstrap_addresses(k) -> dict:
    """controller.quorum.bootstrap.servers as the raft shell's peers, under Kafka's ids for them
    (-2, -3, ...), leaving out this node's own controller listener."""
    from broker.config.validators import _host_port
    own = {(e.host, e.port) for e in list(k.controller_endpoints) + list(k.advertised_controller_endpoints)}
    out = {}
    for i, entry in enumerate(k.bootstrap_servers):
        hp = _host_port(entry)
        if hp is None:
            continue
        host, port = hp
        if (host, port) in own or (k.is_controller and port in {p for _h, p in own}
                                   and host in ("127.0.0.1", "localhost", "0.0.0.0", "")):
            continue
        out[-2 - i] = (host, int(port))
    return out


def _metadata_directory_id(metadata_log_dir: str):
    """directory.id of the metadata log directory's meta.properties (a uuid.UUID), or None."""
    import os
    from broker.storage.checkpoints import read_meta_properties, uuid_from_str
    try:
        props = read_meta_properties(os.path.join(metadata_log_dir, "meta.properties")) or {}
        return uuid_from_str(props["directory.id"])
    except (OSError, KeyError, ValueError):
        return None


def _snapshot_voters(data: bytes):
    """The voter set a snapshot holds (VoterInfo, ...), or None."""
    from raft import convert
    try:
        snap = snapshots.decode(data)
    except Exception:
        return None
    return convert.voters_from_record(snap.voters) if snap.voters is not None else None


class _ForwardedConn:
    """The connection a forwarded request is handled on at the leader."""
    __slots__ = ("transport", "peer", "listener", "client_software", "session", "forwarded")

    def __init__(self, listener):
        self.transport = None
        self.peer = ("forwarded", 0)
        self.listener = listener
        self.client_software = None
        self.session = None
        self.forwarded = True


class ReplicatedMetadataLog(MetadataLog):
    """The MetadataLog of a quorum node: append proposes (leader only); records reach the image
    when committed (or at once on the leader, which reverts if its leadership ends)."""

    def __init__(self, plog, image, quorum):
        super().__init__(plog, image)
        self.quorum = quorum

    def replay(self) -> int:
        return 0   # the image is built from committed entries as the quorum hands them over

    def append(self, records: list) -> int:
        return self.quorum.propose_nowait(records)


class ReplicatedMetadata:
    # (until __init__ or the loader runs: what a commit needs of them, for objects built without __init__)
    _loading: deque | tuple = ()
    _load_wake: trio.Event | None = None
    _load_generation = 0

    def __init__(self, broker):
        self.broker = broker
        self.config = broker.config
        k = broker.config.kraft
        self.k = k
        self.node_id = k.node_id
        self.dynamic = is_dynamic(k)
        self.voters = dict(k.voters)   # a static quorum's; a dynamic one's are in self.node.voter_infos
        self.image: MetadataImage = broker.image
        self.shell: QuorumShell | None = None
        self.metadata: ReplicatedMetadataLog | None = None
        self.storage: LogStorage | None = None
        self.dispatcher = None
        self._was_leader = False
        self._undo = ImageUndo()   # how to drop this leader's uncommitted proposals from the image
        self.rebuilds = 0          # images taken back to the committed log (tests)
        self._bootstrapped = False
        self._registered_epoch = None
        # set (and replaced) at each leadership change of the metadata quorum: what only a new
        # leader can change waits for it instead of polling (an idle node's timers cost CPU)
        self.leader_changed = trio.Event()
        self.incarnation = uuid.uuid4()   # this process run's broker incarnation (BrokerLifecycleManager)
        self.commit_count = 0
        # called once the image holds nothing uncommitted again (the leader's own proposals
        # committed): what waits for committed metadata (Broker._reconcile_replicas)
        self._when_committed: list = []
        # committed entries not in the image yet: decoded a slice per step, then applied together
        # (the loader task, as Kafka's MetadataLoader); None until the task runs
        self._loading: deque = deque()
        self._load_wake: trio.Event | None = None
        self._load_generation = 0   # bumped when a snapshot replaces the image: a decode under way is dropped
        self._nursery = None
        self._creating: set = set()
        self.listener_security = None   # broker/quorum/secure.py, on a controller
        self._pool: dict = {}           # voter id -> idle connections for _call
        # more controller RPCs (api key -> async handler(request) -> response), e.g. AlterPartition:
        # served on the active controller, reached from any node with to_controller(request)
        self.controller_rpcs: dict = {}

    # ---------------------------------------------------------------- open

    def open(self, plog) -> ReplicatedMetadataLog:
        k = self.k
        self.storage = LogStorage(plog, self.voters, dynamic=self.dynamic,
                                  retention_bytes=self.config.get_long("metadata.max.retention.bytes"),
                                  retention_ms=self.config.get_long("metadata.max.retention.ms"))
        persisted = self.storage.load()
        bootstrap = _bootstrap_addresses(k) if self.dynamic else {}
        dynamic = {}
        if self.dynamic:
            # KIP-853: kraft.version 1, the voter set from the snapshots and the log, the leader found
            # through the bootstrap servers
            dynamic = dict(kraft_version=1, snapshot_voters=_snapshot_voters, bootstrap=tuple(bootstrap))
        cfg = RaftConfig(
            self.node_id, tuple(sorted(self.voters)), election_timeout_ms=k.election_timeout_ms,
            fetch_timeout_ms=k.fetch_timeout_ms, election_backoff_max_ms=k.election_backoff_max_ms,
            request_timeout_ms=k.request_timeout_ms, retry_backoff_ms=k.retry_backoff_ms,
            fetch_max_wait_ms=min(500, max(50, k.fetch_timeout_ms // 4)),
            max_bytes_between_snapshots=k.max_record_bytes_between_snapshots,
            max_interval_ms_between_snapshots=k.max_snapshot_interval_ms,
            # KIP-996: a pre-vote round (Vote v2) first, so a partitioned voter does not depose a leader
            pre_vote=True, **dynamic)
        self._raft_args = (cfg, persisted)
        node = RaftNode(cfg, random.Random(), QuorumShell.now_ms() if _in_trio() else 0, persisted)
        self.shell = QuorumShell(node, {**self.voters, **bootstrap}, self.storage,
                                 cluster_id=self.broker.cluster_id,
                                 on_commit=self._on_commit, on_load_snapshot=self._on_load_snapshot,
                                 take_snapshot=self._take_snapshot, on_leader=self._on_leader)
        if self.dynamic:
            self.shell._voters_changed(node.voter_infos)   # the voters' controller endpoints
            self.shell.directory_id = _metadata_directory_id(k.metadata_log_dir)
        self.shell.other_requests = self._serve_other
        self.shell.enabled_apis = lambda: {k for k, _lo, _hi in self.controller_apis.api_keys()}
        # the log end this node started with: the image is complete once it applied a high
        # watermark learned beyond it (broker/partitions/replicas.py removes stray directories only then)
        self._end_at_start = node.end_offset
        self.metadata = ReplicatedMetadataLog(plog, self.image, self)
        self.metadata.subscribe(self._broker_configs)
        self.liveness = Liveness(self)
        from broker.quorum.controller_apis import ControllerApis
        self.controller_apis = ControllerApis(self)   # ControllerRegistration, the admin APIs (KIP-919)
        return self.metadata

    def producer_ids(self):
        """The broker's producer-id source: blocks allocated by the active controller."""
        return QuorumProducerIds(self)

    async def to_controller(self, request, timeout_s: float = 5.0):
        """A controller RPC (BrokerRegistration, BrokerHeartbeat, AllocateProducerIds) to the active
        controller: handled here when this node is it. None when there is no leader."""
        if self.is_active_controller:
            return await self._controller_rpc(request.API_KEY, request)
        leader = self.active_controller_id
        if leader < 0 or leader == self.node_id or leader not in self.shell.peers:
            return None
        with trio.move_on_after(timeout_s):
            return await self._call(leader, request)
        return None

    async def _controller_rpc(self, key: int, request):
        extra = self.controller_rpcs.get(key)
        if extra is not None:
            return await extra(request)
        if key == BROKER_REGISTRATION:
            return await self._register(request)
        if key == BROKER_HEARTBEAT:
            return await self.liveness.handle_heartbeat(request)
        if key == ALLOCATE_PRODUCER_IDS:
            return await self.liveness.handle_allocate(request)
        if key == CONTROLLER_REGISTRATION:
            return await self.controller_apis.handle_registration(request)
        if key == ASSIGN_REPLICAS_TO_DIRS:
            return await self.liveness.handle_assign_dirs(request)
        raise ValueError(f"API {key} on the controller listener")

    async def run(self, task_status=trio.TASK_STATUS_IGNORED):
        """Bind the controller listener (controller role) and run the quorum until cancelled."""
        from broker.server.dispatch import Dispatcher
        from broker.quorum import secure
        self.dispatcher = Dispatcher(self.broker)
        secure.install(self, self.broker)   # TLS / SASL / CLUSTER_ACTION on the controller connections
        # the node was built before trio started (its timers would have expired at once): build it
        # again now, on trio's clock, from the same stored state
        cfg, persisted = self._raft_args
        self.shell.node = RaftNode(cfg, random.Random(), QuorumShell.now_ms(), persisted)
        self.shell.leader = m.LeaderChange(m.NO_LEADER, self.shell.node.epoch)
        listeners = []
        if self.k.is_controller:
            for e in self.k.controller_endpoints:
                ls = await trio.open_tcp_listeners(e.port, host=e.bind_host if hasattr(e, "bind_host") else e.host)
                listeners.extend(ls)
                port = ls[0].socket.getsockname()[1]
                self.broker.bound.append((e.name, e.host or "0.0.0.0", port))
            self.shell.listener_name = (self.k.controller_listener_names or [None])[0]
            if self.dynamic:
                # named as the leader's endpoint to the observers that find it through a bootstrap server
                _name, host, port, _p = self.controller_apis.endpoints()[0]
                self.shell.own_endpoint = (host, port)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.shell.run, listeners)
            await nursery.start(self._load_loop)
            nursery.start_soon(self._bootstrap_loop)
            if self.k.is_controller:
                nursery.start_soon(self.liveness.fence_loop)
                nursery.start_soon(self.controller_apis.registration_loop)
            if self.k.is_broker:
                nursery.start_soon(self._registration_loop)
                nursery.start_soon(self.liveness.heartbeat_loop)
                from broker.storage.dir_assignments import DirAssignments
                nursery.start_soon(DirAssignments(self).run)   # AssignReplicasToDirs (KIP-858)
                if isinstance(self.broker.producer_ids, QuorumProducerIds):
                    nursery.start_soon(self.broker.producer_ids.run)
            task_status.started()

    # ------------------------------------------------------------ state

    @property
    def node(self) -> RaftNode:
        return self.shell.node

    @property
    def is_active_controller(self) -> bool:
        # the leader, once every entry before its epoch is committed and in the image (its own
        # proposals are applied ahead of the commit, so the image must be complete first)
        node = self.node
        return node.role == LEADER and node.applied > node.epoch_start_offset and not self._loading

    @property
    def active_controller_id(self) -> int:
        lc = self.shell.leader
        return lc.leader_id if lc is not None else -1

    # -------------------------------------------------------- committed

    def _apply_records(self, offset: int, records: list) -> None:
        for r in records:
            self.image.apply(r)
        self.image.offset = offset
        for listener in self.metadata._listeners:
            try:
                listener(records)
            except Exception:
                log.exception("metadata listener failed")

    def _broker_configs(self, records: list) -> None:
        """Dynamic configs of this broker, or the cluster default, changed by the active controller
        (wherever the request was sent): installed in the running config, as Kafka's
        DynamicConfigPublisher does, and the topics' effective configs follow."""
        controller = getattr(self.broker, "controller", None)
        partitions = getattr(self.broker, "partitions", None)
        if controller is None or not controller.broker_configs_changed(records) or partitions is None:
            return
        partitions.refresh_all_configs()

    def image_committed(self) -> bool:
        """True unless the image holds this leader's own proposals that are not committed yet."""
        return self.image.offset < self.node.applied

    def when_committed(self, callback) -> None:
        """Call `callback()` once the image holds nothing uncommitted (at most once per wait; a
        rebuild after lost leadership calls the metadata listeners itself)."""
        if callback not in self._when_committed:
            self._when_committed.append(callback)

    def _on_commit(self, entries) -> None:
        fresh, own = [], False
        for e in entries:
            if e.offset <= self.image.offset:
                own = True
                continue   # the leader applied its own proposals already
            fresh.append(e)
        if fresh and (self._loading or (self._load_wake is not None and len(fresh) > LOAD_SLICE_RECORDS)):
            # thousands of records (a fence, a leadership move at 10,000 partitions): decoding them
            # here held the loop for 0.1-0.5 s; the loader decodes them a slice per step and applies
            # them whole, behind what it holds already (commits never end inside a proposal)
            self._loading.extend(fresh)
            self._load_wake.set()
        elif fresh:
            self._apply_decoded([(e.offset, serde.decode(e.data)) for e in fresh])
        if own:
            self._undo.committed(self.node.applied)
        if own and self.image_committed() and self._when_committed:
            waiting, self._when_committed = self._when_committed, []
            for callback in waiting:
                try:
                    callback()
                except Exception:
                    log.exception("a callback waiting for the commit failed")
        self._maybe_caught_up()

    def _apply_decoded(self, decoded: list) -> None:
        """Committed (offset, record)s to the image, in one step."""
        for offset, record in decoded:
            if type(record) is RegisterBrokerRecord:
                # every controller keeps the record's own offset, as Kafka's replay does
                # (registerBrokerRecordOffsets): the broker is caught up once it reached it, also
                # when a controller elected later answers its heartbeats
                self.liveness.register_offsets[record.broker_id] = offset
        self.commit_count += len(decoded)
        self._apply_records(decoded[-1][0], [r for _o, r in decoded])

    async def _load_loop(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Large commits: decoded LOAD_SLICE_RECORDS per step of the loop, then applied whole.
        Until then the image is the one before them (readers never see half a batch), this node
        is not the active controller, and its heartbeats name the offset it applied."""
        self._load_wake = wake = trio.Event()
        task_status.started()
        try:
            while True:
                if not self._loading:
                    await wake.wait()
                    self._load_wake = wake = trio.Event()
                    continue
                generation, decoded, at = self._load_generation, [], 0
                queue = list(self._loading)
                while at < len(queue) and generation == self._load_generation:
                    part = queue[at:at + LOAD_SLICE_RECORDS]
                    decoded.extend((e.offset, serde.decode(e.data)) for e in part)
                    # by what was decoded, not by the slice size: past a short last slice, the
                    # entries committed meanwhile (taken in below) were skipped from `at` on, or
                    # cleared undecoded (issue 26: a restarted node lost the first records of a
                    # fence and kept leading those partitions in its image)
                    at += len(part)
                    await trio.sleep(0)
                    if at >= len(queue) and len(self._loading) > len(queue):
                        queue = list(self._loading)   # more committed meanwhile: taken in too
                if generation != self._load_generation:
                    continue
                self._loading.clear()
                self._apply_decoded(decoded)
                self._maybe_caught_up()
        finally:
            self._load_wake = None

    def _maybe_caught_up(self) -> None:
        """Once the image holds the whole committed log as it stood when this node learned the
        high watermark, partition directories the image does not name are strays and go."""
        partitions = getattr(self.broker, "partitions", None)
        if partitions is None or partitions.strays_allowed:
            return
        hwm = self.node.hwm
        if hwm is not None and hwm > self._end_at_start and self.image.offset + 1 >= hwm:
            partitions.strays_allowed = True
            partitions.remove_strays()

    def _on_load_snapshot(self, sid, data) -> None:
        # committed entries the loader holds are in the snapshot or after it
        self._load_generation += 1
        while self._loading and self._loading[0].offset < sid.end_offset:
            self._loading.popleft()
        self._reset_image()
        snap = snapshots.decode(data) if data else None
        if snap is not None:
            for r in snap.records:
                self.image.apply(r)
        self.image.offset = sid.end_offset - 1
        for listener in self.metadata._listeners:
            listener([])

    def _take_snapshot(self, sid) -> bytes:
        # from the committed state only (the leader's image may be ahead of the commit)
        image = self._committed_image(sid.end_offset)
        voters = None
        if self.node.kraft_version >= 1:   # a dynamic quorum's snapshot holds its voter set (KIP-853)
            from raft import convert
            voters = convert.voters_record(self.node.voters_at(sid.end_offset))
        return snapshots.encode(metadata_snapshots.image_records(image, self.broker.metadata_version,
                                                                 self.node_id),
                                last_contained_timestamp=int(time.time() * 1000), voters=voters,
                                kraft_version=self.node.kraft_version)

    def _committed_image(self, upto: int) -> MetadataImage:
        node = self.node
        image = MetadataImage()
        if node.snapshot_id is not None and node.snapshot_data:
            for r in snapshots.decode(node.snapshot_data).records:
                image.apply(r)
        for e in node.entries:
            if e.offset >= upto:
                break
            if not e.control:
                image.apply(serde.decode(e.data))
        image.offset = upto - 1
        return image

    def _reset_image(self) -> None:
        fresh = MetadataImage()
        kept = {k: self.image.__dict__[k] for k in ("apply_errors", "on_fault") if k in self.image.__dict__}
        self.image.__dict__.clear()
        self.image.__dict__.update(fresh.__dict__)
        self.image.__dict__.update(kept)   # (a count and a reporter, not state the log describes)

    def _rebuild(self) -> None:
        """Back to the committed state (a leader that lost its leadership drops what did not commit):
        its uncommitted proposals undone where they can be (image_undo.py), else the image built
        again from the committed log."""
        upto = self.node.applied
        undone = len(self._undo)
        if self._undo.undo(self.image, upto):
            # (the same words as a rebuild: tests/test_paused_controller.py reads them)
            log.info("metadata image rebuilt from the committed log (up to offset %d): %d uncommitted records "
                     "undone", upto, undone)
        else:
            committed = self._committed_image(upto)
            self.image.__dict__.clear()
            self.image.__dict__.update(committed.__dict__)
            log.info("metadata image rebuilt from the committed log (up to offset %d)", upto)
        self._undo.clear()
        self.rebuilds += 1
        for listener in self.metadata._listeners:
            listener([])

    def _on_leader(self, change: m.LeaderChange) -> None:
        leader = change.leader_id == self.node_id and self.node.role == LEADER
        if self._was_leader and not leader and self.image.offset >= self.node.applied:
            self._rebuild()
        elif not leader or not self._was_leader:
            self._undo.clear()   # (only a leader's own proposals are undone)
        self._was_leader = leader
        self.leader_changed.set()
        self.leader_changed = trio.Event()
        log.info("metadata quorum: leader %s in epoch %d", change.leader_id, change.epoch)
        if self.metadata is not None:
            self.metadata.leader_epoch = change.epoch

    async def _bootstrap_loop(self):
        changed = self.leader_changed
        while not self._bootstrapped:
            # (only the quorum's leader bootstraps: elsewhere nothing to do before a new leader)
            await (trio.sleep(0.05) if self.node.role == LEADER else self.next_leadership(1.0, changed))
            changed = self.leader_changed
            self._maybe_bootstrap()

    async def next_leadership(self, timeout_s: float, changed: trio.Event | None = None) -> None:
        """Return when the metadata quorum's leadership changes after ``changed`` (taken before
        looking at it: a change in between is not missed) or after ``timeout_s``, a safety net."""
        with trio.move_on_after(timeout_s):
            await (self.leader_changed if changed is None else changed).wait()

    async def until_may_be_active(self, seconds: float) -> None:
        """The pause of a check only the active controller makes: ``seconds`` on the quorum's
        leader (active, or about to be once its epoch's first entry commits); elsewhere until
        the leadership changes, or a second at most."""
        if self.shell is None or self.node.role == LEADER:
            await trio.sleep(seconds)
        else:
            await self.next_leadership(1.0)

    def _maybe_bootstrap(self) -> None:
        """The first leader of a new cluster writes the bootstrap records (metadata.version), once
        every earlier entry is committed (its own epoch's first entry is)."""
        if self._bootstrapped or not self.is_active_controller:
            return
        self._bootstrapped = True
        if "metadata.version" in self.image.features:
            return
        from broker.quorum.leadership import bootstrap_batch_records
        try:
            self.propose_nowait(bootstrap_batch_records(self.broker.metadata_log_dir,
                                                        self.broker.metadata_version))
        except KafkaError:
            self._bootstrapped = False

    # -------------------------------------------------------- proposals

    def propose_nowait(self, records: list, datas: list | None = None, undos: list | None = None) -> int:
        """Propose records (leader only) and apply them to this node's image at once; the current
        request waits for their commit. Raises KafkaError(NOT_CONTROLLER) on another node.
        ``datas``, ``undos``: the records' encodings and undos (image_undo.undo_of), when the caller
        made them already (a fence's, in slices)."""
        if not records:
            return self.image.offset
        if not self.is_active_controller:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "This node is not the active controller.")
        if datas is None:
            datas = [serde.encode(r) for r in records]
        p = self.node.propose(datas)
        if isinstance(p, m.NotLeader):
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "This node is not the active controller.")
        done = trio.Event()
        result = {}
        self.shell._waiters.setdefault(p.last_offset, []).append((p.epoch, done, result))
        pending = _pending.get()
        if pending is not None:
            pending.append((done, result))
        self._undo.proposed(self.image, p.last_offset - len(records) + 1, records, undos)
        self._apply_records(p.last_offset, records)
        self.shell._pump()
        return p.last_offset

    async def propose(self, records: list, timeout_ms: int = DEFAULT_TIMEOUT_MS,
                      on_proposed: Callable[[int], None] | None = None) -> None:
        """Propose records from any node and wait for their commit (forwarded to the leader as a
        raw record batch when this node does not lead). Raises KafkaError. `on_proposed` is told
        the batch's last offset as soon as it is proposed, before the commit."""
        token = _pending.set([])
        try:
            last_offset = self.propose_nowait(records)
            if on_proposed is not None:
                on_proposed(last_offset)
            await self._await_pending(timeout_ms)
        finally:
            _pending.reset(token)

    async def _await_pending(self, timeout_ms: int) -> None:
        pending = _pending.get() or []
        with trio.move_on_after(timeout_ms / 1000) as scope:
            for done, _result in pending:
                await done.wait()
        if scope.cancelled_caught:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                             "The request timed out before the metadata records were committed.")
        for _done, result in pending:
            if not result.get("ok"):
                raise KafkaError(ErrorCode.NOT_CONTROLLER,
                                 "The active controller changed before the records were committed.")

    def describe(self, api_version: int):
        """DescribeQuorum from the leader's raft node (the request is forwarded to the leader): voters
        and observers with their log end offsets and wall-clock fetch / caught-up times."""
        from kproto.messages.describe_quorum_response import Listener, Node
        resp = self.shell.describe_quorum_response()
        if self.dynamic:
            # KIP-853: the voters with their directory ids and endpoints, as the voter set names them
            from raft import convert
            infos = {v.node_id: v for v in self.node.voter_infos}
            part = resp.topics[0].partitions[0]
            for row in part.current_voters:
                if row.replica_id in infos:
                    row.replica_directory_id = convert.uuid_from_text(infos[row.replica_id].directory_id)
            for row in part.observers:
                known = self.shell.replica_directories.get(row.replica_id)
                if known is not None:
                    row.replica_directory_id = known
            if api_version >= 2:
                resp.nodes = [Node(node_id=i, listeners=[Listener(name=n, host=h, port=p) for n, h, p in v.endpoints])
                              for i, v in sorted(infos.items())]
            return resp
        if api_version >= 2:
            name = self.k.controller_listener_names[0] if self.k.controller_listener_names else "CONTROLLER"
            resp.nodes = [Node(node_id=i, listeners=[Listener(name=name, host=h, port=p)])
                          for i, (h, p) in sorted(self.voters.items())]
        return resp

    # ------------------------------------------------ request handling

    def wrap(self, api_key: int, handler):
        """The handler a metadata-changing request runs through on this node (broker/server/dispatch.py)."""
        if api_key not in FORWARDED:
            return handler

        async def run(ctx, request):
            merge = None
            if not getattr(ctx.conn, "forwarded", False) and not self.is_active_controller:
                # what the receiving broker checks itself before forwarding (Kafka's ConfigAdminManager)
                request, merge = _preforward(api_key, ctx, request)
                if request is None:
                    return merge(None)
            response = await route(ctx, request)
            return response if merge is None else merge(response)

        async def route(ctx, request):
            timeout_ms = getattr(request, "timeout_ms", None) or DEFAULT_TIMEOUT_MS
            deadline = trio.current_time() + timeout_ms / 1000
            forwarded = getattr(ctx.conn, "forwarded", False)
            while True:
                if self.is_active_controller:
                    return await self._handle_here(handler, ctx, request, deadline)
                if forwarded:
                    return _error(ctx, request, ErrorCode.NOT_CONTROLLER)
                leader = self.active_controller_id
                if leader >= 0 and leader != self.node_id and leader in self.shell.peers:
                    resp = await self._forward(leader, ctx, request, deadline)
                    if resp is not None:
                        return resp
                if trio.current_time() >= deadline:
                    return _error(ctx, request, ErrorCode.REQUEST_TIMED_OUT)
                await trio.sleep(0.05)   # no leader yet (an election), or it just changed
        return run

    async def _handle_here(self, handler, ctx, request, deadline):
        token = _pending.set([])
        try:
            response = await handler(ctx, request)
            try:
                await self._await_pending(max(0.0, deadline - trio.current_time()) * 1000)
            except KafkaError as exc:
                return _error(ctx, request, exc.code)
            return response
        finally:
            _pending.reset(token)

    async def _forward(self, leader, ctx, request, deadline):
        """The request in an Envelope to the leader; its answer, or None to try again (the leader
        went away or is no longer the active controller)."""
        from broker.quorum.secure import address_bytes, serialize_principal
        inner = api.encode_request(request, ctx.api_version, ctx.correlation_id, ctx.client_id)[4:]
        session = getattr(ctx.conn, "session", None)
        principal = session.principal if session is not None else "User:ANONYMOUS"
        peer = getattr(ctx.conn, "peer", None)
        host = (session.peer_host if session is not None else "") or (peer[0] if peer else "127.0.0.1")
        try:
            answer = await self._call_while_leader(leader, deadline, EnvelopeRequest(
                request_data=inner,
                request_principal=serialize_principal(principal, getattr(session, "token_authenticated", False)),
                client_host_address=address_bytes(host)))
        except _CONN_ERRORS as exc:
            log.debug("forwarding to controller %d: %s", leader, exc)
            return None
        if answer is None or answer.error_code != 0:
            return None
        _corr, resp = api.decode_response(answer.response_data, ctx.api_key, ctx.api_version)
        if _not_controller(resp):
            return None   # that node lost its leadership: find the new one
        return resp

    async def _call_while_leader(self, leader: int, deadline: float, request):
        """_call, given up (None) at the deadline or once this node sees another leader (the old one
        may be stopped, not dead: its socket accepts and never answers)."""
        result = []

        async def call(cancel):
            result.append(await self._call(leader, request))
            cancel.cancel()

        with trio.move_on_at(deadline):
            async with trio.open_nursery() as n:
                n.start_soon(call, n.cancel_scope)
                while self.active_controller_id in (leader, -1):
                    await trio.sleep(0.05)
                n.cancel_scope.cancel()
        return result[0] if result else None

    async def _call(self, node_id: int, request):
        """One request to a voter's controller listener, on a connection no other request uses
        meanwhile (kept for the next call: a TLS handshake and SASL login per heartbeat would cost
        more than the heartbeat)."""
        from broker.security.outbound import expiring
        idle = self._pool.setdefault(node_id, [])
        while idle and expiring(idle[-1]):
            with trio.CancelScope(shield=True):
                try:
                    await idle.pop().aclose()   # its SASL session ends soon: a new login instead
                except Exception:
                    pass
        if idle:
            try:
                return await self._call_on(node_id, request, idle.pop())
            except _CONN_ERRORS:
                pass   # the peer closed an idle connection (it restarted): a new one
        return await self._call_on(node_id, request, None)

    async def _call_on(self, node_id: int, request, stream):
        host, port = self.shell.peers[node_id]   # (a static voter, or a dynamic quorum's leader as learned)
        version = api.version_range(request.API_KEY)[1]
        idle = self._pool.setdefault(node_id, [])
        if stream is None:
            connect = self.shell.connect
            if connect is not None:
                try:
                    stream = await connect(host, port, f"kproto-{self.node_id}")
                except _AUTH_ERRORS as exc:
                    log.error("connection to controller %d at %s:%s: %s", node_id, host, port, exc)
                    raise
            else:
                stream = await trio.open_tcp_stream(host, port)
        ok = False
        try:
            await stream.send_all(api.encode_request(request, version, 1, client_id=f"kproto-{self.node_id}"))
            frame = await _read_frame(stream, bytearray())
            ok = True
        finally:
            if ok and len(idle) < 4:
                idle.append(stream)
            else:
                with trio.CancelScope(shield=True):
                    try:
                        await stream.aclose()
                    except Exception:
                        pass
        _corr, resp = api.decode_response(frame, request.API_KEY, version)
        return resp

    async def _serve_other(self, header, request, frame, conn=None) -> bytes:
        """Requests other than raft's on the controller listener: Envelope (forwarded requests),
        BrokerRegistration. Returns the whole response frame. With an authorizer the sender needs
        CLUSTER_ACTION (as Kafka's ControllerApis); a forwarded request is then handled, and
        authorized, as the principal the Envelope names."""
        key, version = header.request_api_key, header.request_api_version
        own = await self.controller_apis.serve(header, request, conn)   # ApiVersions, DescribeCluster...
        if own is not None:
            return self.dispatcher._frame(key, version, header.correlation_id, own)
        guard = self.listener_security
        if guard is not None and not guard.may_cluster_action(conn):
            from kproto.error_response import error_response
            response = (EnvelopeResponse(response_data=b"", error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                        if key == ENVELOPE else
                        error_response(key, version, request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
        elif key == ENVELOPE:
            forwarded = _ForwardedConn(None)
            forwarded.session = self._forwarded_session(request, conn)
            chunks = await self.dispatcher.handle(bytes(request.request_data), forwarded)
            data = b"".join(bytes(c) for c in chunks)[4:] if chunks else b""
            response = EnvelopeResponse(response_data=data, error_code=0)
        else:
            response = await self._controller_rpc(key, request)
        return self.dispatcher._frame(key, version, header.correlation_id, response)

    def _forwarded_session(self, envelope, conn):
        """The original client's principal and address (an empty principal: the forwarding
        broker's own request, e.g. an internal topic's creation, made as the broker itself)."""
        from broker.quorum.secure import address_text, deserialize_principal
        from broker.security.session import Session
        security = getattr(self.broker, "security", None)
        if security is None:
            return None
        own = getattr(conn, "session", None)
        session = Session(security, None, "PLAINTEXT", address_text(envelope.client_host_address))
        try:
            named = deserialize_principal(bytes(envelope.request_principal or b""))
        except Exception:
            named = None
        if named is not None:
            session.principal, session.token_authenticated = named
        elif own is not None:
            session.principal = own.principal
        return session

    # ------------------------------------------- topics created by brokers

    def install_controller_hooks(self, controller) -> None:
        """Topics the broker creates on its own (internal topics at the first FindCoordinator,
        auto-created topics) are created by the active controller: on another node the creation
        is sent to it as a CreateTopics request (the caller answers as when a topic is still being
        created, and clients retry)."""
        from broker.controller.controller import _internal_rf
        ensure, auto = controller.ensure_internal_topic, controller.auto_create_topics

        def ensure_internal_topic(name, partitions, configs):
            if self.is_active_controller:
                return ensure(name, partitions, configs)
            if name not in self.image.topics and name not in self._creating and self._nursery is not None:
                self._creating.add(name)
                # offsets.topic / transaction.state.log.replication.factor, as on the controller
                rf = _internal_rf(controller.config, name)
                self._nursery.start_soon(self._create_remotely, [(name, partitions, rf, configs)])

        async def auto_create_topics(names):
            if self.is_active_controller:
                return await auto(names)
            missing = [(n, -1, -1, {}) for n in names if n not in self.image.topics]
            if missing:
                with trio.move_on_after(5):
                    await self._create_remotely(missing)

        controller.ensure_internal_topic = ensure_internal_topic
        controller.auto_create_topics = auto_create_topics

    async def _create_remotely(self, topics) -> None:
        from kproto.messages.create_topics_request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
        req = CreateTopicsRequest(topics=[
            CreatableTopic(name=n, num_partitions=p, replication_factor=rf, assignments=[],
                           configs=[CreatableTopicConfig(name=k, value=v) for k, v in c.items()])
            for n, p, rf, c in topics], timeout_ms=5000, validate_only=False)
        version = api.version_range(req.API_KEY)[1]
        inner = api.encode_request(req, version, 1, f"kproto-{self.node_id}")[4:]
        try:
            leader = self.active_controller_id
            if leader >= 0 and leader != self.node_id and leader in self.shell.peers:
                await self._call_while_leader(leader, trio.current_time() + 5, EnvelopeRequest(
                    request_data=inner, request_principal=b"", client_host_address=b"\x7f\x00\x00\x01"))
        except _CONN_ERRORS as exc:
            log.debug("topic creation through the controller: %s", exc)
        finally:
            for n, *_rest in topics:
                self._creating.discard(n)

    # ---------------------------------------------------- registration

    async def _registration_loop(self):
        """Register this broker with each new active controller (BrokerLifecycleManager): after a
        refusal, again with Kafka's backoff (100 ms doubling, at most broker.session.timeout.ms);
        DUPLICATE_BROKER_REGISTRATION (another process registered with this node.id, or this node's
        previous run, killed, whose session has not expired yet) is said once, as a warning."""
        from kproto.messages.broker_registration_request import BrokerRegistrationRequest, Listener
        from broker.storage.dir_assignments import online_dir_ids
        incarnation = self.incarnation
        failed, warned, wait = 0, False, 0.05
        changed = self.leader_changed
        while True:
            if self._registered_epoch == self.shell.leader.epoch:
                # registered with this leader: nothing to do before the next one
                await self.next_leadership(1.0, changed)
            else:
                await trio.sleep(wait)
            wait = 0.05
            changed = self.leader_changed   # (before the look below: a change after it wakes the wait)
            leader, epoch = self.active_controller_id, self.shell.leader.epoch
            if leader < 0 or self._registered_epoch == epoch:
                continue
            if self._registered(incarnation):
                self._registered_epoch = epoch
                continue
            listeners = []
            for e in self.config.advertised_listeners():
                host, port = self.broker.advertised_address(e.name)
                listeners.append(Listener(name=e.name, host=host, port=port,
                                          security_protocol=_protocol_id(e)))
            req = BrokerRegistrationRequest(broker_id=self.node_id, cluster_id=self.broker.cluster_id or "",
                                            incarnation_id=incarnation, listeners=listeners, features=[],
                                            rack=self.config.get("broker.rack") or None,   # placement, KIP-392
                                            is_migrating_zk_broker=False,
                                            log_dirs=online_dir_ids(self.broker),   # KIP-858
                                            previous_broker_epoch=-1)
            try:
                resp = await self.to_controller(req)
            except Exception as exc:
                log.debug("broker registration: %s", exc)
                resp = None
            if resp is None or resp.error_code == ErrorCode.NOT_CONTROLLER:
                continue   # no active controller reached: looked for again
            if resp.error_code == 0:
                if failed or warned:
                    log.info("broker %d registered with broker epoch %d", self.node_id, resp.broker_epoch)
                failed, warned = 0, False
                self._registered_epoch = epoch
                self.liveness.broker_epoch = resp.broker_epoch   # the first heartbeat goes at once
                continue
            if resp.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION and not warned:
                warned = True
                log.warning("broker %d: registration refused (DUPLICATE_BROKER_REGISTRATION): another broker "
                            "is registered with node.id %d and its session is live (a second process with "
                            "the same node.id, or this node's previous run until broker.session.timeout.ms "
                            "expires); retrying", self.node_id, self.node_id)
            elif resp.error_code != ErrorCode.DUPLICATE_BROKER_REGISTRATION:
                log.info("broker %d: unable to register: the controller returned error %s",
                         self.node_id, _error_name(resp.error_code))
            wait = _backoff_s(failed, self.liveness.session_s)
            failed += 1

    def _registered(self, incarnation) -> bool:
        b = getattr(self.image, "brokers", {}).get(self.node_id)
        return b is not None and b.incarnation_id == incarnation

    async def _register(self, req):
        """BrokerRegistration on the active controller (broker/controller/registration.py): a new
        incarnation registers fenced, a duplicate of a live one is refused."""
        from kproto.messages.broker_registration_response import BrokerRegistrationResponse
        from broker.controller import registration
        if not self.is_active_controller:
            return BrokerRegistrationResponse(error_code=ErrorCode.NOT_CONTROLLER, broker_epoch=-1)
        bid = req.broker_id
        existing = self.image.brokers.get(bid)
        now = trio.current_time()
        try:
            record = registration.registration_record(
                req, existing, self.liveness.has_valid_session(bid, now), self.image.offset + 1,
                self.broker.cluster_id)
        except KafkaError as exc:
            if exc.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION:
                log.info("broker %d: registration of incarnation %s refused: incarnation %s is registered "
                         "and its session is valid (DUPLICATE_BROKER_REGISTRATION)",
                         bid, req.incarnation_id, existing.incarnation_id)
            return BrokerRegistrationResponse(error_code=exc.code, broker_epoch=-1)
        records = [record]
        if existing is not None and existing.incarnation_id != req.incarnation_id and not existing.fenced:
            # the previous incarnation's session expired but it is not fenced yet: it is fenced in
            # the same batch (its leaderships move), so no image has a new, fenced incarnation leading
            records = self.liveness.fence_records(bid, existing.broker_epoch) + records
        if existing is None or existing.incarnation_id != req.incarnation_id:
            log.info("broker %d: %s incarnation %s, broker epoch %d (fenced until caught up)", bid,
                     "new" if existing is None else "a new", req.incarnation_id, record.broker_epoch)
        token = _pending.set([])
        try:
            offset = self.propose_nowait(records)
            self.liveness.registered(bid, offset, now)
            await self._await_pending(5000)
        except KafkaError as exc:
            return BrokerRegistrationResponse(error_code=exc.code, broker_epoch=-1)
        finally:
            _pending.reset(token)
        return BrokerRegistrationResponse(error_code=0, broker_epoch=record.broker_epoch)


def _backoff_s(failed: int, session_s: float) -> float:
    """Kafka's ExponentialBackoff(100 ms, x2, broker.session.timeout.ms, jitter 0.02)."""
    base = min(0.1 * 2 ** min(failed, 30), session_s)
    return base * random.uniform(0.98, 1.02)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _protocol_id(endpoint) -> int:
    names = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
    return names.get(str(getattr(endpoint, "security_protocol", "PLAINTEXT")).upper(), 0)


def _in_trio() -> bool:
    try:
        trio.lowlevel.current_task()
        return True
    except RuntimeError:
        return False


def _preforward(api_key: int, ctx, request):
    """(the request to forward or None, merge(response) or None): the receiving broker's own
    checks of a request it forwards (per-broker config changes are validated by that broker)."""
    from broker.handlers.configs import PREFORWARD
    pre = PREFORWARD.get(api_key)
    return (request, None) if pre is None else pre(ctx, request)


def _error(ctx, request, code: int):
    from kproto.error_response import error_response
    response = error_response(ctx.api_key, ctx.api_version, request, code)
    if response is None:
        raise KafkaError(code)
    return response


def _not_controller(resp) -> bool:
    """Whether a forwarded answer is the leader's 'not me any more' (then the request is retried)."""
    codes = []
    if hasattr(resp, "error_code"):
        codes.append(resp.error_code)
    for attr in ("topics", "results", "responses"):
        for item in getattr(resp, attr, None) or []:
            if hasattr(item, "error_code"):
                codes.append(item.error_code)
    return bool(codes) and all(c == ErrorCode.NOT_CONTROLLER for c in codes)

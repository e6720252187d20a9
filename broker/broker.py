"""Assembles one broker: storage, metadata, controller, partitions,
coordinators and listeners, and runs their background work."""
from __future__ import annotations

import base64
import logging
import os
import time
import uuid

import trio

from broker.config import BrokerConfig, ConfigError, validate_topic_config
from broker.config.kraft import is_multi_voter
from broker.controller.controller import Controller
from broker.server.dispatch import Dispatcher
from broker.storage.flusher import Flusher
from broker.groups.coordinator import GroupCoordinator
from broker.metadata.delta import PartitionDelta
from broker.metadata.topic_names import INTERNAL_TOPICS
from broker.metadata.image import MetadataImage
from broker.metadata.log import METADATA_TOPIC, MetadataLog
from broker.storage.checkpoint_writer import CheckpointWriter
from broker.metrics import LISTENER_KEY, BrokerMetrics, parse_listener, watch_event_loop
from broker.controller.producer_ids import ProducerIdManager
from broker.quorum.leadership import become_sole_leader, bootstrap_batch_records, bootstrap_voters
from broker.metadata.snapshotter import Snapshotter
from broker.quorum.startup import prepare_storage
from broker.partitions.creation import make_pending_logs
from broker.partitions.sliced_reconcile import SlicedReconcile
from broker.partitions.producers import ProducerStateManager
from broker.partitions.replicas import ReplicaManager
from broker.replication.manager import ReplicationManager
from broker.server.listener import run_listener
from broker.storage import LogManager
from broker.storage.dir_failure import LogDirFailures
from broker.storage.jbod import existing_meta_properties, managers, open_log_dirs
from broker.storage.limits import room_for
from broker.tiered.metrics import tiered_metrics
from broker.tiered.settings import list_offsets_timeout_ms
from broker.transactions.coordinator import TransactionCoordinator
from kproto.errors import ErrorCode, KafkaError

log = logging.getLogger("kproto.broker")


def _metadata_fault(what: str) -> None:
    """A metadata record the image could not apply: reported and skipped, as Kafka's loader does
    (its fault handler logs the error and counts it in metadata-apply-error-count)."""
    log.error("error replaying a metadata record: %s", what)


METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's fixed __cluster_metadata topic id (AAAAAAAAAAAAAAAAAAAAAQ)
METADATA_VERSION = 21  # 3.9-IV0, what Kafka 3.9 finalizes on a fresh cluster
# producer.id.expiration.check.interval.ms, an internal Kafka setting (default 10 minutes)
PRODUCER_EXPIRATION_CHECK_S = 600
# the log cleaner works this long at a time, then lets requests run as long
# (5 ms: a 20 ms slice plus the 50 ms one periodic() used to add held every
# request up to 26 and 56 ms while compaction ran, docs/performance.md)
CLEANER_SLICE_S = 0.005


def _security_manager(broker):
    """TLS, SASL and principals of client connections; bad TLS or JAAS settings stop start-up."""
    from broker.security.manager import SecurityManager
    from broker.config.types import StartupError
    try:
        return SecurityManager(broker)
    except ConfigError as exc:
        raise StartupError(str(exc)) from None


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class Broker:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.node_id = config.node_id
        self.log_dir = os.path.abspath(config.log_dirs[0])
        self.metadata_log_dir = os.path.abspath(config.kraft.metadata_log_dir) if config.kraft else self.log_dir
        self._metadata_logs_manager = None
        self.log_dirs = [os.path.abspath(d) for d in config.log_dirs]   # JBOD: partitions spread over them
        self.quorum_voter_set = None
        self.quorum = None   # broker.quorum.replicated.ReplicatedMetadata on a multi-voter quorum's nodes
        self.cluster_id = None
        self.metadata_version = METADATA_VERSION
        self.features_epoch = 0
        self.image = MetadataImage()
        self.image.on_fault = _metadata_fault
        self.logs = None
        self.metadata = None
        self.controller = None
        self.tiered = None
        self.partitions = None
        self.groups = None
        self.transactions = None
        # share groups (KIP-932, broker/share/): built by the `share` property at the first request
        # that needs it, its task then started in `_services` (the run's nursery)
        self._share = None
        self._services = None
        self.producers = ProducerStateManager()
        self.flusher = Flusher()  # fsyncs in worker threads, group commit
        self.checkpoints = CheckpointWriter()  # periodic checkpoint files, written off the event loop
        self.dir_failures = LogDirFailures(self.log_dirs, self.metadata_log_dir)   # a failed disk: halt as Kafka does
        self.flusher.on_disk_error = self.checkpoints.on_disk_error = self.dir_failures.report
        self.security = None  # broker.security.manager.SecurityManager, set in run()
        self.authorizer = None  # broker.security.acls.Authorizer when authorizer.class.name is set
        self.quotas = None  # broker.security.quotas.QuotaManager
        self.bound: list[tuple[str, str, int]] = []  # (listener name, host, port)
        self._closed = False
        # Prometheus metrics (broker/metrics): None when kproto.metrics.listener is off;
        # ready: listeners bound and storage open (the /ready endpoint)
        self.ready = False
        # gc.freeze() what each slice of new logs is made of (broker/partitions/creation.py): set by
        # `kproto serve`, which owns its process; a broker in a thread of another program
        # (broker/launch/embedded.py, the pytest plugin) leaves that program's collector alone
        self.freeze_made_logs = False
        try:
            self.metrics_listener = parse_listener(config.static_configs.get(LISTENER_KEY))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.metrics = BrokerMetrics() if self.metrics_listener else None
        self.metrics_server = None
        # the schema registry (broker/schema_registry): None unless schema.registry.listeners is set
        # (its package is imported only when a schema.registry.* key is given: it is not small)
        self.schema_registry_settings = None
        if any(key.startswith("schema.registry.") for key in config.static_configs):
            from broker.schema_registry import settings as registry_settings
            try:
                self.schema_registry_settings = registry_settings.read(config)
            except registry_settings.SettingError as exc:
                raise ConfigError(str(exc)) from None
        self.schema_registry = None
        self.schema_registry_url = None

    # -- start -------------------------------------------------------------------

    def _metadata_logs(self):
        """The LogManager of metadata.log.dir (the first log dir's unless set elsewhere)."""
        for directory, manager in managers(self.logs):   # metadata.log.dir may be one of log.dirs
            if directory == self.metadata_log_dir:
                return manager
        if self._metadata_logs_manager is None:
            self._metadata_logs_manager = LogManager.open(self.metadata_log_dir, None,
                                                          broker_config=self._log_manager_settings())
        return self._metadata_logs_manager

    def open_storage(self, progress=None) -> None:
        started = time.monotonic()
        prepare_storage(self.config)   # formatted for this node and cluster (or a single node formats itself)

        shown = {"percent": -1, "at": 0.0}

        def recovery_progress(done: int, total: int) -> None:
            # the store reports per chunk and per partition, repeating itself:
            # one line per new percentage, at most two a second, and always 100%
            if not progress or not total:
                return
            percent = done * 100 // total
            now = time.monotonic()
            if percent <= shown["percent"] or (percent < 100 and now - shown["at"] < 0.5
                                               and shown["percent"] >= 0):
                return
            shown["percent"], shown["at"] = percent, now
            progress(f"kproto: recovering logs: {percent}% ({done >> 20} of {total >> 20} MiB)")

        producers = self.producers

        def snapshot_provider_for(topic: str, index: int):
            # what the log writes into <offset>.snapshot at rolls and at close
            return lambda offset: producers.snapshot_entries(topic, index, offset)

        self.logs = open_log_dirs(self.log_dirs, None, broker_config=self._log_manager_settings(),
                                    progress=recovery_progress, snapshot_provider_for=snapshot_provider_for)
        self.logs.set_flush_scheduler(self.flusher.request)
        self.logs.offline = self.dir_failures.failed   # JBOD: no new partition in a failed dir
        # JBOD: a dir where a partition's directory cannot be made fails, the next is tried
        self.logs.on_dir_failure = lambda exc: self.dir_failures.report(exc, any_os_error=True)
        # a formatted directory keeps its cluster id; only a fresh one gets a new id
        existing = existing_meta_properties(self.log_dirs)
        meta = self.logs.ensure_meta_properties(self.node_id, existing.get("cluster.id") or new_cluster_id())
        self.cluster_id = meta["cluster.id"]
        plog = self._metadata_logs().get_or_create(METADATA_TOPIC, 0, METADATA_TOPIC_ID, {
            "segment.bytes": self.config.get_int("metadata.log.segment.bytes"),
            "segment.ms": self.config.get_long("metadata.log.segment.ms")})
        if is_multi_voter(self.config):
            # a multi-node quorum: the raft shell replicates the log; the image follows the commit
            # (imported here: a single node's start-up never loads raft/ and the quorum's runtime)
            from broker.quorum.replicated import ReplicatedMetadata
            self.quorum = ReplicatedMetadata(self)
            self.metadata = self.quorum.open(plog)
            self._open_services(started, 0)
            self.producer_ids = self.quorum.producer_ids()
            self.quorum.install_controller_hooks(self.controller)
            return
        self.metadata = MetadataLog(plog, self.image)
        count = self.metadata.replay()
        # a one-voter quorum elects itself in a new epoch: quorum-state + LeaderChange record
        voters = list(self.config.kraft.voters) if self.config.kraft else []
        self.quorum_voter_set = bootstrap_voters(plog.dir)   # a dynamic quorum's VotersRecord, or None
        self.metadata.leader_epoch = become_sole_leader(plog, self.node_id, voters, self._metadata_logs().sync,
                                                        self.quorum_voter_set)
        if "metadata.version" not in self.image.features:
            # a new cluster: the bootstrap records (metadata.version from `storage format`) come first
            self.metadata.append(bootstrap_batch_records(self.metadata_log_dir, METADATA_VERSION))
        self.metadata_version = self.image.features.get("metadata.version", METADATA_VERSION)
        self.metadata.snapshotter = Snapshotter(
            plog, self.image, max_bytes=self.config.get_long("metadata.log.max.record.bytes.between.snapshots"),
            max_interval_ms=self.config.get_long("metadata.log.max.snapshot.interval.ms"),
            metadata_version=self.metadata_version, node_id=self.node_id, voter_set=self.quorum_voter_set,
            sync=self._metadata_logs().sync,
            retention_bytes=self.config.get_long("metadata.max.retention.bytes"),
            retention_ms=self.config.get_long("metadata.max.retention.ms"))
        self.features_epoch = max(self.image.offset, 0)
        self._open_services(started, count)

    def _open_services(self, started, count) -> None:
        self.controller = Controller(self.node_id, self.metadata, self.image, self.config,
                                     self._validate_topic_configs, self._check_local_room)
        self.producer_ids = ProducerIdManager(self.node_id, self.metadata, self.image)
        self.partitions = ReplicaManager(self.node_id, self.image, self.logs, self.config)
        if self.quorum is not None:
            self.partitions.strays_allowed = False   # until the image caught up (broker/quorum/replicated.py)
        self.partitions.on_partition_created.append(self.producers.attach)
        self.partitions.on_partition_removed.append(self.producers.forget)
        # a log the disk refuses to make fails its directory (every OSError, as Kafka's getOrCreateLog)
        self.partitions.on_log_failure = lambda exc: self.dir_failures.report(exc, any_os_error=True)
        self.logs.high_watermark_for = self._high_watermark
        self.logs.last_stable_offset_for = self._last_stable_offset
        self.partitions.reconcile()
        self.replication = ReplicationManager(self)   # leader/follower roles (broker/replication)
        self.replication.reconcile()
        self._delta = PartitionDelta(self.node_id)   # what the next reconcile visits
        self._delta.take()                           # (everything was visited just now)
        # a large change's partitions reconciled a slice at a time (broker/partitions/sliced_reconcile.py)
        self._slices = SlicedReconcile(self._reconcile_keys, getattr(self.quorum, "image_committed", None),
                                       getattr(self.quorum, "when_committed", None),
                                       urgent=lambda key: key[0] in INTERNAL_TOPICS)
        self.metadata.subscribe(self._reconcile_replicas)
        self.groups = GroupCoordinator(self)
        self.groups.open()
        self.transactions = TransactionCoordinator(self)
        self.transactions.open()
        self.tiered = self._remote_log_manager()
        log.info("storage open: %d metadata records, %d partitions in %.2f s",
                 count, len(self.partitions.all()), time.monotonic() - started)

    def _remote_log_manager(self):
        """Tiered storage (broker/tiered): the remote log manager of a broker with
        remote.log.storage.system.enable, opened; None without it, and its modules never loaded
        (start-up CPU, issue 26): the fetch and ListOffsets paths and the follower's fetcher ask
        whether broker.tiered is None first."""
        # on /metrics, zeros while tiered storage is off (the dashboard's panel stays valid)
        self.metric_sources = [*getattr(self, "metric_sources", []), lambda: tiered_metrics(self)]
        if not self.config.get_bool("remote.log.storage.system.enable"):
            list_offsets_timeout_ms(self.config)   # (a bad value fails start-up on every broker, as Kafka 4's)
            return None
        from broker.tiered.manager import RemoteLogManager
        tiered = RemoteLogManager(self)
        tiered.open()
        return tiered

    def _log_manager_settings(self) -> dict:
        keys = ("log.retention.check.interval.ms", "log.flush.offset.checkpoint.interval.ms",
                "log.flush.start.offset.checkpoint.interval.ms", "log.segment.delete.delay.ms",
                "log.flush.scheduler.interval.ms", "file.delete.delay.ms",
                "log.cleaner.enable", "log.cleaner.backoff.ms", "log.cleaner.dedupe.buffer.size",
                "log.cleaner.io.buffer.load.factor", "log.cleaner.threads")
        out = {}
        for k in keys:
            try:
                out[k] = self.config.get(k)
            except KeyError:
                pass
        return out

    def _high_watermark(self, topic: str, index: int):
        p = self.partitions.get(topic, index)
        return p.high_watermark if p else None

    def _last_stable_offset(self, topic: str, index: int):
        p = self.partitions.get(topic, index)
        return p.last_stable_offset if p else None

    def _validate_topic_configs(self, configs: dict) -> None:
        try:
            validate_topic_config(self.config, configs)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None

    def _check_local_room(self, partitions: int) -> None:
        # refused before the metadata names logs this process could not open; the partitions
        # committed whose logs are still being made count as made
        queued = self.partitions.pending_count() if getattr(self, "partitions", None) is not None else 0
        why = room_for(partitions + queued)
        if why is not None:
            log.error("refused to host %s", why)
            raise KafkaError(ErrorCode.POLICY_VIOLATION, why)

    def advertised_address(self, listener: str | None = None) -> tuple[str, int]:
        endpoints = self.config.advertised_listeners()
        for e in endpoints:
            if listener is None or e.name == listener:
                port = e.port
                if port == 0:  # bound to an ephemeral port: advertise the real one
                    port = next((p for n, _h, p in self.bound if n == e.name), 0)
                return e.host, port
        _n, host, port = self.bound[0]
        return host, port

    async def run(self, progress=None, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self._start_metrics_listener()
        if self.logs is None:
            self.open_storage(progress)
        self.security = _security_manager(self)
        self.authorizer = self.security.authorizer
        self.quotas = self.security.quotas
        dispatcher = Dispatcher(self)
        max_frame = self.config.get_int("socket.request.max.bytes")
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.dir_failures.halt_when_all_failed)
                await nursery.start(self.dir_failures.take_offline_when_failed, self._take_dirs_offline)
                await nursery.start(self.flusher.run)
                await nursery.start(self.checkpoints.run)
                # new partitions' logs, made after the metadata committed them
                await nursery.start(make_pending_logs, self.partitions, self._partitions_made,
                                    self.freeze_made_logs)
                await nursery.start(self._slices.run)
                self.logs.set_checkpoint_writer(self.checkpoints.submit, with_dir=True)
                if self.quorum is not None:
                    await nursery.start(self.quorum.run)
                addresses = []
                for e in self.config.broker_listeners:
                    host, port = await nursery.start(run_listener, e.bind_host, e.port, dispatcher,
                                                     max_frame, e.name)
                    self.bound.append((e.name, host, port))
                    shown = e.host or host
                    addresses.append(f"{e.name}://{shown}:{port}")
                if self.quorum is None and self.config.kraft is not None and self.config.kraft.controller_endpoints:
                    # a sole voter's controller listeners (broker/quorum/sole_controller.py)
                    from broker.quorum import sole_controller
                    await sole_controller.bind(self, nursery, max_frame)
                nursery.start_soon(self._housekeeping)
                await nursery.start(self.replication.run)
                nursery.start_soon(self._log_cleaner)
                nursery.start_soon(self.groups.run)
                nursery.start_soon(self.transactions.run)
                if self.tiered is not None:
                    nursery.start_soon(self.tiered.run)
                self._services = nursery
                if self._share is not None:       # built before the run (in-process callers)
                    nursery.start_soon(self._share.run)
                if self.metrics is not None:
                    nursery.start_soon(watch_event_loop, self.metrics)
                if self.schema_registry_settings is not None:
                    from broker import schema_registry
                    await nursery.start(schema_registry.run, self, self.schema_registry_settings)
                self.ready = True
                if getattr(self, "metrics_warning", None):
                    log.warning(self.metrics_warning)
                task_status.started(addresses)
        finally:
            self.ready = False
            self._services = None
            self.close()

    @property
    def share(self):
        """The share-group service (broker/share/service.py), built at the first request that needs
        it: a share-group API, a share coordinator key's FindCoordinator, DeleteGroups. Until then
        nothing of it is imported or running (start-up CPU, issue #26); it holds nothing a start
        must recover (sessions live in memory, a share coordinator reads its `__share_group_state`
        partition at its first request, the groups' membership and state records are the group
        coordinator's, which keeps the groups it replays until the service takes them), so built late
        it behaves as built at start."""
        if self._share is None:
            from broker.share.service import ShareService
            self._share = ShareService(self)
            if self._services is not None:
                self._services.start_soon(self._share.run)
        return self._share

    @property
    def share_if_built(self):
        """The share-group service, or None when no request has needed it yet (no share groups)."""
        return self._share

    @property
    def metrics_url(self) -> str | None:
        return self.metrics_server.url if self.metrics_server is not None else None

    def _reconcile_replicas(self, records=None) -> None:
        """Metadata listener: local partitions (created, deleted, leader epochs) and their roles,
        of the partitions the records since the last reconcile named (broker/metadata/delta.py;
        ``records`` None: a call waiting for the commit, which adds none).
        On committed metadata only, as Kafka's brokers: the active controller's image also holds
        its own proposals before they commit, and one that resumes after a pause believing it
        still leads proposes what never commits (broker/quorum/replicated.py)."""
        if records is not None:
            self._delta.add(records, self.image)
            self.replication.elections.add(records, self.image)
        committed = getattr(self.quorum, "image_committed", None)   # (in-process test clusters: none)
        if committed is not None and not committed():
            self.quorum.when_committed(self._reconcile_replicas)
            return
        keys = self._delta.take()
        if keys is None:
            self._slices.clear()   # (every partition is reconciled now)
            self.partitions.reconcile()
            self.replication.reconcile()
        else:
            self._slices.submit(keys)

    def _reconcile_keys(self, keys) -> None:
        self.partitions.reconcile(keys)
        self.replication.reconcile(keys)

    def _take_dirs_offline(self, dirs) -> None:
        """Failed log dirs: their partitions go offline and lose their roles (the heartbeat tells
        the controller, which moves their leadership: broker/quorum/liveness.py)."""
        if self.partitions.take_offline(dirs):
            self.replication.reconcile()

    def _partitions_made(self, parts) -> None:
        """A slice of new partitions' logs exists now: their roles, as _reconcile_replicas gives
        them (on the committed image; a quorum leader's image may be ahead of it)."""
        committed = getattr(self.quorum, "image_committed", None)
        if committed is not None and not committed():
            self._delta.add_keys((p.topic, p.index) for p in parts)
            self.quorum.when_committed(self._reconcile_replicas)
            return
        self.replication.adopt(parts)

    def _start_metrics_listener(self) -> None:
        """Bound first, so /ready and /health answer while storage opens. A
        port in use costs the metrics, not the broker: one line once the
        broker is ready (a start-up that fails says only why it failed)."""
        if self.metrics_listener is None or self.metrics_server is not None:
            return
        from broker.metrics.http import MetricsServer
        host, port = self.metrics_listener
        try:
            self.metrics_server = MetricsServer(self, host, port)
        except OSError as exc:
            self.metrics_warning = (f"metrics listener http://{host}:{port} not started "
                                    f"({exc.strerror or exc}): running without metrics")
            self.metrics = None
            return
        self.metrics_server.trio_token = trio.lowlevel.current_trio_token()

    async def _housekeeping(self) -> None:
        """Retention, flushes and checkpoints, on Kafka's intervals."""
        next_producer_expiry = time.monotonic() + PRODUCER_EXPIRATION_CHECK_S
        while True:
            await trio.sleep(1.0)
            try:
                self.logs.periodic(clean_budget_s=0)   # _log_cleaner compacts, in small slices
            except Exception as exc:
                if not self.dir_failures.report(exc):
                    log.exception("periodic log maintenance failed")
            if time.monotonic() >= next_producer_expiry:
                next_producer_expiry = time.monotonic() + PRODUCER_EXPIRATION_CHECK_S
                removed = self.producers.remove_expired(int(time.time() * 1000),
                                                        self.config.get_int("producer.id.expiration.ms"))
                if removed:
                    log.info("expired %d idle producer ids", removed)

    async def _log_cleaner(self) -> None:
        """Log compaction in short slices, so requests keep flowing between them."""
        while True:
            try:
                busy = self.logs.clean(budget_s=CLEANER_SLICE_S)
            except Exception as exc:
                if not self.dir_failures.report(exc):
                    log.exception("log cleaner failed")
                busy = False
            await trio.sleep(CLEANER_SLICE_S if busy else 0.5)

    def close(self) -> None:
        if self.metrics_server is not None:
            self.metrics_server.close()
        if self._closed or self.logs is None:
            return
        self._closed = True
        self.checkpoints.drain()
        self.logs.close()
        if self._metadata_logs_manager is not None:
            self._metadata_logs_manager.close()
        log.info("clean shutdown")

"""The transaction coordinator, one per broker (`broker.transactions`): the
transaction state machine driven by the coordinators' shell
(broker/coordination/shell.py).

The shell feeds requests to the state machine with the wall clock, runs the
timers and does the work the machine asks for, all from the trio thread and
without awaiting in between (so nothing interleaves); this module says what
the outputs mean: records go to `__transaction_state` through the Partition
objects with acks=all (the outcome, fed back with `append_done`, waits until
the high watermark passes the record, as Kafka's TransactionStateManager
appends with requiredAcks=-1), and markers go to the leader of each partition
of the transaction (broker/transactions/markers.py: written here when this
broker leads it, else by WriteTxnMarkers to its leader; `markers_done`).

At start every `__transaction_state` partition is replayed; until one is, its
transactional ids answer COORDINATOR_LOAD_IN_PROGRESS. On a cluster the
coordinator then follows the leadership of those partitions
(`_follow_leaders`, from the metadata image): a
partition led elsewhere is dropped (NOT_COORDINATOR), one this broker comes
to lead is loaded from its log, its prepared transactions completed and its
ongoing ones left to time out and be aborted.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import trio

from kproto import records as rec
from kproto.errors import ErrorCode, KafkaError

from broker.coordination.shell import CoordinatorShell, Output, replay_partition, wall_clock_ms
from broker.coordination.topic import ensure_internal_topic
from broker.controller.features import TRANSACTION_VERSION
from broker.storage.replay import stored_batches
from broker.transactions.config import TxnConfig
from broker.transactions.verification import RemoteVerifier
from broker.transactions.placement import TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from broker.transactions.markers import MarkerChannel
    from broker.transactions.state import TransactionStateMachine

log = logging.getLogger("kproto.transactions")

# Produce versions from which a transactional batch adds its partition to the transaction (KIP-890 part 2)
IMPLICIT_ADD_PRODUCE_VERSION = 12


class TransactionCoordinator:
    def __init__(self, broker, config: TxnConfig | None = None):
        self.broker = broker
        self.config = config or TxnConfig.from_broker_config(broker.config)
        # the state machine and its marker channel, built at first use (`state`)
        self._machine: TransactionStateMachine | None = None
        self.markers: MarkerChannel | None = None
        self.verifier = RemoteVerifier(broker)
        self._nursery = None
        self._topic_id = None                 # of the __transaction_state the state comes from
        self._led: dict[int, int | None] = {}  # partition -> leader epoch when led here, None when not
        # the machine defers its answers itself until append_done says the
        # record is written (and replicated)
        # (only a built machine has outputs: `state` gives the shell the machine)
        self.shell = CoordinatorShell(None, "transaction coordinator", {
            "appends": Output(write=self._write_state,
                              done=lambda append, error, now: self._machine.append_done(append.token, error, now)),
            "markers": Output(write=lambda job, complete: self.markers.write(job, complete),
                              done=lambda job, results, now: self._machine.markers_done(job, results, now)),
        })
        self._apply = self.shell.apply
        self._call = self.shell.call

    @property
    def state(self) -> TransactionStateMachine:
        """The state machine, built the first time it is needed: a request for a transaction or a
        producer id, a __transaction_state to load, a describe or list. Until then the broker has
        no transaction to track, and most never get one: a fresh node neither imports the machine,
        its records nor the marker channel (start-up CPU, issue #26)."""
        machine = self._machine
        if machine is None:
            # imported at the first use (see above)
            from broker.transactions.markers import MarkerChannel
            from broker.transactions.state import TransactionStateMachine
            machine = self._machine = TransactionStateMachine(self.config, self._allocate_producer_id)
            machine.transaction_version = self.broker.image.features.get(TRANSACTION_VERSION, 0)
            self.markers = MarkerChannel(self.broker, self.config.marker_retry_backoff_ms,
                                         lambda job: machine.owns(job.transactional_id, job.coordinator_epoch),
                                         wall_clock_ms)
            self.markers.nursery = self._nursery
            self.shell.machine = machine
        return machine

    def _active(self) -> bool:
        """Whether the state is that of a __transaction_state (activated), without building it."""
        return self._machine is not None and self._machine.num_partitions is not None

    def _allocate_producer_id(self) -> int:
        # (called by the machine, so its module is loaded)
        from broker.transactions.state import ProducerIdUnavailable
        try:
            return self.broker.producer_ids.next_id()
        except KafkaError as exc:
            # no block from the controller yet (just started, or the controller
            # is moving): Kafka answers COORDINATOR_LOAD_IN_PROGRESS and the
            # client retries, so this is no server error
            raise ProducerIdUnavailable(exc.code) from exc
        except Exception as exc:
            log.exception("producer id allocation failed")
            raise ProducerIdUnavailable(ErrorCode.UNKNOWN_SERVER_ERROR) from exc

    # ================================================================ start

    def open(self) -> None:
        """At broker start (storage open): if __transaction_state exists, all
        its partitions are to be replayed by run()."""
        topic = self.broker.image.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is not None:
            self._topic_id = topic.topic_id
            self._apply(self.state.activate(len(topic.partitions), self._coordinator_epochs(topic),
                                            loading=sorted(topic.partitions), now_ms=self.shell.now_ms()))
            self._follow_leaders(topic)
        self.broker.metadata.subscribe(self._on_metadata)

    @staticmethod
    def _coordinator_epochs(topic) -> dict[int, int]:
        # the coordinator epoch is the leader epoch of the state partition
        return {p.partition: p.leader_epoch for p in topic.partitions.values()}

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                # the tasks that wait for replication and send markers to other brokers
                self._nursery = nursery
                if self.markers is not None:
                    self.markers.nursery = nursery
                await nursery.start(self.shell.run, self._load_all)
                task_status.started()
        finally:
            self._nursery = None
            with trio.CancelScope(shield=True):
                if self.markers is not None:
                    self.markers.nursery = None
                    await self.markers.aclose()
                await self.verifier.aclose()

    async def _load_all(self) -> None:
        # transactions found prepared are completed as they load; their
        # markers in __consumer_offsets must reach groups already loaded
        # (a group still replaying would miss the completion)
        if self._machine is None:
            return   # no __transaction_state at the start: nothing to load
        groups = getattr(self.broker, "groups", None)
        while groups is not None and groups.state.loading:
            await trio.sleep(0.01)
        started = time.monotonic()
        # a partition whose leadership changes meanwhile gets a newer load generation:
        # this load of it then comes to nothing (partition_leadership loads it)
        generations = {index: self.state.load_generation(index) for index in self.state.loading}
        for index in sorted(generations):
            await self._load(index, None, generations[index])
        if self.state.num_partitions is not None:
            log.info("transaction coordinator loaded %d transactional ids in %.2f s", len(self.state.txns),
                     time.monotonic() - started)

    async def _load(self, index: int, upto: int | None, generation: int | None = None) -> None:
        """Replay __transaction_state-index (up to its high watermark, or upto)
        and finish its load, unless a newer load or a resignation superseded it."""
        if generation is None:
            generation = self.state.load_generation(index)
        if generation != self.state.load_generation(index):
            return
        try:
            await self._load_partition(index, generation, upto)
        except Exception:
            log.exception("loading %s-%d failed", TRANSACTION_STATE_TOPIC, index)
        self._apply(self.state.finish_load(index, self.shell.now_ms(), generation))

    async def _load_partition(self, index: int, generation: int, upto: int | None = None) -> None:
        partition = await self._local_replica(index, generation)
        if partition is None:
            return

        def replay(header, batch):
            if not header.is_control:
                for r in rec.iter_records(batch):
                    self.state.replay(index, r.key, r.value, generation)

        if upto is None:
            await replay_partition(partition, replay)
            return
        for chunk in stored_batches(partition.log, upto):
            for header, batch in chunk:
                replay(header, batch)
            await trio.sleep(0)

    def partition_leadership(self, index: int, leader: bool, leader_epoch: int = 0) -> None:
        """Replication moved the leadership of __transaction_state-index
        (from the metadata image, `_follow_leaders`), applied at once so successive changes
        keep their order. Kafka's onElection: load its transactions with the
        leader epoch as coordinator epoch (a new leader never truncates, so
        its whole log is what it leads with); its onResignation: forget them."""
        if not leader:
            self._apply(self.state.resign(index, self.shell.now_ms()))
            return
        self._apply(self.state.begin_load(index, leader_epoch, self.shell.now_ms()))
        if self._nursery is not None:
            self._nursery.start_soon(self._load_led, index, leader_epoch)
        # else: run() has not started; its first load covers the partition

    async def _local_replica(self, index: int, generation: int):
        """The local replica of __transaction_state-index, once its log is made here (queued:
        broker/partitions/creation.py; on a cluster, once the metadata image has it, as a
        restarted broker replays its metadata after the start): loading nothing from a replica
        not open yet would serve its transactions as forgotten. None when the load is no longer
        the one in force (a resignation or a newer election) or nothing will open it."""
        partitions = self.broker.partitions
        part = partitions.get(TRANSACTION_STATE_TOPIC, index)
        while (part is None and generation == self.state.load_generation(index)
               and (getattr(self.broker, "quorum", None) is not None
                    or partitions.is_pending(TRANSACTION_STATE_TOPIC, index))):
            part = await partitions.wait_hosted(TRANSACTION_STATE_TOPIC, index, 1.0)
        return part

    async def _load_led(self, index: int, leader_epoch: int) -> None:
        generation = self.state.load_generation(index)
        part = await self._local_replica(index, generation)
        if generation != self.state.load_generation(index):
            return   # resigned or elected again meanwhile: that load is the one in force
        started = time.monotonic()
        await self._load(index, part.log.log_end_offset if part is not None else None)
        log.info("coordinating the transactions of %s-%d at epoch %d (loaded in %.2f s)", TRANSACTION_STATE_TOPIC,
                 index, leader_epoch, time.monotonic() - started)

    # ================================================================ the state topic

    def ensure_state_topic(self) -> int:
        """FindCoordinator for a transactional id: NONE when __transaction_state
        exists; otherwise create it and answer COORDINATOR_NOT_AVAILABLE, as
        Kafka does on the first lookup (clients retry)."""
        return ensure_internal_topic(self.broker, TRANSACTION_STATE_TOPIC, self._active(),
                                     self._activate_if_created, log)

    def _activate_if_created(self) -> None:
        topic = self.broker.image.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is not None and not self._active():
            # the topic appeared in the image: created just now (nothing to replay), or this
            # broker restarted with an empty image (a multi-voter quorum replays the metadata
            # log after the start) and may still lead partitions whose logs hold transactions:
            # those are loaded as a new leader loads them, never served empty (an Ongoing
            # transaction forgotten here answers INVALID_PRODUCER_ID_MAPPING, hands its id a new
            # producer id and leaves the old one's data open in its partitions: their last
            # stable offset stops for good); partitions led elsewhere answer NOT_COORDINATOR
            self._topic_id = topic.topic_id
            clustered = getattr(self.broker, "quorum", None) is not None
            loading, not_owned = [], []
            for index, p in topic.partitions.items():
                if clustered and p.leader != self.broker.node_id:
                    not_owned.append(index)
                    continue
                part = self.broker.partitions.get(TRANSACTION_STATE_TOPIC, index)
                if clustered or part is None or part.log.log_end_offset > part.log.log_start_offset:
                    # (the local replica may not be open yet, its log still to be made, or on a
                    # cluster not in the image yet: _load_led waits for it)
                    loading.append(index)
            self._apply(self.state.activate(len(topic.partitions), self._coordinator_epochs(topic),
                                            loading=loading, now_ms=self.shell.now_ms()))
            if clustered:
                # _follow_leaders takes over from here: these are the leaderships in force
                for index, p in topic.partitions.items():
                    self._led[index] = p.leader_epoch if p.leader == self.broker.node_id else None
                for index in not_owned:
                    self._apply(self.state.resign(index, self.shell.now_ms()))
            if self._nursery is not None:
                for index in loading:
                    self._nursery.start_soon(self._load_led, index, self.state.coordinator_epochs.get(index, 0))
            # else: run() has not started; its first load covers them
            log.info("%s with %d partitions: %d to load, %d led elsewhere", TRANSACTION_STATE_TOPIC,
                     len(topic.partitions), len(loading), len(not_owned))

    def _on_metadata(self, _records) -> None:
        self._follow_transaction_version()
        topic = self.broker.image.topics.get(TRANSACTION_STATE_TOPIC)
        if self._active() and (topic is None or topic.topic_id != self._topic_id):
            # the topic the state was loaded from is gone (a metadata rollback can remove it)
            log.warning("%s is gone: forgetting its transactions", TRANSACTION_STATE_TOPIC)
            self._apply(self.state.deactivate(self.shell.now_ms()))
            self._topic_id = None
            self._led.clear()
        self._activate_if_created()
        if topic is not None and self._active():
            self._follow_leaders(topic)

    def _follow_leaders(self, topic) -> None:
        """On a cluster the coordinator of a transactional id is the leader of its
        __transaction_state partition (Kafka's onElection / onResignation, from
        the metadata image; broker/replication made the local partitions
        leaders or followers before this listener runs). The first time a
        partition is seen led here it is already loaded (by the start, or
        empty when the topic was just created); a new leader epoch is a new
        election, loaded again with the new coordinator epoch."""
        if getattr(self.broker, "quorum", None) is None:
            return   # a single node coordinates every partition
        for index, p in topic.partitions.items():
            now = p.leader_epoch if p.leader == self.broker.node_id else None
            if index not in self._led:
                self._led[index] = now
                if now is None:
                    self.partition_leadership(index, False)
                continue
            if self._led[index] != now:
                self._led[index] = now
                self.partition_leadership(index, now is not None, -1 if now is None else now)

    # ================================================================ driving the state machine

    def _write_state(self, append, complete) -> None:
        """Append one record to __transaction_state; complete(error) once the
        high watermark passed it (acks=all), at once when not replicated."""
        partition = self.broker.partitions.get(TRANSACTION_STATE_TOPIC, append.partition)
        if partition is None:
            complete(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            return
        if not getattr(partition, "is_leader", True):
            complete(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        repl = getattr(partition, "replication", None)
        replicated = repl is not None and (partition.topic, partition.index) in repl.leaders
        if replicated:
            code = repl.check_min_isr(partition)
            if code is not None:
                complete(code)
                return
        batch = bytearray(rec.build_batch([(append.key, append.value, [], append.timestamp)]))
        try:
            info = partition.append(batch, rec.BatchHeader(batch), append.timestamp)
        except Exception:
            log.exception("appending to __transaction_state-%d failed", append.partition)
            complete(ErrorCode.KAFKA_STORAGE_ERROR)
            return
        if not replicated:
            complete(ErrorCode.NONE)
            return
        if self._nursery is None:
            complete(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            return
        self._nursery.start_soon(self._await_state_write, partition, info.last_offset, complete)

    async def _await_state_write(self, partition, last_offset: int, complete) -> None:
        try:
            timeout = int(self.broker.config.get("request.timeout.ms"))
        except (KeyError, TypeError, ValueError):
            timeout = 30000
        error = await partition.replication.wait_replicated(partition, last_offset, timeout)
        if error:
            log.info("%s-%d: the record at %d was not replicated: %s", partition.topic, partition.index, last_offset,
                     ErrorCode(error).name)
        complete(error)

    # ================================================================ requests

    async def init_producer_id(self, transactional_id, timeout_ms: int, expected=None):
        self._follow_transaction_version()
        return await self._call(self.state.init_producer_id, transactional_id, timeout_ms, expected)

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions,
                             client_tv: int = 0):
        self._follow_transaction_version()
        return await self._call(self.state.add_partitions, transactional_id, producer_id, producer_epoch,
                                partitions, client_tv)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                      client_tv: int = 0):
        """client_tv 2 (EndTxn v5+): an EndResult with the producer id and epoch to go on with."""
        self._follow_transaction_version()
        return await self._call(self.state.end_txn, transactional_id, producer_id, producer_epoch, commit,
                                client_tv)

    def _follow_transaction_version(self) -> None:
        # the finalized transaction.version chooses the version of the records written
        # (a machine not built yet reads it when built)
        if self._machine is not None:
            self._machine.transaction_version = self.broker.image.features.get(TRANSACTION_VERSION, 0)

    def verify_partitions(self, transactional_id, producer_id: int, producer_epoch: int, partitions) -> dict:
        """KIP-890 for a partition leader (Produce, TxnOffsetCommit): {tp: error}.
        Answered by this coordinator, or where another broker coordinates the
        transactional id, by its answer to AddPartitionsToTxn verifyOnly asked
        just before (`prepare_verification`, broker/transactions/verification.py)."""
        if self._coordinates_here(transactional_id):
            out = self.state.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
            for tp in partitions:
                # an implicit add that failed here (CONCURRENT_TRANSACTIONS while another add or the
                # last transaction's markers are in flight): its error, which a retry can fix
                error = self.verifier.take(transactional_id, producer_id, producer_epoch, tp)
                if error is not None and error != ErrorCode.NONE:
                    out[tp] = error
            return out
        out = {}
        for tp in partitions:
            error = self.verifier.take(transactional_id, producer_id, producer_epoch, tp)
            # not asked beforehand: the check is skipped rather than refusing the write
            out[tp] = ErrorCode.NONE if error is None else error
        return out

    def verify_here(self, transactional_id, producer_id: int, producer_epoch: int, partitions) -> dict:
        """AddPartitionsToTxn verifyOnly, from a partition leader to this coordinator."""
        return self.state.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)

    async def prepare_verification(self, transactional_id, producer_id: int, producer_epoch: int,
                                   partitions) -> None:
        """Ask the remote coordinator of transactional_id (if it is remote) about
        partitions, for verify_partitions to answer next."""
        if (not self.config.partition_verification or not transactional_id or not partitions
                or self._coordinates_here(transactional_id)):
            return
        await self.verifier.verify(transactional_id, producer_id, producer_epoch, partitions)

    async def prepare_produce_verification(self, req, version: int = 0) -> None:
        """Before a transactional Produce is appended: the partitions this broker
        leads where the producer has no open transaction yet are verified with a
        remote coordinator (one request per producer id and epoch). From Produce
        v12 (a transactions v2 client, which sends no AddPartitionsToTxn) they are
        added to the transaction instead, as Kafka's AddPartitionsToTxnManager
        does with the addPartition operation (here or by AddPartitionsToTxn v5)."""
        add = version >= IMPLICIT_ADD_PRODUCE_VERSION
        if not req.transactional_id or not (add or self.config.partition_verification):
            return
        here = self._coordinates_here(req.transactional_id)
        if here and not add:
            return
        wanted: dict[tuple[int, int], list] = {}
        for td in req.topic_data:
            for pd in td.partition_data:
                partition = self.broker.partitions.get(td.name, pd.index)
                if partition is None or not getattr(partition, "is_leader", True) or not pd.records:
                    continue
                try:
                    header = rec.BatchHeader(pd.records)
                    if not header.is_transactional:
                        continue
                except Exception:   # noqa: BLE001  (the append's own checks answer for a bad batch)
                    continue
                if self.broker.producers.in_transaction(partition, header.producer_id, header.producer_epoch):
                    continue
                wanted.setdefault((header.producer_id, header.producer_epoch), []).append((td.name, pd.index))
        for (pid, epoch), tps in wanted.items():
            if add and here:
                # the verification that follows finds the partitions in the transaction, or the error
                await self._add_here(req.transactional_id, pid, epoch, tps)
            else:
                await self.verifier.verify(req.transactional_id, pid, epoch, tps, add=add)

    async def add_implicitly(self, transactional_id, producer_id: int, producer_epoch: int, partitions) -> None:
        """TxnOffsetCommit v5 (transactions v2): the group's __consumer_offsets partition joins the
        transaction (no AddOffsetsToTxn came first); verify_partitions then answers."""
        if self._coordinates_here(transactional_id):
            await self._add_here(transactional_id, producer_id, producer_epoch, partitions)
        else:
            await self.verifier.verify(transactional_id, producer_id, producer_epoch, partitions, add=True)

    async def _add_here(self, transactional_id, producer_id: int, producer_epoch: int, partitions) -> None:
        """An implicit add coordinated here; a failure is kept for verify_partitions to answer."""
        error = await self.add_partitions(transactional_id, producer_id, producer_epoch, partitions, client_tv=2)
        if error != ErrorCode.NONE:
            for tp in partitions:
                self.verifier.answers[(transactional_id, producer_id, producer_epoch, tp)] = error

    def _coordinates_here(self, transactional_id) -> bool:
        """Whether this broker leads the __transaction_state partition of the transactional id
        (always on a single node)."""
        if getattr(self.broker, "quorum", None) is None or self._machine is None or not self._machine.num_partitions:
            return True
        return self.verifier.coordinator(transactional_id) == self.broker.node_id

    def count_by_state(self) -> dict[str, int]:
        """Transactional ids by state name, every state listed (metrics)."""
        if self._machine is None:
            # imported at a scrape: the states' names, without building the machine
            from broker.transactions.model import STATE_NAMES
            return dict.fromkeys(STATE_NAMES.values(), 0)
        return self._machine.count_by_state()

    def partitions_loading(self) -> int:
        """__transaction_state partitions still being loaded (metrics)."""
        return len(self._machine.loading) if self._machine is not None else 0

    def describe(self, transactional_id):
        return self.state.describe(transactional_id)

    def list_transactions(self, producer_ids=(), states=(), duration_ms: int = -1):
        return self.state.list_transactions(producer_ids, states, duration_ms, self.shell.now_ms())

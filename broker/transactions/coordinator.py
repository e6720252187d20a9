"""The transaction coordinator, one per broker (`broker.transactions`): the
transaction state machine driven by the coordinators' shell
(broker/coordination/shell.py).

The shell feeds requests to the state machine with the wall clock, runs the
timers and does the work the machine asks for, all from the trio thread and
without awaiting in between (so nothing interleaves); this module says what
the outputs mean: records go to `__transaction_state` through the Partition
objects (their outcome is fed back with `append_done`), markers go straight
into the local partitions through the producer state (which moves the last
stable offset and indexes aborts; `markers_done`), and the group coordinator
hears of markers written to `__consumer_offsets`. At start every
`__transaction_state` partition is replayed; until one is, its transactional
ids answer COORDINATOR_LOAD_IN_PROGRESS.
"""
from __future__ import annotations

import logging
import time

import trio

from kproto import records as rec
from kproto.errors import ErrorCode

from broker.coordination.shell import CoordinatorShell, replay_partition, sync_output
from broker.coordination.topic import ensure_internal_topic
from broker.groups.placement import OFFSETS_TOPIC
from broker.producers import MarkerRefused
from broker.transactions.config import TxnConfig
from broker.transactions.placement import TRANSACTION_STATE_TOPIC
from broker.transactions.state import ProducerIdUnavailable, TransactionStateMachine

log = logging.getLogger("kproto.transactions")



class TransactionCoordinator:
    def __init__(self, broker, config: TxnConfig | None = None):
        self.broker = broker
        self.config = config or TxnConfig.from_broker_config(broker.config)
        self.state = TransactionStateMachine(self.config, self._allocate_producer_id)
        # the machine defers its answers itself until append_done says the
        # record is written
        self.shell = CoordinatorShell(self.state, "transaction coordinator", {
            "appends": sync_output(self._write_state,
                                   done=lambda append, error, now: self.state.append_done(append.token, error, now)),
            "markers": sync_output(self._write_markers, done=self.state.markers_done),
        })
        self._apply = self.shell.apply
        self._call = self.shell.call

    def _allocate_producer_id(self) -> int:
        try:
            return self.broker.producer_ids.next_id()
        except Exception as exc:
            log.exception("producer id allocation failed")
            raise ProducerIdUnavailable(ErrorCode.UNKNOWN_SERVER_ERROR) from exc

    # ================================================================ start

    def open(self) -> None:
        """At broker start (storage open): if __transaction_state exists, all
        its partitions are to be replayed by run()."""
        topic = self.broker.image.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is not None:
            self._apply(self.state.activate(len(topic.partitions), self._coordinator_epochs(topic),
                                            loading=sorted(topic.partitions), now_ms=self.shell.now_ms()))
        self.broker.metadata.subscribe(self._on_metadata)

    @staticmethod
    def _coordinator_epochs(topic) -> dict[int, int]:
        # the coordinator epoch is the leader epoch of the state partition
        return {p.partition: p.leader_epoch for p in topic.partitions.values()}

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await self.shell.run(self._load_all, task_status=task_status)

    async def _load_all(self) -> None:
        # transactions found prepared are completed as they load; their
        # markers in __consumer_offsets must reach groups already loaded
        # (a group still replaying would miss the completion)
        groups = getattr(self.broker, "groups", None)
        while groups is not None and groups.state.loading:
            await trio.sleep(0.01)
        started = time.monotonic()
        await self.shell.load(self.state.loading, self._load_partition, self.state.finish_load,
                              TRANSACTION_STATE_TOPIC)
        if self.state.num_partitions is not None:
            log.info("transaction coordinator loaded %d transactional ids in %.2f s", len(self.state.txns),
                     time.monotonic() - started)

    async def _load_partition(self, index: int) -> None:
        partition = self.broker.partitions.get(TRANSACTION_STATE_TOPIC, index)
        if partition is None:
            return

        def replay(header, batch):
            if not header.is_control:
                for r in rec.iter_records(batch):
                    self.state.replay(index, r.key, r.value)

        await replay_partition(partition, replay)

    # ================================================================ the state topic

    def ensure_state_topic(self) -> int:
        """FindCoordinator for a transactional id: NONE when __transaction_state
        exists; otherwise create it and answer COORDINATOR_NOT_AVAILABLE, as
        Kafka does on the first lookup (clients retry)."""
        return ensure_internal_topic(self.broker, TRANSACTION_STATE_TOPIC, self.state.num_partitions is not None,
                                     self._activate_if_created, log)

    def _activate_if_created(self) -> None:
        topic = self.broker.image.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is not None and self.state.num_partitions is None:
            self._apply(self.state.activate(len(topic.partitions), self._coordinator_epochs(topic),
                                            now_ms=self.shell.now_ms()))
            log.info("created %s with %d partitions", TRANSACTION_STATE_TOPIC, len(topic.partitions))

    def _on_metadata(self, _records) -> None:
        self._activate_if_created()

    # ================================================================ driving the state machine

    def _write_state(self, append) -> int:
        partition = self.broker.partitions.get(TRANSACTION_STATE_TOPIC, append.partition)
        if partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        batch = bytearray(rec.build_batch([(append.key, append.value, [], append.timestamp)]))
        try:
            partition.append(batch, rec.BatchHeader(batch), append.timestamp)
        except Exception:
            log.exception("appending to __transaction_state-%d failed", append.partition)
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.NONE

    def _write_markers(self, job) -> dict:
        """Write the job's markers; {(topic, partition): None or error}."""
        now = self.shell.now_ms()
        results = {}
        offsets_partitions = []
        for tp in job.partitions:
            results[tp] = self.write_marker(tp[0], tp[1], job.producer_id, job.producer_epoch,
                                            job.coordinator_epoch, job.commit, now)
            if results[tp] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                # the topic was deleted: nothing to mark (Kafka drops the partition too)
                log.info("no marker for %s-%d of %r: the partition is gone", tp[0], tp[1], job.transactional_id)
                results[tp] = None
            elif results[tp] in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED):
                # nothing can make this marker valid: Kafka stops sending it
                results[tp] = None
            elif results[tp] == ErrorCode.NONE:
                results[tp] = None
                if tp[0] == OFFSETS_TOPIC:
                    offsets_partitions.append(tp[1])
        if offsets_partitions:
            self._offsets_completed(job.producer_id, job.commit, offsets_partitions)
        return results

    def write_marker(self, topic: str, index: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                     commit: bool, now_ms: int | None = None) -> int:
        """Write one COMMIT/ABORT marker into a local partition; Kafka's error code."""
        partition = self.broker.partitions.get(topic, index)
        if partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        try:
            self.broker.producers.write_marker(partition, producer_id, producer_epoch, coordinator_epoch, commit,
                                               self.shell.now_ms() if now_ms is None else now_ms)
        except MarkerRefused as exc:
            log.warning("marker for %s-%d refused: %s", topic, index, exc)
            return exc.code
        except Exception:
            log.exception("writing a marker to %s-%d failed", topic, index)
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.NONE

    def _offsets_completed(self, producer_id: int, commit: bool, partitions: list[int]) -> None:
        groups = getattr(self.broker, "groups", None)
        if groups is None:
            return
        try:
            groups.on_transaction_completed(producer_id, commit, partitions)
        except Exception:
            log.exception("the group coordinator failed to complete the offsets of producer %d", producer_id)

    # ================================================================ requests

    async def init_producer_id(self, transactional_id, timeout_ms: int, expected=None):
        return await self._call(self.state.init_producer_id, transactional_id, timeout_ms, expected)

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions):
        return await self._call(self.state.add_partitions, transactional_id, producer_id, producer_epoch,
                                partitions)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool):
        return await self._call(self.state.end_txn, transactional_id, producer_id, producer_epoch, commit)

    def verify_partitions(self, transactional_id, producer_id: int, producer_epoch: int, partitions) -> dict:
        if not self._coordinates_here(transactional_id):
            # the transaction's coordinator is another broker of the cluster; Kafka would ask it
            # (AddPartitionsToTxn verifyOnly). kproto does not yet: the KIP-890 check is skipped
            # rather than refusing every transactional write (docs/compatibility.md)
            return {tp: 0 for tp in partitions}
        return self.state.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)

    def _coordinates_here(self, transactional_id) -> bool:
        """Whether this broker leads the __transaction_state partition of the transactional id
        (always on a single node)."""
        if getattr(self.broker, "quorum", None) is None or not self.state.num_partitions:
            return True
        from broker.internal_topics import TRANSACTION_STATE_TOPIC
        part = self.broker.partitions.get(TRANSACTION_STATE_TOPIC, self.state.partition_for(transactional_id))
        return part is not None and getattr(part, "is_leader", True)

    def describe(self, transactional_id):
        return self.state.describe(transactional_id)

    def list_transactions(self, producer_ids=(), states=(), duration_ms: int = -1):
        return self.state.list_transactions(producer_ids, states, duration_ms, self.shell.now_ms())

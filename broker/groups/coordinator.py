"""The group coordinator, one per broker (`broker.groups`): the group state
machine driven by the coordinators' shell (broker/coordination/shell.py).

The shell feeds requests to the state machine with the wall clock, wakes
parked JoinGroup/SyncGroup handlers when their answer comes and runs the
timers; this module says what the outputs mean: records appended to
`__consumer_offsets` through the Partition objects. At start it replays every
`__consumer_offsets` partition; until a partition is replayed its groups
answer COORDINATOR_LOAD_IN_PROGRESS.
"""
from __future__ import annotations

import logging
import time

import trio

from kproto import records as rec
from kproto.errors import ErrorCode
from kproto.metadata.remove_topic_record import RemoveTopicRecord

from broker.coordination.shell import CoordinatorShell, replay_partition, sync_output
from broker.coordination.topic import ensure_internal_topic
from broker.groups.config import GroupConfig
from broker.groups.placement import OFFSETS_TOPIC
from broker.groups.state import GroupStateMachine
from broker.storage.replay import stored_batches

log = logging.getLogger("kproto.groups")


class GroupCoordinator:
    def __init__(self, broker, config: GroupConfig | None = None):
        self.broker = broker
        self.config = config or GroupConfig.from_broker_config(broker.config)
        self.state = GroupStateMachine(self.config)
        # answers wait for the step's appends; a failed append is logged and
        # the answer stands (the state machine has already applied it)
        self.shell = CoordinatorShell(self.state, "group coordinator",
                                      {"appends": sync_output(self._write, holds_answers=True)})
        self._apply = self.shell.apply
        self._call = self.shell.call
        self._known_topics: set[str] = set()

    # ================================================================ start

    def open(self) -> None:
        """At broker start (storage open): if __consumer_offsets exists, all its
        partitions are to be replayed by run()."""
        image = self.broker.image
        self._known_topics = set(image.topics)
        topic = image.topics.get(OFFSETS_TOPIC)
        if topic is not None:
            self._apply(self.state.activate(len(topic.partitions), loading=sorted(topic.partitions), now_ms=self.shell.now_ms()))
        self.broker.metadata.subscribe(self._on_metadata)

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await self.shell.run(self._load_all, task_status=task_status)

    async def _load_all(self) -> None:
        started = time.monotonic()
        await self.shell.load(self.state.loading, self._load_partition, self.state.finish_load, OFFSETS_TOPIC)
        if self.state.num_partitions is not None:
            log.info("group coordinator loaded %d groups in %.2f s", len(self.state.groups),
                     time.monotonic() - started)

    async def _load_partition(self, index: int, upto: int | None = None) -> None:
        partition = self.broker.partitions.get(OFFSETS_TOPIC, index)
        if partition is None:
            return
        def replay(header, batch):
            records = [(r.key, r.value) for r in rec.iter_records(batch)]
            self.state.replay_batch(index, header.base_offset, header.producer_id, header.is_transactional,
                                    header.is_control, records)

        if upto is None:
            await replay_partition(partition, replay)
            return
        # a new leader (replication) loads up to its log end, not only its high watermark
        for chunk in stored_batches(partition.log, upto):
            for header, batch in chunk:
                replay(header, batch)
            await trio.sleep(0)

    async def partition_leadership(self, index: int, leader: bool) -> None:
        """Replication moved the leadership of __consumer_offsets-index (broker/replication/manager.py):
        load its groups from the log when this broker leads it, drop them when another one does."""
        if self.state.num_partitions is None:
            return
        if not leader:
            self._apply(self.state.resign(index, self.shell.now_ms()))
            return
        self._apply(self.state.begin_load(index, self.shell.now_ms()))
        try:
            # a new leader's log end is what it leads with (a leader never truncates): load it all,
            # its high watermark catches up once the followers fetch
            part = self.broker.partitions.get(OFFSETS_TOPIC, index)
            await self._load_partition(index, part.log.log_end_offset if part is not None else None)
        except Exception:
            log.exception("loading __consumer_offsets-%d failed", index)
        self._apply(self.state.finish_load(index, self.shell.now_ms()))

    # ================================================================ the offsets topic

    def ensure_offsets_topic(self) -> int:
        """FindCoordinator for a group: NONE when __consumer_offsets exists;
        otherwise create it and answer COORDINATOR_NOT_AVAILABLE, as Kafka
        does on the first lookup (clients retry)."""
        return ensure_internal_topic(self.broker, OFFSETS_TOPIC, self.state.num_partitions is not None,
                                     self._activate_if_created, log)

    def _activate_if_created(self) -> None:
        topic = self.broker.image.topics.get(OFFSETS_TOPIC)
        if topic is not None and self.state.num_partitions is None:
            # a new topic holds nothing to replay
            self._apply(self.state.activate(len(topic.partitions), now_ms=self.shell.now_ms()))
            log.info("created %s with %d partitions", OFFSETS_TOPIC, len(topic.partitions))

    def _on_metadata(self, records) -> None:
        self._activate_if_created()
        names = set(self.broker.image.topics)
        if any(isinstance(r, RemoveTopicRecord) for r in records):
            gone = self._known_topics - names
            if gone:
                self._apply(self.state.topics_deleted(self.shell.now_ms(), gone))
        self._known_topics = names

    # ================================================================ driving the state machine

    def _write(self, append) -> int:
        """Append one batch to __consumer_offsets: Kafka's error code."""
        partition = self.broker.partitions.get(OFFSETS_TOPIC, append.partition)
        if partition is None:
            log.error("__consumer_offsets-%d is not hosted here: %d records lost", append.partition,
                      len(append.records))
            return ErrorCode.NOT_COORDINATOR
        batch = bytearray(rec.build_batch(
            [(k, v, [], append.timestamp) for k, v in append.records],
            producer_id=append.producer_id, producer_epoch=append.producer_epoch,
            base_sequence=0 if append.transactional else -1, transactional=append.transactional))
        try:
            partition.append(batch, rec.BatchHeader(batch), append.timestamp)
        except Exception:
            log.exception("appending to __consumer_offsets-%d failed", append.partition)
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.NONE

    # ================================================================ requests

    async def join_group(self, **kwargs):
        return await self._call(self.state.join_group, topics=self._topic_table(), **kwargs)

    async def sync_group(self, **kwargs):
        return await self._call(self.state.sync_group, **kwargs)

    async def heartbeat(self, **kwargs):
        return await self._call(self.state.heartbeat, **kwargs)

    async def leave_group(self, **kwargs):
        return await self._call(self.state.leave_group, **kwargs)

    async def commit_offsets(self, **kwargs):
        return await self._call(self.state.commit_offsets, **kwargs)

    async def txn_commit_offsets(self, **kwargs):
        return await self._call(self.state.txn_commit_offsets, **kwargs)

    async def delete_groups(self, group_ids):
        return await self._call(self.state.delete_groups, group_ids)

    async def delete_offsets(self, group_id, partitions):
        return await self._call(self.state.delete_offsets, group_id, partitions)

    async def consumer_group_heartbeat(self, **kwargs):
        return await self._call(self.state.consumer_group_heartbeat, topics=self._topic_table(), **kwargs)

    def consumer_group_describe(self, group_id):
        return self.state.consumer_group_describe(group_id)

    def _topic_table(self) -> dict:
        """name -> (topic id, partition count), what consumer groups subscribe to."""
        return {name: (t.topic_id, len(t.partitions)) for name, t in self.broker.image.topics.items()}

    def fetch_offsets(self, group_id, partitions, require_stable=False):
        return self.state.fetch_offsets(group_id, partitions, require_stable)

    def describe_group(self, group_id):
        return self.state.describe_group(group_id)

    def list_groups(self, states=(), types=()):
        return self.state.list_groups(states, types)

    def partition_for(self, group_id: str) -> int | None:
        if self.state.num_partitions is None:
            return None
        return self.state.partition_for(group_id)

    def on_transaction_completed(self, producer_id: int, commit: bool, partitions=None) -> None:
        """For the transaction coordinator: a COMMIT/ABORT marker for
        producer_id was written to these __consumer_offsets partitions."""
        self._apply(self.state.complete_transaction(self.shell.now_ms(), producer_id, commit,
                                                    None if partitions is None else set(partitions)))

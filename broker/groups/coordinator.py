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

from broker.coordination.shell import CoordinatorShell, Output
from broker.coordination.topic import ensure_internal_topic
from broker.groups.append_errors import fail_answer
from broker.config.groups import GroupConfig
from broker.groups.placement import OFFSETS_TOPIC
from broker.groups.state import GroupStateMachine
from broker.storage.replay import stored_batches

log = logging.getLogger("kproto.groups")


class GroupCoordinator:
    def __init__(self, broker, config: GroupConfig | None = None):
        self.broker = broker
        self.config = config or GroupConfig.from_broker_config(broker.config)
        self.state = GroupStateMachine(self.config)
        # answers wait until the step's appends are replicated (acks=all, as Kafka's
        # coordinator appends); the outcome goes back to the state machine, which makes
        # offsets visible or drops them, and a failed append turns the answers into Kafka's errors
        self.shell = CoordinatorShell(self.state, "group coordinator", {
            "appends": Output(write=self._write, done=self.state.append_done, holds_answers=True,
                              fail_answer=fail_answer)})
        self._apply = self.shell.apply
        self._call = self.shell.call
        self._known_topics: set[str] = set()
        self._nursery = None
        # __consumer_offsets partition -> the load (or resignation) in force: a load that is
        # no longer the one in force (leadership moved meanwhile) stops and changes nothing
        self._load_token: dict[int, object] = {}

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
        async with trio.open_nursery() as nursery:
            self._nursery = nursery   # the replication waits of the appends
            await nursery.start(self.shell.run, self._load_all)
            task_status.started()

    async def _load_all(self) -> None:
        started = time.monotonic()
        async with trio.open_nursery() as nursery:
            for index in sorted(self.state.loading):
                if index in self._load_token:
                    continue   # a leadership change got there first
                token = self._load_token[index] = object()
                nursery.start_soon(self._load, index, token)
        if self.state.num_partitions is not None:
            log.info("group coordinator loaded %d groups in %.2f s", len(self.state.groups),
                     time.monotonic() - started)

    async def partition_leadership(self, index: int, leader: bool) -> None:
        """Replication moved the leadership of __consumer_offsets-index (broker/replication/manager.py):
        load its groups from the log when this broker leads it, drop them at once when another
        one does (Kafka's onElection / onResignation)."""
        if self.state.num_partitions is None:
            return
        token = self._load_token[index] = object()
        if not leader:
            self._apply(self.state.resign(index, self.shell.now_ms()))
            return
        self._apply(self.state.begin_load(index, self.shell.now_ms()))
        await self._load(index, token)

    async def _load(self, index: int, token) -> None:
        """Replay the partition's committed records, once this broker leads it and its high
        watermark covers everything in its log: state built from records a new leader
        could still lose is never served (COORDINATOR_LOAD_IN_PROGRESS until then)."""
        try:
            partition = await self._committed(index, token)
            if partition is None:
                return
            upto = partition.high_watermark

            def replay(header, batch):
                records = [(r.key, r.value) for r in rec.iter_records(batch)]
                self.state.replay_batch(index, header.base_offset, header.producer_id, header.is_transactional,
                                        header.is_control, records)

            for chunk in stored_batches(partition.log, upto):
                if self._load_token.get(index) is not token:
                    return
                for header, batch in chunk:
                    replay(header, batch)
                await trio.sleep(0)
        except Exception:
            log.exception("loading __consumer_offsets-%d failed", index)
        if self._load_token.get(index) is token:
            self._apply(self.state.finish_load(index, self.shell.now_ms()))

    async def _committed(self, index: int, token):
        """The partition once this broker leads it and its high watermark reached the log end
        it had when the wait began; None if the load stopped being the one in force."""
        target = None
        while self._load_token.get(index) is token:
            partition = self.broker.partitions.get(OFFSETS_TOPIC, index)
            if partition is None:
                # its log is not made here yet (queued, or the image still catching up): the load
                # starts once it is (looked at again now and then: a resignation ends the wait)
                await self.broker.partitions.wait_hosted(OFFSETS_TOPIC, index, 1.0)
                continue
            if partition.is_leader:
                if target is None:
                    target = partition.log.log_end_offset
                if partition.high_watermark >= target:
                    return partition
            event = trio.Event()
            partition.add_waiter(event)
            try:
                with trio.move_on_after(0.25):
                    await event.wait()
            finally:
                partition.remove_waiter(event)
        return None

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
            # the topic appeared in the image: created just now (nothing to replay), or a broker
            # that restarted sees it only once its metadata caught up: the partitions it leads
            # may hold groups, loaded as a new leader loads them; the others are led elsewhere.
            # One whose log is not made yet (its creation is queued: broker/partitions/creation.py)
            # loads once it is: until then its groups answer COORDINATOR_LOAD_IN_PROGRESS
            loading, not_owned = [], []
            for index, p in topic.partitions.items():
                if p.leader != self.broker.node_id:
                    not_owned.append(index)
                    continue
                part = self.broker.partitions.get(OFFSETS_TOPIC, index)
                if part is None or part.log.log_end_offset > part.log.log_start_offset:
                    loading.append(index)
            self._apply(self.state.activate(len(topic.partitions), loading=loading, not_owned=not_owned,
                                            now_ms=self.shell.now_ms()))
            for index in loading:
                token = self._load_token[index] = object()
                self._spawn(self._load, index, token)
            log.info("%s with %d partitions: %d to load, %d led elsewhere", OFFSETS_TOPIC,
                     len(topic.partitions), len(loading), len(not_owned))

    def _on_metadata(self, records) -> None:
        self._activate_if_created()
        names = set(self.broker.image.topics)
        if any(isinstance(r, RemoveTopicRecord) for r in records):
            gone = self._known_topics - names
            if gone:
                self._apply(self.state.topics_deleted(self.shell.now_ms(), gone))
            if self.state.share_metadata:
                self._apply(self.state.share_topics_deleted(
                    self.shell.now_ms(), {r.topic_id for r in records if isinstance(r, RemoveTopicRecord)}))
        self._known_topics = names

    # ================================================================ driving the state machine

    def _write(self, append, complete) -> None:
        """Append one batch to __consumer_offsets; complete(Kafka's error code) once the high
        watermark passed it (offsets.commit.required.acks=-1, within offsets.commit.timeout.ms)."""
        partition = self.broker.partitions.get(OFFSETS_TOPIC, append.partition)
        if partition is None or not partition.is_leader:
            complete(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        # (one replica, a single node: no acks setting to read, the append is the commit)
        replication = partition.replication
        if replication is not None and self._required_acks() != -1:
            replication = None
        if replication is not None:
            code = replication.check_min_isr(partition)   # before appending, as a produce
            if code is not None:
                complete(code)
                return
        batch = bytearray(rec.build_batch(
            [(k, v, [], append.timestamp) for k, v in append.records],
            producer_id=append.producer_id, producer_epoch=append.producer_epoch,
            base_sequence=0 if append.transactional else -1, transactional=append.transactional))
        try:
            info = partition.append(batch, rec.BatchHeader(batch), append.timestamp)
        except Exception:
            log.exception("appending to __consumer_offsets-%d failed", append.partition)
            complete(ErrorCode.KAFKA_STORAGE_ERROR)
            return
        if replication is None:
            complete(ErrorCode.NONE)   # one replica: its log end is its high watermark
            return
        self._spawn(self._await_replicated, replication, partition, info.last_offset, complete)

    async def _await_replicated(self, replication, partition, last_offset: int, complete) -> None:
        try:
            code = await replication.wait_replicated(partition, last_offset, self._commit_timeout_ms())
        except Exception:
            log.exception("waiting for __consumer_offsets-%d failed", partition.index)
            code = ErrorCode.UNKNOWN_SERVER_ERROR
        complete(code)

    def spawn(self, fn, *args) -> None:
        """Run fn(*args) in the coordinator's nursery: work a request starts and does not wait for
        (a share group's state initialisation, broker/share/initialized_topics.py)."""
        self._spawn(fn, *args)

    def _spawn(self, fn, *args) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(fn, *args)
        else:   # before run(): a request answered while the broker starts
            trio.lowlevel.spawn_system_task(fn, *args)

    def _config_int(self, key: str, default: int) -> int:
        try:
            return int(self.broker.config.get(key))
        except (KeyError, TypeError, ValueError, AttributeError):
            return default

    def _required_acks(self) -> int:
        return self._config_int("offsets.commit.required.acks", -1)

    def _commit_timeout_ms(self) -> int:
        return self._config_int("offsets.commit.timeout.ms", 5000)

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

    async def put_share_metadata(self, group_id, meta):
        """Write a share group's ShareGroupStatePartitionMetadata (broker/groups/share_metadata.py);
        NONE once it is replicated and the group's."""
        return (await self._call(self.state.put_share_metadata, group_id, meta)).error

    async def put_share_records(self, group_id, records) -> int:
        """Append a share group's membership records (broker/groups/share_records.py); NONE once they
        are replicated, else the client's error (as a consumer group heartbeat's)."""
        return (await self._call(self.state.put_share_records, group_id, records)).error

    def append_share_records(self, group_id, records) -> None:
        """The same without waiting (a member's session expired: no one to answer). Appended now, in
        the order of the changes they record."""
        self._apply(self.state.put_share_records(None, self.shell.now_ms(), group_id, records))

    def take_share_loads(self) -> dict:
        """partition -> {group id: ShareGroupLoad}: the share groups replayed (or, empty, dropped) since
        the last call, for the share-group shell."""
        return self.state.take_share_loads()

    def has_share_loads(self) -> bool:
        return any(self.state.share_loads.values())

    def share_metadata(self, group_id):
        """The share group's replicated ShareStateMetadata (empty when it has none)."""
        from broker.groups.share_metadata import EMPTY_METADATA
        return self.state.share_metadata.get(group_id, EMPTY_METADATA)

    def share_metadata_at(self, group_id) -> int | None:
        """When the share group's record was last written or loaded here (wall clock ms), None
        without one."""
        return self.state.share_metadata_at.get(group_id)

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

    def is_loading(self, index: int) -> bool:
        """Whether __consumer_offsets-index is being loaded (its groups are not served yet):
        a transaction marker for it waits until the load is done (broker/transactions/markers.py)."""
        return index in self.state.loading

    def on_transaction_completed(self, producer_id: int, commit: bool, partitions=None) -> None:
        """For the transaction coordinator: a COMMIT/ABORT marker for
        producer_id was written to these __consumer_offsets partitions."""
        self._apply(self.state.complete_transaction(self.shell.now_ms(), producer_id, commit,
                                                    None if partitions is None else set(partitions)))

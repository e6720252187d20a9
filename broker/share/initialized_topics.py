"""The group coordinator's side of a share group's share-partition state (Kafka 4.3's
GroupCoordinatorService with GroupMetadataManager): which topic-partitions have state at the share
coordinators, recorded in `__consumer_offsets` (broker/groups/share_metadata.py), and the
InitializeShareGroupState / DeleteShareGroupState calls that keep it true.

- A heartbeat whose group now subscribes to partitions without state (the membership's
  `initialize` output): they are recorded initializing, the share coordinators initialise them
  (start offset -1: the share-partition leader starts at share.auto.offset.reset when it first reads
  the state, as Kafka 4.3.1 sends it), and they are recorded initialised. This runs in the
  background, in the group coordinator's nursery, as Kafka's GroupCoordinatorService runs its
  persister initialize after the heartbeat: the heartbeat is answered at once, without them, and
  a later heartbeat assigns them once they are recorded initialised (`partitions`, the membership's
  input). One task per group at a time; a failure leaves them to a later heartbeat.
- Partitions recorded initializing and not initialised (a coordinator that stopped half-way: a
  restart, a failover, a task that failed without its last record) are initialised again by a
  heartbeat only `group.share.initialize.retry.interval.ms` (30 s; at least offsets.commit.timeout.ms)
  after the record was last written or loaded, as Kafka 4.3's GroupMetadataManager (whose replay of
  the record stamps its initializing topics): until then their initialisation is taken as under way.
- DeleteGroups of an empty share group: its topics are recorded deleting, their states deleted,
  then the record is removed; a new group of the same name starts from share.auto.offset.reset.
- DeleteShareGroupOffsets and AlterShareGroupOffsets keep the record in step.

One task at a time per group (a lock): each step writes the record from the one before it.

``KPROTO_TEST_HOLD_SHARE_INIT`` names a file: while it exists the share-partitions recorded
initializing are not initialised (tests: the window between the two records, held open on
purpose); ``<file>.held`` is made once a task waits there.
"""
from __future__ import annotations

import logging
import os

import trio

from kproto.errors import ErrorCode as E

from broker.groups import share_metadata as sm
from broker.share import group_configs, membership

log = logging.getLogger("kproto.share")

# share-partitions initialised at the same time (each call waits for its coordinator's replicated append)
_PARALLEL = 8


class InitializedTopics:
    def __init__(self, svc):
        self.svc = svc
        self._locks: dict[str, trio.Lock] = {}
        self._running: set[str] = set()       # groups with an initialisation task running

    @property
    def _gc(self):
        return self.svc.broker.groups

    def metadata(self, group_id: str) -> sm.ShareStateMetadata:
        return self._gc.share_metadata(group_id)

    def _lock(self, group_id: str) -> trio.Lock:
        lock = self._locks.get(group_id)
        if lock is None:
            lock = self._locks[group_id] = trio.Lock()
        return lock

    def partitions(self, group_id: str) -> dict:
        """topic id -> the group's partitions recorded initialised: what may be assigned."""
        return {tid: ps for tid, (_n, ps) in self.metadata(group_id).initialized.items()}

    # -- initialising ----------------------------------------------------------------------------

    def start_initialize(self, group_id: str, subscribed: dict) -> None:
        """initialize_subscribed in the background (the group coordinator's nursery), unless a task of
        this group is running: it initialises what it finds uninitialised, and a heartbeat after it
        starts another for what is still missing."""
        if group_id in self._running:
            return
        self._running.add(group_id)

        async def task():
            try:
                await self.initialize_subscribed(group_id, subscribed)
            except Exception:   # (a bug: logged, the partitions stay for a later heartbeat)
                log.exception("share group %s: initialising share state failed", group_id)
            finally:
                self._running.discard(group_id)
        self._gc.spawn(task)

    def retry_interval_ms(self) -> int:
        """group.share.initialize.retry.interval.ms, raised to offsets.commit.timeout.ms as Kafka's
        GroupCoordinatorConfig does."""
        config = self.svc.broker.config
        return max(group_configs.broker_int(config, "group.share.initialize.retry.interval.ms", 30000),
                   group_configs.broker_int(config, "offsets.commit.timeout.ms", 5000))

    def _to_initialize(self, group_id: str, subscribed: dict) -> dict:
        """The subscribed partitions without state recorded, with those recorded initializing once
        their record is older than the retry interval."""
        at = self._gc.share_metadata_at(group_id)
        stale = at is None or self.svc.now_ms() - at >= self.retry_interval_ms()
        return sm.uninitialized(self.metadata(group_id), subscribed, retry_initializing=stale)

    async def initialize_subscribed(self, group_id: str, subscribed: dict) -> int:
        """Initialise the state of the subscribed partitions that have none recorded (subscribed:
        topic name -> (topic id, partition count)), and of those recorded initializing for longer
        than the retry interval. NONE, or the first error (the partitions that failed are tried
        again on a later heartbeat)."""
        if not self._to_initialize(group_id, subscribed):
            return E.NONE
        async with self._lock(group_id):
            meta = self.metadata(group_id)
            add = self._to_initialize(group_id, subscribed)
            if not add:
                return E.NONE
            err = await self._gc.put_share_metadata(group_id, sm.initializing(meta, add))
            if err != E.NONE:
                return err
            results: dict = {}
            limiter = trio.CapacityLimiter(_PARALLEL)

            async def one(tid, index):
                async with limiter:
                    results[(tid, index)] = await self._initialize_one(group_id, tid, index)

            await _hold()
            async with trio.open_nursery() as nursery:
                for tid, (_name, partitions) in add.items():
                    for index in sorted(partitions):
                        nursery.start_soon(one, tid, index)
            done, failed, first_error = {}, {}, E.NONE
            for (tid, index), code in sorted(results.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
                (done if code == E.NONE else failed).setdefault(tid, (add[tid][0], set()))[1].add(index)
                if code != E.NONE and first_error == E.NONE:
                    first_error = code
            meta = self.metadata(group_id)
            if failed:
                log.info("share group %s: initialising %s failed (%s): tried again later", group_id,
                         sorted(map(str, failed)), E(first_error).name)
                meta = sm.uninitializing(meta, failed)
            meta = sm.initialized(meta, done)
            err = await self._gc.put_share_metadata(group_id, meta)
            return first_error if first_error != E.NONE else err

    async def _initialize_one(self, group_id: str, topic_id, index: int) -> int:
        """InitializeShareGroupState at start offset -1, unless the share-partition has state already
        (a start offset: its leader, or an administrator's reset, made it): that state stays."""
        summary = await self.svc.persister.summary(group_id, topic_id, index)
        if summary.error_code != E.NONE:
            return summary.error_code
        if summary.start_offset >= 0:
            return E.NONE
        res = await self.svc.persister.initialize(group_id, topic_id, index, max(0, summary.state_epoch), -1)
        return res.error_code

    async def record_initialized(self, group_id: str, done: dict) -> int:
        """AlterShareGroupOffsets gave these partitions state (topic id -> (name, partitions))."""
        async with self._lock(group_id):
            meta = self.metadata(group_id)
            new = sm.initialized(meta, done)
            return E.NONE if new == meta else await self._gc.put_share_metadata(group_id, new)

    # -- deleting --------------------------------------------------------------------------------

    async def begin_delete(self, group_id: str, topic_ids) -> int:
        """DeleteShareGroupState is about to be sent for these topics."""
        async with self._lock(group_id):
            meta = self.metadata(group_id)
            if meta.empty() and not topic_ids:
                return E.NONE
            return await self._gc.put_share_metadata(group_id, sm.deleting(meta, topic_ids))

    async def end_delete(self, group_id: str, topic_ids) -> int:
        async with self._lock(group_id):
            meta = self.metadata(group_id)
            new = sm.deleted(meta, topic_ids)
            return E.NONE if new == meta else await self._gc.put_share_metadata(group_id, new)

    async def delete_group(self, group_id: str) -> int:
        """DeleteGroups of an empty share group: every share-partition state it may have is deleted
        at the share coordinators, then the group and its record go. NONE, or the first error (the
        group stays then, its record listing what is still being deleted)."""
        svc = self.svc
        image = svc.broker.image
        meta = self.metadata(group_id)
        known = meta.known()
        # besides the record: what this broker saw the group use before the record existed
        for tid in svc.group_topics.get(group_id, ()):
            t = image.topics_by_id.get(tid)
            known.setdefault(tid, set()).update(t.partitions if t is not None else ())
        for tid, index in svc.keys_with_state(group_id):
            known.setdefault(tid, set()).add(index)
        for tid in meta.deleting:
            t = image.topics_by_id.get(tid)
            known.setdefault(tid, set()).update(t.partitions if t is not None else ())
        err = await self.begin_delete(group_id, set(known))
        if err != E.NONE:
            return err
        for tid, indexes in known.items():
            for index in sorted(indexes):
                svc.drop((group_id, tid, index))
                res = await svc.persister.delete(group_id, tid, index)
                if res.error_code not in (E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION):
                    return res.error_code
        group = svc.groups.groups.get(group_id)
        if group is not None:      # its membership records (Kafka's createGroupTombstoneRecords)
            err = await self._gc.put_share_records(group_id, membership.tombstones(group))
            if err != E.NONE:
                return err
        async with self._lock(group_id):
            err = await self._gc.put_share_metadata(group_id, sm.EMPTY_METADATA)
        if err != E.NONE:
            return err
        svc.groups.groups.pop(group_id, None)
        svc.group_topics.pop(group_id, None)
        return E.NONE


async def _hold() -> None:
    hold = os.environ.get("KPROTO_TEST_HOLD_SHARE_INIT")
    if not hold or not os.path.exists(hold):
        return
    with open(hold + ".held", "w"):
        pass
    while os.path.exists(hold):
        await trio.sleep(0.05)

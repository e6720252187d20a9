"""The share coordinator of one broker (Kafka 4.3's ShareCoordinatorService): it serves the
share-state RPCs for the keys of the `__share_group_state` partitions this broker leads. A
partition's shard (`coordinator.py`) is read from the log when the broker is first asked about it
under a leader epoch (a new leader after a failover reads what the old one wrote; the partition is
replicated like `__consumer_offsets`), operations on one partition are decided one at a time, the
keys of one request that share a partition are appended as one batch, and an answer goes out only
once the record it wrote is replicated (the high watermark passed it). The next operations are
decided while a batch replicates, so one follower fetch carries the writes of many requests.

Requests and answers are the generated codecs of APIs 83-87, so the handlers
(`broker/handlers/share_state.py`) and this broker's own share-partitions (`persister.py`) call the
same methods.
"""
from __future__ import annotations

import logging
import time

import trio

from kproto import records as rec
from kproto.errors import ErrorCode as E
from kproto.messages.delete_share_group_state_response import DeleteShareGroupStateResponse
from kproto.messages.initialize_share_group_state_response import InitializeShareGroupStateResponse
from kproto.messages.read_share_group_state_response import ReadShareGroupStateResponse
from kproto.messages.read_share_group_state_summary_response import ReadShareGroupStateSummaryResponse
from kproto.messages.write_share_group_state_response import WriteShareGroupStateResponse

from broker.coordination.topic import ensure_internal_topic
from broker.share import state_store
from broker.share.coordinator import SNAPSHOT_UPDATES_DEFAULT, Outcome, ShareCoordinatorShard
from broker.share.group_configs import broker_int
from broker.storage.replay import stored_batches

log = logging.getLogger("kproto.share")

COORDINATOR_MESSAGES = {
    E.NOT_COORDINATOR: "This is not the correct coordinator.",
    E.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    E.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
}
PRUNE_INTERVAL_MS_DEFAULT = 5 * 60 * 1000       # share.coordinator.state.topic.prune.interval.ms
COLD_SNAPSHOT_INTERVAL_MS_DEFAULT = 5 * 60 * 1000   # share.coordinator.cold.partition.snapshot.interval.ms
# what a failed append is answered with (Kafka's CoordinatorRuntime: the caller looks the coordinator
# up again, or retries)
_APPEND_ERRORS = {E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR}


def _empty(req) -> bool:
    """Kafka's ShareCoordinatorService answers with no results: no group id, no topics, or a topic
    with no partitions."""
    return not req.group_id or not req.topics or any(not t.partitions for t in req.topics)


def _errors_only(R, out, p):
    """The answer of an RPC whose partition result carries only an error."""
    return R.PartitionResult(partition=p.partition, error_code=out.error, error_message=out.message)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _policy(p) -> list:
    """The partition's effective cleanup.policy: Kafka 4.3 makes the topic `delete`; a data dir of an
    older kproto has it `compact`."""
    return str(p.config.get("cleanup.policy", "delete")).replace(" ", "").split(",")


class ShareCoordinatorService:
    def __init__(self, broker):
        self.broker = broker
        self.shards: dict[int, tuple[int, ShareCoordinatorShard]] = {}   # index -> (leader epoch, shard)
        self._locks: dict[int, trio.Lock] = {}

    # -- where a key lives -----------------------------------------------------------------------

    def index_for(self, group_id: str, topic_id, partition: int) -> int | None:
        topic = self.broker.image.topics.get(state_store.TOPIC)
        if topic is None:
            return None
        return state_store.partition_for(group_id, topic_id, partition, len(topic.partitions))

    def _known(self, topic_id, partition: int) -> bool:
        t = self.broker.image.topics_by_id.get(topic_id)
        return t is not None and 0 <= partition < len(t.partitions)

    def _shard(self, index: int | None):
        """(error, shard) of a __share_group_state partition: the shard when this broker leads it
        (read from the log on first use under this leader epoch)."""
        if index is None:
            ensure_internal_topic(self.broker, state_store.TOPIC, False, lambda: None, log)
            return E.COORDINATOR_NOT_AVAILABLE, None
        p = self.broker.partitions.get(state_store.TOPIC, index)
        if p is None or not getattr(p, "is_leader", True):
            self.shards.pop(index, None)
            topic = self.broker.image.topics.get(state_store.TOPIC)
            info = topic.partitions.get(index) if topic is not None else None
            # named leader in the metadata, not yet leading here: becoming the coordinator
            if info is not None and info.leader == self.broker.node_id:
                return E.COORDINATOR_LOAD_IN_PROGRESS, None
            return E.NOT_COORDINATOR, None
        cached = self.shards.get(index)
        if cached is not None and cached[0] == p.leader_epoch:
            return E.NONE, cached[1]
        shard = ShareCoordinatorShard(self._updates_per_snapshot())
        start = p.log_start_offset
        for chunk in stored_batches(p.log):
            for header, batch in chunk:
                if header.is_control:
                    continue
                for r in rec.iter_records(batch):
                    got = state_store.decode_full(r.key, r.value) if r.offset >= start else None
                    if got is not None:     # (a batch may straddle the log start: pruned records skipped)
                        shard.replay(*got, offset=r.offset)
        self.shards[index] = (p.leader_epoch, shard)
        if shard.states:
            log.info("share coordinator: %s-%d loaded, %d share-partition states", state_store.TOPIC, index,
                     len(shard.states))
        return E.NONE, shard

    def _updates_per_snapshot(self) -> int:
        return self._config_int("share.coordinator.snapshot.update.records.per.snapshot", SNAPSHOT_UPDATES_DEFAULT)

    def _config_int(self, key: str, default: int) -> int:
        try:
            return broker_int(self.broker.config, key, default)     # a Kafka 4.x key, not in the 3.9 catalog
        except (TypeError, ValueError):
            return default

    # -- pruning (Kafka 4.3's ShareCoordinatorService.setupRecordPruning) ---------------------------

    async def run(self) -> None:
        """Every share.coordinator.state.topic.prune.interval.ms, prunes the partitions whose shard is
        loaded here; every share.coordinator.cold.partition.snapshot.interval.ms, snapshots their
        keys whose latest snapshot is that old (Kafka 4.3's ShareCoordinatorService timers)."""
        prune_ms = max(1, self._config_int("share.coordinator.state.topic.prune.interval.ms",
                                           PRUNE_INTERVAL_MS_DEFAULT))
        cold_ms = max(1, self._config_int("share.coordinator.cold.partition.snapshot.interval.ms",
                                          COLD_SNAPSHOT_INTERVAL_MS_DEFAULT))
        now = trio.current_time()
        next_prune, next_cold = now + prune_ms / 1000, now + cold_ms / 1000
        while True:
            await trio.sleep_until(min(next_prune, next_cold))
            now = trio.current_time()
            if now >= next_cold:
                next_cold = now + cold_ms / 1000
                for index in list(self.shards):
                    await self._decide(index, [lambda s, now_ms: s.snapshot_cold(now_ms, cold_ms)])
            if now >= next_prune:
                next_prune = now + prune_ms / 1000
                for index in list(self.shards):
                    await self.prune(index)

    async def prune(self, index: int) -> int | None:
        """Deletes the records of a __share_group_state partition below the lowest offset its shard
        still needs (through the partition's DeleteRecords path: the log start moves, followers
        follow it); the new log start, or None when nothing was pruned. Not on a compacted topic (an
        older kproto's; Kafka refuses DeleteRecords there too)."""
        async with self._locks.setdefault(index, trio.Lock()):
            cached = self.shards.get(index)
            p = self.broker.partitions.get(state_store.TOPIC, index)
            if cached is None or p is None or not getattr(p, "is_leader", True) or \
                    cached[0] != p.leader_epoch or "delete" not in _policy(p):
                return None
            offset = cached[1].redundant_offset(p.high_watermark)
            if offset <= p.log_start_offset:
                return None
            try:
                p.delete_records_before(offset)
            except Exception:
                log.exception("pruning %s-%d below %d failed", state_store.TOPIC, index, offset)
                return None
            p.notify()                      # followers in a long poll learn the new log start now
            log.debug("share coordinator: %s-%d pruned below %d", state_store.TOPIC, index, offset)
            return p.log_start_offset

    def keys(self) -> list:
        """The keys with state in the __share_group_state partitions this broker leads."""
        topic = self.broker.image.topics.get(state_store.TOPIC)
        out = []
        for index, info in (topic.partitions.items() if topic is not None else ()):
            if info.leader == self.broker.node_id:
                error, shard = self._shard(index)
                if error == 0:
                    out.extend(shard.states)
        return out

    async def _decide(self, index: int | None, ops: list) -> tuple:
        """Decides `ops` ([op(shard, now_ms) -> Outcome]) in order on the shard of `index` and appends
        their records to its partition in one batch. ([outcome], wait) where wait is None or
        (partition, last offset) to await before the outcomes may be answered. The lock is held only
        while deciding and appending: the next writes are decided on this state while it replicates
        (the log's order is the order of the decisions, so a later record is never committed without
        the earlier ones), and one follower fetch carries them all."""
        lock = self._locks.setdefault(index, trio.Lock())
        async with lock:
            error, shard = self._shard(index)
            if error != E.NONE:
                return [Outcome(error, COORDINATOR_MESSAGES[error])] * len(ops), None
            p = self.broker.partitions.get(state_store.TOPIC, index)
            shard.next_offset = p.log_end_offset       # where this decision's records will go
            shard.compacted = "compact" in _policy(p)
            now = _now_ms()
            outs = [op(shard, now) for op in ops]
            records = [r for out in outs if out.record is not None for r in (out.record, *out.extra)]
            if not records:
                return outs, None
            error, part, last = self._append(index, records, now)
        if error != E.NONE:
            return self._failed(index, outs, error), None
        return outs, (part, last)

    def _failed(self, index: int | None, outs: list, error: int) -> list:
        """The outcomes of a batch whose append failed: those that wrote a record answer the error."""
        self.shards.pop(index, None)   # the decided state may not be in the log: read it again
        error = _APPEND_ERRORS.get(error, E.COORDINATOR_NOT_AVAILABLE)
        failed = Outcome(error, COORDINATOR_MESSAGES[error])
        return [failed if out.record is not None else out for out in outs]

    async def _run_batch(self, keyed_ops: list) -> list:
        """keyed_ops: [((group, topic id, partition), op(shard, known, now_ms) -> Outcome)], in the
        request's order; the outcomes in the same order, each once its record is replicated. The keys
        of one __share_group_state partition are decided together and appended as one batch."""
        by_index: dict = {}
        for i, (key, op) in enumerate(keyed_ops):
            known = self._known(key[1], key[2])
            by_index.setdefault(self.index_for(*key), []).append(
                (i, lambda s, now, op=op, key=key, known=known: op(s, key, known, now)))
        outcomes: list = [None] * len(keyed_ops)
        waits = []
        for index, items in by_index.items():
            outs, wait = await self._decide(index, [op for _i, op in items])
            for (i, _op), out in zip(items, outs):
                outcomes[i] = out
            if wait is not None:
                waits.append((index, wait, [i for i, _op in items]))
        for index, (part, last), ids in waits:
            error = await self._replicated(part, last)
            if error != E.NONE:
                for i, out in zip(ids, self._failed(index, [outcomes[i] for i in ids], error)):
                    outcomes[i] = out
        return outcomes

    def _append(self, index: int, records: list, now: int) -> tuple:
        """(error, partition, last offset) of one batch of `records` appended to the leader's log."""
        p = self.broker.partitions.get(state_store.TOPIC, index)
        if p is None or not getattr(p, "is_leader", True):
            return E.NOT_LEADER_OR_FOLLOWER, None, -1
        batch = bytearray(rec.build_batch([(k, v, [], now) for k, v in records]))
        try:
            info = p.append(batch, rec.BatchHeader(batch), now)
        except Exception:
            log.exception("appending to %s-%d failed", state_store.TOPIC, index)
            return E.KAFKA_STORAGE_ERROR, None, -1
        return E.NONE, p, info.last_offset

    async def _replicated(self, p, last_offset: int) -> int:
        repl = getattr(p, "replication", None)
        if repl is None:
            return E.NONE
        try:
            timeout = int(self.broker.config.get("request.timeout.ms"))
        except (KeyError, TypeError, ValueError):
            timeout = 30000
        return await repl.wait_replicated(p, last_offset, timeout)

    # -- the RPCs: every key of a request decided in order, one append per state partition ---------

    async def _each_partition(self, req, R, topic_result, call, answer):
        """Runs `call(shard, key, p, known, now)` for every partition of `req` and answers with
        `answer(R, outcome, p)` per partition, grouped in `topic_result`s."""
        if _empty(req):
            return R(results=[])
        slots, keyed = [], []
        for t in req.topics or ():
            for p in t.partitions or ():
                slots.append((t.topic_id, p))
                keyed.append(((req.group_id, t.topic_id, p.partition),
                              lambda s, key, known, now, p=p: call(s, key, p, known, now)))
        outcomes = await self._run_batch(keyed)
        results: dict = {}
        for (tid, p), out in zip(slots, outcomes):
            results.setdefault(tid, []).append(answer(R, out, p))
        return R(results=[topic_result(topic_id=tid, partitions=parts) for tid, parts in results.items()])

    async def initialize(self, req) -> InitializeShareGroupStateResponse:
        R = InitializeShareGroupStateResponse
        return await self._each_partition(
            req, R, R.InitializeStateResult,
            lambda s, key, p, known, now: s.initialize(key, p.state_epoch, p.start_offset, known, now),
            _errors_only)

    async def write(self, req) -> WriteShareGroupStateResponse:
        R = WriteShareGroupStateResponse

        def call(s, key, p, known, now):
            batches = [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                       for b in p.state_batches or ()]
            complete = getattr(p, "delivery_complete_count", -1)   # v1 only
            return s.write(key, p.leader_epoch, p.state_epoch, p.start_offset, complete, batches, known, now)
        return await self._each_partition(req, R, R.WriteStateResult, call, _errors_only)

    async def read(self, req) -> ReadShareGroupStateResponse:
        R = ReadShareGroupStateResponse

        def answer(R, out, p):
            st = out.state if out.error == E.NONE else None
            return R.PartitionResult(
                partition=p.partition, error_code=out.error, error_message=out.message,
                state_epoch=st.state_epoch if st else 0, start_offset=st.start_offset if st else -1,
                state_batches=[R.StateBatch(first_offset=f, last_offset=last, delivery_state=s, delivery_count=c)
                               for f, last, s, c in (st.batches if st else ())])
        return await self._each_partition(
            req, R, R.ReadStateResult,
            lambda s, key, p, known, now: s.read(key, p.leader_epoch, known, now), answer)

    async def summary(self, req) -> ReadShareGroupStateSummaryResponse:
        R = ReadShareGroupStateSummaryResponse

        def answer(R, out, p):
            st = out.state if out.error == E.NONE else None
            return R.PartitionResult(
                partition=p.partition, error_code=out.error, error_message=out.message,
                state_epoch=st.state_epoch if st else 0, leader_epoch=st.leader_epoch if st else 0,
                start_offset=st.start_offset if st else -1, delivery_complete_count=st.complete if st else -1)
        return await self._each_partition(
            req, R, R.ReadStateSummaryResult,
            lambda s, key, p, known, now: s.summary(key, known), answer)

    async def delete(self, req) -> DeleteShareGroupStateResponse:
        R = DeleteShareGroupStateResponse
        return await self._each_partition(
            req, R, R.DeleteStateResult,
            lambda s, key, p, known, now: s.delete(key, known), _errors_only)

"""COMMIT/ABORT markers on a cluster, both sides of Kafka's WriteTxnMarkers:

- the partition leader's side (`append_marker` + `await_marker`, used by the
  WriteTxnMarkers handler and by a coordinator that leads the partition
  itself): the marker is a control batch appended with acks=all, as Kafka's
  ReplicaManager does for markers (requiredAcks=-1): NOT_ENOUGH_REPLICAS
  before the append when the ISR is below min.insync.replicas, and the
  answer waits until the high watermark passes the marker (the last stable
  offset moves with it); a `__consumer_offsets` partition whose groups are
  still loading answers NOT_LEADER_OR_FOLLOWER (retried), so no completion
  of transactional offsets is lost to a load;
- the coordinator's side (`MarkerChannel`, Kafka's
  TransactionMarkerChannelManager): the markers of a transaction go to the
  current leader of each of its partitions, one connection per destination
  broker; a partition whose leader moved or is unreachable is retried after
  `marker_retry_backoff_ms` with the leadership read again from the
  metadata image, a partition whose topic was deleted is dropped, and the
  job completes (so CompleteCommit/CompleteAbort is written) only once every
  marker is acknowledged. A coordinator that lost the transaction's
  `__transaction_state` partition stops sending (its successor resends).
"""
from __future__ import annotations

import logging

import trio

from kproto.errors import ErrorCode as E

from broker.metadata.internal_topics import OFFSETS_TOPIC
from broker.partitions.producers import MarkerRefused
from broker.transactions.lazy_peers import LazyPeers

log = logging.getLogger("kproto.transactions")

# v2 (KIP-1228) carries each marker's transaction version; sent at the newest version the
# partition leader serves (broker/transactions/peers.py)
WRITE_TXN_MARKERS_VERSION = 2

# the marker is no longer wanted: another coordinator or producer epoch took
# over (Kafka stops sending it; kproto counts it as done, as before)
_GIVE_UP = (E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_COORDINATOR_FENCED)


def _request_timeout_ms(broker) -> int:
    try:
        return int(broker.config.get("request.timeout.ms"))
    except (KeyError, TypeError, ValueError):
        return 30000


def _groups_loading(broker, index: int) -> bool:
    """Whether the group coordinator is loading __consumer_offsets-index."""
    groups = getattr(broker, "groups", None)
    return groups is not None and groups.is_loading(index)


def _replicated(partition) -> bool:
    repl = getattr(partition, "replication", None)
    return repl is not None and (partition.topic, partition.index) in repl.leaders


# ======================================================================== leader side

def append_marker(broker, topic: str, index: int, producer_id: int, producer_epoch: int,
                  coordinator_epoch: int, commit: bool, now_ms: int,
                  transaction_version: int = 0) -> tuple[int, int | None]:
    """Append one marker to a partition this broker leads: (error, offset to
    wait for or None when nothing is left to wait for). transaction_version:
    the transaction's (0 or 2), which decides the epoch check."""
    partition = broker.partitions.get(topic, index)
    if partition is None:
        t = broker.image.topics.get(topic)
        # ReplicaManager.getPartitionOrException: known topic, not hosted here
        return (E.NOT_LEADER_OR_FOLLOWER if t is not None and index in t.partitions
                else E.UNKNOWN_TOPIC_OR_PARTITION), None
    if not getattr(partition, "is_leader", True):
        return E.NOT_LEADER_OR_FOLLOWER, None
    if topic == OFFSETS_TOPIC and _groups_loading(broker, index):
        # the group coordinator is still reading this partition: a marker appended now could
        # fall after the point its load reads to, and its completion would find no group to
        # complete (the transaction's offsets would stay pending for good). Kafka's group
        # coordinator runtime (group.coordinator.new.enable) likewise refuses the completion of a
        # partition that is not loaded yet; NOT_LEADER_OR_FOLLOWER is an error every
        # transaction coordinator retries (TransactionMarkerRequestCompletionHandler)
        return E.NOT_LEADER_OR_FOLLOWER, None
    replicated = _replicated(partition)
    if replicated:
        code = partition.replication.check_min_isr(partition)
        if code is not None:
            return code, None
    try:
        offset = broker.producers.write_marker(partition, producer_id, producer_epoch, coordinator_epoch, commit,
                                               now_ms, transaction_version)
    except MarkerRefused as exc:
        log.warning("marker for %s-%d refused: %s", topic, index, exc)
        return exc.code, None
    except Exception:
        log.exception("writing a marker to %s-%d failed", topic, index)
        return E.KAFKA_STORAGE_ERROR, None
    return E.NONE, (offset if replicated else None)


async def await_marker(broker, topic: str, index: int, offset: int | None, timeout_ms: int | None = None) -> int:
    """acks=all for an appended marker: NONE once the high watermark passed it."""
    if offset is None:
        return E.NONE
    partition = broker.partitions.get(topic, index)
    if partition is None or getattr(partition, "replication", None) is None:
        return E.NOT_LEADER_OR_FOLLOWER
    if timeout_ms is None:
        timeout_ms = _request_timeout_ms(broker)
    return await partition.replication.wait_replicated(partition, offset, timeout_ms)


def offsets_completed(broker, producer_id: int, commit: bool, partitions: list[int]) -> None:
    """Markers written to __consumer_offsets partitions: the group coordinator
    makes the transaction's offsets visible (or drops them)."""
    groups = getattr(broker, "groups", None)
    if groups is None or not partitions:
        return
    try:
        groups.on_transaction_completed(producer_id, commit, partitions)
    except Exception:
        log.exception("the group coordinator failed to complete the offsets of producer %d", producer_id)


# ======================================================================== coordinator side

class MarkerChannel(LazyPeers):
    peers_client_id = "kproto-txn-markers"

    def __init__(self, broker, backoff_ms: int, still_owner, now_ms):
        self.broker = broker
        self.backoff_ms = backoff_ms
        self.still_owner = still_owner          # job -> whether this coordinator still owns its transaction
        self.now_ms = now_ms
        self.nursery: trio.Nursery | None = None

    # -- one job -------------------------------------------------------------------------

    def write(self, job, complete) -> None:
        """The shell's Output.write: markers into partitions led here that need no
        replication are written at once (a single node completes in this call);
        the rest is delivered by a task that calls complete(results) when done."""
        results: dict = {}
        waits: list = []
        todo: list = []
        offsets_done: list[int] = []
        for tp in job.partitions:
            leader = self._leader(tp)
            if leader is None:
                results[tp] = None    # the topic was deleted: Kafka drops the marker too
                log.info("no marker for %s-%d of %r: the partition is gone", tp[0], tp[1], job.transactional_id)
            elif leader == self.broker.node_id:
                error, offset = append_marker(self.broker, tp[0], tp[1], job.producer_id, job.producer_epoch,
                                              job.coordinator_epoch, job.commit, self.now_ms(),
                                              job.transit.client_tv)
                if error == E.NONE and offset is not None:
                    waits.append((tp, offset))
                elif error == E.NONE or error in _GIVE_UP:
                    results[tp] = None
                    if error == E.NONE and tp[0] == OFFSETS_TOPIC:
                        offsets_done.append(tp[1])
                else:
                    todo.append(tp)
            else:
                todo.append(tp)
        offsets_completed(self.broker, job.producer_id, job.commit, offsets_done)
        if not waits and not todo:
            complete(results)
            return
        if self.nursery is None:
            complete({**results, **{tp: E.COORDINATOR_LOAD_IN_PROGRESS for tp, _o in waits},
                      **{tp: E.COORDINATOR_LOAD_IN_PROGRESS for tp in todo}})
            return
        self.nursery.start_soon(self._deliver, job, results, waits, todo, complete)

    async def _deliver(self, job, results: dict, waits: list, todo: list, complete) -> None:
        todo = list(todo)
        for tp, offset in waits:
            if await self._await_local(job, tp, offset) is not None:
                todo.append(tp)
            else:
                results[tp] = None
        while todo:
            if not self.still_owner(job):
                log.info("markers of %r abandoned: this broker no longer coordinates it", job.transactional_id)
                return
            by_leader: dict[int, list] = {}
            for tp in todo:
                leader = self._leader(tp)
                if leader is None:
                    results[tp] = None
                    log.info("no marker for %s-%d of %r: the partition is gone", tp[0], tp[1],
                             job.transactional_id)
                else:
                    by_leader.setdefault(leader, []).append(tp)
            failed: list = []
            async with trio.open_nursery() as nursery:
                for leader, tps in by_leader.items():
                    nursery.start_soon(self._send_to, job, leader, tps, results, failed)
            todo = failed
            if todo:
                log.info("markers of %r to %s not written yet; retrying", job.transactional_id, todo)
                await trio.sleep(self.backoff_ms / 1000)
        if self.still_owner(job):
            complete(results)

    async def _send_to(self, job, leader: int, tps: list, results: dict, failed: list) -> None:
        if leader < 0:
            failed.extend(tps)       # no leader at the moment
            return
        if leader == self.broker.node_id:
            for tp in tps:
                error, offset = append_marker(self.broker, tp[0], tp[1], job.producer_id, job.producer_epoch,
                                              job.coordinator_epoch, job.commit, self.now_ms(),
                                              job.transit.client_tv)
                if error == E.NONE:
                    error = await self._await_local(job, tp, offset)
                elif error in _GIVE_UP:
                    error = None
                if error is None:
                    results[tp] = None
                else:
                    failed.append(tp)
            return
        errors = await self._remote(job, leader, tps)
        for tp in tps:
            error = errors.get(tp, E.UNKNOWN_SERVER_ERROR)
            if error == E.NONE or error in _GIVE_UP:
                results[tp] = None
            else:
                if error not in (E.NOT_LEADER_OR_FOLLOWER, E.NETWORK_EXCEPTION):
                    log.info("marker of %r for %s-%d on broker %d: %s", job.transactional_id, tp[0], tp[1],
                             leader, E(error).name)
                failed.append(tp)

    async def _await_local(self, job, tp, offset) -> int | None:
        """None once the local marker is replicated, else its error."""
        error = await await_marker(self.broker, tp[0], tp[1], offset)
        if error != E.NONE:
            return error
        if tp[0] == OFFSETS_TOPIC:
            offsets_completed(self.broker, job.producer_id, job.commit, [tp[1]])
        return None

    async def _remote(self, job, leader: int, tps: list) -> dict:
        """WriteTxnMarkers to the leader's broker: {tp: error}."""
        from kproto.messages.write_txn_markers_request import WriteTxnMarkersRequest
        from broker.transactions.peers import errors_by_partition
        endpoint = self._endpoint(leader)
        timeout = _request_timeout_ms(self.broker) / 1000 + 5
        version = WRITE_TXN_MARKERS_VERSION
        if endpoint is not None:
            version = await self._peers.version(leader, endpoint, WriteTxnMarkersRequest.API_KEY,
                                                WRITE_TXN_MARKERS_VERSION, timeout)

        def make_request(by_topic):
            return WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=job.producer_id, producer_epoch=job.producer_epoch, transaction_result=job.commit,
                coordinator_epoch=job.coordinator_epoch,
                # an older leader (v0-1) checks the epoch as for transactions v0
                transaction_version=job.transit.client_tv if version >= 2 else 0,
                topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                        for t, ps in by_topic.items()])])
        return await self._peers.partition_errors(
            leader, endpoint, tps, make_request, version, timeout,
            lambda resp: errors_by_partition(resp.markers, "topics", "partitions", "error_code"))

    # -- the metadata image --------------------------------------------------------------

    def _leader(self, tp) -> int | None:
        """The partition's leader from the metadata image; None when the topic is gone."""
        t = self.broker.image.topics.get(tp[0])
        if t is None:
            return None
        p = t.partitions.get(tp[1])
        if p is None:
            return None
        leader = getattr(p, "leader", None)
        return self.broker.node_id if leader is None else leader

    def _endpoint(self, broker_id: int):
        repl = getattr(self.broker, "replication", None)
        if repl is None:
            return None
        return repl.endpoint_of(broker_id)

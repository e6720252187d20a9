"""The registry's `_schemas` topic, read and written as a Kafka client of
the cluster: kproto's own codecs over the inter-broker listener (with its
TLS/SASL), so the same code serves a single node and any node of a cluster.

One partition, compacted, as Confluent's kafkastore creates it; records are
Confluent's key/value JSON. The reader tails the partition from offset 0 and
hands every record to the store; a writer produces with acks=all and waits
until its own reader has applied the offset it got back."""
from __future__ import annotations

import json
import logging
import time

import trio

from kproto import records as rec
from kproto.errors import ErrorCode
from kproto.messages.create_topics_request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kproto.messages.fetch_request import FetchRequest
from kproto.messages.list_offsets_request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kproto.messages.produce_request import ProduceRequest

log = logging.getLogger("kproto.schema_registry")

TOPIC = "_schemas"
FETCH_WAIT_MS = 200
SHORT_CLUSTER_AFTER_S = 15.0   # a cluster with fewer brokers than the replication factor, after this
RETRIABLE = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
             ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT,
             ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_CONTROLLER, ErrorCode.UNKNOWN_LEADER_EPOCH}


def encode(obj) -> bytes | None:
    return None if obj is None else json.dumps(obj, separators=(",", ":")).encode()


class SchemasTopic:
    def __init__(self, broker, topic: str = TOPIC, replication_factor: int = 3):
        self.broker = broker
        self.topic = topic
        self.replication_factor = replication_factor
        self._conns: dict[tuple, object] = {}

    # -- where to send ---------------------------------------------------------------------

    def _local(self) -> tuple[str, int]:
        listener = self.broker.config.get("inter.broker.listener.name") or None
        try:
            return self.broker.advertised_address(listener)
        except (IndexError, StopIteration):
            return self.broker.advertised_address()

    def _leader_endpoint(self) -> tuple[str, int] | None:
        t = self.broker.image.topics.get(self.topic)
        if t is None or 0 not in t.partitions:
            return None
        leader = t.partitions[0].leader
        if leader < 0:
            return None
        if leader == self.broker.node_id:
            return self._local()
        return self.broker.replication.endpoint_of(leader)

    def _conn(self, endpoint, purpose: str):
        key = (endpoint, purpose)
        conn = self._conns.get(key)
        if conn is None:
            conn = self._conns[key] = self.broker.replication.connection(
                endpoint[0], endpoint[1], f"kproto-schema-registry-{purpose}")
        return conn

    async def aclose(self) -> None:
        for conn in list(self._conns.values()):
            await conn.aclose()
        self._conns.clear()

    # -- the topic ---------------------------------------------------------------------------

    async def ensure(self) -> None:
        """Create `_schemas` (1 partition, compacted) unless it exists: with the replication factor
        asked for (3, Confluent's kafkastore.topic.replication.factor) while the cluster may still be
        starting, then with as many replicas as there are brokers (a warning says so)."""
        started = trio.current_time()
        while self.topic not in self.broker.image.topics:
            rf = self.replication_factor
            if trio.current_time() - started > SHORT_CLUSTER_AFTER_S:
                brokers = [b for b in (getattr(self.broker.image, "brokers", {}) or {}).values()
                           if not getattr(b, "fenced", False)]
                if 0 < len(brokers) < rf:
                    log.warning("%s: %d brokers, fewer than replication factor %d: creating it with %d",
                                self.topic, len(brokers), rf, len(brokers))
                    rf = len(brokers)
            req = CreateTopicsRequest(timeout_ms=30000, topics=[CreatableTopic(
                name=self.topic, num_partitions=1, replication_factor=rf, configs=[
                    CreatableTopicConfig(name="cleanup.policy", value="compact")])])
            try:
                resp = await self._conn(self._local(), "admin").request(req, 5)
                code = resp.topics[0].error_code
                if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS,
                                ErrorCode.INVALID_REPLICATION_FACTOR):
                    log.warning("cannot create %s yet: error %s", self.topic, code)
            except (OSError, EOFError, trio.BrokenResourceError) as exc:
                log.warning("cannot create %s yet: %s", self.topic, exc)
            await trio.sleep(0.2)

    async def append(self, key: dict, value: dict | None, timeout_s: float = 30.0) -> int:
        """Produce one record (acks=all); its offset. OSError when the cluster does not take it in time."""
        return await self.append_all([(key, value)], timeout_s)

    async def append_all(self, pairs: list, timeout_s: float = 30.0) -> int:
        """Produce (key, value) records as one batch, appended whole or not at all; the last offset."""
        now = int(time.time() * 1000)
        batch = rec.build_batch([(encode(k), encode(v), [], now) for k, v in pairs])
        req = ProduceRequest(acks=-1, timeout_ms=int(timeout_s * 1000), topic_data=[ProduceRequest.TopicProduceData(
            name=self.topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])
        deadline = trio.current_time() + timeout_s
        last = "no leader"
        while trio.current_time() < deadline:
            endpoint = self._leader_endpoint()
            if endpoint is not None:
                conn = self._conn(endpoint, "write")
                try:
                    with trio.move_on_after(max(0.1, deadline - trio.current_time())):
                        resp = await conn.request(req, 9)
                        p = resp.responses[0].partition_responses[0]
                        if p.error_code == ErrorCode.NONE:
                            return p.base_offset + len(pairs) - 1
                        last = f"error {p.error_code}"
                        if p.error_code not in RETRIABLE:
                            raise OSError(f"produce to {self.topic} failed: {last}")
                except (EOFError, trio.BrokenResourceError, ConnectionError) as exc:
                    last = str(exc)
                    await conn.aclose()
            await trio.sleep(0.1)
        raise OSError(f"produce to {self.topic} timed out ({last})")

    async def end_offset(self, timeout_s: float = 30.0) -> int:
        """The partition's end (committed) offset, asked of its leader now."""
        req = ListOffsetsRequest(replica_id=-1, isolation_level=1, topics=[ListOffsetsTopic(
            name=self.topic, partitions=[ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                              timestamp=-1)])])
        deadline = trio.current_time() + timeout_s
        while trio.current_time() < deadline:
            endpoint = self._leader_endpoint()
            if endpoint is not None:
                conn = self._conn(endpoint, "write")
                try:
                    resp = await conn.request(req, 5)
                    p = resp.topics[0].partitions[0]
                    if p.error_code == ErrorCode.NONE:
                        return p.offset
                except (OSError, EOFError, trio.BrokenResourceError):
                    await conn.aclose()
            await trio.sleep(0.1)
        raise OSError(f"no end offset of {self.topic} in {timeout_s} s")

    async def tail(self, apply, task_status=trio.TASK_STATUS_IGNORED, advance=None, prepare=None) -> None:
        """Read from offset 0 for ever, apply(key, value, offset) for each record, then await
        prepare() and call advance(next offset) once per fetch; task_status is started once the
        reader has caught up with the end of the log it first saw."""
        await self.ensure()
        offset, started = 0, False
        while True:
            endpoint = self._leader_endpoint()
            if endpoint is None:
                await trio.sleep(0.1)
                continue
            conn = self._conn(endpoint, "read")
            req = FetchRequest(replica_id=-1, max_wait_ms=0 if not started else FETCH_WAIT_MS, min_bytes=1,
                               max_bytes=8 << 20, isolation_level=1, session_id=0, session_epoch=-1, topics=[
                                   FetchRequest.FetchTopic(topic=self.topic, partitions=[
                                       FetchRequest.FetchPartition(partition=0, fetch_offset=offset,
                                                                   partition_max_bytes=8 << 20)])])
            try:
                resp = await conn.request(req, 12)
            except (OSError, EOFError, trio.BrokenResourceError) as exc:
                log.debug("fetch from %s failed: %s", endpoint, exc)
                await conn.aclose()
                await trio.sleep(0.2)
                continue
            except Exception:   # (an answer that does not decode: the registry waits, the broker goes on)
                log.exception("fetch of %s from %s failed", self.topic, endpoint)
                await conn.aclose()
                await trio.sleep(1.0)
                continue
            p = resp.responses[0].partitions[0]
            if p.error_code != ErrorCode.NONE:
                if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    offset = max(offset, p.log_start_offset)
                await trio.sleep(0.1)
                continue
            data = bytes(p.records or b"")
            for batch_pos, header in _batches(data):
                if header.is_control:
                    offset = header.last_offset + 1
                    continue
                try:
                    batch = list(rec.iter_records(data, batch_pos))
                except Exception as exc:   # (a batch that does not decode is skipped, with a warning)
                    log.warning("%s: batch at offset %d does not decode (%s), skipped", self.topic,
                                header.base_offset, exc)
                    batch = []
                for r in batch:
                    if r.offset < offset:
                        continue
                    try:
                        apply(json.loads(r.key) if r.key else None,
                              json.loads(r.value) if r.value is not None else None, r.offset)
                    except Exception as exc:   # (a record this registry cannot read must not stop the reader)
                        log.warning("%s offset %d: not a registry record (%s), skipped", self.topic, r.offset, exc)
                    offset = r.offset + 1
                offset = max(offset, header.last_offset + 1)
            if prepare is not None:
                await prepare()   # (the registry parses what it applied, off the event loop)
            if advance is not None:
                advance(offset)   # (records removed by compaction leave gaps: the position still moves)
            if not started and offset >= p.high_watermark:
                started = True
                task_status.started()


def _batches(data):
    pos = 0
    while pos + 61 <= len(data):
        try:
            header = rec.BatchHeader(data, pos)
            size = header.size
        except Exception:
            return
        if pos + size > len(data):
            return   # a partial batch at the end of the fetch
        yield pos, header
        pos += size

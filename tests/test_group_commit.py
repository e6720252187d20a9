"""Group commit (broker/storage/flusher.py): fsyncs run in worker threads, never on
the trio thread; the recovery point moves only after an fsync completed;
acks=-1 produce to a topic with flush.messages=1 is answered only once an
fsync covered it, and concurrent producers share fsyncs.

Three levels: the storage half (PartitionLog.flush_targets / FlushTargets /
flushed) on real files, a broker running in this process (so the test can
look at recovery points at the moment a Produce is answered), and real
clients against a `kproto serve` process, killed with SIGKILL.
"""
from __future__ import annotations

import errno
import os
import struct
import threading
import time

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.controller.controller import TopicSpec
from broker.storage.flusher import Flusher
from broker.handlers import HANDLERS, load_all
from broker.storage import checkpoints as cp
from broker.storage.log import PartitionLog
from broker.storage.log_flush import FlushTargets
from kproto import api
from kproto.api import ApiKey
from kproto.messages.produce_request import ProduceRequest
from kproto.records import build_batch
from broker.launch.process import BrokerProcess

PRODUCE_V = 9


def batch(value: bytes = b"v" * 100, count: int = 1) -> bytearray:
    return bytearray(build_batch([(None, value, [], 1_700_000_000_000)] * count))


def open_log(tmp_path, **config) -> PartitionLog:
    return PartitionLog.open(str(tmp_path / "t-0"), {k.replace("_", "."): str(v) for k, v in config.items()},
                             sync=False)


# -- storage: flushing in another thread ----------------------------------------------------------

def test_due_flush_is_handed_over_and_the_recovery_point_waits_for_the_fsync(tmp_path):
    plog = open_log(tmp_path, flush_messages=1)
    due = []
    plog.on_flush_due = lambda log, upto: due.append(upto)
    for _ in range(3):
        plog.append(batch(), 0)
    assert due == [None, None, None]     # asked, not fsynced here
    assert plog.recovery_point == 0
    targets = plog.flush_targets()
    assert targets.upto == 3 and len(targets.fds) == 3  # the .log, .index and .timeindex
    plog.append(batch(), 0)               # lands while the fsync would run
    assert plog.recovery_point == 0       # planned is not done
    targets.sync()
    assert targets.fds == []              # the duplicated descriptors are closed
    plog.flushed(targets)
    assert plog.recovery_point == 3       # what the fsync covered, not the log end (4)
    assert plog.flush_targets().upto == 4
    plog.close()


def test_fsync_of_a_segment_deleted_and_closed_meanwhile(tmp_path):
    plog = open_log(tmp_path, flush_messages=1, segment_bytes=600, file_delete_delay_ms=0)
    plog.on_flush_due = lambda log, upto: None
    for _ in range(6):
        plog.append(batch(b"x" * 300), 0)
    assert len(plog.segments) > 2
    targets = plog.flush_targets()
    covered = [seg for seg in plog.segments if seg.base_offset < plog.log_end_offset]
    assert len(targets.fds) == 3 * len(covered)
    # every segment goes away (and its files are closed and unlinked) before the fsync runs
    plog.truncate_fully_and_start_at(plog.log_end_offset)
    plog.purge_deleted(force=True)
    targets.sync()                        # duplicated descriptors: still valid, no error
    plog.flushed(targets)
    # planned before the truncation: it says nothing about the new log
    assert plog.recovery_point == plog.log_end_offset
    plog.append(batch(), 0)
    targets = plog.flush_targets()
    plog.close()                          # closes the segment files
    targets.sync()
    plog.flushed(targets)                 # a closed log ignores it
    assert plog.recovery_point == plog.log_end_offset  # (close flushed synchronously)


def test_a_failed_fsync_does_not_move_the_recovery_point(tmp_path):
    plog = open_log(tmp_path, flush_messages=1)
    plog.on_flush_due = lambda log, upto: None
    plog.append(batch(), 0)
    targets = plog.flush_targets()
    targets.close()
    plog.flushed(targets, ok=False)
    assert plog.recovery_point == 0
    assert plog.flush_targets().dir is not None  # the directory fsync is owed again
    plog.close()


# -- the flusher ----------------------------------------------------------------------------------

def test_concurrent_waiters_share_fsyncs_and_wake_only_when_covered(tmp_path):
    plog = open_log(tmp_path, flush_messages=1)
    flusher = Flusher()
    plog.on_flush_due = flusher.request
    woken = []

    async def producer(i):
        for _ in range(5):
            last = plog.append(batch(), 0).last_offset
            assert await flusher.wait_flushed(plog, last)
            woken.append((last, plog.recovery_point))
            await trio.sleep(0)

    async def main():
        async with trio.open_nursery() as outer:
            await outer.start(flusher.run)
            async with trio.open_nursery() as nursery:
                for i in range(40):
                    nursery.start_soon(producer, i)
            outer.cancel_scope.cancel()

    trio.run(main)
    assert len(woken) == 200
    assert all(rp > last for last, rp in woken)
    assert flusher.records_covered == 200
    assert 0 < flusher.flushes < 200 / 4, flusher.flushes  # group commit: many records per fsync
    plog.close()


def test_a_failed_fsync_fails_its_waiters_and_later_ones(tmp_path, monkeypatch):
    plog = open_log(tmp_path, flush_messages=1)
    flusher = Flusher()
    plog.on_flush_due = flusher.request

    def broken_sync(self, close=True):
        raise OSError(errno.EIO, "Input/output error")

    results = []

    async def main():
        async with trio.open_nursery() as outer:
            await outer.start(flusher.run)
            monkeypatch.setattr(FlushTargets, "sync", broken_sync)
            results.append(await flusher.wait_flushed(plog, plog.append(batch(), 0).last_offset))
            monkeypatch.undo()
            # the kernel may have dropped the pages: no later fsync vouches for them
            results.append(await flusher.wait_flushed(plog, plog.append(batch(), 0).last_offset))
            outer.cancel_scope.cancel()

    trio.run(main)
    assert results == [False, False]
    assert plog.recovery_point == 0 and flusher.failures == 1
    plog.close()


# -- a broker in this process ---------------------------------------------------------------------

class _Conn:
    def __init__(self, stream):
        self.stream = stream
        self.buf = bytearray()
        self.cid = 0

    async def call(self, request, version: int):
        self.cid += 1
        await self.stream.send_all(api.encode_request(request, version, self.cid, "group-commit-test"))
        while True:
            if len(self.buf) >= 4:
                size = struct.unpack_from(">i", self.buf)[0]
                if len(self.buf) >= 4 + size:
                    frame = bytes(self.buf[4:4 + size])
                    del self.buf[:4 + size]
                    cid, resp = api.decode_response(frame, request.API_KEY, version)
                    assert cid == self.cid
                    return resp
            chunk = await self.stream.receive_some(65536)
            assert chunk, "broker closed the connection"
            self.buf += chunk


def produce_req(topic: str, partition: int, acks: int, records: int = 1) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=bytes(batch(count=records)))])])


def run_broker(tmp_path, settings: dict, body):
    """Run a Broker in this process's trio loop; ``body(broker, port)`` drives it."""
    config = BrokerConfig.load(None, {"log.dirs": str(tmp_path / "data"),
                                      "listeners": "PLAINTEXT://127.0.0.1:0", **settings})

    async def main():
        broker = Broker(config)
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            port = next(p for _n, _h, p in broker.bound)
            await body(broker, port)
            nursery.cancel_scope.cancel()

    trio.run(main)


def _check_acks_at_answer_time(monkeypatch, broker_box: dict, violations: list, answered: list):
    """Wrap the Produce handler: when it returns an answer, every acknowledged
    offset must already be below its log's recovery point (fsynced)."""
    load_all()
    lo, hi, produce = HANDLERS[int(ApiKey.PRODUCE)]

    async def checked(ctx, req):
        resp = await produce(ctx, req)
        if resp is not None and req.acks == -1:
            for t in resp.responses:
                for p in t.partition_responses:
                    if p.error_code == 0:
                        plog = broker_box["broker"].partitions.get(t.name, p.index).log
                        answered.append(p.base_offset)
                        if plog.recovery_point <= p.base_offset:
                            violations.append((t.name, p.index, p.base_offset, plog.recovery_point))
        return resp

    monkeypatch.setitem(HANDLERS, int(ApiKey.PRODUCE), (lo, hi, checked))


@pytest.mark.timeout(60)
def test_fsync_before_ack_many_concurrent_producers(tmp_path, monkeypatch):
    box, violations, answered = {}, [], []
    _check_acks_at_answer_time(monkeypatch, box, violations, answered)
    per_conn, conns, partitions = 20, 16, 3

    async def body(broker, port):
        box["broker"] = broker
        broker.controller.create_topic(TopicSpec("durable", partitions, 1))

        async def client(i):
            conn = _Conn(await trio.open_tcp_stream("127.0.0.1", port))
            for n in range(per_conn):
                resp = await conn.call(produce_req("durable", (i + n) % partitions, -1), PRODUCE_V)
                assert resp.responses[0].partition_responses[0].error_code == 0
            await conn.stream.aclose()

        async with trio.open_nursery() as nursery:
            for i in range(conns):
                nursery.start_soon(client, i)
        box["flushes"] = broker.flusher.flushes
        box["covered"] = broker.flusher.records_covered

    # the broker-level way to ask for it: log.flush.interval.messages=1
    run_broker(tmp_path, {"log.flush.interval.messages": "1"}, body)
    assert len(answered) == per_conn * conns
    assert violations == []
    assert box["covered"] >= per_conn * conns
    assert box["flushes"] < per_conn * conns, box   # producers shared fsyncs


@pytest.mark.timeout(60)
def test_no_fsync_on_the_trio_thread(tmp_path, monkeypatch):
    """Default configs: producing fsyncs nothing at all. flush.messages=1:
    the fsyncs happen, in worker threads only. acks=1 is answered without
    waiting for them."""
    calls = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync
    main_thread = threading.get_ident()

    def spy(real):
        def call(fd):
            calls.append(threading.get_ident() == main_thread)
            return real(fd)
        return call

    async def body(broker, port):
        broker.controller.create_topic(TopicSpec("plain", 2, 1))
        broker.controller.create_topic(TopicSpec("synced", 2, 1, configs={"flush.messages": "1"}))
        await trio.sleep(0.1)
        while not broker.checkpoints.idle:   # the new partitions' own fsyncs (checkpoint writer) first
            await trio.sleep(0.02)
        conn = _Conn(await trio.open_tcp_stream("127.0.0.1", port))
        monkeypatch.setattr(os, "fsync", spy(real_fsync))
        monkeypatch.setattr(os, "fdatasync", spy(real_fdatasync))
        for n in range(50):
            for acks in (1, -1):
                resp = await conn.call(produce_req("plain", n % 2, acks, records=10), PRODUCE_V)
                assert resp.responses[0].partition_responses[0].error_code == 0
        assert calls == [] and broker.flusher.flushes == 0
        plain = broker.partitions.get("plain", 0).log
        assert plain.recovery_point == 0 and plain.log_end_offset == 500
        for n in range(50):
            resp = await conn.call(produce_req("synced", n % 2, -1, records=10), PRODUCE_V)
            assert resp.responses[0].partition_responses[0].error_code == 0
        assert calls and not any(calls)   # fsyncs, none of them on the trio thread
        monkeypatch.undo()
        await conn.stream.aclose()

    run_broker(tmp_path, {}, body)


@pytest.mark.timeout(60)
def test_failed_fsync_answers_kafka_storage_error(tmp_path, monkeypatch):
    """Kafka takes a log directory offline when an fsync fails and answers
    KAFKA_STORAGE_ERROR (56) for its partitions: the acks=-1 batches whose
    fsync failed, and then every batch, acks=1 too, since the partition is
    offline with its dir (ReplicaManager.handleLogDirFailure)."""
    codes = []

    def broken_sync(self, close=True):
        raise OSError(errno.EIO, "Input/output error")

    async def body(broker, port):
        broker.controller.create_topic(TopicSpec("synced", 1, 1, configs={"flush.messages": "1"}))
        await trio.sleep(0.1)
        conn = _Conn(await trio.open_tcp_stream("127.0.0.1", port))
        resp = await conn.call(produce_req("synced", 0, -1), PRODUCE_V)
        codes.append(resp.responses[0].partition_responses[0].error_code)
        monkeypatch.setattr(FlushTargets, "sync", broken_sync)
        for acks in (-1, -1, 1):
            resp = await conn.call(produce_req("synced", 0, acks), PRODUCE_V)
            codes.append(resp.responses[0].partition_responses[0].error_code)
        monkeypatch.undo()
        await conn.stream.aclose()

    run_broker(tmp_path, {}, body)
    assert codes == [0, 56, 56, 56]


# -- real clients, a real process -----------------------------------------------------------------

@pytest.mark.timeout(120)
def test_acks_all_producers_with_fsync_survive_kill_9(tmp_path):
    proc = BrokerProcess(str(tmp_path / "data"), settings={
        "log.flush.interval.messages": "1", "log.flush.offset.checkpoint.interval.ms": "1000"})
    proc.start()
    try:
        topic, producers, per_producer = "durable", 6, 300
        acked: list[list[tuple[int, int]]] = [[] for _ in range(producers)]
        errors = []

        def run(i):
            p = Producer({"bootstrap.servers": proc.bootstrap, "acks": "all", "linger.ms": 1,
                          "enable.idempotence": i % 2 == 0})

            def delivered(err, msg):
                if err is not None:
                    errors.append(err)
                else:
                    acked[i].append((msg.partition(), msg.offset()))
            for n in range(per_producer):
                p.produce(topic, f"{i}-{n}".encode(), partition=n % 2, on_delivery=delivered)
                p.poll(0)
            assert p.flush(30) == 0

        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
        threads = [threading.Thread(target=run, args=(i,)) for i in range(producers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert sum(map(len, acked)) == producers * per_producer
        time.sleep(2.5)  # a recovery-point checkpoint (every second here) after the last ack
        proc.kill()
        points = cp.read_offsets_checkpoint(os.path.join(proc.data_dir, "recovery-point-offset-checkpoint"))
        for part in {p for a in acked for p, _ in a}:
            last = max(o for a in acked for p, o in a if p == part)
            assert points[(topic, part)] > last   # everything acknowledged was fsynced
        proc.start()
        c = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "g", "enable.auto.commit": False})
        try:
            for part in {p for a in acked for p, _ in a}:
                low, high = c.get_watermark_offsets(TopicPartition(topic, part), timeout=10)
                assert high > max(o for a in acked for p, o in a if p == part)
        finally:
            c.close()
    finally:
        proc.stop()

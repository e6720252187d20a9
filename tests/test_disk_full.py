"""A full disk under a real broker (a small tmpfs as its log dir; needs root
to mount it, skipped otherwise).

What a user sees, as with Kafka: batches the disk refused are answered
KAFKA_STORAGE_ERROR, never acknowledged; once every log dir has failed the
broker stops with one line naming the directory and the cause (Kafka halts,
so that in a cluster leadership moves to replicas on healthy disks); after
space is freed it restarts on the same directory and every acknowledged
record is still there, once, in order (recovery truncates the partial
write).

A new partition's log that the disk refuses to make fails its log directory the
same way (Kafka's LogManager.getOrCreateLog), whether the log is made in the
metadata apply (a few partitions) or afterwards (broker/partitions/creation.py):
with its only log dir failed the broker stops, saying which and why; with another
dir left, that partition answers KAFKA_STORAGE_ERROR (not NOT_LEADER_OR_FOLLOWER,
which clients would retry until a restart) and the next logs go to the healthy
dir. A partition directory that a dir cannot make (no inode left) is made in the
next dir, and the dir that failed takes the partitions it held offline."""
from __future__ import annotations

import os
import re
import subprocess
import time

import pytest

from tests.tmpfs import small_tmpfs
from tests.wire_client import WireClient, create_topics, fetch, list_offset, produce
from broker.launch.process import BrokerProcess
from broker.storage.checkpoints import CorruptCheckpointError, read_epoch_checkpoint
from kproto.errors import ErrorCode
from kproto.records import build_batch

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture
def small_disk(tmp_path):
    with small_tmpfs(tmp_path / "disk", "3m") as path:
        yield path


def _read_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 30) -> list:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                                  "enable.auto.commit": False})
    c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append((m.offset(), m.value()))
    c.close()
    return got


@pytest.mark.timeout(150)
def test_a_full_disk_stops_the_broker_and_loses_no_acknowledged_record(small_disk):
    data = str(small_disk / "data")
    broker = BrokerProcess(data_dir=data)
    broker.start()
    try:
        p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                                      "linger.ms": 5, "message.timeout.ms": 8000, "enable.idempotence": True})
        acked, errors = [], {}

        def delivered(err, msg):
            if err is None:
                acked.append((msg.offset(), msg.value()))
            else:
                errors[err.name()] = errors.get(err.name(), 0) + 1
        for i in range(4000):       # 4 MB of values into a 3 MB disk
            p.produce("full", value=b"%06d" % i + b"x" * 1000, partition=0, on_delivery=delivered)
            p.poll(0)
        p.flush(30)
        assert acked and errors, (len(acked), errors)
        broker.proc.wait(timeout=30)        # the broker halts by itself
        assert broker.proc.returncode == 1
        stderr = "".join(broker.stderr_lines)
        assert f"every log directory has failed: {os.path.abspath(data)} (No space left on device)" in stderr
        assert "Traceback" not in stderr
    finally:
        broker.stop()
    subprocess.run(["mount", "-o", "remount,size=20m", str(small_disk)], check=True)
    again = BrokerProcess(data_dir=data)
    again.start()
    try:
        got = _read_all(again.bootstrap, "full", len(acked))
        assert got[:len(acked)] == sorted(acked)          # every acknowledged record, in order, once
        assert [o for o, _ in got] == list(range(len(got)))
        values = [v for _, v in got]
        assert len(values) == len(set(values))
    finally:
        again.stop()


def _fill(path) -> None:
    """Take every free byte of the file system at `path`."""
    with open(os.path.join(path, "filler"), "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


def _produce_to_each(bootstrap: str, topic: str, partitions: int) -> list[str]:
    """One record to each partition (the producer retries until its log is made); the errors."""
    errors = []
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 30000})
    for i in range(partitions):
        p.produce(topic, value=b"v", partition=i,
                  on_delivery=lambda err, msg: err is None or errors.append(f"{msg.partition()}: {err}"))
    assert p.flush(40) == 0
    return errors


def _replica_manager(metrics_url: str) -> dict[str, float]:
    """kafka_server_replicamanager_* samples of the broker's /metrics, by short name."""
    import urllib.request
    prefix = "kafka_server_replicamanager_"
    with urllib.request.urlopen(metrics_url, timeout=10) as r:
        return {line.split()[0][len(prefix):]: float(line.split()[1])
                for line in r.read().decode().splitlines() if line.startswith(prefix)}


def _errors(bootstrap: str, topic: str, partition: int) -> dict[str, int]:
    """Produce, Fetch and ListOffsets error codes for one partition, each sent once (no retry)."""
    with WireClient(bootstrap) as c:
        return {"produce": produce(c, topic, build_batch([(None, b"v")]), partition).error_code,
                "fetch": fetch(c, topic, 0, partition=partition).responses[0].partitions[0].error_code,
                "list_offsets": list_offset(c, topic, -1, partition).error_code}


def _wait_for_epoch_checkpoints(log_dir: str, topic: str, partitions: int, timeout_s: float = 10) -> None:
    """Until every partition's leader-epoch-checkpoint in ``log_dir`` holds an entry."""
    def written(p: int) -> bool:
        try:
            return bool(read_epoch_checkpoint(os.path.join(log_dir, f"{topic}-{p}", "leader-epoch-checkpoint")))
        except CorruptCheckpointError:   # (caught mid-write: it is written in place)
            return False
    deadline = time.monotonic() + timeout_s
    while not all(written(p) for p in range(partitions)):
        assert time.monotonic() < deadline, f"{topic}'s leader-epoch checkpoints never written"
        time.sleep(0.05)


@pytest.mark.timeout(60)
def test_a_log_a_full_dir_cannot_make_answers_storage_error_then_with_no_dir_left_the_broker_stops(tmp_path):
    """Two log dirs, each a small tmpfs (the metadata log elsewhere, so that every CreateTopics
    commits): logs that a full dir refuses, made in the metadata apply (4 partitions) and after
    the answer (20, past INLINE_PARTITIONS). Kafka 3.9 in the same scenario, run by hand: the
    partitions in the full dir answer KAFKA_STORAGE_ERROR to Produce, Fetch and ListOffsets, and
    once the other dir fails too it halts ("Shutdown broker because all log dirs in ... have
    failed"). It placed two of the four in the full dir, not one: it writes partition.metadata
    in a background task, so it notices the failure a little later. Kafka keeps such a partition
    as HostedPartition.Offline: ReplicaManager's PartitionCount counts it, and Kafka 4.3.1's
    OfflineReplicaCount (4 and 2 there, JMX; Kafka 3.9.0's OfflineReplicaCount stays 0, a bug)."""
    with small_tmpfs(tmp_path / "disk-a", "3m") as disk_a, small_tmpfs(tmp_path / "disk-b", "3m") as disk_b:
        a, b = str(disk_a / "a"), str(disk_b / "b")
        broker = BrokerProcess(data_dir=a, metrics=True,
                               settings={"log.dirs": f"{a},{b}", "metadata.log.dir": str(tmp_path / "meta")}).start()
        try:
            _fill(disk_b)
            with WireClient(broker.bootstrap) as c:
                # made in the apply: few-0 in a, few-1 in b (the dir with fewer partitions),
                # which fails b, then few-2 and few-3 in a
                create_topics(c, ["few"], 4)
            storage = ErrorCode.KAFKA_STORAGE_ERROR
            assert _errors(broker.bootstrap, "few", 1) == {"produce": storage, "fetch": storage,
                                                           "list_offsets": storage}
            assert [_errors(broker.bootstrap, "few", p)["produce"] for p in (0, 2, 3)] == [0, 0, 0]
            assert {"few-0", "few-2", "few-3"} <= set(os.listdir(a)) and "few-0" not in os.listdir(b)
            rm = _replica_manager(broker.metrics_url)
            assert (rm["partitioncount"], rm["offlinereplicacount"], rm["leadercount"]) == (4, 1, 3)
            with WireClient(broker.bootstrap) as c:
                create_topics(c, ["wide"], 20)    # made after the answer, all in a
            assert _produce_to_each(broker.bootstrap, "wide", 20) == []
            assert broker.proc.poll() is None     # still serving
            stderr = "".join(broker.stderr_lines)
            assert f"log directory {b} failed: No space left on device" in stderr
            assert f"making the log of few-1 failed at {b}/few-1/partition.metadata: No space left on device" in stderr

            # a full too: the next log made after the answer fails the last dir, the broker halts.
            # First wide's leader-epoch checkpoints, which the checkpoint writer's thread writes
            # after the first append: filled before them, a would fail on one of those
            _wait_for_epoch_checkpoints(a, "wide", 20)
            _fill(disk_a)
            with WireClient(broker.bootstrap) as c:
                create_topics(c, ["more"], 20)    # answered at the commit
            broker.proc.wait(timeout=30)
            assert broker.proc.returncode == 1
            stderr = "".join(broker.stderr_lines)
            assert (f"every log directory has failed: {b} (No space left on device), "
                    f"{a} (No space left on device)") in stderr
            # what failed a is a file of the new topic: its first log's partition.metadata (made
            # in the reconcile) or its first leader-epoch checkpoint, which the checkpoint
            # writer's thread writes a moment later (as Kafka 3.9 writes partition.metadata in a
            # background task)
            assert re.search(rf"log directory {re.escape(a)} failed: No space left on device "
                             rf"\(at {re.escape(a)}/more-\d+/(partition.metadata|leader-epoch-checkpoint)\)",
                             stderr), stderr
            assert "Traceback" not in stderr
        finally:
            broker.stop()


def _use_every_inode(path) -> None:
    """Take every free inode of the file system at `path` (empty files): no directory can be made
    there any more, while the files already open keep taking writes."""
    for i in range(100_000):
        try:
            open(os.path.join(path, f"inode-{i}"), "wb").close()
        except OSError:
            return
    raise AssertionError(f"{path} never ran out of inodes")


@pytest.mark.timeout(60)
def test_a_partition_directory_one_dir_cannot_make_goes_to_the_next_and_the_dir_fails(tmp_path):
    """Kafka's LogManager.getOrCreateLog tries the log dirs in nextLogDirs' order: a dir where
    createLogDirectory fails goes offline (LogDirFailureChannel.maybeAddOfflineLogDir) and the
    partition is made in the next one. The dir that failed takes the partitions it already hosted
    offline with it (ReplicaManager.handleLogDirFailure): they answer KAFKA_STORAGE_ERROR to
    Produce, Fetch and ListOffsets, and count in PartitionCount and OfflineReplicaCount. Here
    b runs out of inodes: its open files still take writes, but no directory can be made there."""
    with small_tmpfs(tmp_path / "disk-b", "8m", inodes=64) as disk_b:
        a, b = str(tmp_path / "a"), str(disk_b / "b")
        broker = BrokerProcess(data_dir=a, metrics=True,
                               settings={"log.dirs": f"{a},{b}", "metadata.log.dir": str(tmp_path / "meta")}).start()
        try:
            with WireClient(broker.bootstrap) as c:
                create_topics(c, ["before"], 2)       # before-0 in a, before-1 in b (fewer partitions)
            assert "before-1" in os.listdir(b) and "before-0" in os.listdir(a)
            assert [_errors(broker.bootstrap, "before", p)["produce"] for p in (0, 1)] == [0, 0]
            _use_every_inode(disk_b)
            with WireClient(broker.bootstrap) as c:
                create_topics(c, ["after"], 2)        # after-0 in a; after-1 tried in b, made in a
            assert [_errors(broker.bootstrap, "after", p) for p in (0, 1)] == [
                {"produce": 0, "fetch": 0, "list_offsets": 0}] * 2
            assert {"after-0", "after-1"} <= set(os.listdir(a))
            storage = ErrorCode.KAFKA_STORAGE_ERROR
            assert _errors(broker.bootstrap, "before", 1) == {"produce": storage, "fetch": storage,
                                                              "list_offsets": storage}
            assert _errors(broker.bootstrap, "before", 0)["fetch"] == 0
            rm = _replica_manager(broker.metrics_url)
            assert (rm["partitioncount"], rm["offlinereplicacount"], rm["leadercount"]) == (4, 1, 3)
            assert broker.proc.poll() is None     # a is left: still serving
            stderr = "".join(broker.stderr_lines)
            assert f"log directory {b} failed: No space left on device" in stderr
            assert "Traceback" not in stderr
        finally:
            broker.stop()

"""Several log directories (JBOD): placement, meta.properties per directory,
DescribeLogDirs per directory, AlterReplicaLogDirs moving a partition, and
recovery from a move a crash interrupted."""
from __future__ import annotations

import os
import shutil

import pytest

from broker.storage.checkpoints import read_meta_properties
from broker.storage.jbod import LogDirs, future_dir_name
from kproto import records as rec
from kproto.errors import ErrorCode
from kproto.messages.alter_replica_log_dirs_request import (
    AlterReplicaLogDir, AlterReplicaLogDirsRequest, AlterReplicaLogDirTopic)
from kproto.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from kproto.messages.describe_log_dirs_request import DescribableLogDirTopic, DescribeLogDirsRequest
from tests.wire_client import WireClient, list_offset, produce
from broker.launch.process import BrokerProcess

pytestmark = pytest.mark.timeout(60)


def _batch(n: int, tag: str) -> bytearray:
    return bytearray(rec.build_batch([(f"k{i}", f"{tag}-{i}" * 20) for i in range(n)]))


def _dirs_of(c: WireClient, topic: str) -> dict[int, tuple[str, int]]:
    """partition -> (log dir, size) from DescribeLogDirs v4."""
    out = {}
    resp = c.call(DescribeLogDirsRequest(topics=None), 4)
    for r in resp.results:
        assert r.error_code == 0 and r.total_bytes > 0 and r.usable_bytes > 0
        for t in r.topics:
            if t.name == topic:
                for p in t.partitions:
                    assert p.partition_index not in out, "a partition in two directories"
                    out[p.partition_index] = (r.log_dir, p.partition_size)
    return out


def _move(c: WireClient, topic: str, partition: int, path: str) -> int:
    req = AlterReplicaLogDirsRequest(dirs=[AlterReplicaLogDir(path=path, topics=[
        AlterReplicaLogDirTopic(name=topic, partitions=[partition])])])
    return c.call(req, 2).results[0].partitions[0].error_code


def _broker_with_two_dirs(tmp_path) -> tuple[BrokerProcess, str, str]:
    """(a started broker whose log.dirs are a and b, a, b)."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    proc = BrokerProcess(str(tmp_path / "unused"), settings={"log.dirs": f"{a},{b}"})
    proc.start()
    return proc, a, b


def _create(c: WireClient, topic: str, partitions: int) -> int:
    return c.call(CreateTopicsRequest(topics=[CreatableTopic(name=topic, num_partitions=partitions,
                                                             replication_factor=1)], timeout_ms=5000), 7).topics[0].error_code


def test_two_log_dirs_end_to_end(tmp_path):
    proc, a, b = _broker_with_two_dirs(tmp_path)
    try:
        with WireClient(proc.bootstrap) as c:
            assert _create(c, "spread", 4) == 0
            for p in range(4):
                assert produce(c, "spread", _batch(10 + p, f"p{p}"), partition=p).error_code == 0
            where = _dirs_of(c, "spread")
            # spread evenly, each partition's size reported where it lives
            assert sorted(d for d, _s in where.values()) == [a, a, b, b]
            assert all(size > 0 for _d, size in where.values())
            src, size = where[0]
            dest = b if src == a else a
            assert _move(c, "spread", 0, dest) == 0
            moved = _dirs_of(c, "spread")
            assert moved[0] == (dest, size)
            assert not os.path.exists(os.path.join(src, "spread-0"))
            # the moved partition keeps its records and takes new ones
            assert produce(c, "spread", _batch(5, "after"), partition=0).error_code == 0
            assert list_offset(c, "spread", -1, partition=0).offset == 15
            # Kafka's errors
            assert _move(c, "spread", 1, str(tmp_path / "elsewhere")) == ErrorCode.LOG_DIR_NOT_FOUND
            # a partition not hosted yet: REPLICA_NOT_AVAILABLE, and it is created where asked
            assert _move(c, "later", 0, b) == ErrorCode.REPLICA_NOT_AVAILABLE
            assert _move(c, "later", 1, b) == ErrorCode.REPLICA_NOT_AVAILABLE
            assert _create(c, "later", 2) == 0
            assert [d for d, _s in sorted(_dirs_of(c, "later").values())] == [b, b]
            assert _move(c, "spread", 0, dest) == 0           # already there: nothing to do
            only = c.call(DescribeLogDirsRequest(topics=[DescribableLogDirTopic(topic="spread", partitions=[0])]), 4)
            assert [(r.log_dir, [p.partition_index for t in r.topics for p in t.partitions]) for r in only.results] \
                == [(a, [0] if dest == a else []), (b, [0] if dest == b else [])]
        props = [read_meta_properties(os.path.join(d, "meta.properties")) for d in (a, b)]
        assert props[0]["cluster.id"] == props[1]["cluster.id"]
        assert props[0]["directory.id"] != props[1]["directory.id"]
        assert props[0]["node.id"] == props[1]["node.id"] == "1"
        assert os.path.isdir(os.path.join(a, "__cluster_metadata-0"))   # the metadata log stays in the first
        proc.stop()
        proc.start()
        with WireClient(proc.bootstrap) as c:
            assert _dirs_of(c, "spread")[0][0] == dest
            assert list_offset(c, "spread", -1, partition=0).offset == 15
            assert list_offset(c, "spread", -1, partition=3).offset == 13
    finally:
        proc.stop()


def test_interrupted_moves_are_resolved_at_start(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    dirs = LogDirs.open([a, b], sync=False)
    for p in range(2):
        plog = dirs.get_or_create("t", p, None, {})
        plog.append(_batch(3, "x"), 0, 0)
    dirs.ensure_meta_properties(1, "cid")
    where = {p: dirs.dir_of("t", p) for p in range(2)}
    assert sorted(where.values()) == [a, b]
    dirs.close()
    # a crash left a partial copy of t-0 in the other directory, and a complete duplicate of t-1
    other0 = b if where[0] == a else a
    os.makedirs(os.path.join(other0, future_dir_name("t", 0)))
    other1 = b if where[1] == a else a
    shutil.copytree(os.path.join(where[1], "t-1"), os.path.join(other1, "t-1"))
    dirs = LogDirs.open([a, b], sync=False)
    try:
        assert dirs.dir_of("t", 0) == where[0]
        assert not [n for n in os.listdir(other0) if n.endswith("-future")]
        assert dirs.dir_of("t", 1) == a                   # of two copies the first directory's stays
        assert sorted(n for d in (a, b) for n in os.listdir(d) if n == "t-1") == ["t-1"]
        assert dirs.get("t", 1).log_end_offset == 3
        # a move, then both directories reopen with the log in its new place
        dest = b if dirs.dir_of("t", 0) == a else a
        moved = dirs.move("t", 0, dest)
        assert moved.log_end_offset == 3 and dirs.dir_of("t", 0) == dest
    finally:
        dirs.close()
    dirs = LogDirs.open([a, b], sync=False)
    try:
        assert dirs.dir_of("t", 0) == dest and dirs.get("t", 0).log_end_offset == 3
    finally:
        dirs.close()


def test_new_partitions_skip_a_failed_log_dir(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    logs = LogDirs.open(dirs)
    try:
        logs.offline = {dirs[0]: "No space left on device"}   # as broker/storage/dir_failure.py records it
        logs.preferred[("t", 2)] = dirs[0]                    # even where AlterReplicaLogDirs asked for it
        for i in range(3):
            logs.get_or_create("t", i, None)
        assert {logs.dir_of("t", i) for i in range(3)} == {dirs[1]}
        logs.offline = {}
        logs.get_or_create("t", 3, None)
        assert logs.dir_of("t", 3) == dirs[0]
    finally:
        logs.close()


def test_a_partition_directory_a_dir_cannot_make_is_made_in_the_next(tmp_path):
    # Kafka's getOrCreateLog: createLogDirectory in nextLogDirs' order, the first that succeeds
    # wins; the one that failed is reported (it goes offline) and gets no later partition
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    logs = LogDirs.open(dirs)
    failed = {}

    def report(exc):
        failed[os.path.dirname(exc.filename)] = exc.strerror
        logs.offline = failed
    try:
        logs.on_dir_failure = report
        with open(os.path.join(dirs[0], "t-0"), "w"):   # in the way of its directory (FileExistsError)
            pass
        logs.get_or_create("t", 0, None)
        assert logs.dir_of("t", 0) == dirs[1] and list(failed) == [dirs[0]]
        logs.get_or_create("t", 1, None)
        assert logs.dir_of("t", 1) == dirs[1]
    finally:
        logs.close()


def test_a_replica_missing_at_start_is_not_made_while_a_log_dir_is_offline(tmp_path):
    # Kafka's LogManager.getOrCreateLog: a log that is not new (a replica the broker had) is not
    # made while a log dir is offline (it may be there): the partition goes offline, instead of
    # answering from an empty log in the healthy dir. At the restart `first-0` (in b) and
    # `second-0` (in a) have lost their directories; b fails making `first-0`'s (a file is in the
    # way), so `second-0`'s is refused. (b, not a: a failed metadata log dir halts the broker.)
    proc, a, b = _broker_with_two_dirs(tmp_path)
    try:
        with WireClient(proc.bootstrap) as c:
            for name in ("anchor", "first", "second"):   # placed in a, b, a (fewest partitions, then order)
                assert _create(c, name, 1) == 0
            assert produce(c, "second", _batch(5, "kept")).error_code == 0
            assert [_dirs_of(c, n)[0][0] for n in ("anchor", "first", "second")] == [a, b, a]
        proc.stop()
        shutil.rmtree(os.path.join(a, "second-0"))
        shutil.rmtree(os.path.join(b, "first-0"))
        with open(os.path.join(b, "first-0"), "w"):     # b cannot make first-0's directory again
            pass
        proc.start()
        with WireClient(proc.bootstrap) as c:
            assert list_offset(c, "second", -1).error_code == ErrorCode.KAFKA_STORAGE_ERROR
            assert produce(c, "second", _batch(1, "new")).error_code == ErrorCode.KAFKA_STORAGE_ERROR
            assert list_offset(c, "anchor", -1).error_code == 0
        assert not os.path.exists(os.path.join(a, "second-0"))
        assert any(f"Can not create log for second-0 because log directories {b} are offline" in line
                   for line in proc.stderr_lines), "".join(proc.stderr_lines[-20:])
    finally:
        proc.stop()

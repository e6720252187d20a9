"""Partitions against the process's limits, with real broker processes and the
confluent-kafka client: a node under `ulimit -n 256` hosts two thousand partitions
(idle ones hold no descriptor) and restarts after kill -9; a creation that would
run past vm.max_map_count is refused with POLICY_VIOLATION before the metadata
commits to it, and a start-up past it says which setting to raise."""
from __future__ import annotations

import glob
import os
import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from broker.launch.process import BrokerProcess
from tests.client_adapters import read_values

pytestmark = pytest.mark.timeout(180)


def _fds(proc: BrokerProcess) -> int:
    return len(os.listdir(f"/proc/{proc.proc.pid}/fd"))


def _fds_at_rest(proc: BrokerProcess) -> int:
    """Open files once responses in flight and flush rounds are done (they hold a few
    more for a moment): polled for a few seconds, the lowest count seen."""
    lowest = _fds(proc)
    deadline = time.monotonic() + 15
    while lowest >= 128 and time.monotonic() < deadline:
        time.sleep(0.2)
        lowest = min(lowest, _fds(proc))
    return lowest


def _maps(proc: BrokerProcess) -> int:
    with open(f"/proc/{proc.proc.pid}/maps", "rb") as f:
        return sum(1 for _ in f)


def _admin(proc: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": proc.bootstrap})


def _create(admin: AdminClient, topics: dict[str, int]) -> dict[str, Exception | None]:
    futures = admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=1) for t, n in topics.items()],
                                  operation_timeout=60, request_timeout=60)
    out = {}
    for name, fut in futures.items():
        try:
            fut.result(timeout=60)
            out[name] = None
        except Exception as exc:   # the KafkaException with the broker's error
            out[name] = exc
    return out


def _partition_counts(admin: AdminClient) -> dict[str, int]:
    md = admin.list_topics(timeout=30)
    return {name: len(t.partitions) for name, t in md.topics.items() if not name.startswith("__")}


def _consume_all(proc: BrokerProcess, partitions: list[tuple[str, int]], expected: int) -> list[bytes]:
    return read_values(proc.bootstrap, partitions, expected, "limits", timeout=60)




def _wait_for_logs(proc: BrokerProcess, names: list[str]) -> None:
    deadline = time.monotonic() + 120
    while not set(names) <= set(os.listdir(proc.data_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert set(names) <= set(os.listdir(proc.data_dir))


@pytest.mark.long
def test_a_node_under_ulimit_256_hosts_two_thousand_partitions_and_restarts_after_kill(tmp_path):
    proc = BrokerProcess(str(tmp_path / "data"), open_files_limit=256).start()
    try:
        admin = _admin(proc)
        topics = {f"wide-{i}": 100 for i in range(20)}
        assert _create(admin, topics) == {t: None for t in topics}
        assert _partition_counts(admin) == topics
        # the answer came at the commit; the logs are made afterwards (tests/test_create_at_commit.py
        # covers producing meanwhile): this test is about holding them, so it waits for them
        _wait_for_logs(proc, [f"{t}-{p}" for t in topics for p in range(100)])
        # one record to every partition: each log is written, so each was opened
        producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 5})
        for t in topics:
            for p in range(100):
                producer.produce(t, value=f"{t}/{p}".encode(), partition=p)
        assert producer.flush(60) == 0
        # two thousand partitions, all written under a limit of 256 open files; at rest the
        # broker holds half the limit (the table of recently used files, connections)
        assert _fds_at_rest(proc) < 128
        everything = [(t, p) for t in topics for p in range(100)]
        expected = sorted(f"{t}/{p}".encode() for t, p in everything)
        assert sorted(_consume_all(proc, everything, len(expected))) == expected
        assert _fds_at_rest(proc) < 128

        proc.kill()
        proc.start()   # same limit: the crash recovery opens every log again
        assert _partition_counts(_admin(proc)) == topics
        assert sorted(_consume_all(proc, everything, len(expected))) == expected
        assert _fds_at_rest(proc) < 128
    finally:
        proc.stop()


def _topics_by_metadata_batch(data: str) -> list[list[str]]:
    """The names of the TopicRecords of each batch of the metadata log that holds any, in order
    (read from its segment files, as kafka-dump-log --cluster-metadata-decoder would)."""
    from broker.metadata import serde
    from kproto.metadata.topic_record import TopicRecord
    from kproto.records import iter_batch_headers, iter_records
    out = []
    for path in sorted(glob.glob(os.path.join(data, "__cluster_metadata-0", "*.log"))):
        with open(path, "rb") as f:
            buf = f.read()
        for pos, header in iter_batch_headers(buf, allow_partial_tail=True):
            if header.is_control:
                continue
            names = [r.name for r in (serde.decode(rec.value) for rec in iter_records(buf, pos))
                     if isinstance(r, TopicRecord)]
            if names:
                out.append(names)
    return out


def test_creation_past_the_map_limit_is_refused_before_the_metadata_commits(tmp_path):
    data = str(tmp_path / "data")
    proc = BrokerProcess(data).start()
    baseline = _maps(proc)
    proc.stop()
    # room for about 100 more partitions (two index maps each) over what the broker maps now
    # and the reserve limits.py keeps
    limit = baseline + 1024 + 200
    proc = BrokerProcess(data, port=proc.port, env={"KPROTO_TEST_MAX_MAP_COUNT": str(limit)}).start()
    try:
        admin = _admin(proc)
        # one request, one metadata batch: each topic is checked with the partitions of the
        # request's earlier topics counted (85 alone would fit, 20 + 85 do not)
        results = _create(admin, {"too-many": 400, "fits": 20, "not-with-fits": 85, "small": 5})
        assert results["fits"] is None and results["small"] is None
        for name in ("too-many", "not-with-fits"):
            error = results[name].args[0]
            assert error.code() == KafkaError.POLICY_VIOLATION, name
            assert "vm.max_map_count" in error.str()
        assert _partition_counts(admin) == {"fits": 20, "small": 5}
        # the topics of that request were committed as one batch of the metadata log
        assert _topics_by_metadata_batch(data)[-1] == ["fits", "small"]

        # growing a topic past the limit: refused the same way, the topic keeps its partitions
        fut = admin.create_partitions([NewPartitions("fits", 420)], operation_timeout=60)["fits"]
        with pytest.raises(Exception) as raised:
            fut.result(timeout=60)
        assert raised.value.args[0].code() == KafkaError.POLICY_VIOLATION
        assert "vm.max_map_count" in raised.value.args[0].str()
        assert _partition_counts(admin) == {"fits": 20, "small": 5}
        # the node still serves
        producer = Producer({"bootstrap.servers": proc.bootstrap})
        producer.produce("fits", value=b"after", partition=3)
        assert producer.flush(30) == 0

        # after kill -9 it starts again, with the topic it accepted only
        proc.kill()
        proc.start()
        assert _partition_counts(_admin(proc)) == {"fits": 20, "small": 5}
        assert _consume_all(proc, [("fits", 3)], 1) == [b"after"]
        proc.stop()

        # the same node started with too few maps for its partitions: one line naming the setting
        proc.env["KPROTO_TEST_MAX_MAP_COUNT"] = str(baseline + 1024 + 10)
        proc.stderr_lines = []
        with pytest.raises(RuntimeError):
            proc.start()
        assert proc.proc.wait(30) == 1
        deadline = time.monotonic() + 10
        while not proc.stderr_lines and time.monotonic() < deadline:
            time.sleep(0.05)   # (the reader thread drains what the process left)
        lines = [line for line in proc.stderr_lines if line.strip()]
        assert len(lines) == 1, lines
        assert lines[0].startswith("kproto: ") and "vm.max_map_count" in lines[0]
    finally:
        proc.stop()


def test_logs_made_while_every_descriptor_is_taken_evict_idle_files_instead_of_failing_the_dir(tmp_path):
    """Issue 26: more than INLINE_PARTITIONS new logs are made after the CreateTopics answer, in
    slices of the event loop. At the descriptor limit (idle connections took what the table of
    open files left), making a new log's files must make room in that table, as opening a segment
    does, not fail the broker's only log dir (which halts it)."""
    import socket
    limit = 256
    proc = BrokerProcess(str(tmp_path / "data"), open_files_limit=limit).start()
    held: list[socket.socket] = []
    try:
        admin = _admin(proc)
        producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 5})
        # written partitions keep their .log in the table: 150 of its 192 places
        assert _create(admin, {"warm": 150}) == {"warm": None}
        _wait_for_logs(proc, [f"warm-{p}" for p in range(150)])
        for p in range(150):
            producer.produce("warm", value=f"warm/{p}".encode(), partition=p)
        assert producer.flush(60) == 0
        # idle connections take every descriptor left (the admin and producer are connected)
        deadline = time.monotonic() + 30
        while _fds(proc) < limit and time.monotonic() < deadline:
            for _ in range(max(1, min(16, limit - _fds(proc)))):
                held.append(socket.create_connection(("127.0.0.1", int(proc.bootstrap.rsplit(":", 1)[1]))))
            time.sleep(0.05)
        assert _fds(proc) >= limit
        assert _create(admin, {"cold": 40}) == {"cold": None}
        _wait_for_logs(proc, [f"cold-{p}" for p in range(40)])
        for s in held:
            s.close()
        held.clear()
        assert proc.proc.poll() is None, "".join(proc.stderr_lines[-20:])
        for p in range(40):
            producer.produce("cold", value=f"cold/{p}".encode(), partition=p)
        assert producer.flush(60) == 0, "".join(proc.stderr_lines[-20:])
        everything = [("warm", p) for p in range(150)] + [("cold", p) for p in range(40)]
        expected = sorted([f"warm/{p}".encode() for p in range(150)] + [f"cold/{p}".encode() for p in range(40)])
        assert sorted(_consume_all(proc, everything, len(expected))) == expected
        # (the accepts refused at the limit are logged; no log dir failed, no log was not made)
        assert not [line for line in proc.stderr_lines if "logger=kproto.storage" in line or "making the log" in line]
    finally:
        for s in held:
            s.close()
        proc.stop()

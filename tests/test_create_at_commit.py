"""CreateTopics answered at the commit, logs made afterwards (issue 26), with real broker
processes and confluent-kafka: the answer does not wait for the new partitions' logs; until a
log exists its partition answers NOT_LEADER_OR_FOLLOWER (Kafka's getPartitionOrError for a
partition its metadata names), which a producer retries until the log is there; a topic deleted
or re-created before its logs were made, and a kill -9 in the middle, leave every partition the
metadata names usable and nothing else on disk.

KPROTO_TEST_HOLD_LOG_CREATION (broker/partitions/creation.py) holds the logs back while a file
exists, so the window between the answer and the logs is open for as long as a test needs."""
from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.launch.process import BrokerProcess
from kproto.errors import ErrorCode
from kproto.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from kproto.messages.find_coordinator_request import FindCoordinatorRequest
from kproto.messages.init_producer_id_request import InitProducerIdRequest
from kproto.messages.offset_commit_request import OffsetCommitRequest
from kproto.messages.offset_fetch_request import OffsetFetchRequest
from kproto.records import build_batch
from tests.client_adapters import read_values
from tests.wire_client import WireClient, fetch, list_offset, produce

pytestmark = pytest.mark.timeout(180)

TOPICS = {f"wide-{i}": 50 for i in range(20)}   # 1,000 partitions in one CreateTopics


def _create(admin: AdminClient, topics: dict[str, int]) -> None:
    futures = admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=1) for t, n in topics.items()],
                                  operation_timeout=60, request_timeout=60)
    for fut in futures.values():
        fut.result(timeout=60)


def _delete(admin: AdminClient, topics: list[str]) -> None:
    for fut in admin.delete_topics(topics, operation_timeout=60, request_timeout=60).values():
        fut.result(timeout=60)


def _partition_dirs(data: str) -> set[str]:
    return {d for d in os.listdir(data) if not d.startswith("__") and os.path.isdir(os.path.join(data, d))}


def _partition_dirs_of(topics: dict[str, int]) -> set[str]:
    return {f"{t}-{p}" for t, n in topics.items() for p in range(n)}


def _produce_all(proc: BrokerProcess, topics: dict[str, int], tag: str, before_flush=None) -> list[str]:
    """One record to every partition; the delivery errors (none expected: the producer retries
    NOT_LEADER_OR_FOLLOWER until the log is there)."""
    errors = []
    producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 5, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 120000})

    def delivered(err, msg):
        if err is not None:
            errors.append(f"{msg.topic()}-{msg.partition()}: {err}")

    for t, n in topics.items():
        for p in range(n):
            producer.produce(t, value=f"{tag}/{t}/{p}".encode(), partition=p, on_delivery=delivered)
    producer.poll(0)
    if before_flush is not None:
        before_flush()
    assert producer.flush(150) == 0
    return errors


def _consume_all(proc: BrokerProcess, topics: dict[str, int], expected: int) -> list[bytes]:
    return read_values(proc.bootstrap, [(t, p) for t, n in topics.items() for p in range(n)], expected, "at-commit")




def _expected(topics: dict[str, int], tag: str) -> list[bytes]:
    return sorted(f"{tag}/{t}/{p}".encode() for t, n in topics.items() for p in range(n))


def _raw_errors(proc: BrokerProcess, topic: str, partition: int) -> dict[str, int]:
    """Produce, Fetch and ListOffsets error codes for one partition, each sent once (no retry)."""
    with WireClient(proc.bootstrap) as c:
        fetched = fetch(c, topic, 0, partition=partition)
        return {"produce": produce(c, topic, build_batch([(None, b"raw")]), partition).error_code,
                "list_offsets": list_offset(c, topic, -1, partition).error_code,
                "fetch": fetched.responses[0].partitions[0].error_code}


def test_answered_before_the_logs_exist_produces_in_the_window_land_and_deletes_win(tmp_path):
    data = str(tmp_path / "data")
    hold = str(tmp_path / "hold")
    proc = BrokerProcess(data, env={"KPROTO_TEST_HOLD_LOG_CREATION": hold}).start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        open(hold, "w").close()
        _create(admin, TOPICS)   # answered with no log made
        assert _partition_dirs(data) == set()
        md = admin.list_topics(timeout=30)
        assert {t: len(md.topics[t].partitions) for t in TOPICS} == TOPICS
        assert all(p.leader == 1 for t in TOPICS for p in md.topics[t].partitions.values())
        # not made yet: what Kafka's broker answers for a partition its metadata names but it
        # does not host, so a client looks again and retries
        nl = KafkaError.NOT_LEADER_FOR_PARTITION
        assert _raw_errors(proc, "wide-7", 13) == {"produce": nl, "list_offsets": nl, "fetch": nl}
        # a partition the metadata does not name stays unknown
        unknown = KafkaError.UNKNOWN_TOPIC_OR_PART
        assert _raw_errors(proc, "wide-7", 50) == {"produce": unknown, "list_offsets": unknown, "fetch": unknown}

        # a record to every partition, sent while none has a log; the logs are let go meanwhile
        errors = _produce_all(proc, TOPICS, "a", before_flush=lambda: os.unlink(hold))
        assert errors == []
        assert _partition_dirs(data) == _partition_dirs_of(TOPICS)
        expected = _expected(TOPICS, "a")
        assert sorted(_consume_all(proc, TOPICS, len(expected))) == expected

        # deleted, and re-created under a new id, before the logs were made (same broker: one
        # start less)
        open(hold, "w").close()
        _create(admin, {"gone": 30, "again": 30, "kept": 5})
        _delete(admin, ["gone", "again"])
        _create(admin, {"again": 20})   # the same name under a new topic id, fewer partitions
        os.unlink(hold)
        kept = {"kept": 5, "again": 20}
        assert _produce_all(proc, kept, "b") == []
        # only what the metadata names was made: nothing of the deleted topic or the first "again"
        assert _partition_dirs(data) - _partition_dirs_of(TOPICS) == (
            {f"kept-{p}" for p in range(5)} | {f"again-{p}" for p in range(20)})
        md = admin.list_topics(timeout=30)
        assert "gone" not in md.topics and len(md.topics["again"].partitions) == 20
        expected = _expected(kept, "b")
        assert sorted(_consume_all(proc, kept, len(expected))) == expected
    finally:
        proc.stop()


def test_kill_during_log_creation_then_restart(tmp_path):
    data = str(tmp_path / "data")
    proc = BrokerProcess(data).start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        _create(admin, {"before": 3})
        assert _produce_all(proc, {"before": 3}, "old") == []
        _create(admin, TOPICS)
        proc.kill()   # at once: most of the 1,000 logs are still to be made (any point will do)
        proc.start()
        everything = dict(TOPICS, before=3)
        md = AdminClient({"bootstrap.servers": proc.bootstrap}).list_topics(timeout=30)
        assert {t: len(md.topics[t].partitions) for t in everything} == everything
        assert _produce_all(proc, TOPICS, "new") == []
        assert _partition_dirs(data) == _partition_dirs_of(everything)
        assert not [d for d in os.listdir(data) if d.endswith("-delete")]
        assert sorted(_consume_all(proc, {"before": 3}, 3)) == _expected({"before": 3}, "old")
        expected = _expected(TOPICS, "new")
        assert sorted(_consume_all(proc, TOPICS, len(expected))) == expected
    finally:
        proc.stop()


@pytest.mark.long
def test_followers_make_their_logs_after_the_commit_too():
    """Three nodes, replication factor 3: every node queues the 60 new logs and makes them after
    the commit; each follower fetches a partition only once its own log exists. acks=all with
    min.insync.replicas=3 acknowledges a record only once all three logs hold it."""
    from tools.cluster_client import wait_brokers_unfenced
    from tools.quorum_cluster import QuorumCluster
    # Kafka's session and heartbeat defaults: a loaded machine must not fence a node meanwhile
    settings = {"replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "100"}
    with QuorumCluster(3, settings=settings) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        wait_brokers_unfenced(admin, 3, timeout=120)
        futures = admin.create_topics([NewTopic("rf3", num_partitions=60, replication_factor=3,
                                                config={"min.insync.replicas": "3"})],
                                      operation_timeout=60, request_timeout=60)
        futures["rf3"].result(timeout=60)
        topics = {"rf3": 60}

        class Proc:   # (_produce_all and _consume_all take a broker process)
            bootstrap = cluster.bootstrap
        assert _produce_all(Proc, topics, "c") == []
        expected = _expected(topics, "c")
        assert sorted(_consume_all(Proc, topics, len(expected))) == expected
        for node in cluster.nodes.values():
            assert _partition_dirs(node.data_dir) >= _partition_dirs_of(topics)


def _until(call, what: str, ok=lambda code: code == ErrorCode.NONE, tries: int = 300) -> int:
    """call() (an error code) again every 0.1 s until ok(code): the last code."""
    for _ in range(tries):
        code = call()
        if ok(code):
            return code
        time.sleep(0.1)
    raise AssertionError(f"{what}: still {ErrorCode(code).name}")


def test_coordinators_load_once_their_partitions_logs_are_made(tmp_path):
    # __consumer_offsets' and __transaction_state's 50 partitions are made as other topics' are,
    # after the metadata change (broker/partitions/creation.py, held back here): until a
    # partition's log is made its coordinator answers COORDINATOR_LOAD_IN_PROGRESS (which clients
    # retry), never from a log that does not exist; then it loads it and serves
    data, hold = str(tmp_path / "data"), str(tmp_path / "hold")
    proc = BrokerProcess(data, env={"KPROTO_TEST_HOLD_LOG_CREATION": hold}).start()
    T, P = OffsetCommitRequest.OffsetCommitRequestTopic, OffsetCommitRequest.OffsetCommitRequestPartition
    FT = OffsetFetchRequest.OffsetFetchRequestTopic
    try:
        with WireClient(proc.bootstrap) as c:
            resp = c.call(CreateTopicsRequest(topics=[CreatableTopic(name="t", num_partitions=1,
                                                                     replication_factor=1)], timeout_ms=5000), 7)
            assert resp.topics[0].error_code == 0
            open(hold, "w").close()

            def find(key: str, key_type: int) -> int:
                return c.call(FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key]), 4).coordinators[0].error_code

            def commit() -> int:
                res = c.call(OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=-1, member_id="",
                                                 retention_time_ms=-1, topics=[T(name="t", partitions=[
                                                     P(partition_index=0, committed_offset=7, commit_timestamp=-1,
                                                       committed_metadata="m")])]), 7)
                return res.topics[0].partitions[0].error_code

            def init() -> int:
                return c.call(InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60000), 4).error_code

            _until(lambda: find("g", 0), "FindCoordinator of a group")          # creates __consumer_offsets
            _until(lambda: find("tx", 1), "FindCoordinator of a transactional id")
            internal = [d for d in os.listdir(data) if d.startswith(("__consumer_offsets-", "__transaction_state-"))]
            assert internal == []      # not made in the metadata change
            loading = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            assert commit() == loading
            fetched = c.call(OffsetFetchRequest(group_id="g", topics=[FT(name="t", partition_indexes=[0])]), 7)
            assert fetched.error_code == loading
            assert init() == loading
            os.unlink(hold)
            _until(commit, "OffsetCommit once the logs are made")
            fetched = c.call(OffsetFetchRequest(group_id="g", topics=[FT(name="t", partition_indexes=[0])]), 7)
            assert (fetched.error_code, fetched.topics[0].partitions[0].committed_offset) == (0, 7)
            _until(init, "InitProducerId once the logs are made")
    finally:
        proc.stop()


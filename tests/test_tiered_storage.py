"""Tiered storage (KIP-405) end to end on one `kproto serve` process with the local-directory
object store: closed segments go to the store, local retention deletes only what was copied, and
real consumers read from offset 0 through the tier; ListOffsets speaks of the tiers."""
from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from broker.launch.process import BrokerProcess
from tests.wire_client import WireClient, list_offset

pytestmark = pytest.mark.timeout(120)

SEGMENT_BYTES = 16 * 1024
LOCAL_BYTES = 2 * SEGMENT_BYTES
VALUE = b"v" * 500


def tiered_settings(remote_dir: str) -> dict[str, str]:
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "log.segment.delete.delay.ms": "0",
        "rsm.config.dir": remote_dir,
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "remote.list.offsets.request.timeout.ms": "3000",   # Kafka 4's (default 30000)
    }


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    base = tmp_path_factory.mktemp("tiered")
    remote = str(base / "remote")
    proc = BrokerProcess(str(base / "data"), settings=tiered_settings(remote), metrics=True)
    proc.start()
    yield proc, remote
    proc.stop()


def create(bootstrap: str, name: str, **configs) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    cfg = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
           "local.retention.bytes": str(LOCAL_BYTES)}
    cfg.update({k.replace("_", "."): str(v) for k, v in configs.items()})
    admin.create_topics([NewTopic(name, 1, 1, config=cfg)])[name].result(15)


def produce(bootstrap: str, topic: str, count: int, ts0: int | None = None) -> None:
    """``count`` records; with ``ts0`` record i has timestamp ts0 + 10 i."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 4096})
    for i in range(count):
        stamp = {} if ts0 is None else {"timestamp": ts0 + 10 * i}
        p.produce(topic, key=str(i).encode(), value=VALUE + str(i).encode(), **stamp)
        if i % 200 == 0:
            p.poll(0)
    assert p.flush(20) == 0


def wait_for(what: str, predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")


def offsets(bootstrap: str, topic: str) -> dict[int, int]:
    with WireClient(bootstrap) as c:
        return {ts: list_offset(c, topic, ts).offset for ts in (-1, -2, -4, -5)}


def consume_all(bootstrap: str, topic: str, expected: int, start: int = 0) -> list[tuple[int, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition(topic, 0, start)])
        out = []
        deadline = time.monotonic() + 30
        while len(out) < expected and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.offset(), msg.value()))
        return out
    finally:
        c.close()


def test_consumer_reads_from_offset_zero_after_local_segments_are_gone(tiered):
    proc, remote = tiered
    topic = "tiered-read"
    create(proc.bootstrap, topic, index_interval_bytes=1024)   # an index entry for every batch
    count = 600   # ~310 KiB: ~19 segments of 16 KiB, 2 of them kept locally
    ts0 = int(time.time() * 1000) - 3_600_000
    produce(proc.bootstrap, topic, count, ts0=ts0)
    # the local log start moves up once the segments are copied and past local retention
    local_dir = os.path.join(proc.data_dir, f"{topic}-0")

    def local_logs():
        return [f for f in os.listdir(local_dir) if f.endswith(".log")]
    wait_for("local segments deleted", lambda: offsets(proc.bootstrap, topic)[-4] > 0 and len(local_logs()) < 6)
    seen = offsets(proc.bootstrap, topic)
    assert seen[-2] == 0                      # EARLIEST: the start of the remote log
    assert seen[-1] == count                  # LATEST
    assert 0 < seen[-4] <= seen[-5] + 1       # EARLIEST_LOCAL within what the tier holds
    remote_logs = sorted((f, os.path.getsize(os.path.join(d, f))) for d, _s, fs in os.walk(remote)
                         for f in fs if f.endswith(".log"))
    assert len(remote_logs) >= 10
    # timestamp lookups reach into the tier: the first record at or after the timestamp
    starts = [int(f.split("-")[0]) for f, _size in remote_logs]
    assert seen[-4] > starts[3]
    mid = (starts[2] + 2 * starts[3]) // 3           # two thirds into the third remote segment
    with WireClient(proc.bootstrap) as c:
        def lookup(ts):
            found = list_offset(c, topic, ts)
            return found.error_code, found.offset, found.timestamp
        before = scrape(proc, "kproto_tiered_store_read_bytes_total")
        assert lookup(ts0 + 10 * mid - 5) == (0, mid, ts0 + 10 * mid)
        # the segment's indexes and the batches they point at, not the whole segment
        read = scrape(proc, "kproto_tiered_store_read_bytes_total") - before
        assert 0 < read < remote_logs[2][1] * 0.6, (read, remote_logs[2][1])
        assert lookup(0) == (0, 0, ts0)                                   # before the first segment
        assert lookup(ts0 + 10 * mid) == (0, mid, ts0 + 10 * mid)         # a record's own timestamp
        for k in (1, 3):                                                  # between two segments
            assert lookup(ts0 + 10 * starts[k] - 5) == (0, starts[k], ts0 + 10 * starts[k])
        assert lookup(ts0 + 10 * (count - 1)) == (0, count - 1, ts0 + 10 * (count - 1))   # local
        assert lookup(ts0 + 10 * count)[1] == -1                          # after the last record
    got = consume_all(proc.bootstrap, topic, count)
    assert [o for o, _v in got] == list(range(count))
    assert all(v == VALUE + str(o).encode() for o, v in got)


def test_kafka_python_reads_the_tier_too(tiered):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    proc, _remote = tiered
    topic = "tiered-kafka-python"
    create(proc.bootstrap, topic)
    produce(proc.bootstrap, topic, 400)
    wait_for("local segments deleted", lambda: offsets(proc.bootstrap, topic)[-4] > 0)
    c = KafkaConsumer(bootstrap_servers=proc.bootstrap, enable_auto_commit=False, auto_offset_reset="none",
                      consumer_timeout_ms=10000)
    try:
        tp = KTP(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got = []
        for msg in c:
            got.append(msg.offset)
            if len(got) == 400:
                break
        assert got == list(range(400))
    finally:
        c.close()


def fetch_at(bootstrap: str, topic: str, offset: int):
    from tests.wire_client import fetch
    with WireClient(bootstrap) as c:
        return fetch(c, topic, offset).responses[0].partitions[0]


class StoreOutage:
    """The local store's directory replaced by a file: every put, get and list fails."""

    def __init__(self, remote: str):
        self.remote, self.away = remote, remote + ".away"

    def __enter__(self):
        os.rename(self.remote, self.away)
        with open(self.remote, "w") as f:
            f.write("not a directory")
        return self

    def __exit__(self, *exc):
        os.unlink(self.remote)
        os.rename(self.away, self.remote)


def scrape(proc, name: str) -> float:
    """The value of an unlabelled sample on the broker's /metrics."""
    import urllib.request
    with urllib.request.urlopen(proc.metrics_url, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not on /metrics")


def test_store_outage_deletes_nothing_local_that_is_not_copied_and_remote_reads_fail_then_recover(tiered):
    from kproto.errors import ErrorCode
    proc, remote = tiered
    topic, fresh = "tiered-outage-read", "tiered-outage-write"
    create(proc.bootstrap, topic)
    create(proc.bootstrap, fresh)
    produce(proc.bootstrap, topic, 400)
    wait_for("tiered", lambda: offsets(proc.bootstrap, topic)[-4] > 0)
    assert fetch_at(proc.bootstrap, topic, 0).error_code == 0
    with StoreOutage(remote):
        produce(proc.bootstrap, fresh, 400)       # produce goes on
        time.sleep(3)                             # many passes and retention checks
        seen = offsets(proc.bootstrap, fresh)
        assert seen[-4] == 0 and seen[-5] == -1   # nothing copied, nothing deleted
        local_dir = os.path.join(proc.data_dir, f"{fresh}-0")
        assert len([f for f in os.listdir(local_dir) if f.endswith(".log")]) > 6
        # a metric says why (and the broker's log warns)
        assert scrape(proc, "kproto_tiered_local_segments_held_back") > 0
        assert fetch_at(proc.bootstrap, fresh, 0).error_code == 0            # local reads go on
        # a read of remote data fails with an error, never with made-up data
        p = fetch_at(proc.bootstrap, topic, 0)
        assert p.error_code == ErrorCode.UNKNOWN_SERVER_ERROR and not p.records
        # a timestamp lookup in the tier: that partition's error; a local one beside it is answered
        from kproto.messages.list_offsets_request import ListOffsetsRequest as L
        from tests.wire_client import LIST_OFFSETS_V
        with WireClient(proc.bootstrap) as c:
            resp = c.call(L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name=t, partitions=[
                L.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=0)])
                for t in (topic, fresh)]), LIST_OFFSETS_V)
        answers = {t.name: (t.partitions[0].error_code, t.partitions[0].offset) for t in resp.topics}
        assert answers == {topic: (ErrorCode.UNKNOWN_SERVER_ERROR, -1), fresh: (0, 0)}
    # the store is back: copying resumes, local retention follows, remote reads work
    wait_for("copying resumed", lambda: offsets(proc.bootstrap, fresh)[-4] > 0, 40)
    assert fetch_at(proc.bootstrap, topic, 0).error_code == 0
    with WireClient(proc.bootstrap) as c:
        found = list_offset(c, topic, 0)
        assert (found.error_code, found.offset) == (0, 0)
    assert [o for o, _v in consume_all(proc.bootstrap, fresh, 400)] == list(range(400))
    assert scrape(proc, "kafka_server_brokertopicmetrics_remotefetcherrors_total") >= 1
    assert scrape(proc, "kafka_server_brokertopicmetrics_remotecopybytes_total") > 0


def test_corrupt_remote_object_is_reported_not_served(tiered):
    from kproto.errors import ErrorCode
    proc, remote = tiered
    topic = "tiered-corrupt"
    create(proc.bootstrap, topic)
    produce(proc.bootstrap, topic, 400)
    wait_for("tiered", lambda: offsets(proc.bootstrap, topic)[-4] > 0)
    first = sorted(os.path.join(d, f) for d, _s, fs in os.walk(remote) for f in fs
                   if d.split(os.sep)[-1].startswith(f"{topic}-0-") and f.endswith(".log"))[0]
    with open(first, "r+b") as f:
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0xFF]))
    p = fetch_at(proc.bootstrap, topic, 0)
    assert p.error_code == ErrorCode.CORRUPT_MESSAGE and not p.records
    with open(first, "r+b") as f:
        f.truncate(100)      # truncated: still an error
    p = fetch_at(proc.bootstrap, topic, 0)
    assert p.error_code == ErrorCode.CORRUPT_MESSAGE and not p.records


def test_total_retention_and_topic_deletion_remove_remote_data(tiered):
    proc, remote = tiered
    topic = "tiered-retention"
    create(proc.bootstrap, topic, retention_bytes=8 * SEGMENT_BYTES)
    produce(proc.bootstrap, topic, 600)
    # remote segments beyond retention.bytes expire: the log start offset moves up
    seen = wait_for("remote segments expired", lambda: (lambda o: o if o[-2] > 0 else None)(
        offsets(proc.bootstrap, topic)))
    assert seen[-2] < seen[-4]   # still a remote part
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    admin.alter_configs([ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={
        "retention.bytes": "-1", "local.retention.bytes": str(LOCAL_BYTES), "remote.storage.enable": "true",
        "segment.bytes": str(SEGMENT_BYTES)})])[ConfigResource(ConfigResource.Type.TOPIC, topic)].result(15)
    time.sleep(0.5)
    start = offsets(proc.bootstrap, topic)[-2]
    got = consume_all(proc.bootstrap, topic, 600 - start, start)
    assert [o for o, _v in got] == list(range(start, 600))

    def objects():
        return [f for d, _s, fs in os.walk(remote) for f in fs if d.split(os.sep)[-1].startswith(f"{topic}-0-")]
    assert objects()
    admin.delete_topics([topic])[topic].result(15)
    wait_for("remote data deleted with the topic", lambda: not objects())


def test_turning_tiering_off_with_delete_on_disable_deletes_the_remote_data(tiered):
    """KIP-950: remote.storage.enable=false needs remote.log.delete.on.disable=true; the remote
    segments then go and the log starts at the local log start."""
    import confluent_kafka
    proc, remote = tiered
    topic = "tiered-disable"
    create(proc.bootstrap, topic)
    produce(proc.bootstrap, topic, 400)
    wait_for("tiered", lambda: offsets(proc.bootstrap, topic)[-4] > 0)
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    with pytest.raises(confluent_kafka.KafkaException, match="without deleting remote data"):
        admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            confluent_kafka.admin.ConfigEntry("remote.storage.enable", "false",
                                              incremental_operation=confluent_kafka.admin.AlterConfigOpType.SET)])])[
            res].result(15)
    admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        confluent_kafka.admin.ConfigEntry(k, v, incremental_operation=confluent_kafka.admin.AlterConfigOpType.SET)
        for k, v in (("remote.storage.enable", "false"), ("remote.log.delete.on.disable", "true"))])])[res].result(15)

    def objects():
        return [f for d, _s, fs in os.walk(remote) for f in fs if d.split(os.sep)[-1].startswith(f"{topic}-0-")]
    wait_for("remote data deleted", lambda: not objects())
    seen = offsets(proc.bootstrap, topic)
    assert seen[-2] == seen[-4] > 0 and seen[-5] == -1


def test_the_tier_is_readable_after_a_restart(tiered):
    """The remote segment list is rebuilt from __remote_log_metadata when the broker starts."""
    proc, _remote = tiered
    topic = "tiered-restart"
    create(proc.bootstrap, topic)
    produce(proc.bootstrap, topic, 400)
    wait_for("tiered", lambda: offsets(proc.bootstrap, topic)[-4] > 0)
    proc.stop()
    proc.start()
    wait_for("the remote log start known again", lambda: offsets(proc.bootstrap, topic)[-2] == 0)
    assert [o for o, _v in consume_all(proc.bootstrap, topic, 400)] == list(range(400))


def test_remote_fetch_quota_answers_no_records_while_exceeded(tiered):
    proc, _remote = tiered
    topic = "tiered-fetch-quota"
    create(proc.bootstrap, topic)
    produce(proc.bootstrap, topic, 400)
    wait_for("tiered", lambda: offsets(proc.bootstrap, topic)[-4] > 0)
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "1")

    def quota(value):
        import confluent_kafka
        op = (confluent_kafka.admin.AlterConfigOpType.SET if value else confluent_kafka.admin.AlterConfigOpType.DELETE)
        admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
            confluent_kafka.admin.ConfigEntry("remote.log.manager.fetch.max.bytes.per.second", value or "",
                                              incremental_operation=op)])])[res].result(15)
    quota("1")
    try:
        time.sleep(0.5)
        first = fetch_at(proc.bootstrap, topic, 0)
        assert first.error_code == 0 and first.records            # the first read takes the window's quota
        second = fetch_at(proc.bootstrap, topic, 0)
        assert second.error_code == 0 and not second.records      # over it: no records
    finally:
        quota(None)
    time.sleep(1.5)
    assert fetch_at(proc.bootstrap, topic, 0).records


def test_with_copying_disabled_local_retention_deletes_as_usual(tiered):
    """KIP-950: remote.log.copy.disable=true (local retention then equals the total): nothing is
    copied and local segments go by retention, not held back for a copy that never comes."""
    proc, remote = tiered
    topic = "tiered-copy-disabled"
    create(proc.bootstrap, topic, remote_log_copy_disable="true", local_retention_bytes=-2,
           retention_bytes=LOCAL_BYTES)
    produce(proc.bootstrap, topic, 400)
    wait_for("local retention", lambda: offsets(proc.bootstrap, topic)[-2] > 0)
    seen = offsets(proc.bootstrap, topic)
    assert seen[-5] == -1 and seen[-2] == seen[-4]
    assert not [f for d, _s, fs in os.walk(remote) for f in fs if d.split(os.sep)[-1].startswith(f"{topic}-0-")]


def test_read_committed_drops_aborted_transactions_in_the_tier(tiered):
    """The remote segments' transaction indexes tell a read_committed consumer what to drop."""
    from confluent_kafka import Consumer
    proc, _remote = tiered
    topic = "tiered-txn"
    create(proc.bootstrap, topic)
    p = Producer({"bootstrap.servers": proc.bootstrap, "transactional.id": "tiered-txn", "linger.ms": 5,
                  "batch.size": 4096})
    p.init_transactions(15)
    committed = []
    for round_ in range(8):
        for outcome in ("commit", "abort"):
            p.begin_transaction()
            for i in range(40):
                v = b"%s-%d-%d-" % (outcome.encode(), round_, i) + VALUE
                p.produce(topic, value=v)
                if outcome == "commit":
                    committed.append(v)
            if outcome == "commit":
                p.commit_transaction(15)
            else:
                p.flush(15)   # the aborted records reach the log (abort would drop unsent ones)
                p.abort_transaction(15)
    wait_for(lambda: f"tiered: {offsets(proc.bootstrap, topic)}", lambda: offsets(proc.bootstrap, topic)[-4] > 400)
    c = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "tiered-txn", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(committed) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        time.sleep(0.5)
        extra = c.consume(100, 1.0)
    finally:
        c.close()
    assert got == committed and not [m for m in extra if not m.error()]


def remote_segments(remote: str, topic: str) -> list[int]:
    """The start offsets of the topic's partition 0 segments in the local-directory store."""
    return sorted(int(f.split("-")[0]) for d, _s, fs in os.walk(remote) for f in fs
                  if d.split(os.sep)[-1].startswith(f"{topic}-0-") and f.endswith(".log"))


def test_delete_records_into_the_tier_moves_the_log_start_and_deletes_remote_segments_below(tiered):
    """As Kafka 3.9: DeleteRecords may move the log start below the local log start; EARLIEST is
    then that offset, a fetch below it is OFFSET_OUT_OF_RANGE, the remote segments wholly below it
    are deleted, and the log start survives a restart (the log start offset checkpoint)."""
    from kproto.errors import ErrorCode
    from tests.wire_client import delete_records
    proc, remote = tiered
    topic = "tiered-delete-records"
    create(proc.bootstrap, topic)
    produce(proc.bootstrap, topic, 400)
    wait_for("tiered", lambda: offsets(proc.bootstrap, topic)[-4] > 0)
    starts = remote_segments(remote, topic)
    target = starts[2] + 3                       # inside the third remote segment
    assert target < offsets(proc.bootstrap, topic)[-4]
    with WireClient(proc.bootstrap) as c:
        p = delete_records(c, topic, target)
        assert (p.error_code, p.low_watermark) == (0, target)
    assert offsets(proc.bootstrap, topic)[-2] == target
    assert fetch_at(proc.bootstrap, topic, target - 1).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    wait_for(lambda: f"remote segments below {target}: {remote_segments(remote, topic)}",
             lambda: remote_segments(remote, topic)[0] == starts[2])
    assert [o for o, _v in consume_all(proc.bootstrap, topic, 400 - target, target)] == list(range(target, 400))
    proc.stop()
    proc.start()
    seen = wait_for(lambda: f"the tier known again: {offsets(proc.bootstrap, topic)}",
                    lambda: (lambda o: o if o[-2] < o[-4] else None)(offsets(proc.bootstrap, topic)))
    assert seen[-2] == target


def test_a_remote_segment_off_the_leader_epoch_lineage_below_the_log_start_is_deleted(tiered):
    """A segment another leader copied (its leader epochs are not this partition's history, e.g.
    after an unclean election) is never read; once it lies below the log start the leader deletes
    it, as Kafka's RLMExpirationTask, and EARLIEST never names it. The segment is announced in
    __remote_log_metadata here as a deposed leader would have."""
    import uuid

    from broker.tiered import metadata_records as mr
    from broker.tiered.keys import partition_prefix
    from tests.wire_client import metadata
    proc, remote = tiered
    topic = "tiered-off-lineage"
    create(proc.bootstrap, topic, retention_ms=1_800_000)
    produce(proc.bootstrap, topic, 300, ts0=int(time.time() * 1000) - 3_600_000)   # past retention.ms
    produce(proc.bootstrap, topic, 300)
    start = wait_for("remote segments expired", lambda: offsets(proc.bootstrap, topic)[-2])
    with WireClient(proc.bootstrap) as c:
        tp = mr.TopicIdPartition(topic, metadata(c, topic).topic_id, 0)
    sid, now = uuid.uuid4(), int(time.time() * 1000)
    # offsets 0-9 in leader epoch 5: an epoch this partition (leader epoch 0) never had
    seg = mr.SegmentMetadata(tp, sid, 0, 9, 2, now, now, [(5, 0)], 100, mr.COPY_SEGMENT_STARTED)
    obj = os.path.join(remote, partition_prefix(topic, 0, tp.topic_id),
                       f"{0:020d}-{mr.uuid_to_kafka(sid)}.log")
    with open(obj, "wb") as f:
        f.write(b"x" * 100)
    p = Producer({"bootstrap.servers": proc.bootstrap})
    for record in (seg, mr.SegmentUpdate(tp, sid, 2, now, mr.COPY_SEGMENT_FINISHED)):
        p.produce("__remote_log_metadata", value=mr.encode(record), partition=mr.metadata_partition(tp, 3))
    assert p.flush(10) == 0
    # (retention.ms would never delete it: its records are new; nor let it hold back the others)
    wait_for("the off-lineage segment deleted", lambda: not os.path.exists(obj), 15)
    assert offsets(proc.bootstrap, topic)[-2] == start


def test_remote_reads_past_their_time_limit_answer_as_kafka(tiered):
    """A store that does not answer: a timestamp lookup in the tier answers REQUEST_TIMED_OUT after
    the request's TimeoutMs (v10), else after remote.list.offsets.request.timeout.ms (Kafka 4,
    KIP-1075), the other partitions of the request answered; a remote fetch answers no records
    and no error after remote.fetch.max.wait.ms (Kafka's DelayedRemoteFetch). The store's object
    is a FIFO here: reading it blocks until a writer comes."""
    from kproto.errors import ErrorCode
    from kproto.messages.list_offsets_request import ListOffsetsRequest as L
    proc, remote = tiered
    topic, other = "tiered-slow-store", "tiered-slow-store-other"
    create(proc.bootstrap, other)
    create(proc.bootstrap, topic)
    ts0 = int(time.time() * 1000) - 3_600_000
    produce(proc.bootstrap, topic, 400, ts0=ts0)
    produce(proc.bootstrap, other, 10, ts0=ts0)
    wait_for("tiered", lambda: offsets(proc.bootstrap, topic)[-4] > 0)
    first = sorted(os.path.join(d, f) for d, _s, fs in os.walk(remote) for f in fs
                   if d.split(os.sep)[-1].startswith(f"{topic}-0-") and f.endswith(".log"))[0]
    os.rename(first, first + ".saved")
    os.mkfifo(first)

    def lookup(version: int, timeout_ms: int = 0):
        with WireClient(proc.bootstrap) as c:
            started = time.monotonic()
            resp = c.call(L(replica_id=-1, isolation_level=0, timeout_ms=timeout_ms, topics=[
                L.ListOffsetsTopic(name=t, partitions=[L.ListOffsetsPartition(
                    partition_index=0, current_leader_epoch=-1, timestamp=ts0 + 5)]) for t in (topic, other)]),
                version)
            took = time.monotonic() - started
        return {t.name: (t.partitions[0].error_code, t.partitions[0].offset) for t in resp.topics}, took
    try:
        answers, took = lookup(10, timeout_ms=500)
        assert answers == {topic: (ErrorCode.REQUEST_TIMED_OUT, -1), other: (0, 1)}
        assert 0.4 < took < 2.9, took                # the request's 500 ms, not the broker's 3 s
        answers, took = lookup(9)                    # no TimeoutMs: the broker's setting (3 s)
        assert answers == {topic: (ErrorCode.REQUEST_TIMED_OUT, -1), other: (0, 1)}
        assert 2.9 < took < 15, took
        started = time.monotonic()
        p = fetch_at(proc.bootstrap, topic, 0)       # remote.fetch.max.wait.ms: 500 ms
        assert (p.error_code, bytes(p.records or b"")) == (0, b"") and time.monotonic() - started < 10
        assert scrape(proc, "kafka_server_delayedremotelistoffsetsmetrics_expirespersec_total") >= 2
        assert scrape(proc, "kafka_server_delayedremotefetchmetrics_expirespersec_total") >= 1
    finally:
        os.close(os.open(first, os.O_WRONLY | os.O_NONBLOCK))   # the blocked readers see an end
        os.replace(first + ".saved", first)
    with WireClient(proc.bootstrap) as c:
        found = list_offset(c, topic, ts0 + 5)
        assert (found.error_code, found.offset) == (0, 1)


def test_describe_log_dirs_reports_the_local_size_of_a_tiered_partition(tiered):
    """Kafka 3.9 (and 4.3) reports UnifiedLog.size, the local segments only, in DescribeLogDirs /
    kafka-log-dirs.sh, not what remote storage holds; so does kproto."""
    import json
    import subprocess

    from kproto.messages.describe_log_dirs_request import DescribableLogDirTopic, DescribeLogDirsRequest
    proc, remote = tiered
    topic = "tiered-log-dirs"
    create(proc.bootstrap, topic)
    produce(proc.bootstrap, topic, 400)
    wait_for("tiered", lambda: offsets(proc.bootstrap, topic)[-4] > 0)
    local_dir = os.path.join(proc.data_dir, f"{topic}-0")

    def sizes():
        with WireClient(proc.bootstrap) as c:
            r = c.call(DescribeLogDirsRequest(topics=[DescribableLogDirTopic(topic=topic, partitions=[0])]), 4)
        local = sum(os.path.getsize(os.path.join(local_dir, f)) for f in os.listdir(local_dir) if f.endswith(".log"))
        return r.results[0].topics[0].partitions[0].partition_size, local
    reported = wait_for(lambda: f"the local size: {sizes()}",
                        lambda: (lambda s: s[0] if s[0] == s[1] else None)(sizes()))
    in_remote = sum(os.path.getsize(os.path.join(d, f)) for d, _s, fs in os.walk(remote) for f in fs
                    if d.split(os.sep)[-1].startswith(f"{topic}-0-") and f.endswith(".log"))
    assert 0 < reported < in_remote
    kafka_home = os.environ.get("KAFKA_HOME")
    if kafka_home:   # the same figure through Kafka's own tool
        out = subprocess.run([os.path.join(kafka_home, "bin", "kafka-log-dirs.sh"), "--bootstrap-server",
                              proc.bootstrap, "--describe", "--topic-list", topic],
                             capture_output=True, text=True, timeout=120).stdout
        report = json.loads(out.strip().splitlines()[-1])
        (part,) = [p for d in report["brokers"][0]["logDirs"] for p in d["partitions"]]
        assert (part["partition"], part["size"]) == (f"{topic}-0", sizes()[1])

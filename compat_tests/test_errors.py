"""Error codes for bad requests, against the rows of kafka-observations/error-cases.csv.

Each raw case sends the request the row describes, at the row's API version,
through kafka-python's protocol codec (not kproto's), and compares the error
code (and, where the row records one without volatile names, the message).
Client cases show the same errors as the Java and kafka-python clients
report them.
"""
from __future__ import annotations

import ast
import re
import struct
import time
import uuid

import pytest

from compat_tests import observations, wire

RECORDS = 10


def _message(row) -> str | None:
    m = re.match(r"message=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")", row["notes"])
    return ast.literal_eval(m.group(1)) if m else None


@pytest.fixture
def ten(target, topic, clients):
    """A 1-partition topic holding offsets 0..9."""
    target.create_topic(topic, 1)
    records = [{"key": None, "value": f"r{i}", "headers": [], "partition": 0, "timestamp": None}
               for i in range(RECORDS)]
    clients.produce("confluent", target.bootstrap, topic, records)
    return topic


# ------------------------------------------------------------------ raw cases

def _produce(target, topic, partition=0, acks=-1, records=None, timeout_ms=10000):
    records = records if records is not None else wire.record_batch([(None, b"x")])
    resp = wire.call(target.bootstrap, "Produce", 9, transactional_id=None, acks=acks, timeout_ms=timeout_ms,
                     topic_data=[{"name": topic, "partition_data": [{"index": partition, "records": records}]}])
    return resp["responses"][0]["partition_responses"][0]["error_code"], None


def _fetch(target, topic, offset, partition=0, leader_epoch=-1, version=12, topic_id=None):
    topic_entry = {"topic_id": topic_id} if version >= 13 else {"topic": topic}
    resp = wire.call(target.bootstrap, "Fetch", version, replica_id=-1, max_wait_ms=100, min_bytes=1,
                     max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                     topics=[{**topic_entry, "partitions": [{"partition": partition,
                                                              "current_leader_epoch": leader_epoch,
                                                              "fetch_offset": offset, "log_start_offset": -1,
                                                              "partition_max_bytes": 1 << 20}]}],
                     forgotten_topics_data=[], rack_id="")
    return resp["responses"][0]["partitions"][0]["error_code"], None


def _fetch_session(target, topic, session_id, epoch):
    resp = wire.call(target.bootstrap, "Fetch", 12, replica_id=-1, max_wait_ms=100, min_bytes=1,
                     max_bytes=1 << 20, isolation_level=0, session_id=session_id, session_epoch=epoch,
                     topics=[{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                               "fetch_offset": 0, "log_start_offset": -1,
                                                               "partition_max_bytes": 1 << 20}]}],
                     forgotten_topics_data=[], rack_id="")
    return resp["error_code"], None


def _delete_topic(target, name):
    resp = wire.call(target.bootstrap, "DeleteTopics", 6, timeout_ms=10000,
                     topics=[{"name": name, "topic_id": uuid.UUID(int=0)}])
    r = resp["responses"][0]
    return r["error_code"], r["error_message"]


def _create_partitions(target, topic, count):
    resp = wire.call(target.bootstrap, "CreatePartitions", 3, timeout_ms=10000, validate_only=False,
                     topics=[{"name": topic, "count": count, "assignments": None}])
    return resp["results"][0]["error_code"], None


def _alter_topic_config(target, topic, name, value):
    resp = wire.call(target.bootstrap, "IncrementalAlterConfigs", 1, validate_only=False, resources=[{
        "resource_type": 2, "resource_name": topic,
        "configs": [{"name": name, "config_operation": 0, "value": value}]}])
    r = resp["responses"][0]
    return r["error_code"], r["error_message"]


def _list_offsets(target, topic, partition=0, timestamp=-1, leader_epoch=-1):
    resp = wire.call(target.bootstrap, "ListOffsets", 9, replica_id=-1, isolation_level=0, timeout_ms=10000,
                     topics=[{"name": topic, "partitions": [{"partition_index": partition,
                                                             "current_leader_epoch": leader_epoch,
                                                             "timestamp": timestamp}]}])
    return resp["topics"][0]["partitions"][0]["error_code"], None


def _delete_records(target, topic, offset):
    resp = wire.call(target.bootstrap, "DeleteRecords", 2, timeout_ms=10000,
                     topics=[{"name": topic, "partitions": [{"partition_index": 0, "offset": offset}]}])
    return resp["topics"][0]["partitions"][0]["error_code"], None


def _create(target, name, partitions=1, configs=None, version=7):
    resp = wire.call(target.bootstrap, "CreateTopics", version, timeout_ms=10000, validate_only=False, topics=[{
        "name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}])
    t = resp["topics"][0]
    return t["error_code"], t["error_message"]


def _describe_configs(target, topic):
    resp = wire.call(target.bootstrap, "DescribeConfigs", 4, include_synonyms=True, include_documentation=False,
                     resources=[{"resource_type": 2, "resource_name": topic, "configuration_keys": None}])
    return resp["results"][0]["error_code"], None


def _corrupt_crc(batch: bytes) -> bytes:
    # CRC sits at bytes 17..21 of a v2 batch
    crc = struct.unpack_from(">I", batch, 17)[0]
    return batch[:17] + struct.pack(">I", crc ^ 0xFFFF) + batch[21:]


MISSING = "compat-no-such-topic"

# (row of error-cases.csv, API the case needs, request) ; the request gets
# (target, topic holding offsets 0..9) and returns (error code, message).
RAW_CASES = [
    ("produce to unknown topic (Produce never auto-creates; broker auto.create.topics.enable=true)", "Produce",
     lambda t, topic: _produce(t, MISSING)),
    ("produce to partition 5 of a 1-partition topic", "Produce", lambda t, topic: _produce(t, topic, partition=5)),
    ("produce a 1,100,000-byte record (topic default max.message.bytes 1048588)", "Produce",
     lambda t, topic: _produce(t, topic, records=wire.record_batch([(None, b"x" * 1_100_000)]))),
    ("produce with acks=2", "Produce", lambda t, topic: _produce(t, topic, acks=2)),
    ("produce with acks=-2", "Produce", lambda t, topic: _produce(t, topic, acks=-2)),
    ("produce a v2 batch with the CRC field altered", "Produce",
     lambda t, topic: _produce(t, topic, records=_corrupt_crc(wire.record_batch([(b"k", b"v")])))),
    ("produce two record batches in one partition entry (Produce v3+ allows exactly one batch)", "Produce",
     lambda t, topic: _produce(t, topic, records=wire.record_batch([(None, b"a")]) + wire.record_batch([(None, b"b")]))),
    ("produce a magic-1 (legacy) message set with Produce v9", "Produce",
     lambda t, topic: _produce(t, topic, records=wire.record_batch([(None, b"old")], magic=1))),
    ("produce a truncated batch (last 5 bytes cut, batchLength unchanged)", "Produce",
     lambda t, topic: _produce(t, topic, records=wire.record_batch([(b"k", b"value")])[:-5])),
    ("produce a batch flagged zstd (attributes=4) whose payload is not zstd", "Produce",
     lambda t, topic: _produce(t, topic, records=wire.with_attributes(wire.record_batch([(b"k", b"v")]), 4))),
    ("produce a batch flagged gzip (attributes=1) whose payload is not gzip", "Produce",
     lambda t, topic: _produce(t, topic, records=wire.with_attributes(wire.record_batch([(b"k", b"v")]), 1))),
    ("produce a transactional-flagged batch with producerId -1 and no TransactionalId", "Produce",
     lambda t, topic: _produce(t, topic, records=wire.with_attributes(wire.record_batch([(b"k", b"v")]), 0x10))),
    ("fetch offset 11 (high watermark 10; beyond end)", "Fetch", lambda t, topic: _fetch(t, topic, 11)),
    ("fetch offset 1000000", "Fetch", lambda t, topic: _fetch(t, topic, 1_000_000)),
    ("fetch offset 10 (exactly the high watermark)", "Fetch", lambda t, topic: _fetch(t, topic, 10)),
    ("fetch partition 3 of a 1-partition topic (by name)", "Fetch", lambda t, topic: _fetch(t, topic, 0, partition=3)),
    ("fetch unknown topic by name", "Fetch", lambda t, topic: _fetch(t, MISSING, 0)),
    ("fetch unknown topic id", "Fetch", lambda t, topic: _fetch(t, None, 0, version=16, topic_id=uuid.uuid4())),
    ("fetch with CurrentLeaderEpoch 7 (partition leader epoch is 0)", "Fetch",
     lambda t, topic: _fetch(t, topic, 0, leader_epoch=7)),
    ("fetch with SessionId 12345 / SessionEpoch 3 (no such fetch session)", "Fetch",
     lambda t, topic: _fetch_session(t, topic, 12345, 3)),
    ("fetch with SessionId 0 / SessionEpoch 5", "Fetch", lambda t, topic: _fetch_session(t, topic, 0, 5)),
    ("list offsets of unknown topic (latest)", "ListOffsets", lambda t, topic: _list_offsets(t, MISSING)),
    ("list offsets of partition 4 of a 1-partition topic", "ListOffsets",
     lambda t, topic: _list_offsets(t, topic, partition=4)),
    ("list offsets with CurrentLeaderEpoch 7 (leader epoch is 0)", "ListOffsets",
     lambda t, topic: _list_offsets(t, topic, leader_epoch=7)),
    ("delete records up to offset 50 (beyond high watermark 10)", "DeleteRecords",
     lambda t, topic: _delete_records(t, topic, 50)),
    ("delete records on unknown topic", "DeleteRecords", lambda t, topic: _delete_records(t, MISSING, 1)),
    ("create topic that already exists", "CreateTopics", lambda t, topic: (_create(t, topic)[0], None)),
    ("create with NumPartitions=0", "CreateTopics", lambda t, topic: _create(t, topic + "-p0", partitions=0)),
    ("create with invalid config value retention.ms=abc", "CreateTopics",
     lambda t, topic: _create(t, topic + "-bad", configs={"retention.ms": "abc"})),
    ("create with unknown config name no.such.config=1", "CreateTopics",
     lambda t, topic: _create(t, topic + "-unk", configs={"no.such.config": "1"})),
    ('create with invalid name "bad/name"', "CreateTopics", lambda t, topic: (_create(t, "bad/name")[0], None)),
    ("describe configs of unknown topic", "DescribeConfigs", lambda t, topic: _describe_configs(t, MISSING)),
    ("delete unknown topic by name", "DeleteTopics", lambda t, topic: _delete_topic(t, MISSING)),
    ("create partitions: same count 3 -> 3", "CreatePartitions",
     lambda t, topic: (_create(t, topic + "-3p", partitions=3)[0] or _create_partitions(t, topic + "-3p", 3)[0],
                       None)),
    ("create partitions on unknown topic", "CreatePartitions", lambda t, topic: _create_partitions(t, MISSING, 2)),
    ("incremental alter topic config: unknown name", "IncrementalAlterConfigs",
     lambda t, topic: _alter_topic_config(t, topic, "no.such.config", "1")),
    ("incremental alter topic config: retention.ms=abc", "IncrementalAlterConfigs",
     lambda t, topic: _alter_topic_config(t, topic, "retention.ms", "abc")),
]


@pytest.mark.compat("error: {case}", client="protocol")
@pytest.mark.parametrize("case", [c[0] for c in RAW_CASES],
                         ids=[re.sub(r"[^a-z0-9]+", "-", c[0].lower())[:60].strip("-") for c in RAW_CASES])
def test_error_case(target, compat, ten, case):
    (_, api, request), = [c for c in RAW_CASES if c[0] == case]
    row = observations.error_case(case)
    target.require(api, version=int(row["version"]))
    code, message = request(target, ten)
    expected_message = _message(row)
    obs = {"error_code": code}
    recorded = {"error_code": int(row["error_code"])}
    if message is not None and expected_message is not None:
        obs["message"] = message
        recorded["message"] = expected_message
    compat.observe(obs, recorded=recorded)


@pytest.mark.compat("error: produce a 20000-byte record to a topic with max.message.bytes=10000", client="protocol")
def test_too_large_topic_limit(target, compat, topic):
    """A topic's own max.message.bytes bounds a record, as the row with max.message.bytes=10000."""
    row = observations.error_case("produce a 20000-byte record to a topic with max.message.bytes=10000")
    target.create_topic(topic, 1, {"max.message.bytes": "10000"})
    code, _ = _produce(target, topic, records=wire.record_batch([(None, b"x" * 20000)]))
    compat.observe({"error_code": code}, recorded={"error_code": int(row["error_code"])})


# ---------------------------------------------------------------- clients

@pytest.mark.compat("errors as the Java client reports them", client="java")
def test_java_errors(target, java_client, compat, ten):
    steps = [
        {"op": "describe_topics", "topics": [MISSING]},
        {"op": "produce", "topic": ten, "config": {"max.request.size": "2000000", "retries": "0",
                                                 "delivery.timeout.ms": "15000", "request.timeout.ms": "10000"},
         "records": [{"key": None, "value_size": 1_100_000, "partition": 0}]},
        {"op": "consume_assign", "topic": ten, "partitions": [0], "seek": {"0": 50}, "max_records": 1,
         "config": {"auto.offset.reset": "none"}, "timeout_ms": 10000},
        {"op": "list_offsets", "topic": MISSING, "partitions": [0], "spec": "latest"},
    ]
    if target.supports("CreateTopics"):
        steps.append({"op": "create_topics", "topics": [{"name": ten + "-bad", "partitions": 1,
                                                         "configs": {"retention.ms": "abc"}}]})
    results = java_client.run(target.bootstrap, steps)
    unknown, too_large, out_of_range, offsets_missing = results[:4]
    obs = {
        "describe unknown topic": unknown["topics"][MISSING]["error"]["name"],
        "record over max.message.bytes": too_large["records"][0].get("error", {}).get("name"),
        # the consumer's own exception class (not an ApiException): OFFSET_OUT_OF_RANGE
        "fetch beyond the end, auto.offset.reset=none": out_of_range.get("error", {}).get("class"),
        "list offsets of unknown topic": (offsets_missing.get("error") or
                                          offsets_missing["partitions"]["0"].get("error", {})).get("name"),
    }
    expected = {
        "describe unknown topic": "UNKNOWN_TOPIC_OR_PARTITION",
        "record over max.message.bytes": "MESSAGE_TOO_LARGE",
        "fetch beyond the end, auto.offset.reset=none": "OffsetOutOfRangeException",
        "list offsets of unknown topic": "UNKNOWN_TOPIC_OR_PARTITION",
    }
    if len(results) > 4:
        obs["create topic with retention.ms=abc"] = results[4]["topics"][ten + "-bad"]["error"]["name"]
        expected["create topic with retention.ms=abc"] = "INVALID_CONFIG"
    compat.observe(obs, expected=expected)


@pytest.mark.compat("errors as librdkafka reports them", client="confluent")
def test_confluent_errors(target, compat, ten):
    from confluent_kafka import KafkaError, KafkaException, Producer
    errors = []
    p = Producer({"bootstrap.servers": target.bootstrap, "message.max.bytes": 2_000_000, "retries": 0,
                  "message.timeout.ms": 15000})
    p.produce(ten, value=b"x" * 1_100_000, partition=0, on_delivery=lambda err, msg: errors.append(err))
    try:
        p.produce(ten, value=b"y", partition=7, on_delivery=lambda err, msg: errors.append(err))
    except KafkaException as e:
        # the topic's metadata (created by the first produce) can arrive before this call: librdkafka
        # then refuses the unknown partition at once instead of through the delivery report
        errors.append(e.args[0])
    p.flush(20)
    names = sorted(KafkaError(e.code()).name() if e is not None else None for e in errors)
    compat.observe(names, expected=sorted(["MSG_SIZE_TOO_LARGE", "_UNKNOWN_PARTITION"]))


@pytest.mark.compat("idempotent producer: duplicates, sequence gaps, epochs", client="protocol")
def test_idempotent_sequences(target, compat, topic):
    """The error-cases.csv rows "idempotent produce ...", in their order, on a fresh topic."""
    target.require("InitProducerId", "Produce")
    target.create_topic(topic, 1)
    for _ in range(50):
        init = wire.call(target.bootstrap, "InitProducerId", 5, transactional_id=None,
                         transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1)
        # a fresh Kafka answers COORDINATOR_LOAD_IN_PROGRESS / _NOT_AVAILABLE
        # for a moment: clients retry those
        if init["error_code"] not in (14, 15):
            break
        time.sleep(0.2)
    assert init["error_code"] == 0, init
    pid, epoch = init["producer_id"], init["producer_epoch"]

    def send(seq, ep=None, producer=None):
        batch = wire.record_batch([(None, b"i")], producer_id=pid if producer is None else producer,
                                  producer_epoch=epoch if ep is None else ep, base_sequence=seq)
        resp = wire.call(target.bootstrap, "Produce", 9, transactional_id=None, acks=-1, timeout_ms=10000,
                         topic_data=[{"name": topic, "partition_data": [{"index": 0, "records": batch}]}])
        p = resp["responses"][0]["partition_responses"][0]
        return [p["error_code"], p["base_offset"] if p["error_code"] == 0 else None]

    steps = [
        ("idempotent produce seq 0 (first)", lambda: send(0)),
        ("idempotent produce seq 0 again (duplicate of the last batch)", lambda: send(0)),
        ("idempotent produce seq 5 when 1 is expected (gap)", lambda: send(5)),
        ("idempotent produce seq 1 (next expected)", lambda: send(1)),
        ("idempotent produce with epoch+1 and seq 3 (new epoch must start at seq 0)", lambda: send(3, epoch + 1)),
        ("idempotent produce with epoch+1 and seq 0", lambda: send(0, epoch + 1)),
        ("idempotent produce with the old epoch after the bump", lambda: send(2, epoch)),
        ("idempotent produce with a never-allocated producer id, seq 7", lambda: send(7, 0, pid + 100000)),
    ]
    obs, recorded = [], []
    for case, step in steps:
        row = observations.error_case(case)
        obs.append([case, *step()])
        # the recorded topic had one record before these; base offsets here start at 0
        m = re.search(r"BaseOffset=(\d+)", row["notes"])
        recorded.append([case, int(row["error_code"]), int(m.group(1)) - 1 if m else None])
    compat.observe(obs, recorded=recorded)


@pytest.mark.compat("log start offset after DeleteRecords: ListOffsets -1/-2/-3/-4/-5, Fetch below it",
                    client="protocol")
def test_after_delete_records(target, compat, topic):
    """The error-cases.csv rows recorded on a partition holding 0..9 after delete-records to 5.

    As there, one record per batch with rising timestamps, so the newest
    record (offset 9) has the largest timestamp.
    """
    target.require("DeleteRecords", "ListOffsets", "Fetch")
    target.create_topic(topic, 1)
    ten = topic
    for i in range(RECORDS):
        assert _produce(target, ten, records=wire.record_batch([(None, b"r%d" % i)],
                                                                timestamp=1_700_000_000_000 + i))[0] == 0
    deleted = wire.call(target.bootstrap, "DeleteRecords", 2, timeout_ms=10000,
                        topics=[{"name": ten, "partitions": [{"partition_index": 0, "offset": 5}]}])
    p = deleted["topics"][0]["partitions"][0]
    obs = {"setup: delete records before offset 5 on a partition holding offsets 0..9":
           f"{p['error_code']} LowWatermark={p['low_watermark']}"}

    def list_offsets(ts):
        resp = wire.call(target.bootstrap, "ListOffsets", 9, replica_id=-1, isolation_level=0, timeout_ms=10000,
                         topics=[{"name": ten, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                                "timestamp": ts}]}])
        r = resp["topics"][0]["partitions"][0]
        return f"{r['error_code']} Offset={r['offset']}"

    def fetch(offset):
        resp = wire.call(target.bootstrap, "Fetch", 12, replica_id=-1, max_wait_ms=100, min_bytes=1,
                         max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                         topics=[{"topic": ten, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                                 "fetch_offset": offset, "log_start_offset": -1,
                                                                 "partition_max_bytes": 1 << 20}]}],
                         forgotten_topics_data=[], rack_id="")
        r = resp["responses"][0]["partitions"][0]
        return (f"{r['error_code']} HighWatermark={r['high_watermark']} LastStableOffset={r['last_stable_offset']} "
                f"LogStartOffset={r['log_start_offset']}")

    cases = {
        "list offsets latest (-1) after delete-records": lambda: list_offsets(-1),
        "list offsets earliest (-2) after delete-records to 5": lambda: list_offsets(-2),
        "list offsets max-timestamp (-3)": lambda: list_offsets(-3),
        "list offsets earliest-local (-4)": lambda: list_offsets(-4),
        "list offsets timestamp -5 (earliest-pending-upload, needs v9)": lambda: list_offsets(-5),
        "fetch offset 2 (log start offset 5; before start)": lambda: fetch(2),
        "fetch offset 5 (log start offset)": lambda: fetch(5),
    }
    for case, run in cases.items():
        obs[case] = run()
    recorded = {}
    for case in obs:
        row = observations.error_case(case)
        fields = {"LowWatermark", "Offset", "HighWatermark", "LastStableOffset", "LogStartOffset"}
        values = " ".join(f"{k}={v}" for k, v in re.findall(r"(\w+)=(-?\d+)", row["notes"]) if k in fields)
        recorded[case] = f"{row['error_code']} {values}"
    compat.observe(obs, recorded=recorded)

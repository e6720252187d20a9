"""The admin CLI (`kproto topic|produce|consume|group|cluster|acl|user`, docs/cli.md) against a real
kproto process with an authorizer and a SASL listener: every command's JSON output, its exit code
and its one-line error with Kafka's error name; what it reports checked against what a real
client (confluent-kafka / librdkafka) sees of the same cluster. Commands run in-process through
`kproto`'s own entry point (broker.launch.cli.main); one test runs the command as a process."""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time

import pytest

from broker.launch.cli import main
from tests.security_helpers import SecureBroker

pytestmark = pytest.mark.timeout(180)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = SecureBroker(str(tmp_path_factory.mktemp("admin-cli")), None, listeners=("SASL_PLAINTEXT",), settings={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",   # the PLAINTEXT listener administers
        "auto.create.topics.enable": "false",
    })
    b.start()
    yield b
    b.stop()


class Result:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    @property
    def json(self):
        return json.loads(self.out)

    @property
    def lines(self):
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


def kp(broker, *argv, stdin: bytes = b"", bootstrap: str | None = None) -> Result:
    """`kproto ARGV -b BOOTSTRAP` in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    old_stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main([*argv, "-b", bootstrap or broker.bootstrap])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.stdin = old_stdin
    return Result(code, out.getvalue(), err.getvalue())


def ok(r: Result) -> Result:
    assert r.code == 0, (r.code, r.out, r.err)
    return r


def fails(r: Result, code: int, name: str) -> str:
    """The command failed with `code` and one stderr line naming Kafka's error `name`."""
    assert r.code == code, (r.code, r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kproto: ") and name in lines[0], r.err
    return lines[0]


# -- topics -----------------------------------------------------------------------------------

def test_topic_create_list_describe_alter_add_partitions_delete(broker):
    r = ok(kp(broker, "topic", "create", "cli-t", "-p", "3", "-c", "retention.ms=123456", "--format", "json"))
    assert r.json == [{"name": "cli-t", "created": True, "topic_id": r.json[0]["topic_id"], "partitions": 3,
                       "replication_factor": 1}]
    fails(kp(broker, "topic", "create", "cli-t"), 1, "TOPIC_ALREADY_EXISTS (topic cli-t)")
    assert ok(kp(broker, "topic", "create", "cli-t", "--if-not-exists", "--format", "json")).json == [
        {"name": "cli-t", "created": False}]
    fails(kp(broker, "topic", "create", "bad name!"), 1, "INVALID_TOPIC_EXCEPTION")

    listed = {t["name"]: t for t in ok(kp(broker, "topic", "list", "--format", "json")).json}
    assert listed["cli-t"]["partitions"] == 3 and listed["cli-t"]["replication_factor"] == 1

    ok(kp(broker, "produce", "cli-t", "-p", "1", stdin=b"x" * 100 + b"\n"))
    d = ok(kp(broker, "topic", "describe", "cli-t", "--format", "json")).json[0]
    assert [(p["partition"], p["leader"], p["replicas"], p["isr"], p["offline_replicas"]) for p in d["partitions"]] \
        == [(i, 1, [1], [1], []) for i in range(3)]
    sizes = [p["size_bytes"] for p in d["partitions"]]
    assert sizes[0] == 0 and sizes[1] > 100 and sizes[2] == 0       # DescribeLogDirs: one record in partition 1
    configs = {c["name"]: c for c in d["configs"]}
    assert configs["retention.ms"]["value"] == "123456"
    assert configs["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["cleanup.policy"]["source"] == "DEFAULT_CONFIG"
    table = ok(kp(broker, "topic", "describe", "cli-t")).out
    assert "PARTITION" in table and "ISR" in table and "retention.ms" in table and "DYNAMIC_TOPIC_CONFIG" in table

    ok(kp(broker, "topic", "alter-config", "cli-t", "--set", "max.message.bytes=2048", "--delete", "retention.ms"))
    configs = {c["name"]: c for c in ok(kp(broker, "topic", "describe", "cli-t", "--format", "json")).json[0]["configs"]}
    assert configs["max.message.bytes"]["value"] == "2048"
    assert configs["retention.ms"]["source"] == "DEFAULT_CONFIG"
    fails(kp(broker, "topic", "alter-config", "cli-t", "--set", "retention.ms=soon"), 1, "INVALID_CONFIG")

    ok(kp(broker, "topic", "add-partitions", "cli-t", "--count", "5"))
    assert ok(kp(broker, "topic", "describe", "cli-t", "--format", "json")).json[0]["partition_count"] == 5
    fails(kp(broker, "topic", "add-partitions", "cli-t", "--count", "2"), 1, "INVALID_PARTITIONS")

    assert ok(kp(broker, "topic", "delete", "cli-t", "--format", "json")).json == [{"name": "cli-t", "deleted": True}]
    fails(kp(broker, "topic", "delete", "cli-t"), 1, "UNKNOWN_TOPIC_OR_PARTITION (topic cli-t)")
    fails(kp(broker, "topic", "describe", "cli-t"), 1, "UNKNOWN_TOPIC_OR_PARTITION")


# -- produce / consume -----------------------------------------------------------------------

def test_produce_places_keys_as_librdkafka_murmur2_and_consume_reads_them_back(broker):
    from confluent_kafka import Consumer, Producer, TopicPartition
    ok(kp(broker, "topic", "create", "cli-keys", "-p", "4"))
    ok(kp(broker, "topic", "create", "cli-keys-ref", "-p", "4"))
    keys = [f"key-{i}" for i in range(40)]
    lines = "".join(f"{k}|value {i}\n" for i, k in enumerate(keys)).encode()
    r = ok(kp(broker, "produce", "cli-keys", "-k", "|", "-H", "src=cli", "-H", "run=1", "-z", "gzip",
              "--format", "json", stdin=lines))
    assert r.json["records"] == 40 and sum(p["records"] for p in r.json["partitions"]) == 40

    # the Java client's partitioner (librdkafka's murmur2_random) puts each key where the CLI did
    p = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    ref = {}
    for k in keys:
        p.produce("cli-keys-ref", key=k, value=b"", on_delivery=lambda e, m: ref.__setitem__(m.key().decode(),
                                                                                            m.partition()))
    assert p.flush(15) == 0
    got = ok(kp(broker, "consume", "cli-keys", "--from-beginning", "-e", "--format", "json")).lines
    assert len(got) == 40
    assert {g["key"]: g["partition"] for g in got} == ref
    assert {g["key"]: g["value"] for g in got} == {k: f"value {i}" for i, k in enumerate(keys)}
    assert all(g["headers"] == [["src", "cli"], ["run", "1"]] for g in got)

    # and librdkafka reads what the CLI wrote: same offsets, keys, headers
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cli-ref", "enable.auto.commit": False})
    c.assign([TopicPartition("cli-keys", i, 0) for i in range(4)])
    seen = {}
    deadline = time.monotonic() + 20
    while len(seen) < 40 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            seen[m.key().decode()] = (m.partition(), m.offset(), m.headers())
    c.close()
    assert {k: (g["partition"], g["offset"]) for g in got for k in [g["key"]]} == \
        {k: v[:2] for k, v in seen.items()}
    assert all(h == [("src", b"cli"), ("run", b"1")] for _p, _o, h in seen.values())


def test_consume_positions_formats_and_produce_options(broker, tmp_path):
    ok(kp(broker, "topic", "create", "cli-c", "-p", "2"))
    r = ok(kp(broker, "produce", "cli-c", "-p", "0", "--acks", "1", "--format", "json", stdin=b"a\nb\nc\n"))
    assert r.json["partitions"] == [{"partition": 0, "records": 3, "first_offset": 0, "last_offset": 2}]
    before = int(time.time() * 1000)
    time.sleep(0.05)
    data = tmp_path / "lines.txt"
    data.write_bytes(b'{"n": 1}\n\x00\x01\xff\nlast\n')
    ok(kp(broker, "produce", "cli-c", "-p", "0", "--file", str(data), "-z", "zstd"))
    ok(kp(broker, "produce", "cli-c", "-p", "1", "--acks", "0", stdin=b"fire-and-forget\n"))

    text = ok(kp(broker, "consume", "cli-c", "-p", "0", "--offset", "1", "-n", "2", "--print", "offset,value"))
    assert text.out == "1\tb\n2\tc\n"
    assert "Processed a total of 2 messages" in text.err
    j = ok(kp(broker, "consume", "cli-c", "-p", "0", "--from-timestamp", str(before), "-e", "--format", "json",
              "--decode", "json")).lines
    assert [x["offset"] for x in j] == [3, 4, 5]
    assert j[0]["value"] == {"n": 1} and j[1]["value"] == "0001ff" and j[2]["value"] == "last"
    hexed = ok(kp(broker, "consume", "cli-c", "-p", "0", "--offset", "0", "-n", "1", "--decode", "hex"))
    assert hexed.out == "61\n"
    # acks=0 gets no answer, yet the record is there; the end of the log is empty
    deadline = time.monotonic() + 10
    while True:
        got = ok(kp(broker, "consume", "cli-c", "-p", "1", "--from-beginning", "-e")).out
        if got or time.monotonic() > deadline:
            break
    assert got == "fire-and-forget\n"
    assert ok(kp(broker, "consume", "cli-c", "--offset", "latest", "-e")).out == ""
    assert ok(kp(broker, "consume", "cli-c", "-p", "0", "--offset", "latest", "--idle-timeout", "0.3")).out == ""

    fails(kp(broker, "consume", "cli-c", "-p", "7", "-e"), 1, "UNKNOWN_TOPIC_OR_PARTITION")
    fails(kp(broker, "consume", "nope", "-e"), 1, "UNKNOWN_TOPIC_OR_PARTITION")
    fails(kp(broker, "produce", "cli-c", "-k", ":", stdin=b"no separator\n"), 2, "no key separator")
    fails(kp(broker, "consume", "cli-c", "--print", "colour", "-e"), 2, "unknown field 'colour'")


def test_consume_skips_transaction_markers_and_read_committed_skips_aborted_records(broker):
    from confluent_kafka import Producer
    ok(kp(broker, "topic", "create", "cli-txn"))
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "cli-txn-producer"})
    p.init_transactions(30)
    for values, commit in ((["ok1", "ok2"], True), (["bad1", "bad2"], False), (["ok3"], True)):
        p.begin_transaction()
        for v in values:
            p.produce("cli-txn", value=v)
        p.flush(15)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    ok(kp(broker, "produce", "cli-txn", stdin=b"plain\n"))
    # the log holds 5 data records, 3 markers and the plain one (offsets 0-8)
    everything = ok(kp(broker, "consume", "cli-txn", "--from-beginning", "-e", "--print", "offset,value")).out
    assert everything == "0\tok1\n1\tok2\n3\tbad1\n4\tbad2\n6\tok3\n8\tplain\n"
    committed = ok(kp(broker, "consume", "cli-txn", "--from-beginning", "-e", "--isolation", "read_committed"))
    assert committed.out == "ok1\nok2\nok3\nplain\n"


# -- groups ----------------------------------------------------------------------------------

def _confluent_offsets(broker, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    res = admin.list_consumer_group_offsets([req])[group].result(15)
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def test_group_list_describe_seek_delete_against_a_live_consumer(broker):
    from confluent_kafka import Consumer
    ok(kp(broker, "topic", "create", "cli-g", "-p", "2"))
    ok(kp(broker, "produce", "cli-g", "-p", "0", stdin=b"".join(b"a%d\n" % i for i in range(6))))
    ok(kp(broker, "produce", "cli-g", "-p", "1", stdin=b"".join(b"b%d\n" % i for i in range(4))))
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cli-group", "client.id": "cli-client",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["cli-g"])
    seen = []
    deadline = time.monotonic() + 30
    while len(seen) < 7 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            seen.append(m)
            if len(seen) == 7:
                c.commit(message=None, asynchronous=False)
    try:
        listed = {g["group"]: g for g in ok(kp(broker, "group", "list", "--format", "json")).json}
        assert listed["cli-group"]["state"] == "Stable" and listed["cli-group"]["protocol_type"] == "consumer"
        d = ok(kp(broker, "group", "describe", "cli-group", "--format", "json")).json[0]
        assert d["state"] == "Stable" and len(d["members"]) == 1
        assert d["members"][0]["client_id"] == "cli-client"
        assert sorted(p for a in d["members"][0]["assignment"] for p in a["partitions"]) == [0, 1]
        committed = _confluent_offsets(broker, "cli-group", "cli-g", 2)
        rows = {r["partition"]: r for r in d["offsets"]}
        assert {p: r["current_offset"] for p, r in rows.items()} == committed
        assert {p: r["log_end_offset"] for p, r in rows.items()} == {0: 6, 1: 4}
        assert d["total_lag"] == 10 - 7 == sum(r["lag"] for r in rows.values())
        assert all(r["consumer_id"] == d["members"][0]["member_id"] for r in rows.values())
        assert "LOG-END-OFFSET" in ok(kp(broker, "group", "describe", "cli-group")).out
        line = fails(kp(broker, "group", "seek", "cli-group", "--topic", "cli-g", "--to-earliest"), 1,
                     "inactive")
        assert line == ("kproto: Assignments can only be reset if the group 'cli-group' is inactive, but the "
                        "current state is Stable.")
    finally:
        c.close()

    dry = ok(kp(broker, "group", "seek", "cli-group", "--topic", "cli-g", "--to-earliest", "--format", "json"))
    assert dry.json == {"executed": False, "offsets": [
        {"group": "cli-group", "topic": "cli-g", "partition": 0, "new_offset": 0},
        {"group": "cli-group", "topic": "cli-g", "partition": 1, "new_offset": 0}]}
    assert "--execute option is missing" in dry.err
    assert _confluent_offsets(broker, "cli-group", "cli-g", 2) == committed     # a dry run changes nothing
    ok(kp(broker, "group", "seek", "cli-group", "--topic", "cli-g:1", "--to-offset", "99", "--execute"))
    ok(kp(broker, "group", "seek", "cli-group", "--topic", "cli-g:0", "--shift-by", "-2", "--execute"))
    assert _confluent_offsets(broker, "cli-group", "cli-g", 2) == {0: committed[0] - 2, 1: 4}   # clamped to the end

    # consume --group starts at the committed offsets and commits where it stopped
    got = ok(kp(broker, "consume", "cli-g", "-g", "cli-group", "-e", "--format", "json")).lines
    assert sorted((g["partition"], g["offset"]) for g in got) == [(0, o) for o in range(committed[0] - 2, 6)]
    assert _confluent_offsets(broker, "cli-group", "cli-g", 2) == {0: 6, 1: 4}
    assert ok(kp(broker, "group", "describe", "cli-group", "--format", "json")).json[0]["total_lag"] == 0

    assert ok(kp(broker, "group", "delete", "cli-group", "--format", "json")).json == [
        {"group": "cli-group", "deleted": True}]
    assert "cli-group" not in {g["group"] for g in ok(kp(broker, "group", "list", "--format", "json")).json}
    fails(kp(broker, "group", "describe", "cli-group"), 1, "GROUP_ID_NOT_FOUND")
    fails(kp(broker, "group", "delete", "cli-group"), 1, "GROUP_ID_NOT_FOUND")


def test_group_describe_and_seek_of_a_kip848_consumer_group(broker):
    """A `group.protocol=consumer` group (KIP-848): DescribeGroups calls it Dead, so describe and
    seek ask ConsumerGroupDescribe, as kafka-consumer-groups.sh does by the group's type."""
    from confluent_kafka import Consumer
    ok(kp(broker, "topic", "create", "cli-848", "-p", "2"))
    ok(kp(broker, "produce", "cli-848", "-p", "0", stdin=b"a\nb\nc\n"))
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cli-848-group", "group.protocol": "consumer",
                  "client.id": "cli-848-client", "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "log_level": 0})
    c.subscribe(["cli-848"])
    got = 0
    deadline = time.monotonic() + 30
    while got < 3 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    c.commit(asynchronous=False)
    try:
        d = ok(kp(broker, "group", "describe", "cli-848-group", "--format", "json")).json[0]
        assert d["state"] == "Stable" and d["protocol_type"] == "consumer"
        assert [m["client_id"] for m in d["members"]] == ["cli-848-client"]
        assert d["members"][0]["assignment"] == [{"topic": "cli-848", "partitions": [0, 1]}]
        assert {r["partition"]: (r["current_offset"], r["lag"]) for r in d["offsets"]}[0] == (3, 0)
        assert all(r["consumer_id"] == d["members"][0]["member_id"] for r in d["offsets"])
        fails(kp(broker, "group", "seek", "cli-848-group", "--all-topics", "--to-earliest", "--execute"), 1,
              "current state is Stable")
    finally:
        c.close()


# -- cluster ---------------------------------------------------------------------------------

def test_cluster_info_health_quorum_single_node(broker):
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    info = ok(kp(broker, "cluster", "info", "--format", "json")).json
    assert info["cluster_id"] == md.cluster_id and f"cluster {md.cluster_id}" in broker.ready_line
    assert info["controller_id"] == 1
    assert [(b["id"], b["host"], b["port"]) for b in info["brokers"]] == [(1, "127.0.0.1", broker.port)]
    health = ok(kp(broker, "cluster", "health", "--format", "json")).json
    assert health == {"healthy": True, "controller_id": 1, "brokers": [1], "brokers_down": [],
                      "offline_partitions": [], "under_replicated_partitions": []}
    q = ok(kp(broker, "cluster", "quorum", "--format", "json")).json
    assert q["leader_id"] == 1 and q["leader_epoch"] >= 1 and q["high_watermark"] > 0
    assert [(v["id"], v["status"], v["lag"]) for v in q["voters"]] == [(1, "Leader", 0)]
    assert "HighWatermark" in ok(kp(broker, "cluster", "quorum")).out


# -- users, ACLs and logging in as a user ----------------------------------------------------------

def test_users_acls_and_a_scram_login_that_the_acls_govern(broker, tmp_path):
    ok(kp(broker, "topic", "create", "cli-secret"))
    ok(kp(broker, "produce", "cli-secret", stdin=b"classified\n"))
    ok(kp(broker, "user", "create", "alice", "--password", "alice-pw", "--format", "json"))
    ok(kp(broker, "user", "create", "bob", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192",
          stdin=b"bob-pw\n"))     # the password from stdin
    users = ok(kp(broker, "user", "list", "--format", "json")).json
    assert users == [{"user": "alice", "mechanism": "SCRAM-SHA-256", "iterations": 4096},
                     {"user": "bob", "mechanism": "SCRAM-SHA-512", "iterations": 8192}]
    fails(kp(broker, "user", "create", "carol", "--password", "x", "--iterations", "10"), 1, "UNACCEPTABLE_CREDENTIAL")

    sasl = broker.address("SASL_PLAINTEXT")
    alice = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-256",
             "-X", "sasl.username=alice", "-X", "sasl.password=alice-pw"]
    fails(kp(broker, "consume", "cli-secret", "--from-beginning", "-e", *alice, bootstrap=sasl), 1,
          "TOPIC_AUTHORIZATION_FAILED")
    fails(kp(broker, "acl", "list", *alice, bootstrap=sasl), 1, "CLUSTER_AUTHORIZATION_FAILED")

    for op in ("read", "describe"):
        r = ok(kp(broker, "acl", "create", "--resource-type", "topic", "--resource-name", "cli-secret",
                  "--principal", "User:alice", "--operation", op, "--format", "json"))
        assert r.json["permission"] == "ALLOW" and r.json["operation"] == op.upper()
    acls = ok(kp(broker, "acl", "list", "--principal", "User:alice", "--format", "json")).json
    assert acls == [{"principal": "User:alice", "host": "*", "operation": op, "permission": "ALLOW",
                     "resource_type": "TOPIC", "resource_name": "cli-secret", "pattern_type": "LITERAL"}
                    for op in ("DESCRIBE", "READ")]
    got = ok(kp(broker, "consume", "cli-secret", "--from-beginning", "-e", *alice, bootstrap=sasl))
    assert got.out == "classified\n"

    # the same login from a properties file in the Java client's words (Kafka's --command-config)
    props = tmp_path / "alice.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                     'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                     'username="alice" password="alice-pw";\n')
    assert ok(kp(broker, "consume", "cli-secret", "--from-beginning", "-e", "--command-config", str(props),
                 bootstrap=sasl)).out == "classified\n"
    fails(kp(broker, "topic", "list", "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-256",
             "-X", "sasl.username=alice", "-X", "sasl.password=wrong", bootstrap=sasl), 3, "SASL_AUTHENTICATION_FAILED")
    bob = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-512",
           "-X", "sasl.username=bob", "-X", "sasl.password=bob-pw"]
    fails(kp(broker, "consume", "cli-secret", "-e", *bob, bootstrap=sasl), 1, "TOPIC_AUTHORIZATION_FAILED")

    deleted = ok(kp(broker, "acl", "delete", "--principal", "User:alice", "--resource-type", "topic",
                    "--format", "json")).json
    assert sorted(a["operation"] for a in deleted) == ["DESCRIBE", "READ"]
    assert ok(kp(broker, "acl", "list", "--format", "json")).json == []
    fails(kp(broker, "consume", "cli-secret", "-e", *alice, bootstrap=sasl), 1, "TOPIC_AUTHORIZATION_FAILED")
    fails(kp(broker, "acl", "create", "--resource-type", "topic", "--resource-name", "x", "--principal", "User:a",
             "--operation", "fly"), 2, "--operation 'fly'")

    ok(kp(broker, "user", "delete", "alice"))
    assert [u["user"] for u in ok(kp(broker, "user", "list", "--format", "json")).json] == ["bob"]
    fails(kp(broker, "user", "delete", "alice"), 1, "RESOURCE_NOT_FOUND")
    fails(kp(broker, "topic", "list", *alice, bootstrap=sasl), 3, "SASL_AUTHENTICATION_FAILED")


# -- the command as a process: the env var, connection failures, usage errors ------------------------

def _run(*argv, env_extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "broker.launch.cli", *argv], capture_output=True, text=True,
                          env=env, timeout=60)


def test_process_exit_codes_and_env_bootstrap(broker):
    from broker.launch.process import free_port
    p = _run("topic", "list", "--format", "json", env_extra={"KPROTO_BROKERS": broker.bootstrap})
    assert p.returncode == 0 and isinstance(json.loads(p.stdout), list), p.stderr
    dead = f"127.0.0.1:{free_port()}"
    p = _run("cluster", "health", env_extra={"KPROTO_BROKERS": dead})
    assert p.returncode == 3
    assert p.stderr.strip() == f"kproto: cannot connect to {dead}: Connection refused"
    p = _run("topic", "list", "-X", "security.protocol=QUIC", "-b", broker.bootstrap)
    assert p.returncode == 2 and p.stderr.strip().startswith("kproto: security.protocol QUIC: use one of")
    p = _run("topic", "frobnicate")
    assert p.returncode == 2 and "invalid choice" in p.stderr


def test_consume_with_group_joins_it_and_shares_the_partitions(broker):
    """`kproto consume TOPIC --group G` is a member of G (KIP-848): two readers at once split the
    partitions, `group describe` lists both with their assignments, each record is read by exactly
    one of them, and when they stop they commit and leave."""
    ok(kp(broker, "topic", "create", "cli-join", "-p", "4"))
    for p in range(4):
        ok(kp(broker, "produce", "cli-join", "-p", str(p), stdin=b"".join(b"%d-%d\n" % (p, i) for i in range(5))))
    env = {**os.environ, "PYTHONPATH": ROOT}
    cmd = [sys.executable, "-m", "broker.launch.cli", "consume", "cli-join", "-g", "cli-join-group",
           "--from-beginning", "--idle-timeout", "20", "--format", "json", "-b", broker.bootstrap]
    # the idle timeout outlasts a rebalance: the first reader gives back half of its partitions at
    # its next heartbeat and the second takes them at its own (5 s apart each, Kafka's default)
    readers = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
               for _ in range(2)]
    try:
        deadline = time.monotonic() + 30
        members = []
        while time.monotonic() < deadline:
            r = kp(broker, "group", "describe", "cli-join-group", "--format", "json")
            if r.code == 0:
                members = r.json[0]["members"]
                owned = sorted(p for m in members for a in m["assignment"] for p in a["partitions"])
                if len(members) == 2 and owned == [0, 1, 2, 3] and all(m["assignment"] for m in members):
                    break
            time.sleep(0.3)
        assert len(members) == 2, (members, [r.poll() is not None and r.communicate() for r in readers])
        assert sorted(p for m in members for a in m["assignment"] for p in a["partitions"]) == [0, 1, 2, 3]
        outs = [r.communicate(timeout=60) for r in readers]
    finally:
        for r in readers:
            if r.poll() is None:
                r.kill()
    for r, (_out, err) in zip(readers, outs):
        assert r.returncode == 0, err
        assert "not joining" not in err, err
    got = [json.loads(line) for out, _ in outs for line in out.splitlines() if line.strip()]
    assert sorted((g["partition"], g["offset"]) for g in got) == [(p, i) for p in range(4) for i in range(5)]
    d = ok(kp(broker, "group", "describe", "cli-join-group", "--format", "json")).json[0]
    assert d["members"] == [] and d["total_lag"] == 0
    assert {(r["partition"], r["current_offset"]) for r in d["offsets"]} == {(p, 5) for p in range(4)}

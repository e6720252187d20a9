"""broker.config: Kafka's config names, defaults, validation messages and DescribeConfigs view.

The observation tests compare with what a real Kafka 3.9 broker answered (../shared next to the
repository); they are skipped, saying what is missing, where that folder is absent.
"""
from __future__ import annotations

import csv
import json
import re
import socket
from pathlib import Path

import pytest

from broker.config import (
    BrokerConfig, ConfigError, ConfigSource, ConfigType, OpType, TopicConfig, alter_topic_configs,
    describe_broker, describe_broker_resource, describe_topic, incremental_alter_topic_configs,
    kafka_map_order, parse_override, parse_properties, validate_topic_config,
)
from broker.config.catalog import BROKER_CONFIGS, TOPIC_CONFIGS
from broker.config.describe import created_topic_configs, describe_cluster_default
from broker.config.types import java_double_str, parse_value
from kproto.errors import ErrorCode

OBSERVATIONS = Path(__file__).resolve().parents[2] / "shared" / "kafka-observations"

# The observed broker ran on 59092/59093 with a machine-specific log dir; kproto's embedded
# single-node settings use 9092/9093 and ./kproto-data. Nothing else may differ.
ADDRESS_AND_PATH_CHANGES = (("127.0.0.1:59092", "127.0.0.1:9092"), ("127.0.0.1:59093", "127.0.0.1:9093"),
                            ("<LOG_DIR>", "./kproto-data"))


def observed(name: str):
    path = OBSERVATIONS / name
    if not path.exists():
        pytest.skip(f"Kafka observation {path} is not available (needs the shared/ folder beside the repo)")
    if name.endswith(".json"):
        return json.loads(path.read_text())
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def adapt(value):
    if value is None:
        return None
    for old, new in ADDRESS_AND_PATH_CHANGES:
        value = value.replace(old, new)
    return value


# The observed broker had a controller listener; kproto's embedded settings have
# none (nothing would listen there), hence no CONTROLLER endpoint and no voters.
NO_CONTROLLER_LISTENER = ",CONTROLLER://127.0.0.1:9093"


def observed_entry(c: dict) -> tuple:
    if c["name"] == "controller.quorum.voters":
        return (c["name"], "", True, 5, False, 7, [(c["name"], "", 5)])  # (not set: Kafka's default)
    def value(v):
        v = adapt(v)
        return v.replace(NO_CONTROLLER_LISTENER, "") if v is not None else v
    return (c["name"], value(c["value"]), c["read_only"], c["config_source"], c["is_sensitive"],
            c["config_type"], [(s["name"], value(s["value"]), s["source"]) for s in c["synonyms"]])


def our_entry(e) -> tuple:
    return (e.name, e.value, e.read_only, int(e.source), e.is_sensitive, int(e.type),
            [(s.name, s.value, int(s.source)) for s in e.synonyms])


@pytest.fixture
def cfg() -> BrokerConfig:
    return BrokerConfig.load()


# -- DescribeConfigs against the observed Kafka broker ------------------------------------------

def test_describe_broker_matches_kafka_for_every_config(cfg):
    obs = observed("broker-configs.json")["result"]["configs"]
    ours = describe_broker(cfg, include_synonyms=True)
    assert len(ours) == len(obs) == 314
    assert {e.name for e in ours} == {c["name"] for c in obs}
    mismatches = [(o, m) for o, m in zip(map(observed_entry, obs), map(our_entry, ours)) if o != m]
    assert not mismatches
    # same order too: Kafka's HashMap order is reproduced, not approximated
    assert [e.name for e in ours] == [c["name"] for c in obs]


def test_embedded_defaults_name_no_controller_listener(cfg):
    # nothing listens on a controller port: DescribeConfigs must not claim one
    by_name = {e.name: e.value for e in describe_broker(cfg)}
    assert "CONTROLLER://" not in by_name["listeners"] and "CONTROLLER://" not in by_name["advertised.listeners"]
    assert by_name["controller.quorum.voters"] == ""


def test_static_set_is_the_one_kafka_reported(cfg):
    obs = observed("broker-configs.json")["result"]["configs"]
    kafka_static = {c["name"] for c in obs if c["config_source_name"] == "STATIC_BROKER_CONFIG"}
    ours = {e.name for e in describe_broker(cfg) if e.source is ConfigSource.STATIC_BROKER_CONFIG}
    assert len(kafka_static) == 23
    assert ours == kafka_static - {"controller.quorum.voters"}  # (no controller listener)


def test_describe_broker_selected_keys_in_kafka_order(cfg):
    obs = observed("broker-configs.json")["v1_selected_keys"]["raw"]["Results"][0]["Configs"]
    ours = describe_broker(cfg, include_synonyms=True,
                           keys=["log.retention.hours", "log.dirs", "num.partitions"])
    assert [(e.name, e.value, e.read_only, int(e.source), e.is_sensitive,
             [(s.name, s.value, int(s.source)) for s in e.synonyms]) for e in ours] == [
        (c["Name"], adapt(c["Value"]), c["ReadOnly"], c["ConfigSource"], c["IsSensitive"],
         [(s["Name"], adapt(s["Value"]), s["Source"]) for s in c["Synonyms"]]) for c in obs]


def test_describe_other_broker_resources(cfg):
    data = observed("broker-configs.json")
    other = data["other_broker_id"]["result"]
    with pytest.raises(ConfigError) as e:
        describe_broker_resource(cfg, "7")
    assert (e.value.error_code, e.value.message) == (other["error_code"], other["error_message"])
    assert describe_broker_resource(cfg, "") == [] == data["cluster_default_resource_empty_name"]["result"]["configs"]
    with pytest.raises(ConfigError, match="Broker id must be an integer, but it is: x") as e:
        describe_broker_resource(cfg, "x")
    assert e.value.error_code == ErrorCode.INVALID_REQUEST
    assert len(describe_broker_resource(cfg, "1")) == 314


@pytest.mark.parametrize("which, overrides", [
    ("default_topic", {}),
    ("override_topic", {"retention.ms": "3600000", "cleanup.policy": "compact", "max.message.bytes": "2000000"}),
])
def test_describe_topic_matches_kafka(cfg, which, overrides):
    result = observed("topic-configs.json")[which]["result"]
    ours = describe_topic(cfg, overrides, include_synonyms=True)
    assert [our_entry(e) for e in ours] == [observed_entry(c) for c in result["configs"]]


def test_created_topic_configs_match_kafka(cfg):
    cases = observed("create-topics-response.json")["cases"]
    creation_configs = {
        "obs-create-3p": {}, "obs-create-defaults": {}, "obs-create-validate": {},
        "obs-create-override": {"retention.ms": "3600000", "cleanup.policy": "compact"},
    }
    checked = 0
    for case in cases:
        topic = case["response"]["Topics"][0]
        if topic["ErrorCode"] != 0:
            continue
        ours = created_topic_configs(cfg, creation_configs[topic["Name"]])
        assert [(e.name, e.value, e.read_only, int(e.source), e.is_sensitive) for e in ours] == [
            (c["Name"], c["Value"], c["ReadOnly"], c["ConfigSource"], c["IsSensitive"]) for c in topic["Configs"]]
        checked += 1
    assert checked == 4


# -- Kafka's error messages (error-cases.csv) ---------------------------------------------------

ERROR_CASES = {
    "create with invalid config value retention.ms=abc": {"retention.ms": "abc"},
    "create with unknown config name no.such.config=1": {"no.such.config": "1"},
    "create with cleanup.policy=bogus": {"cleanup.policy": "bogus"},
    "create with max.message.bytes=-5": {"max.message.bytes": "-5"},
    "create with min.insync.replicas=2 (greater than RF 1), validateOnly=true": {"min.insync.replicas": "2"},
    "incremental alter topic config: unknown name": [("no.such.config", OpType.SET, "1")],
    "incremental alter topic config: retention.ms=abc": [("retention.ms", OpType.SET, "abc")],
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_config_errors_match_kafka(cfg, case):
    rows = [r for r in observed("error-cases.csv") if r["case"] == case]
    assert len(rows) == 1, f"row {case!r} missing from error-cases.csv"
    row = rows[0]
    request = ERROR_CASES[case]
    try:
        if isinstance(request, dict):
            validate_topic_config(cfg, request)
        else:
            incremental_alter_topic_configs(cfg, {}, request)
    except ConfigError as e:
        got = (e.error_code.name, e.message)
    else:
        got = ("NONE", None)
    m = re.match(r"message=(['\"])(.*?)\1", row["notes"])
    expected_message = m.group(2) if m and row["error_name"] != "NONE" else None
    assert got == (row["error_name"], expected_message)


@pytest.mark.parametrize("name, raw, message", [
    ("retention.ms", "abc", "Invalid value abc for configuration retention.ms: Not a number of type LONG"),
    ("segment.bytes", "2147483648",
     "Invalid value 2147483648 for configuration segment.bytes: Not a number of type INT"),
    ("segment.bytes", "13", "Invalid value 13 for configuration segment.bytes: Value must be at least 14"),
    ("segment.bytes", " 1 000", "Invalid value  1 000 for configuration segment.bytes: Not a number of type INT"),
    ("min.cleanable.dirty.ratio", "2",
     "Invalid value 2.0 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"),
    ("min.cleanable.dirty.ratio", "x",
     "Invalid value x for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE"),
    ("preallocate", "yes",
     "Invalid value yes for configuration preallocate: Expected value to be either true or false"),
    ("compression.type", "brotli", "Invalid value brotli for configuration compression.type: String must be one of: "
                                   "uncompressed, zstd, lz4, snappy, gzip, producer"),
    ("message.timestamp.type", "createtime", "Invalid value createtime for configuration message.timestamp.type: "
                                             "String must be one of: CreateTime, LogAppendTime"),
    ("cleanup.policy", "delete,bogus",
     "Invalid value bogus for configuration cleanup.policy: String must be one of: compact, delete"),
    ("compression.gzip.level", "0", "Invalid value 0 for configuration compression.gzip.level: "
                                    "Value must be between 1 and 9 or equal to -1"),
    ("compression.zstd.level", "23",
     "Invalid value 23 for configuration compression.zstd.level: Value must be no more than 22"),
    ("retention.ms", "-2", "Invalid value -2 for configuration retention.ms: Value must be at least -1"),
    ("min.insync.replicas", "0", "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
    ("message.format.version", "9.9",
     "Invalid value 9.9 for configuration message.format.version: Version 9.9 is not a valid version"),
    ("leader.replication.throttled.replicas", "0:1,x", "Invalid value [0:1, x] for configuration "
        "leader.replication.throttled.replicas: leader.replication.throttled.replicas must be the literal '*' "
        "or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."),
])
def test_invalid_topic_values_have_kafkas_messages(cfg, name, raw, message):
    with pytest.raises(ConfigError) as e:
        validate_topic_config(cfg, {name: raw})
    assert e.value.message == message
    assert e.value.error_code == ErrorCode.INVALID_CONFIG


@pytest.mark.parametrize("name, raw", [
    ("retention.ms", " 3600000 "), ("retention.ms", "+5"), ("cleanup.policy", "compact, delete"),
    ("cleanup.policy", ""), ("min.cleanable.dirty.ratio", "1e-1"), ("message.format.version", "3.9.1"),
    ("compression.gzip.level", "-1"), ("leader.replication.throttled.replicas", "*"),
    ("unclean.leader.election.enable", "TRUE"),
])
def test_values_kafka_accepts(cfg, name, raw):
    validate_topic_config(cfg, {name: raw})


def test_unknown_name_is_reported_before_bad_values_and_first_bad_value_in_kafka_order(cfg):
    with pytest.raises(ConfigError, match="Unknown topic config name: nope"):
        validate_topic_config(cfg, {"retention.ms": "abc", "nope": "1"})
    # LogConfig defines segment.bytes before retention.ms, whatever the request order
    with pytest.raises(ConfigError, match="configuration segment.bytes"):
        validate_topic_config(cfg, {"retention.ms": "abc", "segment.bytes": "abc"})


def test_compaction_lag_conflict(cfg):
    with pytest.raises(ConfigError) as e:
        validate_topic_config(cfg, {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert e.value.message == "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"


def test_remote_storage_needs_the_broker_side_enabled(cfg):
    with pytest.raises(ConfigError, match="Tiered Storage functionality is disabled in the broker"):
        validate_topic_config(cfg, {"remote.storage.enable": "true"})


# -- properties files ---------------------------------------------------------------------------

def test_properties_syntax():
    text = (
        "# comment\n"
        "! also a comment\n"
        "   \n"
        "a=1\n"
        "  b : 2\n"
        "c 3\n"
        "d=\n"
        "e\n"
        "long = first, \\\n"
        "       second\n"
        "tail=keeps trailing space  \n"
        "esc=tab\\there\\nnewline \\u0041\\\\ end\n"
        "key\\ with\\=equals\\:colon = v=w:x\n"
        "#not.continued=1\\\n"
        "after.comment=ok\n"
        "a=again\n"
        "crlf=1\r\n"
        "cr=2\rlast=3"
    )
    assert parse_properties(text) == {
        "b": "2", "c": "3", "d": "", "e": "", "long": "first, second",
        "tail": "keeps trailing space  ", "esc": "tab\there\nnewline A\\ end",
        "key with=equals:colon": "v=w:x", "after.comment": "ok", "a": "again",
        "crlf": "1", "cr": "2", "last": "3",
    }


def test_properties_even_backslashes_do_not_continue():
    assert parse_properties("a=x\\\\\nb=y") == {"a": "x\\", "b": "y"}


def test_properties_bad_unicode_escape():
    with pytest.raises(ConfigError, match="Malformed"):
        parse_properties("a=\\u12x4")


def test_parse_override():
    assert parse_override("log.retention.ms=5=6") == ("log.retention.ms", "5=6")
    with pytest.raises(ConfigError):
        parse_override("novalue")


# -- BrokerConfig -------------------------------------------------------------------------------

def test_embedded_single_node_defaults(cfg):
    assert cfg.node_id == 1 and cfg.get_int("broker.id") == 1
    assert cfg.get_int("num.partitions") == 1
    assert cfg.get_bool("auto.create.topics.enable") is True
    assert cfg.get_int("group.initial.rebalance.delay.ms") == 3000
    assert cfg.get_int("message.max.bytes") == 1048588
    assert cfg.get_list("process.roles") == ["broker", "controller"]
    assert cfg.log_dirs == ["./kproto-data"]
    assert [(e.name, e.bind_host, e.port) for e in cfg.broker_listeners] == [("PLAINTEXT", "127.0.0.1", 9092)]
    assert [str(e) for e in cfg.advertised_listeners()] == ["PLAINTEXT://127.0.0.1:9092"]
    assert cfg.warnings == []


def test_file_then_overrides_take_precedence(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("num.partitions=3\nlog.retention.hours=1\ndefault.replication.factor=1\n")
    c = BrokerConfig.load(props, ["num.partitions=5"])
    assert c.get_int("num.partitions") == 5
    assert c.get_int("log.retention.hours") == 1
    assert c.source_of("num.partitions") is ConfigSource.STATIC_BROKER_CONFIG
    assert c.source_of("log.cleaner.threads") is ConfigSource.DEFAULT_CONFIG
    # the embedded settings the file left alone are still there
    assert c.get_int("transaction.state.log.min.isr") == 1


def test_without_embedded_defaults_kafka_builtins_apply():
    c = BrokerConfig.load(embedded_defaults=False)
    assert c.get_int("node.id") == -1
    assert c.get_int("offsets.topic.replication.factor") == 3
    assert c.log_dirs == ["/tmp/kafka-logs"]
    assert [str(e) for e in c.listeners] == ["PLAINTEXT://:9092"]
    assert c.listeners[0].bind_host == "0.0.0.0"
    assert all(e.source is ConfigSource.DEFAULT_CONFIG for e in describe_broker(c))


def test_invalid_broker_value_names_key_and_value():
    with pytest.raises(ConfigError) as e:
        BrokerConfig.load(overrides=["num.partitions=many"])
    assert e.value.message == "Invalid value many for configuration num.partitions: Not a number of type INT"
    with pytest.raises(ConfigError, match="Invalid value 0 for configuration num.io.threads: "
                                          "Value must be at least 1"):
        BrokerConfig.load(overrides=["num.io.threads=0"])
    with pytest.raises(ConfigError, match="String must be one of: broker, controller"):
        BrokerConfig.load(overrides=["process.roles=broker,zookeeper"])
    with pytest.raises(ConfigError, match="Invalid value maybe for configuration auto.create.topics.enable"):
        BrokerConfig.load(overrides={"auto.create.topics.enable": "maybe"})


def test_unknown_keys_warn_and_are_described_as_kafka_does(caplog):
    c = BrokerConfig.load(overrides=["no.such.setting=1"])
    assert c.unknown_keys == ["no.such.setting"]
    assert c.warnings == ["The configuration 'no.such.setting' was supplied but isn't a known config."]
    assert "no.such.setting" in caplog.text
    (entry,) = describe_broker(c, include_synonyms=True, keys=["no.such.setting"])
    assert (entry.value, entry.is_sensitive, entry.type, entry.source, entry.read_only) == (
        None, True, ConfigType.UNKNOWN, ConfigSource.STATIC_BROKER_CONFIG, True)
    assert len(describe_broker(c)) == 315


def test_internal_group_share_initialize_retry_interval():
    """Kafka 4.3's internal group.share.initialize.retry.interval.ms: an INT of at least 1, known (no
    warning), listed by DescribeConfigs only when set, as Kafka lists an internal config."""
    name = "group.share.initialize.retry.interval.ms"
    assert [e.name for e in describe_broker(BrokerConfig.load()) if e.name == name] == []
    c = BrokerConfig.load(overrides=[f"{name}=2000"])
    assert c.warnings == [] and c.get(name) == 2000
    (entry,) = describe_broker(c, keys=[name])
    assert (entry.value, entry.type, entry.source, entry.read_only) == (
        "2000", ConfigType.INT, ConfigSource.STATIC_BROKER_CONFIG, True)
    with pytest.raises(ConfigError, match=f"Invalid value 0 for configuration {name}: Value must be at least 1"):
        BrokerConfig.load(overrides=[f"{name}=0"])


def test_retention_precedence_ms_over_minutes_over_hours():
    assert BrokerConfig.load().log_retention_ms == 168 * 3_600_000
    assert BrokerConfig.load(overrides=["log.retention.hours=2"]).log_retention_ms == 7_200_000
    c = BrokerConfig.load(overrides=["log.retention.hours=2", "log.retention.minutes=3"])
    assert c.log_retention_ms == 180_000
    c = BrokerConfig.load(overrides=["log.retention.hours=2", "log.retention.minutes=3", "log.retention.ms=1234"])
    assert c.log_retention_ms == 1234
    assert TopicConfig(c).retention_ms == 1234
    assert BrokerConfig.load(overrides=["log.retention.ms=-7"]).log_retention_ms == -1


def test_retention_synonyms_in_describe():
    c = BrokerConfig.load(overrides=["log.retention.ms=1234"])
    by_name = {e.name: e for e in describe_broker(c, include_synonyms=True)}
    assert [(s.name, s.value, s.source) for s in by_name["log.retention.ms"].synonyms] == [
        ("log.retention.ms", "1234", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG)]
    # the hours entry itself only lists what comes from its own name on
    assert [s.name for s in by_name["log.retention.hours"].synonyms] == ["log.retention.hours"] * 2
    topic = {e.name: e for e in describe_topic(c, {}, include_synonyms=True)}
    assert topic["retention.ms"].value == "1234"
    assert topic["retention.ms"].source is ConfigSource.STATIC_BROKER_CONFIG


def test_roll_hours_and_ms():
    assert BrokerConfig.load().log_roll_ms == 168 * 3_600_000
    assert BrokerConfig.load(overrides=["log.roll.hours=1"]).log_roll_ms == 3_600_000
    c = BrokerConfig.load(overrides=["log.roll.hours=1", "log.roll.ms=5000"])
    assert c.log_roll_ms == 5000
    assert TopicConfig(c).segment_ms == 5000
    assert BrokerConfig.load(overrides=["log.roll.jitter.hours=2"]).log_roll_jitter_ms == 7_200_000


def test_listeners_parsing_and_advertising():
    c = BrokerConfig.load(overrides=["listeners=plaintext://:19092,CONTROLLER://127.0.0.1:19093"])
    (ep,) = c.broker_listeners
    assert (ep.name, ep.host, ep.bind_host, ep.port, ep.security_protocol) == (
        "PLAINTEXT", "", "0.0.0.0", 19092, "PLAINTEXT")
    # the embedded advertised.listeners gave way: the listener is advertised, wildcard resolved
    assert [(e.host, e.port) for e in c.advertised_listeners()] == [(socket.getfqdn(), 19092)]
    assert c.get_list("controller.quorum.voters") == ["1@127.0.0.1:19093"]
    c2 = BrokerConfig.load(overrides=["listeners=PLAINTEXT://[::1]:9092,CONTROLLER://:9093",
                                      "advertised.listeners=PLAINTEXT://broker.example:9092"])
    assert [(e.host, e.port) for e in c2.listeners] == [("::1", 9092), ("", 9093)]
    assert [str(e) for e in c2.advertised_listeners()] == ["PLAINTEXT://broker.example:9092"]


@pytest.mark.parametrize("override, message", [
    ("listeners=PLAINTEXT://127.0.0.1", "Unable to parse PLAINTEXT://127.0.0.1 to a broker endpoint"),
    ("listeners=FOO://:1,CONTROLLER://:2", "No security protocol defined for listener FOO"),
    ("listeners=PLAINTEXT://:1,CONTROLLER://:1", "Each listener must have a different port"),
    ("advertised.listeners=PLAINTEXT://0.0.0.0:9092", "cannot use the nonroutable meta-address 0.0.0.0"),
])
def test_bad_listeners(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        BrokerConfig.load(overrides=[override])


def test_node_id_and_broker_id_are_one_setting():
    c = BrokerConfig.load(overrides=["broker.id=4", "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"])
    assert c.node_id == 4 and c.get_int("broker.id") == 4
    assert c.get_list("controller.quorum.voters") == ["4@127.0.0.1:9093"]
    by_name = {e.name: e for e in describe_broker(c)}
    assert by_name["node.id"].source is ConfigSource.STATIC_BROKER_CONFIG


def test_log_dirs(tmp_path):
    c = BrokerConfig.load(overrides=[f"log.dir={tmp_path}"])
    assert c.log_dirs == [str(tmp_path)]   # the user's log.dir beats the embedded log.dirs
    assert BrokerConfig.load(overrides=["log.dirs=/a, /b"]).log_dirs == ["/a", "/b"]
    with pytest.raises(ConfigError, match="At least one log directory must be defined"):
        BrokerConfig.load(overrides=["log.dirs="])


def test_typed_accessors_refuse_wrong_type(cfg):
    with pytest.raises(TypeError):
        cfg.get_int("auto.create.topics.enable")
    with pytest.raises(KeyError):
        cfg.get("no.such.config")
    assert cfg["log.cleaner.min.cleanable.ratio"] == 0.5
    assert cfg.get_double("log.cleaner.min.cleanable.ratio") == 0.5
    assert cfg.get_str("compression.type") == "producer"


def test_dynamic_broker_configs(cfg):
    cfg.set_dynamic(per_broker={"log.retention.ms": "1000"}, cluster_default={"log.cleaner.threads": "2"})
    assert cfg.log_retention_ms == 1000
    assert cfg.get_int("log.cleaner.threads") == 2
    by_name = {e.name: e for e in describe_broker(cfg, include_synonyms=True)}
    assert by_name["log.retention.ms"].source is ConfigSource.DYNAMIC_BROKER_CONFIG
    assert [(s.name, s.source) for s in by_name["log.cleaner.threads"].synonyms] == [
        ("log.cleaner.threads", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.cleaner.threads", ConfigSource.DEFAULT_CONFIG)]
    (default_entry,) = describe_cluster_default(cfg, include_synonyms=True)
    assert (default_entry.name, default_entry.value, [s.source for s in default_entry.synonyms]) == (
        "log.cleaner.threads", "2", [ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG])
    assert TopicConfig(cfg).retention_ms == 1000
    with pytest.raises(ConfigError) as e:
        cfg.set_dynamic(per_broker={"num.partitions": "3"})
    assert e.value.message == "Cannot update these configs dynamically: Set(num.partitions)"
    assert e.value.error_code == ErrorCode.INVALID_REQUEST
    with pytest.raises(ConfigError, match="Invalid value x for configuration log.retention.ms"):
        cfg.set_dynamic(per_broker={"log.retention.ms": "x"})
    assert cfg.log_retention_ms == 1000   # a rejected change leaves the config as it was


# -- TopicConfig and alter operations -----------------------------------------------------------

def test_topic_effective_values(cfg):
    t = TopicConfig(cfg, {"segment.bytes": "1048576", "cleanup.policy": "compact,delete",
                          "message.timestamp.type": "LogAppendTime"})
    assert t.segment_bytes == 1048576
    assert t.segment_ms == 604_800_000
    assert t.segment_index_bytes == 10_485_760
    assert t.index_interval_bytes == 4096
    assert t.retention_ms == 604_800_000 and t.retention_bytes == -1
    assert t.max_message_bytes == 1048588
    assert t.cleanup_policy == ["compact", "delete"] and t.compact and t.delete
    assert t.message_timestamp_type == "LogAppendTime"
    assert t.min_insync_replicas == 1
    assert t.source_of("segment.bytes") is ConfigSource.TOPIC_CONFIG
    assert t.source_of("retention.ms") is ConfigSource.STATIC_BROKER_CONFIG
    assert t.source_of("flush.ms") is ConfigSource.DEFAULT_CONFIG
    assert set(t.as_dict()) == set(TOPIC_CONFIGS)


def test_topic_defaults_follow_broker_synonyms():
    c = BrokerConfig.load(overrides=["log.segment.bytes=2000000", "message.max.bytes=500",
                                     "log.cleanup.policy=compact", "log.message.timestamp.type=LogAppendTime"])
    t = TopicConfig(c)
    assert (t.segment_bytes, t.max_message_bytes, t.cleanup_policy, t.message_timestamp_type) == (
        2_000_000, 500, ["compact"], "LogAppendTime")


def test_incremental_alter_operations(cfg):
    current = {"retention.ms": "1000"}
    new = incremental_alter_topic_configs(cfg, current, [
        ("retention.ms", OpType.DELETE, None),
        ("segment.bytes", OpType.SET, "1048576"),
        ("cleanup.policy", OpType.APPEND, "compact"),
    ])
    assert new == {"segment.bytes": "1048576", "cleanup.policy": "delete,compact"}
    assert current == {"retention.ms": "1000"}
    new = incremental_alter_topic_configs(cfg, new, [("cleanup.policy", OpType.SUBTRACT, "delete")])
    assert new["cleanup.policy"] == "compact"
    new = incremental_alter_topic_configs(cfg, new, [("cleanup.policy", OpType.APPEND, "compact,")])
    assert new["cleanup.policy"] == "compact"


@pytest.mark.parametrize("ops, code, message", [
    ([("retention.ms", OpType.APPEND, "5")], ErrorCode.INVALID_CONFIG,
     "Can't APPEND to key retention.ms because its type is not LIST."),
    ([("nope", OpType.SUBTRACT, "5")], ErrorCode.INVALID_CONFIG,
     "Can't SUBTRACT to key nope because its type is not LIST."),
    ([("retention.ms", OpType.SET, "1"), ("retention.ms", OpType.DELETE, None)], ErrorCode.INVALID_REQUEST,
     "Error due to duplicate config keys"),
    ([("retention.ms", OpType.SET, None), ("segment.ms", OpType.SET, None)], ErrorCode.INVALID_REQUEST,
     "Null value not supported for : retention.ms, segment.ms"),
    ([("cleanup.policy", OpType.APPEND, "bogus")], ErrorCode.INVALID_CONFIG,
     "Invalid value bogus for configuration cleanup.policy: String must be one of: compact, delete"),
    ([("retention.ms", 7, "1")], ErrorCode.INVALID_REQUEST, "Unknown operations type 7"),
])
def test_incremental_alter_errors(cfg, ops, code, message):
    with pytest.raises(ConfigError) as e:
        incremental_alter_topic_configs(cfg, {}, ops)
    assert (e.value.error_code, e.value.message) == (code, message)


def test_alter_configs_replaces_all_overrides(cfg):
    assert alter_topic_configs(cfg, {"retention.ms": "1", "segment.ms": "5"}, [("segment.bytes", "1048576")]) == {
        "segment.bytes": "1048576"}
    with pytest.raises(ConfigError, match="Unknown topic config name: nope"):
        alter_topic_configs(cfg, {}, [("nope", "1")])


# -- small pieces -------------------------------------------------------------------------------

def test_kafka_map_order_depends_only_on_the_names():
    names = list(TOPIC_CONFIGS)
    assert kafka_map_order(names) == kafka_map_order(reversed(names))
    assert sorted(kafka_map_order(names)) == sorted(names)
    # in a 16-slot table these three fall into buckets 0, 2 and 13 (not alphabetical order)
    assert kafka_map_order(["log.dirs", "num.partitions", "log.retention.hours"]) == [
        "log.retention.hours", "num.partitions", "log.dirs"]


@pytest.mark.parametrize("d, text", [
    (0.5, "0.5"), (2.0, "2.0"), (1e7, "1.0E7"), (1234567.0, "1234567.0"), (0.001, "0.001"),
    (0.0001, "1.0E-4"), (-0.0, "-0.0"), (float("inf"), "Infinity"), (1.5e300, "1.5E300"),
])
def test_java_double_rendering(d, text):
    assert java_double_str(d) == text


def test_parse_value_java_rules():
    assert parse_value("x", ConfigType.LIST, " a , b,,c ") == ["a", "b", "", "c"]
    assert parse_value("x", ConfigType.LIST, "  ") == []
    assert parse_value("x", ConfigType.DOUBLE, "1.5d") == 1.5
    assert parse_value("x", ConfigType.DOUBLE, "0x1p3") == 8.0
    assert parse_value("x", ConfigType.LONG, "-9223372036854775808") == -(1 << 63)
    with pytest.raises(ConfigError, match="Not a number of type SHORT"):
        parse_value("x", ConfigType.SHORT, "40000")
    assert repr(parse_value("x", ConfigType.PASSWORD, "secret")) == "[hidden]"


def test_catalog_shape():
    assert len(BROKER_CONFIGS) == 314 and len(TOPIC_CONFIGS) == 36
    assert sum(k.sensitive for k in BROKER_CONFIGS.values()) == 13
    assert BROKER_CONFIGS["log.dir"].default == "/tmp/kafka-logs"
    assert BROKER_CONFIGS["log.segment.bytes"].dynamic and not BROKER_CONFIGS["num.partitions"].dynamic
    for key in TOPIC_CONFIGS.values():
        for broker_name, _ in key.synonyms:
            assert broker_name in BROKER_CONFIGS

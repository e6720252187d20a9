"""Replication throttles (KIP-73), the fast parts: the throttled-replica lists as a broker reads
them, Kafka's SimpleRate over replication.quota.window.num samples, when a quota holds a replica
back, and the broker configs that set the bounds (accepted, validated and described as Kafka 3.9
does: observed on a single node, `kafka-configs.sh --entity-type brokers`)."""
from __future__ import annotations

import pytest

from broker.config.broker_config import BrokerConfig
from broker.config.describe import describe_broker, describe_cluster_default
from broker.config.types import ConfigError, ConfigSource, ConfigType
from broker.replication.quota import (
    ALL, LONG_MAX, ReplicationQuota, ReplicationQuotas, SimpleRate, parse_throttled_partitions, rate_bound)

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"


# -- the lists ----------------------------------------------------------------------------------

@pytest.mark.parametrize("value, broker, expected", [
    ("*", 1, ALL),
    (" * ", 7, ALL),
    ("0:1,1:2,3:1", 1, {0, 3}),
    ("0:1,1:2,3:1", 2, {1}),
    ("0:1,1:2", 5, set()),
    ("", 1, set()),
    (None, 1, set()),
    ("0:10,1:1", 1, {1}),          # broker 10 is not broker 1
])
def test_throttled_partitions_of_a_broker(value, broker, expected):
    assert parse_throttled_partitions(value, broker) == expected


class _Topic:
    def __init__(self, configs):
        self.configs = configs


class _Image:
    def __init__(self, topics):
        self.topics = {name: _Topic(c) for name, c in topics.items()}


def test_a_broker_throttles_the_partitions_its_topics_name_for_it():
    config = BrokerConfig.load(overrides={"node.id": "2"})
    q = ReplicationQuotas(2, config)
    q.refresh(_Image({
        "a": {"leader.replication.throttled.replicas": "0:1,1:2", "follower.replication.throttled.replicas": "0:2"},
        "b": {"leader.replication.throttled.replicas": "*"},
        "c": {"follower.replication.throttled.replicas": "0:1"},   # another broker's
        "d": {},
    }))
    assert q.leader.throttled == {"a": {1}, "b": ALL}
    assert q.follower.throttled == {"a": {0}}
    assert q.leader.is_throttled("a", 1) and not q.leader.is_throttled("a", 0)
    assert q.leader.is_throttled("b", 17) and not q.leader.is_throttled("d", 0)
    # a list removed: no longer throttled
    q.refresh(_Image({"a": {}, "b": {"leader.replication.throttled.replicas": ""}}))
    assert q.leader.throttled == {} and q.follower.throttled == {}


# -- the rate ----------------------------------------------------------------------------------

def test_simple_rate_divides_by_the_time_since_the_oldest_sample_at_least_one_window():
    r = SimpleRate(samples=11, window_ms=1000)
    r.record(1000, 0)
    assert r.measure(0) == 1000            # a first burst: over one whole window, not over 0 ms
    r.record(500, 500)
    assert r.measure(500) == 1500
    assert r.measure(3000) == 500          # 1500 bytes over 3 s
    r.record(1500, 3000)                   # a new sample (the first one is full)
    assert r.measure(6000) == 3000 / 6


def test_simple_rate_forgets_samples_older_than_the_window_count():
    r = SimpleRate(samples=11, window_ms=1000)
    r.record(11000, 0)
    assert r.measure(10999) == pytest.approx(11000 / 10.999)
    assert r.measure(11000) == 0           # no record for 11 windows: the sample is reset


def test_simple_rate_reuses_its_oldest_sample():
    r = SimpleRate(samples=3, window_ms=1000)
    for t in (0, 1000, 2000):
        r.record(300, t)
    assert r.measure(2500) == 900 / 2.5
    r.record(300, 3000)                    # the first sample is reused: 3 samples left
    assert r.measure(3000) == 900 / 2      # they started at 1000


def test_quota_exceeded_while_the_rate_is_above_the_bound():
    now = [0]
    q = ReplicationQuota(LEADER_RATE, "x", 11, 1, clock=lambda: now[0], bound=lambda: 1000)
    q.throttled = {"t": ALL}
    assert not q.is_quota_exceeded()
    q.record(2000)
    assert q.is_quota_exceeded()
    now[0] = 1999
    assert q.is_quota_exceeded()           # 2000 B over 1.999 s
    now[0] = 2000
    assert not q.is_quota_exceeded()       # exactly the bound is within it
    now[0] = 1000
    assert q.should_throttle("t", 0, in_sync=False)
    assert not q.should_throttle("t", 0, in_sync=True)     # an in-sync replica never is
    assert not q.should_throttle("u", 0, in_sync=False)    # nor a partition not throttled
    assert q.recorded == 2000


def test_no_rate_set_never_holds_back():
    q = ReplicationQuota(LEADER_RATE, "x", 11, 1, clock=lambda: 0)
    q.throttled = {"t": ALL}
    q.record(10 ** 12)
    assert q.bound == LONG_MAX and not q.should_throttle("t", 0, in_sync=False)


def test_a_checker_of_the_rate_fails_on_a_broken_window():
    # the lower bound of the window is what keeps a first burst from reading as a huge rate:
    # with it gone the first record would be "exceeded" for any bound (division by ~0 s)
    r = SimpleRate(samples=11, window_ms=1000)
    r.record(100, 0)
    assert r.measure(1) < 1000             # broken (elapsed 1 ms, no floor) would say 100000 B/s


# -- the broker configs ---------------------------------------------------------------------------

def test_rate_is_the_brokers_then_the_cluster_default_then_none():
    config = BrokerConfig.load()
    assert rate_bound(config, LEADER_RATE) == LONG_MAX
    config.set_dynamic(cluster_default={LEADER_RATE: "3000"})
    assert rate_bound(config, LEADER_RATE) == 3000
    config.set_dynamic(per_broker={LEADER_RATE: "1000000", FOLLOWER_RATE: "0"})
    assert rate_bound(config, LEADER_RATE) == 1000000
    assert rate_bound(config, FOLLOWER_RATE) == 0
    q = ReplicationQuotas(1, config)
    assert q.leader.bound == 1000000 and q.follower.bound == 0
    config.set_dynamic(per_broker={})
    assert q.leader.bound == 3000 and q.follower.bound == LONG_MAX   # read when checked


def test_static_rate_is_not_a_bound():
    config = BrokerConfig.load(overrides={LEADER_RATE: "5", FOLLOWER_RATE: "abc"})
    assert rate_bound(config, LEADER_RATE) == LONG_MAX   # as Kafka: BrokerConfigHandler reads dynamic configs
    # unknown to Kafka's static config: warned about, not validated
    assert f"The configuration '{LEADER_RATE}' was supplied but isn't a known config." in config.warnings
    config.set_dynamic(per_broker={LEADER_RATE: "7"})
    assert rate_bound(config, LEADER_RATE) == 7


@pytest.mark.parametrize("value, message", [
    ("-5", "Invalid value -5 for configuration leader.replication.throttled.rate: Value must be at least 0"),
    ("abc", "Invalid value abc for configuration leader.replication.throttled.rate: Not a number of type LONG"),
])
def test_invalid_rates_are_refused_with_kafkas_message(value, message):
    config = BrokerConfig.load()
    with pytest.raises(ConfigError) as exc:
        config.set_dynamic(per_broker={LEADER_RATE: value})
    assert exc.value.message == message and exc.value.error_code == 42   # INVALID_REQUEST
    assert rate_bound(config, LEADER_RATE) == LONG_MAX


def test_rates_are_described_as_kafka_39_does():
    config = BrokerConfig.load()
    names = lambda entries: [e.name for e in entries]   # noqa: E731
    assert LEADER_RATE not in names(describe_broker(config))   # unset: not listed
    config.set_dynamic(per_broker={LEADER_RATE: "1000000", FOLLOWER_RATE: "2000000"},
                       cluster_default={LEADER_RATE: "3000"})
    entries = {e.name: e for e in describe_broker(config, include_synonyms=True)}
    leader = entries[LEADER_RATE]
    # observed: value, read_only=True, source DYNAMIC_BROKER_CONFIG, type LONG, both layers as synonyms
    assert (leader.value, leader.read_only, leader.source, leader.type, leader.is_sensitive) == (
        "1000000", True, ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigType.LONG, False)
    assert [(s.value, s.source) for s in leader.synonyms] == [
        ("1000000", ConfigSource.DYNAMIC_BROKER_CONFIG), ("3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
    assert entries[FOLLOWER_RATE].value == "2000000"
    default = describe_cluster_default(config, include_synonyms=True)
    assert [(e.name, e.value, e.source) for e in default] == [
        (LEADER_RATE, "3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
    # listed in Kafka's order (leader before follower, as the observed broker listed them)
    order = names(describe_broker(config))
    assert order.index(LEADER_RATE) < order.index(FOLLOWER_RATE)

"""Client metrics (KIP-714): subscriptions as CLIENT_METRICS config resources,
ListClientMetricsResources, GetTelemetrySubscriptions / PushTelemetry with
Kafka's rules, and a real client (librdkafka) pushing its metrics."""
from __future__ import annotations

import time
import uuid

import pytest

from kproto import compression
from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.api_versions_request import ApiVersionsRequest
from kproto.messages.describe_configs_request import DescribeConfigsRequest, DescribeConfigsResource
from kproto.messages.get_telemetry_subscriptions_request import GetTelemetrySubscriptionsRequest
from kproto.messages.incremental_alter_configs_request import (
    AlterableConfig, AlterConfigsResource, IncrementalAlterConfigsRequest)
from kproto.messages.list_config_resources_request import ListConfigResourcesRequest
from kproto.messages.push_telemetry_request import PushTelemetryRequest
from tests.wire_client import WireClient
from broker.launch.process import BrokerProcess

pytestmark = pytest.mark.timeout(60)

CLIENT_METRICS = 16
SET, DELETE, APPEND = 0, 1, 2


@pytest.fixture(scope="module")
def info_broker(tmp_path_factory):
    proc = BrokerProcess(str(tmp_path_factory.mktemp("kproto-data")), log_level="INFO", metrics=True)
    proc.start()
    yield proc
    proc.stop()


def _alter(c: WireClient, name: str, *ops, validate_only=False):
    req = IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[AlterConfigsResource(
        resource_type=CLIENT_METRICS, resource_name=name,
        configs=[AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])])
    r = c.call(req, 1).responses[0]
    return r.error_code, r.error_message


def _listed(c: WireClient) -> list[str]:
    return [r.resource_name for r in c.call(ListConfigResourcesRequest(), 0).config_resources]


def _advertised(c: WireClient) -> set[int]:
    resp = c.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    return {k.api_key for k in resp.api_keys}


def _get(c: WireClient, instance=uuid.UUID(int=0)):
    return c.call(GetTelemetrySubscriptionsRequest(client_instance_id=instance), 0)


def _push(c: WireClient, instance, sub_id, data=b"", codec=0, terminating=False) -> int:
    return c.call(PushTelemetryRequest(client_instance_id=instance, subscription_id=sub_id,
                                       terminating=terminating, compression_type=codec, metrics=data), 0).error_code


def test_subscriptions_and_advertising(info_broker):
    telemetry = {ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.PUSH_TELEMETRY}
    with WireClient(info_broker.bootstrap) as c:
        assert not telemetry & _advertised(c) and _listed(c) == []
        # Kafka's validation and its error codes
        assert _alter(c, "s", ("no.such", SET, "1"))[0] == ErrorCode.INVALID_REQUEST
        assert _alter(c, "s", ("interval.ms", SET, "50")) == (
            ErrorCode.INVALID_REQUEST, "Invalid value 50 for interval.ms, interval must be between 100 and "
            "3600000 (1 hour)")
        assert _alter(c, "s", ("match", SET, "client_idd=x")) == (
            ErrorCode.INVALID_CONFIG, "Illegal client matching pattern: client_idd=x")
        assert _alter(c, "s", ("match", SET, "client_id=(")) == (
            ErrorCode.INVALID_CONFIG, "Illegal client matching pattern: client_id=(")
        # Kafka 3.9 lets Integer.parseInt's exception escape, and treats no key as a list
        assert _alter(c, "s", ("interval.ms", SET, " 200")) == (ErrorCode.UNKNOWN_SERVER_ERROR, None)
        assert _alter(c, "s", ("metrics", APPEND, "a")) == (
            ErrorCode.INVALID_CONFIG, "Can't APPEND to key metrics because its type is not LIST.")
        assert _alter(c, "", ("metrics", SET, "org.apache"))[0] == ErrorCode.INVALID_REQUEST
        assert _alter(c, "s", ("metrics", SET, "org.apache"), validate_only=True) == (0, None)
        assert _listed(c) == []
        assert _alter(c, "s", ("metrics", SET, "org.apache.kafka.producer"), ("interval.ms", SET, "1000")) == (0, None)
        assert _alter(c, "s", ("metrics", SET, "org.apache.kafka.producer,org.apache.kafka.consumer")) == (0, None)
        assert _listed(c) == ["s"]
        assert telemetry <= _advertised(c)
        desc = c.call(DescribeConfigsRequest(resources=[DescribeConfigsResource(
            resource_type=CLIENT_METRICS, resource_name="s", configuration_keys=None)]), 4).results[0]
        assert {e.name: e.value for e in desc.configs}["metrics"] == "org.apache.kafka.producer,org.apache.kafka.consumer"
        sub = _get(c)
        assert sub.error_code == 0 and sub.client_instance_id.int != 0
        assert (sub.push_interval_ms, sub.requested_metrics) == (1000, ["org.apache.kafka.producer",
                                                                        "org.apache.kafka.consumer"])
        assert sub.accepted_compression_types == [4, 3, 1, 2] and sub.telemetry_max_bytes == 1048576
        # removing every key removes the subscription
        assert _alter(c, "s", ("metrics", DELETE, ""), ("interval.ms", DELETE, "")) == (0, None)
        assert _listed(c) == [] and not telemetry & _advertised(c)


def test_push_rules(info_broker):
    with WireClient(info_broker.bootstrap) as c:
        assert _alter(c, "rules", ("metrics", SET, "*"), ("interval.ms", SET, "100"),
                      ("match", SET, "client_id=kproto-tests")) == (0, None)
        sub = _get(c)
        assert sub.requested_metrics == [""]   # "*": every metric
        inst, sid = sub.client_instance_id, sub.subscription_id
        assert _get(c, inst).error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED   # asked again at once
        assert _push(c, inst, sid + 1) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
        assert _push(c, uuid.UUID(int=0), sid) == ErrorCode.INVALID_REQUEST
        time.sleep(0.12)
        assert _push(c, inst, sid, codec=9) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        time.sleep(0.12)
        assert _push(c, inst, sid, compression.compress(compression.GZIP, _otlp("m.a", "m.b")), codec=1) == 0
        assert _push(c, inst, sid) == ErrorCode.THROTTLING_QUOTA_EXCEEDED        # before the interval
        time.sleep(0.12)
        assert _push(c, inst, sid, b"x" * (1048576 + 1)) == ErrorCode.TELEMETRY_TOO_LARGE
        assert _push(c, inst, sid, _otlp("m.a", "m.b", "m.c"), terminating=True) == 0
        assert _push(c, inst, sid, terminating=True) == ErrorCode.INVALID_REQUEST  # after termination
        assert _alter(c, "rules", ("metrics", DELETE, ""), ("interval.ms", DELETE, ""), ("match", DELETE, "")) == (0, None)
    assert _wait_for_log(info_broker, f"client telemetry from {inst}", "2 metrics")
    # the broker's own metrics expose them (Kafka's client-metrics group)
    samples = _scrape(info_broker.metrics_url)
    assert samples[("kproto_client_telemetry_metrics", (("client_id", "kproto-tests"),
                                                       ("client_instance_id", str(inst))))] == 3
    assert samples[("kafka_server_client_metrics_plugin_export_total", ())] >= 2
    assert samples[("kafka_server_client_metrics_throttle_total", ())] >= 2
    assert samples[("kafka_server_client_metrics_unknown_subscription_request_total", ())] >= 1


def _scrape(url: str) -> dict:
    import urllib.request
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_librdkafka_pushes_its_metrics(info_broker):
    from confluent_kafka import Producer
    with WireClient(info_broker.bootstrap) as c:
        assert _alter(c, "all-producers", ("metrics", SET, "*"), ("interval.ms", SET, "500"),
                      ("match", SET, "client_id=telemetry-probe.*")) == (0, None)
    p = Producer({"bootstrap.servers": info_broker.bootstrap, "client.id": "telemetry-probe-1"})
    try:
        for _ in range(30):
            p.produce("telemetry-topic", b"v")
            p.poll(0.1)
        p.flush(10)
        assert _wait_for_log(info_broker, "(client id telemetry-probe-1)", timeout=10)
    finally:
        with WireClient(info_broker.bootstrap) as c:
            _alter(c, "all-producers", ("metrics", DELETE, ""), ("interval.ms", DELETE, ""), ("match", DELETE, ""))


def _wait_for_log(proc, *parts, timeout=5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(all(p in line for p in parts) for line in proc.stderr_lines):
            return True
        time.sleep(0.1)
    return False


def _otlp(*names: str) -> bytes:
    """A MetricsData with one resource, one scope and these metric names."""
    def ld(field: int, payload: bytes) -> bytes:
        return bytes([field << 3 | 2, len(payload)]) + payload
    metrics = b"".join(ld(2, ld(1, n.encode())) for n in names)
    return ld(1, ld(2, metrics))

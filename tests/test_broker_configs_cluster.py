"""Per-broker dynamic configs in a 3-node cluster (`kafka-configs --entity-type brokers
--entity-name N`): the AdminClient sends the change for broker N to broker N, which checks and
validates it and forwards it to the active controller; once committed, broker N's running config
has it (DescribeConfigs of broker N: DYNAMIC_BROKER_CONFIG), whichever node is the controller."""
import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType)

from kproto.errors import ErrorCode  # noqa: E402
from kproto.messages.describe_quorum_request import DescribeQuorumRequest, PartitionData, TopicData  # noqa: E402
from kproto.messages.incremental_alter_configs_request import (  # noqa: E402
    AlterableConfig, AlterConfigsResource, IncrementalAlterConfigsRequest)
from tests.wire_client import WireClient  # noqa: E402
from tools.cluster_client import QUIET, create_topic, wait_until  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

pytestmark = pytest.mark.timeout(180)

KEY = "log.retention.bytes"
TOPIC, BROKER, SET = 2, 4, 0


def _value(admin, node: int, key: str = KEY):
    """(value, source) of `key` in broker `node`'s DescribeConfigs (sent to that broker)."""
    res = ConfigResource(ResourceType.BROKER, str(node))
    entry = admin.describe_configs([res], request_timeout=10)[res].result(15)[key]
    return entry.value, entry.source


def _alter(admin, node: int, value: str) -> bool:
    res = ConfigResource(ResourceType.BROKER, str(node), incremental_configs=[
        ConfigEntry(KEY, value, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res], request_timeout=15)[res].result(20)
    return True


def _raw_alter(port: int, resources):
    """IncrementalAlterConfigs v1 sent to one node; [(error code, message)] in request order."""
    req = IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(
        resource_type=rtype, resource_name=name, configs=[AlterableConfig(name=k, config_operation=SET, value=v)])
        for rtype, name, k, v in resources], validate_only=False)
    with WireClient(f"127.0.0.1:{port}", timeout=20) as c:
        return [(r.error_code, r.error_message) for r in c.call(req, 1).responses]


def _leader(cluster) -> int:
    with WireClient(f"127.0.0.1:{cluster.ports[1]}", timeout=5) as c:
        return c.call(DescribeQuorumRequest(topics=[TopicData(topic_name="__cluster_metadata", partitions=[
            PartitionData(partition_index=0)])]), 2).topics[0].partitions[0].leader_id


def test_per_broker_configs_changed_through_any_broker_reach_that_broker():
    with QuorumCluster(3) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        wait_until(lambda: create_topic(admin, "t", replication_factor=3), 60, "a topic created")
        # (the client routes a broker's change to that broker: it must know all of them first)
        wait_until(lambda: sorted(admin.list_topics(timeout=5).brokers) == [1, 2, 3], 30, "every broker listed")
        controller = wait_until(lambda: _leader(cluster) in (1, 2, 3) and _leader(cluster), 30, "a controller")

        # every broker, the active controller and the others, takes its own per-broker change
        for node in (2, 3, 1):
            wait_until(lambda: _alter(admin, node, str(1000 + node)), 30, f"broker {node}'s change accepted")
        for node in (1, 2, 3):
            wait_until(lambda: _value(admin, node) == (str(1000 + node), ConfigSource.DYNAMIC_BROKER_CONFIG.value),
                       20, lambda: f"broker {node} showing its dynamic value (controller {controller}): "
                                   f"{_value(admin, node)}")

        # a broker other than the controller: a change named for another broker is refused there,
        # as Kafka's broker refuses it; the rest of the request is forwarded and answered in order
        other = next(n for n in (1, 2, 3) if n != controller)
        third = next(n for n in (1, 2, 3) if n not in (other, controller))
        assert _raw_alter(cluster.ports[other], [
            (BROKER, str(third), KEY, "5"),
            (TOPIC, "t", "retention.ms", "3600000"),
            (BROKER, str(other), KEY, "2222"),
        ]) == [(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {other}, but received {third}"),
               (0, None), (0, None)]
        wait_until(lambda: _value(admin, other)[0] == "2222", 20, "the second change on that broker")
        assert _value(admin, third)[0] == str(1000 + third)
        res = ConfigResource(ResourceType.TOPIC, "t")
        assert admin.describe_configs([res])[res].result(15)["retention.ms"].value == "3600000"

        # a cluster-wide default sent to a broker that is not the controller reaches every broker
        assert _raw_alter(cluster.ports[other], [(BROKER, "", "log.retention.ms", "7200000")]) == [(0, None)]
        for node in (1, 2, 3):
            wait_until(lambda: _value(admin, node, "log.retention.ms") == (
                "7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value), 20,
                f"broker {node} showing the new cluster default")

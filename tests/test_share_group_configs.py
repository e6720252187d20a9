"""Share-group configs (share.*) on resource type GROUP with IncrementalAlterConfigs: accepted values
are kept, a bad value or an unknown key gets INVALID_CONFIG with Kafka's wording (confluent-kafka's
AdminClient against one node)."""
from __future__ import annotations

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType,
)

from broker.launch.process import BrokerProcess  # noqa: E402


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory):
    b = BrokerProcess(str(tmp_path_factory.mktemp("share-configs") / "data")).start()
    yield b
    b.stop()


def alter(bootstrap, group, **configs):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    for f in admin.incremental_alter_configs([res]).values():
        return f.result(15)


@pytest.mark.parametrize("configs", [
    {"share_auto_offset_reset": "earliest"},
    {"share_auto_offset_reset": "by_duration:PT1H"},
    {"share_delivery_count_limit": "2", "share_isolation_level": "read_committed"},
])
def test_valid_share_configs_are_accepted(kbroker, configs):
    assert alter(kbroker.bootstrap, "cfg-ok", **configs) is None


@pytest.mark.parametrize("configs, words", [
    ({"share_auto_offset_reset": "sometimes"}, "share.auto.offset.reset"),
    ({"share_delivery_count_limit": "11"}, "share.delivery.count.limit must be less than or equal to 10"),
    ({"share_record_lock_duration_ms": "100"}, "group.share.min.record.lock.duration.ms"),
    ({"share_bogus": "1"}, "Unknown group config name: share.bogus"),
])
def test_bad_share_configs_get_invalid_config(kbroker, configs, words):
    with pytest.raises(KafkaException) as e:
        alter(kbroker.bootstrap, "cfg-bad", **configs)
    err = e.value.args[0]
    assert err.name() == "INVALID_CONFIG" and words in err.str(), err.str()

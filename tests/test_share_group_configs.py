"""Share-group configs (share.*) on resource type GROUP with IncrementalAlterConfigs: accepted values
are kept, a bad value or an unknown key gets INVALID_CONFIG with Kafka's wording (confluent-kafka's
AdminClient against one node); a group's share.assignment.interval.ms defers its target assignment."""
from __future__ import annotations

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType,
)

from kproto.messages.share_group_describe_request import ShareGroupDescribeRequest  # noqa: E402
from tests.test_share_group_state_record import _join, _topic  # noqa: E402
from tests.wire_client import WireClient  # noqa: E402
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
    {"share_assignment_interval_ms": "0"},
])
def test_valid_share_configs_are_accepted(kbroker, configs):
    assert alter(kbroker.bootstrap, "cfg-ok", **configs) is None


@pytest.mark.parametrize("configs, words", [
    ({"share_auto_offset_reset": "sometimes"}, "share.auto.offset.reset"),
    ({"share_delivery_count_limit": "11"}, "share.delivery.count.limit must be less than or equal to 10"),
    ({"share_record_lock_duration_ms": "100"}, "group.share.min.record.lock.duration.ms"),
    ({"share_bogus": "1"}, "Unknown group config name: share.bogus"),
    ({"share_assignment_interval_ms": "15001"}, "group.share.max.assignment.interval.ms"),
])
def test_bad_share_configs_get_invalid_config(kbroker, configs, words):
    with pytest.raises(KafkaException) as e:
        alter(kbroker.bootstrap, "cfg-bad", **configs)
    err = e.value.args[0]
    assert err.name() == "INVALID_CONFIG" and words in err.str(), err.str()


def test_a_groups_assignment_interval_defers_its_target_assignment(kbroker):
    """KIP-1263: with share.assignment.interval.ms 10 s, a second member's join bumps the group epoch
    but gets the old assignment epoch and nothing yet; with 0 it is assigned at once."""
    _topic(kbroker.bootstrap, "iv-t", 2)
    for group, interval, epochs in (("iv-slow", "10000", (1, 2, 1)), ("iv-fast", "0", (2, 2, 2))):
        alter(kbroker.bootstrap, group, share_assignment_interval_ms=interval)
        assert _join(kbroker.bootstrap, group, "iv-t").member_epoch == 1     # a group's first: at once
        second = _join(kbroker.bootstrap, group, "iv-t")
        with WireClient(kbroker.bootstrap) as c:
            d = c.call(ShareGroupDescribeRequest(group_ids=[group]), 1).groups[0]
        assert (second.member_epoch, d.group_epoch, d.assignment_epoch) == epochs, (group, second, d)

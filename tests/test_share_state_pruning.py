"""`__share_group_state` as Kafka 4.3 keeps it (issue #31): created with Kafka's topic configs
(cleanup.policy=delete, ...), and pruned by the share coordinator every
share.coordinator.state.topic.prune.interval.ms below the oldest snapshot a share-partition still
needs, so its log start moves; after a restart the state read back from what is left hands out
exactly the records not yet acknowledged."""
from __future__ import annotations

import time
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType,
)

from kproto.errors import ErrorCode as E  # noqa: E402
from kproto.messages.list_offsets_request import ListOffsetsRequest  # noqa: E402
from kproto.messages.share_fetch_request import ShareFetchRequest  # noqa: E402
from tests.wire_client import WireClient, metadata  # noqa: E402
from broker.launch.process import BrokerProcess  # noqa: E402

STATE_TOPIC = "__share_group_state"
SETTINGS = {
    "offsets.topic.num.partitions": "1",
    "share.coordinator.state.topic.num.partitions": "1",
    "share.coordinator.state.topic.prune.interval.ms": "200",
    "share.coordinator.snapshot.update.records.per.snapshot": "3",
    "share.coordinator.cold.partition.snapshot.interval.ms": "300",
}
RECORDS = 60


def _start_offset(c) -> int:
    req = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=STATE_TOPIC, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-2)])])
    p = c.call(req, 1).topics[0].partitions[0]
    assert p.error_code == 0
    return p.offset


def _share_fetch(c, group, member, tid, epoch, acks=()):
    r = c.call(ShareFetchRequest(
        group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=200, min_bytes=1,
        max_records=5, batch_size=5, forgotten_topics_data=[], topics=[ShareFetchRequest.FetchTopic(
            topic_id=tid, partitions=[ShareFetchRequest.FetchPartition(
                partition_index=0, acknowledgement_batches=[ShareFetchRequest.AcknowledgementBatch(
                    first_offset=o, last_offset=o, acknowledge_types=[1]) for o in acks])])]), 1)
    assert r.error_code == E.NONE
    parts = [p for t in r.responses for p in t.partitions]
    assert [p.acknowledge_error_code for p in parts] == [E.NONE] * len(parts), epoch
    return [o for p in parts for a in p.acquired_records for o in range(a.first_offset, a.last_offset + 1)]


def _topic_with_records(b, topic: str, group: str, count: int) -> AdminClient:
    """A one-partition topic holding records "0".."count-1", and `group` reading it from the start
    (share.auto.offset.reset=earliest); the admin client."""
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(30)
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(15)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(count):
        p.produce(topic, value=str(i).encode())
    assert p.flush(15) == 0
    return admin


@pytest.mark.timeout(90)
def test_share_state_topic_has_kafkas_configs_and_is_pruned_without_losing_state(tmp_path):
    topic, group = "prune-t", "prune-g"
    b = BrokerProcess(str(tmp_path / "data"), settings=SETTINGS).start()
    try:
        admin = _topic_with_records(b, topic, group, RECORDS)

        # one member takes 5 records per ShareFetch and accepts them with the next, except every 7th
        accepted, fetched = set(), set()
        with WireClient(b.bootstrap) as c:
            tid = metadata(c, name=topic).topic_id
            member, pending = str(uuid.uuid4()), []
            for epoch in range(60):
                if len(fetched) == RECORDS and not pending:
                    break
                acks = [o for o in pending if o % 7 != 3]
                got = _share_fetch(c, group, member, tid, epoch, acks)
                accepted.update(acks)
                fetched.update(got)
                pending = got
            assert fetched == set(range(RECORDS)) and len(accepted) == RECORDS - 9

            # Kafka 4.3's topic configs (ShareCoordinatorService.shareGroupStateTopicConfigs); one
            # in-sync replica: this single node's offsets topic has one (the embedded defaults), so the
            # state topic too, and Kafka's default of 2 is capped at it (the parametrized test below)
            cfg = admin.describe_configs([ConfigResource(ResourceType.TOPIC, STATE_TOPIC)])
            entries = next(iter(cfg.values())).result(15)
            assert {k: entries[k].value for k in ("cleanup.policy", "compression.type", "segment.bytes",
                                                  "min.insync.replicas", "retention.ms")} == {
                "cleanup.policy": "delete", "compression.type": "producer", "segment.bytes": "104857600",
                "min.insync.replicas": "1", "retention.ms": "-1"}

            # the pruner moves the log start of __share_group_state (bounded: 15 s)
            for _ in range(150):
                start = _start_offset(c)
                if start > 0:
                    break
                time.sleep(0.1)
            assert start > 0

        b.restart(clean=True)
        again = []
        with WireClient(b.bootstrap) as c:
            member, empty = str(uuid.uuid4()), 0
            for epoch in range(60):             # bounded: 60 fetches of at most 0.2 s wait
                got = _share_fetch(c, group, member, tid, epoch)
                again.extend(got)
                empty = 0 if got else empty + 1
                if empty >= 3:
                    break
        # exactly the records not acknowledged: none acknowledged comes back, none is lost
        assert sorted(again) == sorted(set(range(RECORDS)) - accepted)
    finally:
        b.stop()


def _end_offset(c) -> int:
    req = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=STATE_TOPIC, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
    return c.call(req, 1).topics[0].partitions[0].offset


@pytest.mark.timeout(90)
def test_a_compacted_share_state_topic_of_an_older_kproto_gets_snapshots_only(tmp_path):
    """Upgrade safety: `__share_group_state` made compacted (as an older kproto made it) keeps only a
    key's last ShareUpdate, so there the coordinator writes every change as a ShareSnapshot (the
    leaders' deltas merged into the whole state) and prunes nothing; a restart still hands out exactly
    the records not acknowledged."""
    from confluent_kafka import Consumer, TopicPartition
    topic, group = "compact-t", "compact-g"
    b = BrokerProcess(str(tmp_path / "data"), settings=SETTINGS).start()
    try:
        admin = _topic_with_records(b, topic, group, 30)
        accepted = set()
        with WireClient(b.bootstrap) as c:
            tid = metadata(c, name=topic).topic_id
            member = str(uuid.uuid4())
            pending = _share_fetch(c, group, member, tid, 0)       # makes __share_group_state
            res = ConfigResource(ResourceType.TOPIC, STATE_TOPIC, incremental_configs=[
                ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
            for f in admin.incremental_alter_configs([res]).values():
                f.result(15)
            time.sleep(0.5)
            since = _end_offset(c)
            for epoch in range(1, 30):
                if not pending:
                    break
                acks = [o for o in pending if o % 7 != 3]
                pending = _share_fetch(c, group, member, tid, epoch, acks)
                accepted.update(acks)
            time.sleep(1)                                          # five prune intervals
            assert _start_offset(c) == 0
            end = _end_offset(c)
        assert end - since >= 6
        consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "compact-reader",
                             "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition(STATE_TOPIC, 0, since)])
            kinds = []
            for _ in range(100):                                   # bounded: 100 polls of 0.2 s
                m = consumer.poll(0.2)
                if m is not None and not m.error():
                    kinds.append(int.from_bytes(m.key()[:2], "big"))
                if len(kinds) >= end - since:
                    break
        finally:
            consumer.close()
        assert kinds and set(kinds) == {0}                         # ShareSnapshot records only

        b.restart(clean=True)
        again = []
        with WireClient(b.bootstrap) as c:
            member, empty = str(uuid.uuid4()), 0
            for epoch in range(40):
                got = _share_fetch(c, group, member, tid, epoch)
                again.extend(got)
                empty = 0 if got else empty + 1
                if empty >= 3:
                    break
        assert sorted(again) == sorted(set(range(30)) - accepted)
    finally:
        b.stop()


@pytest.mark.parametrize("settings,rf,min_isr", [
    ({}, 3, "2"),                                                      # Kafka's defaults
    ({"offsets.topic.replication.factor": "1"}, 1, "1"),               # the embedded single-node ones
    ({"offsets.topic.replication.factor": "3", "share.coordinator.state.topic.min.isr": "3"}, 3, "3"),
    ({"offsets.topic.replication.factor": "3", "share.coordinator.state.topic.replication.factor": "1"}, 1, "1"),
])
def test_the_state_topics_min_insync_replicas_default_is_never_above_its_replication_factor(settings, rf, min_isr):
    """Kafka's share.coordinator.state.topic.min.isr default is 2; kproto's state topic takes
    offsets.topic.replication.factor's replicas unless its own key is set, so a cluster whose
    offsets topic has one replica would otherwise refuse every share-state write
    (NOT_ENOUGH_REPLICAS). Set explicitly, the key is taken as it is."""
    from broker.config.broker_config import BrokerConfig
    from broker.controller.controller import _internal_rf
    from broker.metadata.internal_topics import internal_topic_spec

    config = BrokerConfig(settings)
    assert _internal_rf(config, STATE_TOPIC) == rf
    assert internal_topic_spec(config, STATE_TOPIC)[1]["min.insync.replicas"] == min_isr

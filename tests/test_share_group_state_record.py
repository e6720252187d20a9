"""The group coordinator's record of a share group's share-partition state (Kafka 4.3's
ShareGroupStatePartitionMetadata in __consumer_offsets, broker/groups/share_metadata.py and
broker/share/initialized_topics.py), seen from clients: the partitions a member subscribes to are
initialised in the background and assigned on a later heartbeat, listed by DescribeShareGroupOffsets
before any fetch (not while still initialising), and still after a broker restart; DescribeShareGroupOffsets
of a classic or consumer group answers as for a group that does not exist (no type check, as Kafka 4.3.1); DeleteGroups (the admin client's delete of a group) deletes an empty share group's
state, so a new group of that name starts from share.auto.offset.reset."""
from __future__ import annotations

import time
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType,
)

from kproto.messages.alter_share_group_offsets_request import AlterShareGroupOffsetsRequest as Alter  # noqa: E402
from kproto.messages.consumer_group_heartbeat_request import ConsumerGroupHeartbeatRequest  # noqa: E402
from kproto.messages.describe_share_group_offsets_request import (  # noqa: E402
    DescribeShareGroupOffsetsRequest as Describe,
)
from kproto.messages.find_coordinator_request import FindCoordinatorRequest  # noqa: E402
from kproto.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest  # noqa: E402
from tests.wire_client import WireClient  # noqa: E402
from broker.launch.process import BrokerProcess  # noqa: E402

SETTINGS = {"offsets.topic.num.partitions": "1"}


@pytest.fixture
def kbroker(tmp_path):
    # while the file HOLD_SHARE_INIT names exists, share-partitions recorded initializing stay so
    # (broker/share/initialized_topics.py); it does not exist unless a test makes it
    b = BrokerProcess(str(tmp_path / "data"), settings=SETTINGS,
                      env={"KPROTO_TEST_HOLD_SHARE_INIT": str(tmp_path / "hold-share-init")}).start()
    b.hold_share_init = tmp_path / "hold-share-init"
    yield b
    b.stop()


def _topic(bootstrap, name, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(30)
    return admin


def _coordinator(bootstrap, group):
    """FindCoordinator until the group's coordinator is there (the first one makes __consumer_offsets,
    as a client's does)."""
    with WireClient(bootstrap) as c:
        for _ in range(100):
            r = c.call(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4).coordinators[0]
            if r.error_code == 0:
                return
            time.sleep(0.1)
    raise AssertionError(f"no coordinator for {group}: {r}")


def _join(bootstrap, group, topic):
    """One ShareGroupHeartbeat of a new member (the first a client sends); retried while the
    coordinator is still being set up."""
    _coordinator(bootstrap, group)
    with WireClient(bootstrap) as c:
        for _ in range(100):
            r = c.call(ShareGroupHeartbeatRequest(group_id=group, member_id=uuid.uuid4().hex[:22], member_epoch=0,
                                                  rack_id=None, subscribed_topic_names=[topic]), 1)
            if r.error_code == 0:
                return r
            assert r.error_code in (14, 15, 16), r       # load in progress, not available, not coordinator
            time.sleep(0.1)
    raise AssertionError(f"no heartbeat answer: {r}")


def _heartbeat_until_assigned(bootstrap, group, member_id, epoch):
    """Heartbeats (as a client's, without a subscription change) until one assigns partitions."""
    with WireClient(bootstrap) as c:
        for _ in range(300):
            r = c.call(ShareGroupHeartbeatRequest(group_id=group, member_id=member_id, member_epoch=epoch,
                                                  rack_id=None, subscribed_topic_names=None), 1)
            assert r.error_code == 0, r
            if r.assignment is not None and r.assignment.topic_partitions:
                return r
            assert r.member_epoch == epoch                 # nothing changes until then
            time.sleep(0.05)
    raise AssertionError("never assigned")


def _leave(bootstrap, group, member_id):
    with WireClient(bootstrap) as c:
        r = c.call(ShareGroupHeartbeatRequest(group_id=group, member_id=member_id, member_epoch=-1,
                                              rack_id=None, subscribed_topic_names=None), 1)
    assert r.error_code == 0, r


def _offsets(bootstrap, group, topic=None, partitions=()):
    topics = None if topic is None else [Describe.DescribeShareGroupOffsetsRequestTopic(
        topic_name=topic, partitions=list(partitions))]
    with WireClient(bootstrap) as c:
        for _ in range(300):                 # a restarted broker loads __consumer_offsets first
            g = c.call(Describe(groups=[Describe.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=topics)]),
                       1).groups[0]
            if g.error_code != 14:           # COORDINATOR_LOAD_IN_PROGRESS
                break
            time.sleep(0.1)
    assert g.error_code == 0, g
    return {(t.topic_name, p.partition_index): p.start_offset for t in g.topics for p in t.partitions}


def _describe_missing(bootstrap, topics, group="sr-nobody"):
    """DescribeShareGroupOffsets v0 and v1 of a group without share state (by default one that does not
    exist): (error, message, topics with their partitions' answers), the same at both versions."""
    answers = []
    with WireClient(bootstrap) as c:
        for version in (0, 1):
            g = c.call(Describe(groups=[Describe.DescribeShareGroupOffsetsRequestGroup(
                group_id=group, topics=topics)]), version).groups[0]
            answers.append((g.error_code, g.error_message, [
                (t.topic_name, str(t.topic_id) == "00000000-0000-0000-0000-000000000000",
                 [(p.partition_index, p.start_offset, p.leader_epoch, p.error_code) for p in t.partitions])
                for t in g.topics]))
    assert answers[0] == answers[1]
    return answers[0]


def test_joined_members_partitions_are_listed_before_any_fetch_and_after_a_restart(kbroker):
    b = kbroker.bootstrap
    _topic(b, "sr-jobs", 3)
    _coordinator(b, "sr-nobody")
    # a group that does not exist is not looked up (Kafka 4.3.1's answers): NONE, no topics when all are
    # asked for, -1 (leader epoch 0, no error) for each partition asked for, also of a partition or topic
    # that does not exist (zero topic id)
    T = Describe.DescribeShareGroupOffsetsRequestTopic
    assert _describe_missing(b, None) == (0, None, [])
    assert _describe_missing(b, [T(topic_name="sr-jobs", partitions=[0, 7]), T(topic_name="sr-none", partitions=[0])]) == (
        0, None, [("sr-jobs", False, [(0, -1, 0, 0), (7, -1, 0, 0)]), ("sr-none", True, [(0, -1, 0, 0)])])
    # nor is the type of a group of that id checked: a classic group (a consumer's commit) and a
    # consumer group (KIP-848, one heartbeat) answer as one that does not exist (Kafka 4.3.1)
    c = confluent_kafka.Consumer({"bootstrap.servers": b, "group.id": "sr-classic"})
    c.commit(offsets=[confluent_kafka.TopicPartition("sr-jobs", 0, 0)], asynchronous=False)
    c.close()
    with WireClient(b) as w:
        r = w.call(ConsumerGroupHeartbeatRequest(group_id="sr-consumer", member_id=uuid.uuid4().hex[:22],
                                                 member_epoch=0, rebalance_timeout_ms=30000,
                                                 subscribed_topic_names=["sr-jobs"], topic_partitions=[]), 0)
        assert r.error_code == 0, r
    for group in ("sr-classic", "sr-consumer"):
        assert _describe_missing(b, None, group) == (0, None, [])
        assert _describe_missing(b, [T(topic_name="sr-jobs", partitions=[0])], group) == (
            0, None, [("sr-jobs", False, [(0, -1, 0, 0)])])
    # partitions recorded initializing (held there) are not listed: only those recorded
    # initialised are, as Kafka 4.3's describeShareGroupAllOffsets
    kbroker.hold_share_init.touch()
    res = _join(b, "sr-g1", "sr-jobs")
    held = kbroker.hold_share_init.with_name("hold-share-init.held")
    for _ in range(200):
        if held.exists():
            break
        time.sleep(0.05)
    assert held.exists()
    assert _describe_missing(b, None, "sr-g1") == (0, None, [])
    kbroker.hold_share_init.unlink()
    # answered at once, before the share coordinators initialised the partitions' state: nothing is
    # assigned yet (Kafka 4.3.1 answers a join so); a later heartbeat, once they are initialised,
    # bumps the group epoch and assigns them
    assert res.assignment is not None and res.assignment.topic_partitions == []
    later = _heartbeat_until_assigned(b, "sr-g1", res.member_id, res.member_epoch)
    assert later.member_epoch == res.member_epoch + 1
    assert sorted(p for t in later.assignment.topic_partitions for p in t.partitions) == [0, 1, 2]
    # initialised at the share coordinators, no start offset yet (the first fetch sets it)
    expected = {("sr-jobs", 0): -1, ("sr-jobs", 1): -1, ("sr-jobs", 2): -1}
    assert _offsets(b, "sr-g1") == expected
    _leave(b, "sr-g1", res.member_id)
    kbroker.stop()
    kbroker.start()
    # the group has no member now; the coordinator read where its state is from __consumer_offsets
    assert _offsets(b, "sr-g1") == expected


def test_deleted_share_group_starts_again_from_the_reset_offset(kbroker):
    b = kbroker.bootstrap
    admin = _topic(b, "sr-del", 1)
    p = Producer({"bootstrap.servers": b})
    for i in range(10):
        p.produce("sr-del", value=str(i).encode())
    assert p.flush(15) == 0
    res = ConfigResource(ResourceType.GROUP, "sr-g2", incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(15)
    # the group's share-partition moves past every record (kafka-share-groups.sh --reset-offsets)
    _coordinator(b, "sr-g2")
    with WireClient(b) as c:
        r = c.call(Alter(group_id="sr-g2", topics=[Alter.AlterShareGroupOffsetsRequestTopic(
            topic_name="sr-del", partitions=[Alter.AlterShareGroupOffsetsRequestPartition(
                partition_index=0, start_offset=10)])]), 0)
    assert r.error_code == 0 and r.responses[0].partitions[0].error_code == 0, r
    assert _offsets(b, "sr-g2") == {("sr-del", 0): 10}
    # kafka-share-groups.sh --delete --group: DeleteGroups
    for f in admin.delete_consumer_groups(["sr-g2"]).values():
        f.result(15)
    # a new group of that name: share.auto.offset.reset (earliest) again, all 10 records
    from confluent_kafka import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": b, "group.id": "sr-g2"})
    try:
        c.subscribe(["sr-del"])
        seen = set()
        for _ in range(150):
            for m in c.poll(0.2):
                if not m.error():
                    seen.add(m.offset())
            if len(seen) == 10:
                break
        assert seen == set(range(10))
    finally:
        c.close()


RETRY_MS = 4000


def test_partitions_left_initializing_are_initialised_again_after_the_retry_interval(tmp_path):
    """Share-partitions a stopped coordinator left recorded initializing (kill -9 while their
    initialisation was held) are initialised again by a heartbeat only once their record, loaded at
    the restart, is group.share.initialize.retry.interval.ms old (Kafka 4.3's GroupMetadataManager):
    until then they are taken as still initialising, so nothing is assigned; then they are."""
    hold = tmp_path / "hold-share-init"
    b = BrokerProcess(str(tmp_path / "data"), env={"KPROTO_TEST_HOLD_SHARE_INIT": str(hold)},
                      settings={**SETTINGS, "group.share.initialize.retry.interval.ms": str(RETRY_MS),
                                "offsets.commit.timeout.ms": "1000"}).start()   # (else it is at least 5 s)
    try:
        _topic(b.bootstrap, "sr-retry", 2)
        hold.touch()
        res = _join(b.bootstrap, "sr-g4", "sr-retry")
        held = tmp_path / "hold-share-init.held"
        for _ in range(200):
            if held.exists():
                break
            time.sleep(0.05)
        assert held.exists()
        b.kill()                           # recorded initializing, never initialised
        hold.unlink()
        restarted = time.monotonic()       # before the coordinator loads the record
        b.start()
        assert res.assignment is not None and res.assignment.topic_partitions == []
        # the member is still there after the restart (its records): it heartbeats on
        with WireClient(b.bootstrap) as c:
            for _ in range(600):           # 30 s at most
                r = c.call(ShareGroupHeartbeatRequest(group_id="sr-g4", member_id=res.member_id,
                                                      member_epoch=res.member_epoch, rack_id=None,
                                                      subscribed_topic_names=None), 1)
                if r.error_code in (14, 15, 16):    # the restarted coordinator still loading
                    time.sleep(0.05)
                    continue
                assert r.error_code == 0, r
                if r.assignment is not None and r.assignment.topic_partitions:
                    break
                time.sleep(0.05)
        assigned_after = time.monotonic() - restarted
        assert sorted(p for t in r.assignment.topic_partitions for p in t.partitions) == [0, 1]
        assert assigned_after >= RETRY_MS / 1000, assigned_after
    finally:
        b.stop()

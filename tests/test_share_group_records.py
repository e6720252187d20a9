"""Share groups' membership in __consumer_offsets (Kafka 4.3's records 10-14, broker/groups/share_records.py),
seen from clients: after a kill -9 and a start on the same data, a share group is listed and described
as before (group epoch, assignment epoch, members with their epochs and assignments) and a member that
heartbeats with its member id and epoch keeps its assignment; an empty share group that DeleteGroups
removed stays removed after a restart. And the records' bytes, as a Kafka 4.3 coordinator reads them."""
from __future__ import annotations

import time
import uuid

import pytest

from kproto.coordinator.share_group_target_assignment_metadata_value import ShareGroupTargetAssignmentMetadataValue
from kproto.messages.create_topics_request import CreateTopicsRequest
from kproto.messages.delete_groups_request import DeleteGroupsRequest
from kproto.messages.find_coordinator_request import FindCoordinatorRequest
from kproto.messages.list_groups_request import ListGroupsRequest
from kproto.messages.share_group_describe_request import ShareGroupDescribeRequest
from kproto.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
from tests.wire_client import WireClient
from broker.groups import share_records as srec
from broker.groups.loading import PartitionLoad
from broker.launch.process import BrokerProcess
from broker.share import membership

# a 100 ms assignment interval (KIP-1263) so members get their initialised partitions soon
SETTINGS = {"offsets.topic.num.partitions": "1", "group.share.assignment.interval.ms": "100",
            "share.coordinator.state.topic.num.partitions": "1"}
_RETRY = (14, 15, 16)        # load in progress, coordinator not available, not coordinator


@pytest.fixture
def kbroker(tmp_path):
    b = BrokerProcess(str(tmp_path / "data"), settings=SETTINGS).start()
    yield b
    b.stop()


def _until(c, request, version, ok, tries=300):
    """The answer once `ok(answer)` is not a retriable coordinator error (a start loads first)."""
    for _ in range(tries):
        r = c.call(request, version)
        code = ok(r)
        if code not in _RETRY:
            return r
        time.sleep(0.05)
    raise AssertionError(f"still {code}: {r}")


def _heartbeat(c, group, member_id, epoch, topics=None):
    return _until(c, ShareGroupHeartbeatRequest(group_id=group, member_id=member_id, member_epoch=epoch, rack_id=None,
                                                subscribed_topic_names=topics), 1, lambda r: r.error_code)


def _describe(c, group):
    g = _until(c, ShareGroupDescribeRequest(group_ids=[group], include_authorized_operations=False), 1,
               lambda r: r.groups[0].error_code).groups[0]
    return (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch,
            sorted((m.member_id, m.member_epoch, tuple(m.subscribed_topic_names),
                    tuple(sorted(p for t in m.assignment.topic_partitions for p in t.partitions)))
                   for m in g.members))


def _listed(c):
    r = _until(c, ListGroupsRequest(states_filter=[], types_filter=[]), 5, lambda r: r.error_code)
    return {g.group_id: (g.group_type, g.group_state) for g in r.groups}


def _setup(c, topic, partitions):
    t = CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=partitions, replication_factor=1,
                                           assignments=[], configs=[])
    assert c.call(CreateTopicsRequest(topics=[t], timeout_ms=15000, validate_only=False), 7).topics[0].error_code == 0
    _until(c, FindCoordinatorRequest(key_type=0, coordinator_keys=["any"]), 4, lambda r: r.coordinators[0].error_code)


def _join_until_assigned(c, group, topic, member_ids):
    """Each member joins; then heartbeats until every one has a partition (the share state of the
    partitions is initialised in the background first). member id -> epoch."""
    epochs = {m: _heartbeat(c, group, m, 0, [topic]).member_epoch for m in member_ids}
    for _ in range(300):
        got = {m: _heartbeat(c, group, m, epochs[m]) for m in member_ids}
        assert all(r.error_code == 0 for r in got.values()), got
        epochs = {m: r.member_epoch for m, r in got.items()}
        members = _describe(c, group)[4]
        if all(a for *_x, a in members) and len({e for _m, e, *_y in members}) == 1:
            return epochs
        time.sleep(0.05)
    raise AssertionError(f"never assigned: {_describe(c, group)}")


def test_share_group_survives_a_kill_and_a_member_keeps_its_assignment(kbroker):
    with WireClient(kbroker.bootstrap) as c:
        _setup(c, "srec-jobs", 4)
        a, b = uuid.uuid4().hex[:22], uuid.uuid4().hex[:22]
        epochs = _join_until_assigned(c, "srec-g", "srec-jobs", [a, b])
        before = _describe(c, "srec-g")
        assert before[:2] == (0, "Stable") and before[2] >= 2 and before[3] == before[2]
        assert sorted(p for *_x, ps in before[4] for p in ps) == [0, 1, 2, 3]
    kbroker.kill()
    kbroker.start()
    with WireClient(kbroker.bootstrap) as c:
        assert _listed(c).get("srec-g") == ("share", "Stable")
        assert _describe(c, "srec-g") == before
        # the member heartbeats on as if nothing happened: same epoch, no new assignment to take
        r = _heartbeat(c, "srec-g", a, epochs[a])
        assert (r.error_code, r.member_epoch) == (0, epochs[a]), r
        assert r.assignment is None or sorted(p for t in r.assignment.topic_partitions for p in t.partitions) == \
            [p for m, *_x, ps in before[4] if m == a for p in ps]
        assert _describe(c, "srec-g") == before


def test_deleted_empty_share_group_does_not_come_back(kbroker):
    with WireClient(kbroker.bootstrap) as c:
        _setup(c, "srec-del", 1)
        m = uuid.uuid4().hex[:22]
        assert _heartbeat(c, "srec-gone", m, 0, ["srec-del"]).error_code == 0
        assert _heartbeat(c, "srec-gone", m, -1).error_code == 0
        # another group, kept: the restart loads it
        assert _heartbeat(c, "srec-kept", uuid.uuid4().hex[:22], 0, ["srec-del"]).error_code == 0
        r = c.call(DeleteGroupsRequest(groups_names=["srec-gone"]), 2)
        assert [(g.group_id, g.error_code) for g in r.results] == [("srec-gone", 0)]
    kbroker.kill()
    kbroker.start()
    with WireClient(kbroker.bootstrap) as c:
        listed = _listed(c)
        assert "srec-gone" not in listed and listed.get("srec-kept") == ("share", "Stable")
        assert _describe(c, "srec-gone")[0] == 69          # GROUP_ID_NOT_FOUND


def test_records_are_kafka_4_3s_bytes_and_replay_to_the_same_group():
    """The layout of ShareGroup*Value v0 (flexible, Kafka 4.3's JSON) byte by byte, the tagged
    AssignmentTimestamp (KIP-1263) only when set; a group's records replayed give it back."""
    groups = membership.ShareGroups(assignment_interval_ms=1000)
    tid = uuid.UUID(int=5)
    topics = {"t": (tid, 2)}
    before = membership.view(None)
    groups.heartbeat("g", "m1", 0, "r1", ["t"], topics, 1_000, client_id="c", client_host="/h")
    group = groups.groups["g"]
    recs = membership.records(group, before)
    kinds = [int.from_bytes(k[:2], "big") for k, _v in recs]
    assert kinds == [10, 11, 13, 12, 14]          # member, group epoch, target, target epoch, current
    values = dict(zip(kinds, (v for _k, v in recs)))
    # key: type 10, then GroupId and MemberId as int16-length strings (non-flexible v0)
    assert recs[0][0] == b"\x00\x0a" + b"\x00\x01g" + b"\x00\x02m1"
    # MemberMetadata v0: version, compact RackId, ClientId, ClientHost, SubscribedTopicNames, no tags
    assert values[10] == b"\x00\x00" + b"\x03r1" + b"\x02c" + b"\x03/h" + b"\x02\x02t" + b"\x00"
    # GroupMetadata v0: Epoch 1, MetadataHash (int64), no tags
    assert values[11][:6] == b"\x00\x00\x00\x00\x00\x01" and len(values[11]) == 2 + 4 + 8 + 1
    # TargetAssignmentMetadata v0: AssignmentEpoch 1, one tagged field: tag 0, 8 bytes, the timestamp
    assert values[12] == b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x01\x00\x08" + (1_000).to_bytes(8, "big")
    assert ShareGroupTargetAssignmentMetadataValue(assignment_epoch=3).encode(0) == b"\x00\x00\x00\x03\x00"
    # TargetAssignmentMember v0: one topic (uuid, compact [0, 1]), no tags
    assert values[13] == b"\x00\x00\x02" + tid.bytes + b"\x03" + b"\x00\x00\x00\x00\x00\x00\x00\x01" + b"\x00\x00"
    # CurrentMemberAssignment v0: MemberEpoch 1, PreviousMemberEpoch 0, State 0 (STABLE), partitions
    assert values[14] == (b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00" + b"\x00" + b"\x02" + tid.bytes
                          + b"\x03" + b"\x00\x00\x00\x00\x00\x00\x00\x01" + b"\x00\x00")
    load = PartitionLoad(0)
    load.replay_batch(0, -1, False, False, recs)
    back = groups.restore("g", load.share_groups["g"], 5_000)
    assert membership.records(back, None) == recs         # the same group: the same records
    # a leave: the member's three tombstones, then the new group epoch and the (empty) target epoch
    view = membership.view(group, ["m1"])
    groups.heartbeat("g", "m1", -1, None, None, topics, 3_000)
    leave = membership.records(groups.groups["g"], view, ["m1"])
    assert [(int.from_bytes(k[:2], "big"), v is None) for k, v in leave] == [
        (14, True), (13, True), (10, True), (11, False), (12, False)]
    load.replay_batch(len(recs), -1, False, False, leave)
    back = groups.restore("g", load.share_groups["g"], 5_000)
    assert membership.records(back, None) == membership.records(groups.groups["g"], None)
    assert (back.group_epoch, back.assignment_epoch, back.assignment_ms, back.members) == (2, 2, 3_000, {})
    load.replay_batch(99, -1, False, False, srec.group_tombstones("g", []))
    assert groups.restore("g", load.share_groups["g"], 5_000) is None


def test_a_change_whose_records_are_not_written_is_undone():
    """The shell puts the group back when the append fails (the client is told the append's error)."""
    groups = membership.ShareGroups()
    topics = {"t": (uuid.UUID(int=6), 3)}
    groups.heartbeat("g", "a", 0, None, ["t"], topics, 0)
    group = groups.groups["g"]
    groups.heartbeat("g", "a", group.members["a"].member_epoch, None, None, topics, 1)
    written = membership.records(group, None)
    for member_id, epoch in (("b", 0), ("a", -1), ("a", 1)):      # a join, a leave, a resubscription
        before = membership.view(group, [member_id])
        groups.heartbeat("g", member_id, epoch, "rack", ["t", "u"] if epoch == 1 else ["t"], topics, 2)
        assert membership.records(group, before, [member_id])
        membership.revert(group, before)
        assert membership.records(group, None) == written

"""ElectLeaders and the automatic preferred-leader rebalance (broker/replication/preferred.py),
and the controller's side of controlled shutdown (broker/quorum/shutdown.py), checked against
what Kafka 3.9's controller decides. Pure: no processes."""
from __future__ import annotations

import uuid

import trio

from kproto.errors import ErrorCode
from kproto.messages.broker_heartbeat_request import BrokerHeartbeatRequest
from kproto.metadata.broker_registration_change_record import BrokerRegistrationChangeRecord
from kproto.metadata.partition_record import PartitionRecord
from kproto.metadata.register_broker_record import RegisterBrokerRecord
from kproto.metadata.topic_record import TopicRecord

from broker.metadata.image import MetadataImage
from broker.replication import preferred
from broker.replication.brokers import BrokerInfo, brokers_from_image

E = ErrorCode


def _image(parts):
    """parts: {index: (replicas, isr, leader)} of topic "t"."""
    image = MetadataImage()
    tid = uuid.uuid4()
    image.apply(TopicRecord(name="t", topic_id=tid))
    for i, (replicas, isr, leader) in parts.items():
        image.apply(PartitionRecord(partition_id=i, topic_id=tid, replicas=replicas, isr=isr, leader=leader,
                                    leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[],
                                    directories=[], leader_recovery_state=0))
    return image


def _brokers(n=3, fenced=(), shutting=()):
    return {i: BrokerInfo(i, None, i in fenced, i in shutting, epoch=10 + i) for i in range(1, n + 1)}


def test_preferred_election_moves_leadership_to_the_first_replica():
    image = _image({0: ([1, 2, 3], [1, 2, 3], 2)})
    results, records = preferred.elect(image, _brokers(), preferred.PREFERRED, [("t", [0])])
    assert results == [("t", [(0, E.NONE, None)])]
    assert len(records) == 1 and records[0].leader == 1 and records[0].isr is None
    for r in records:
        image.apply(r)
    p = image.topics["t"].partitions[0]
    assert (p.leader, p.leader_epoch) == (1, 1)


def test_preferred_election_errors_as_kafka():
    image = _image({0: ([1, 2, 3], [1, 2, 3], 1),    # already led by the preferred replica
                    1: ([1, 2, 3], [2, 3], 2),       # preferred replica out of the ISR
                    2: ([3, 1, 2], [3, 1, 2], 1)})   # preferred replica fenced
    results, records = preferred.elect(image, _brokers(fenced={3}), preferred.PREFERRED,
                                       [("t", [0, 1, 2, 7]), ("missing", [0])])
    assert records == []
    assert results == [("t", [(0, E.ELECTION_NOT_NEEDED, None), (1, E.PREFERRED_LEADER_NOT_AVAILABLE, None),
                              (2, E.PREFERRED_LEADER_NOT_AVAILABLE, None),
                              (7, E.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as t-7")]),
                       ("missing", [(0, E.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as missing")])]


def test_preferred_election_of_all_partitions_leaves_out_those_that_need_none():
    image = _image({0: ([1, 2, 3], [1, 2, 3], 1), 1: ([2, 3, 1], [2, 3, 1], 3)})
    results, records = preferred.elect(image, _brokers(), preferred.PREFERRED, None)
    assert results == [("t", [(1, E.NONE, None)])]
    assert [r.leader for r in records] == [2]


def test_unclean_election():
    image = _image({0: ([1, 2, 3], [1, 2, 3], 1),   # has a leader
                    1: ([1, 2, 3], [1], -1),         # leaderless, its last ISR member fenced
                    2: ([1, 2, 3], [1], -1)})        # every replica fenced
    results, records = preferred.elect(image, _brokers(fenced={1}), preferred.UNCLEAN, [("t", [0, 1])])
    assert results == [("t", [(0, E.ELECTION_NOT_NEEDED, None), (1, E.NONE, None)])]
    assert (records[0].leader, records[0].isr, records[0].leader_recovery_state) == (2, [2], 1)
    results, records = preferred.elect(image, _brokers(fenced={1, 2, 3}), preferred.UNCLEAN, [("t", [2])])
    assert results == [("t", [(2, E.ELIGIBLE_LEADERS_NOT_AVAILABLE, None)])] and records == []
    # an ISR member that can lead is a clean election even when asked for an unclean one
    image = _image({0: ([1, 2, 3], [2, 3], -1)})
    _results, records = preferred.elect(image, _brokers(), preferred.UNCLEAN, [("t", [0])])
    assert (records[0].leader, records[0].isr) == (2, None)


def test_rebalance_only_for_brokers_above_the_imbalance_percentage():
    # broker 1 is preferred for 10 partitions and leads 9 of them: 10 % imbalance, not above 10
    parts = {i: ([1, 2, 3], [1, 2, 3], 1 if i else 2) for i in range(10)}
    image = _image(parts)
    assert preferred.rebalance(image, _brokers(), 10) == []
    # leading 8 of 10: 20 % > 10 %: both partitions go back to it
    parts[1] = ([1, 2, 3], [1, 2, 3], 3)
    image = _image(parts)
    assert sorted((r.partition_id, r.leader) for r in preferred.rebalance(image, _brokers(), 10)) == [(0, 1), (1, 1)]
    # not for a partition being reassigned
    image.topics["t"].partitions[1].adding_replicas = [4]
    assert [(r.partition_id, r.leader) for r in preferred.rebalance(image, _brokers(), 10)] == [(0, 1)]
    image.topics["t"].partitions[1].adding_replicas = []
    # not while it is fenced or shutting down
    assert preferred.rebalance(image, _brokers(fenced={1}), 10) == []
    assert preferred.rebalance(image, _brokers(shutting={1}), 10) == []


# -- controlled shutdown on the controller ---------------------------------------------------

class _Controller:
    def __init__(self, image):
        self.image = image

    def brokers(self):
        return brokers_from_image(self.image, 1)


class _Quorum:
    """What ShutdownTracker uses of ReplicatedMetadata: an image, propose (applied at once and
    committed at once), the broker's controller."""

    def __init__(self, image):
        from types import SimpleNamespace
        self.image = image
        self.config = SimpleNamespace(get=lambda k: "false")
        self.broker = SimpleNamespace(controller=_Controller(image))
        self.proposed = []

    def propose_nowait(self, records):
        for r in records:
            self.image.apply(r)
        self.image.offset += 1
        self.proposed.append(records)
        return self.image.offset

    async def propose(self, records, timeout_ms=0, on_proposed=None):
        offset = self.propose_nowait(records)
        if on_proposed is not None:
            on_proposed(offset)


def _registered(image, n=3):
    for i in range(1, n + 1):
        image.apply(RegisterBrokerRecord(broker_id=i, incarnation_id=uuid.uuid4(), broker_epoch=10 + i,
                                         end_points=[], features=[], rack=None, fenced=False))


def _hb(bid, offset, want=True):
    return BrokerHeartbeatRequest(broker_id=bid, broker_epoch=10 + bid, current_metadata_offset=offset,
                                  want_fence=False, want_shut_down=want, offline_log_dirs=[])


def test_controlled_shutdown_moves_leaders_then_grants_once_the_others_caught_up():
    from broker.quorum.shutdown import ShutdownTracker
    image = _image({0: ([1, 2, 3], [1, 2, 3], 1), 1: ([2, 1, 3], [2, 1, 3], 2), 2: ([1], [1], 1)})
    _registered(image)
    image.offset = 100
    q = _Quorum(image)
    tracker = ShutdownTracker(q)

    async def main():
        for b in (2, 3):
            tracker.note(_hb(b, 100, want=False))
        answer = await tracker.on_heartbeat(_hb(1, 100), image.brokers[1])
        assert not answer.should_shut_down and not answer.is_fenced
        # one batch: the registration change and the elections
        batch = q.proposed[0]
        assert isinstance(batch[0], BrokerRegistrationChangeRecord) and batch[0].in_controlled_shutdown == 1
        assert image.brokers[1].in_controlled_shutdown
        parts = image.topics["t"].partitions
        assert (parts[0].leader, parts[0].isr) == (2, [2, 3])
        assert (parts[1].leader, parts[1].isr) == (2, [2, 3])
        assert (parts[2].leader, parts[2].isr) == (-1, [1])   # its only ISR member: leaderless, kept
        # not granted while broker 3 has not applied the move
        tracker.note(_hb(2, 101, want=False))
        answer = await tracker.on_heartbeat(_hb(1, 101), image.brokers[1])
        assert not answer.should_shut_down
        tracker.note(_hb(3, 101, want=False))
        answer = await tracker.on_heartbeat(_hb(1, 101), image.brokers[1])
        assert answer.should_shut_down and answer.is_fenced
        assert image.brokers[1].fenced
        # heartbeats without want_shut_down from a fenced broker in controlled shutdown do not unfence it
        answer = await tracker.on_heartbeat(_hb(1, 102, want=False), image.brokers[1])
        assert answer is not None and answer.is_fenced
    trio.run(main)


def test_broker_registration_change_record_uses_kafkas_fenced_encoding():
    image = MetadataImage()
    _registered(image, 1)
    image.apply(BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=11, fenced=0))
    assert not image.brokers[1].fenced           # 0: no change
    image.apply(BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=11, fenced=1))
    assert image.brokers[1].fenced
    image.apply(BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=11, fenced=-1))
    assert not image.brokers[1].fenced


def test_unclean_leader_election_enable_per_topic_and_broker_default():
    from broker.replication import election
    from kproto.metadata.config_record import ConfigRecord
    image = _image({0: ([1, 2, 3], [1], -1)})   # its last in-sync replica (1) is fenced
    brokers = _brokers(fenced={1})
    assert election.sweep(image, brokers, unclean_default=False) == []
    [r] = election.sweep(image, brokers, unclean_default=True)
    assert (r.leader, r.isr, r.leader_recovery_state) == (2, [2], 1)
    image.apply(ConfigRecord(resource_type=2, resource_name="t", name="unclean.leader.election.enable", value="true"))
    [r] = election.sweep(image, brokers, unclean_default=False)   # the topic's setting wins
    assert (r.leader, r.isr) == (2, [2])
    image.apply(ConfigRecord(resource_type=2, resource_name="t", name="unclean.leader.election.enable", value="false"))
    assert election.sweep(image, brokers, unclean_default=True) == []

"""The active controller's broker registration and fencing rules, as Kafka 3.9's
ClusterControlManager.registerBroker and BrokerHeartbeatManager.calculateNextBrokerState
(broker/controller/registration.py, driven through ReplicatedMetadata._register and
Liveness.handle_heartbeat over an in-memory image): a new incarnation registers fenced, a
registration over a live session is DUPLICATE_BROKER_REGISTRATION, the same incarnation amends and
keeps its state, and a heartbeat unfences only once the broker caught up with its registration
(with the leaderless partitions it can lead elected in the same batch)."""
from __future__ import annotations

import types
import uuid

import trio
import trio.testing

from kproto.errors import ErrorCode
from kproto.messages.broker_heartbeat_request import BrokerHeartbeatRequest
from kproto.messages.broker_registration_request import BrokerRegistrationRequest, Listener
from kproto.metadata.partition_change_record import PartitionChangeRecord
from kproto.metadata.partition_record import PartitionRecord
from kproto.metadata.topic_record import TopicRecord
from kproto.metadata.unfence_broker_record import UnfenceBrokerRecord

from broker.metadata import serde
from broker.metadata.image import MetadataImage
from broker.quorum.liveness import Liveness
from broker.quorum.replicated import ReplicatedMetadata
from broker.replication.brokers import brokers_from_image

SESSION_MS = 2000
CONFIG = {"broker.session.timeout.ms": SESSION_MS, "broker.heartbeat.interval.ms": 500,
          "log.dir.failure.timeout.ms": 30000, "unclean.leader.election.enable": "false"}


class FakeController:
    """The parts of ReplicatedMetadata that _register and Liveness use: an active controller whose
    proposals are applied to its image at once, each record one offset."""

    is_active_controller = True

    def __init__(self):
        self.image = MetadataImage()
        self.image.offset = 99
        self.config = types.SimpleNamespace(get_int=CONFIG.get, get_long=CONFIG.get, get=CONFIG.get)
        self.broker = types.SimpleNamespace(
            cluster_id="c1", controller=types.SimpleNamespace(brokers=lambda: brokers_from_image(self.image, 0)))
        self.batches = []
        self.liveness = Liveness(self)

    def propose_nowait(self, records):
        self.batches.append(list(records))
        for r in records:
            self.image.apply(r)
        self.image.offset += len(records)
        return self.image.offset

    async def propose(self, records, timeout_ms=0, on_proposed=None):
        offset = self.propose_nowait(records)
        if on_proposed is not None:
            on_proposed(offset)

    async def _await_pending(self, timeout_ms):
        pass

    async def register(self, bid, incarnation, cluster_id="c1"):
        req = BrokerRegistrationRequest(broker_id=bid, cluster_id=cluster_id, incarnation_id=incarnation,
                                        listeners=[Listener(name="PLAINTEXT", host="h", port=9000 + bid,
                                                            security_protocol=0)],
                                        features=[], rack=None, log_dirs=[], previous_broker_epoch=-1)
        return await ReplicatedMetadata._register(self, req)

    async def heartbeat(self, bid, offset, want_fence=False):
        b = self.image.brokers[bid]
        return await self.liveness.handle_heartbeat(BrokerHeartbeatRequest(
            broker_id=bid, broker_epoch=b.broker_epoch, current_metadata_offset=offset,
            want_fence=want_fence, want_shut_down=False, offline_log_dirs=[]))


def run(test):
    def wrapper():
        async def main():
            c = FakeController()
            c.liveness._active_since = trio.current_time()   # sessions started (the fence loop's job)
            await test(c)
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    wrapper.__name__ = test.__name__
    return wrapper


@run
async def test_a_new_incarnation_registers_fenced_and_is_unfenced_only_once_caught_up(c):
    resp = await c.register(1, uuid.uuid4())
    assert resp.error_code == 0 and resp.broker_epoch == 100
    assert c.image.brokers[1].fenced, "a new incarnation registers fenced"
    # the heartbeat of a broker behind its RegisterBrokerRecord (offset 100) leaves it fenced
    answer = await c.heartbeat(1, offset=99)
    assert (answer.error_code, answer.is_fenced, answer.is_caught_up) == (0, True, False)
    assert c.image.brokers[1].fenced
    # caught up, but still asking to stay fenced (logs not loaded yet): fenced, caught up
    answer = await c.heartbeat(1, offset=100, want_fence=True)
    assert (answer.is_fenced, answer.is_caught_up) == (True, True)
    assert c.image.brokers[1].fenced
    answer = await c.heartbeat(1, offset=100)
    assert (answer.error_code, answer.is_fenced, answer.is_caught_up) == (0, False, True)
    assert not c.image.brokers[1].fenced
    assert isinstance(c.batches[-1][0], UnfenceBrokerRecord)


@run
async def test_a_second_incarnation_is_refused_while_the_first_has_a_live_session(c):
    first, second = uuid.uuid4(), uuid.uuid4()
    await c.register(1, first)
    await c.heartbeat(1, offset=100)
    assert not c.image.brokers[1].fenced
    await trio.sleep(SESSION_MS / 1000 / 2)
    resp = await c.register(1, second)
    assert resp.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION == 101
    assert c.image.brokers[1].incarnation_id == first and not c.image.brokers[1].fenced
    # a heartbeat of the first keeps its session; once it stops, the session expires
    await c.heartbeat(1, offset=100)
    await trio.sleep(SESSION_MS / 1000 - 0.1)
    assert (await c.register(1, second)).error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    await trio.sleep(0.2)
    resp = await c.register(1, second)
    assert resp.error_code == 0
    b = c.image.brokers[1]
    assert b.incarnation_id == second and b.fenced and b.broker_epoch == resp.broker_epoch > 100


@run
async def test_a_fenced_registration_does_not_hold_the_id(c):
    await c.register(1, uuid.uuid4())   # fenced, never unfenced: no valid session (Kafka's hasValidSession)
    resp = await c.register(1, uuid.uuid4())
    assert resp.error_code == 0


@run
async def test_the_same_incarnation_amends_and_keeps_its_state_and_epoch(c):
    inc = uuid.uuid4()
    first = await c.register(1, inc)
    await c.heartbeat(1, offset=100)
    c.image.brokers[1].in_controlled_shutdown = True
    again = await c.register(1, inc)
    b = c.image.brokers[1]
    assert again.error_code == 0 and again.broker_epoch == first.broker_epoch == b.broker_epoch
    assert not b.fenced and b.in_controlled_shutdown, "an amended registration keeps its state"


@run
async def test_a_heartbeat_with_another_epoch_is_stale_and_does_not_keep_the_session(c):
    await c.register(1, uuid.uuid4())
    await c.heartbeat(1, offset=100)
    await trio.sleep(SESSION_MS / 1000 - 0.5)
    answer = await c.liveness.handle_heartbeat(BrokerHeartbeatRequest(
        broker_id=1, broker_epoch=5, current_metadata_offset=200, want_fence=False,
        want_shut_down=False, offline_log_dirs=[]))
    assert answer.error_code == ErrorCode.STALE_BROKER_EPOCH
    await trio.sleep(0.6)
    assert (await c.register(1, uuid.uuid4())).error_code == 0


@run
async def test_unfencing_elects_the_leaderless_partitions_it_can_lead_in_the_same_batch(c):
    await c.register(1, uuid.uuid4())
    await c.register(2, uuid.uuid4())
    topic = uuid.uuid4()
    c.propose_nowait([TopicRecord(name="t", topic_id=topic),
                      PartitionRecord(partition_id=0, topic_id=topic, replicas=[1, 2], isr=[1], leader=-1,
                                      leader_epoch=3, partition_epoch=3)])
    answer = await c.heartbeat(1, offset=c.image.offset)
    assert not answer.is_fenced
    unfence, *elections = c.batches[-1]
    assert isinstance(unfence, UnfenceBrokerRecord) and unfence.id == 1
    assert [(type(r), r.leader) for r in elections] == [(PartitionChangeRecord, 1)]
    assert c.image.topics["t"].partitions[0].leader == 1


async def _register_over_an_expired_session(c):
    """Brokers 1 and 2 registered and unfenced, partition t-0 led by 1; broker 1's session expires
    (the fence loop has not fenced it yet) and a new incarnation of broker 1 registers."""
    await c.register(1, uuid.uuid4())
    await c.register(2, uuid.uuid4())
    await c.heartbeat(1, offset=c.image.offset)
    await c.heartbeat(2, offset=c.image.offset)
    topic = uuid.uuid4()
    c.propose_nowait([TopicRecord(name="t", topic_id=topic),
                      PartitionRecord(partition_id=0, topic_id=topic, replicas=[1, 2], isr=[1, 2], leader=1,
                                      leader_epoch=0, partition_epoch=0)])
    await trio.sleep(SESSION_MS / 1000 - 0.5)
    await c.heartbeat(2, offset=c.image.offset)
    await trio.sleep(1.0)
    return await c.register(1, uuid.uuid4())


@run
async def test_a_new_incarnation_over_an_expired_unfenced_one_fences_it_in_the_same_batch(c):
    resp = await _register_over_an_expired_session(c)
    assert resp.error_code == 0
    p = c.image.topics["t"].partitions[0]
    assert (p.leader, p.isr) == (2, [2]), "the old incarnation's leadership moved in the registration's batch"
    assert c.image.brokers[1].fenced


@run
async def test_a_registration_from_another_cluster_is_refused_and_writes_nothing(c):
    # ClusterControlManager.registerBroker: "Expected cluster ID c1, but got cluster ID c2"
    r = await c.register(1, uuid.uuid4(), cluster_id="c2")
    assert (r.error_code, r.broker_epoch) == (ErrorCode.INCONSISTENT_CLUSTER_ID, -1)
    assert c.batches == [] and 1 not in c.image.brokers


class ReplayingController(FakeController):
    """A controller that did not write the registrations: it replays the committed batches through
    ReplicatedMetadata._on_commit, as a standby controller does, and is elected afterwards."""

    commit_count = 0
    _loading, _load_wake = (), None   # (no loader task: every commit is applied in its step)
    _apply_decoded = ReplicatedMetadata._apply_decoded

    def __init__(self):
        super().__init__()
        self._when_committed = []

    def _apply_records(self, last, records):
        for r in records:
            self.image.apply(r)
        self.image.offset = last

    def image_committed(self):
        return True

    def _maybe_caught_up(self):
        pass

    def replay(self, batches, first_offset):
        records = [r for batch in batches for r in batch]
        entries = [types.SimpleNamespace(offset=first_offset + i, data=serde.encode(r), control=False)
                   for i, r in enumerate(records)]
        ReplicatedMetadata._on_commit(self, entries)


@run
async def test_a_controller_elected_later_waits_for_the_register_record_itself(c):
    # Kafka's controllers keep each RegisterBrokerRecord's offset on replay
    # (ClusterControlManager.registerBrokerRecordOffsets): a broker is caught up once it reached that
    # record, not the broker epoch (the first offset of its batch, which may fence the old incarnation)
    assert (await _register_over_an_expired_session(c)).error_code == 0
    epoch, record_offset = c.image.brokers[1].broker_epoch, c.image.offset
    assert record_offset > epoch, "the registration's batch starts with the old incarnation's fencing"

    d = ReplayingController()
    d.replay(c.batches, first_offset=100)
    assert d.image.offset == record_offset and d.image.brokers[1].broker_epoch == epoch
    d.liveness._active_since = trio.current_time()   # d is the active controller now
    answer = await d.heartbeat(1, offset=epoch)
    assert (answer.error_code, answer.is_fenced, answer.is_caught_up) == (0, True, False)
    assert d.image.brokers[1].fenced
    answer = await d.heartbeat(1, offset=record_offset)
    assert (answer.error_code, answer.is_fenced, answer.is_caught_up) == (0, False, True)
    assert not d.image.brokers[1].fenced

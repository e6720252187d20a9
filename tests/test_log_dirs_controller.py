"""Log directories in the metadata (JBOD in KRaft, KIP-858), controller side
(broker/controller/log_dirs.py): which dir a new replica gets, AssignReplicasToDirs,
and what a failed dir reported in a heartbeat moves, checked against Kafka 3.9's
ClusterControlManager.defaultDir, DirectoryId.isOnline,
ReplicationControlManager.handleAssignReplicasToDirs / handleDirectoriesOffline.
Pure: no processes."""
from __future__ import annotations

import uuid

from kproto.errors import ErrorCode
from kproto.messages.assign_replicas_to_dirs_request import (
    AssignReplicasToDirsRequest, DirectoryData, PartitionData, TopicData,
)
from kproto.metadata.broker_registration_change_record import BrokerRegistrationChangeRecord
from kproto.metadata.partition_change_record import PartitionChangeRecord
from kproto.metadata.partition_record import PartitionRecord
from kproto.metadata.register_broker_record import RegisterBrokerRecord
from kproto.metadata.topic_record import TopicRecord

from broker.metadata import serde
from broker.metadata.image import MetadataImage
from broker.controller import log_dirs
from broker.controller.log_dirs import LOST, MIGRATING, UNASSIGNED
from broker.metadata.snapshotter import image_records
from broker.replication.brokers import brokers_from_image
from broker.replication.leader_hint import offline_replicas

A, B, C = uuid.UUID(int=1 << 100), uuid.UUID(int=2 << 100), uuid.UUID(int=3 << 100)
TID = uuid.UUID(int=42 << 64)


def _image(dirs_of=None):
    """Brokers 1..3 (broker 1 with dirs A and B, 2 and 3 with one dir each)."""
    dirs_of = dirs_of or {1: [A, B], 2: [C], 3: [uuid.UUID(int=4 << 100)]}
    img = MetadataImage()
    for bid, dirs in dirs_of.items():
        img.apply(RegisterBrokerRecord(broker_id=bid, broker_epoch=100 + bid, incarnation_id=uuid.uuid4(),
                                       fenced=False, log_dirs=list(dirs)))
    img.apply(TopicRecord(name="t", topic_id=TID))
    return img


def _partition(img, index, replicas, directories, leader=None):
    img.apply(PartitionRecord(partition_id=index, topic_id=TID, replicas=replicas, isr=list(replicas),
                              leader=replicas[0] if leader is None else leader, leader_epoch=0,
                              partition_epoch=0, directories=directories))


def _apply(img, records):
    for r in records:
        img.apply(serde.decode(serde.encode(r)))   # as the metadata log carries them


def test_a_new_replica_gets_its_brokers_only_dir_else_unassigned():
    img = _image({1: [A, B], 2: [C], 3: []})
    assert log_dirs.new_directories(img, [1, 2, 3, 9]) == [UNASSIGNED, C, MIGRATING, UNASSIGNED]


def test_is_online_follows_directory_id():
    assert log_dirs.is_online(UNASSIGNED, [A]) and log_dirs.is_online(MIGRATING, [A])
    assert not log_dirs.is_online(LOST, [A])
    assert log_dirs.is_online(A, [A, B]) and not log_dirs.is_online(C, [A, B])
    assert log_dirs.is_online(C, [])     # registered without dirs: assumed online


def test_a_created_partition_records_its_directories():
    from broker.controller.controller import Controller
    img = _image()
    ctl = Controller.__new__(Controller)
    ctl.image, ctl.node_id = img, 1
    rec = ctl._partition_record(TID, 0, [2, 1])
    assert rec.directories == [C, UNASSIGNED]
    _apply(img, [rec])
    assert img.topics["t"].partitions[0].directories == [C, UNASSIGNED]


def test_assign_replicas_to_dirs_sets_the_replicas_dir():
    img = _image()
    _partition(img, 0, [1, 2], [UNASSIGNED, C])
    req = AssignReplicasToDirsRequest(broker_id=1, broker_epoch=101, directories=[DirectoryData(id=B, topics=[
        TopicData(topic_id=TID, partitions=[PartitionData(partition_index=0), PartitionData(partition_index=7)]),
        TopicData(topic_id=uuid.UUID(int=5), partitions=[PartitionData(partition_index=0)])])])
    resp, records = log_dirs.assign(img, req, brokers_from_image(img, 1))
    codes = [[p.error_code for p in t.partitions] for t in resp.directories[0].topics]
    assert resp.error_code == 0
    assert codes == [[0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION], [ErrorCode.UNKNOWN_TOPIC_ID]]
    assert [type(r) for r in records] == [PartitionChangeRecord]
    assert records[0].directories == [B, C] and records[0].leader == -2 and records[0].isr is None
    _apply(img, records)
    p = img.topics["t"].partitions[0]
    assert p.directories == [B, C] and p.leader == 1
    # already there: nothing to write
    assert log_dirs.assign(img, req, brokers_from_image(img, 1))[1] == []


def test_assign_replicas_to_dirs_checks_the_broker():
    img = _image()
    _partition(img, 0, [2, 3], [C, UNASSIGNED])
    ask = lambda bid, epoch: log_dirs.assign(img, AssignReplicasToDirsRequest(  # noqa: E731
        broker_id=bid, broker_epoch=epoch, directories=[DirectoryData(id=A, topics=[
            TopicData(topic_id=TID, partitions=[PartitionData(partition_index=0)])])]), brokers_from_image(img, 1))
    assert ask(1, 5)[0].error_code == ErrorCode.STALE_BROKER_EPOCH
    assert ask(9, 5)[0].error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    resp, records = ask(1, 101)      # not a replica of the partition
    assert resp.directories[0].topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert records == []


def test_a_failed_dir_moves_only_the_partitions_in_it():
    img = _image()
    _partition(img, 0, [1, 2, 3], [A, C, UNASSIGNED])        # led by 1, in its dir A
    _partition(img, 1, [1, 2, 3], [B, C, UNASSIGNED])        # led by 1, in its dir B
    _partition(img, 2, [2, 1, 3], [C, B, UNASSIGNED])        # led by 2, follower on 1 in B
    _partition(img, 3, [1, 2, 3], [UNASSIGNED, C, UNASSIGNED])   # 1 has not said where: untouched
    records = log_dirs.offline_records(img, 1, 101, [B], brokers_from_image(img, 1))
    changes = {r.partition_id: r for r in records if isinstance(r, PartitionChangeRecord)}
    assert set(changes) == {1, 2}
    assert changes[1].leader == 2 and changes[1].isr == [2, 3]
    assert changes[2].leader == -2 and changes[2].isr == [2, 3]
    reg = records[-1]
    assert isinstance(reg, BrokerRegistrationChangeRecord) and reg.broker_id == 1 and reg.log_dirs == [A]
    _apply(img, records)
    parts = img.topics["t"].partitions
    assert [parts[i].leader for i in range(4)] == [1, 2, 2, 1]
    assert img.brokers[1].log_dirs == [A] and not img.brokers[1].fenced

    class _B:
        image = img
    assert offline_replicas(_B, parts[1]) == [1] and offline_replicas(_B, parts[2]) == [1]
    assert offline_replicas(_B, parts[0]) == [] and offline_replicas(_B, parts[3]) == []
    # the same dir reported again (every heartbeat until the broker halts): nothing new
    assert log_dirs.offline_records(img, 1, 101, [B], brokers_from_image(img, 1)) == []


def test_a_failed_dir_keeps_the_last_isr_member_leaderless():
    img = _image()
    img.apply(PartitionRecord(partition_id=0, topic_id=TID, replicas=[1, 2], isr=[1], leader=1, leader_epoch=0,
                              partition_epoch=0, directories=[B, C]))
    records = log_dirs.offline_records(img, 1, 101, [B], brokers_from_image(img, 1))
    assert records[0].leader == -1 and records[0].isr is None   # Kafka keeps the last ISR member
    assert records[0].partition_id == 0


def test_assigning_a_replica_to_an_offline_dir_moves_it_out():
    img = _image()
    _partition(img, 0, [1, 2], [UNASSIGNED, C])
    _apply(img, [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=101, log_dirs=[A])])   # B failed
    req = AssignReplicasToDirsRequest(broker_id=1, broker_epoch=101, directories=[DirectoryData(id=B, topics=[
        TopicData(topic_id=TID, partitions=[PartitionData(partition_index=0)])])])
    _resp, records = log_dirs.assign(img, req, brokers_from_image(img, 1))
    _apply(img, records)
    p = img.topics["t"].partitions[0]
    assert p.directories == [B, C] and p.leader == 2 and p.isr == [2]


def test_directories_survive_a_snapshot_and_a_reassignment():
    img = _image()
    _partition(img, 0, [1, 2], [B, C])
    _apply(img, [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=101, log_dirs=[A])])
    again = MetadataImage()
    _apply(again, image_records(img, 21, 1))
    assert again.topics["t"].partitions[0].directories == [B, C]
    assert again.brokers[1].log_dirs == [A]
    _apply(again, [PartitionChangeRecord(partition_id=0, topic_id=TID, replicas=[2, 3])])
    assert again.topics["t"].partitions[0].directories == [C, UNASSIGNED]


def test_a_replica_in_a_failed_dir_is_neither_elected_nor_taken_back_into_the_isr():
    from kproto.messages.alter_partition_request import AlterPartitionRequest

    from broker.replication import alter_partition, election
    img = _image()
    _partition(img, 0, [1, 2], [B, C], leader=-1)
    img.topics["t"].partitions[0].isr = [1]
    _partition(img, 1, [2, 1], [C, B])
    _apply(img, [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=101, log_dirs=[A])])
    brokers = brokers_from_image(img, 1)
    # the periodic sweep leaves partition 0 leaderless (its only ISR member is in the failed dir)
    # and takes broker 1 out of partition 1's ISR
    sweep = {r.partition_id: r for r in election.sweep(img, brokers)}
    assert 0 not in sweep and sweep[1].isr == [2] and sweep[1].leader == -2
    p = img.topics["t"].partitions[1]
    Part = AlterPartitionRequest.PartitionData
    req = AlterPartitionRequest(broker_id=2, broker_epoch=102, topics=[AlterPartitionRequest.TopicData(
        topic_id=TID, partitions=[Part(partition_index=1, leader_epoch=p.leader_epoch, new_isr=[2, 1],
                                       partition_epoch=p.partition_epoch, leader_recovery_state=0,
                                       new_isr_with_epochs=[])])])
    resp, records = alter_partition.handle(img, req, 2, brokers)
    assert resp.topics[0].partitions[0].error_code == ErrorCode.INELIGIBLE_REPLICA and records == []


def test_the_broker_reports_replicas_whose_dir_the_metadata_does_not_name(tmp_path):
    """Broker side (broker/storage/dir_assignments.py): what AssignReplicasToDirs carries."""
    from broker.storage.dir_assignments import pending
    from broker.storage.jbod import LogDirs
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    logs = LogDirs.open([a, b])
    try:
        img = _image()
        _partition(img, 0, [1, 2], [UNASSIGNED, C])   # not said yet
        _partition(img, 1, [1, 2], [B, C])            # named, and there
        _partition(img, 2, [2, 3], [C, UNASSIGNED])   # not a replica here
        _partition(img, 3, [1, 2], [A, C])            # named A, but moved (AlterReplicaLogDirs) to b
        for i, where in ((0, a), (1, b), (3, b)):
            logs.preferred[("t", i)] = where
            logs.get_or_create("t", i, TID)

        class _Broker:
            image, dir_failures = img, None
        _Broker.logs = logs
        ids = {a: A, b: B}
        assert pending(_Broker, 1, ids) == {A: {TID: [0]}, B: {TID: [3]}}
        _apply(img, [PartitionChangeRecord(partition_id=3, topic_id=TID, directories=[B, C])])
        assert pending(_Broker, 1, ids) == {A: {TID: [0]}}   # the metadata agrees on 3 now
    finally:
        logs.close()

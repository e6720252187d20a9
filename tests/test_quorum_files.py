"""KRaft's files as Kafka 3.9 writes them: quorum-state, `<offset>-<epoch>.checkpoint` snapshots
with SnapshotHeader/SnapshotFooter control records, bootstrap.checkpoint, LeaderChange records."""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from broker.metadata import control, snapshots
from broker.quorum import state_file
from broker.config import voters as dynamic_voters
from broker.quorum.state_file import QuorumState, QuorumStateError
from broker.metadata import serde
from kproto import records as rec
from kproto.messages.leader_change_message import LeaderChangeMessage, Voter
from kproto.metadata.feature_level_record import FeatureLevelRecord
from kproto.metadata.topic_record import TopicRecord

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "kraft"
CLUSTER_OBS = ROOT.parent / "shared" / "kafka-observations" / "cluster"


def observed(name: str) -> bytes:
    path = CLUSTER_OBS / name
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path.read_bytes()


# ---------------------------------------------------------------- quorum-state

@pytest.mark.parametrize("name, state", [
    ("node1-quorum-state.before.json", QuorumState(leader_id=2, leader_epoch=1, current_voters=[1, 2, 3])),
    ("node3-quorum-state.after-leader-kill.json", QuorumState(leader_id=3, leader_epoch=3, current_voters=[1, 2, 3])),
])
def test_quorum_state_is_byte_identical_to_kafkas(name, state):
    kafka = observed(name)
    assert state.to_json() == kafka
    assert QuorumState.from_json(kafka) == state


def test_quorum_state_version_1_for_a_dynamic_quorum():
    s = QuorumState(leader_id=1, leader_epoch=4, voted_id=1, voted_directory_id="tbeE6Jgi0eWXhAQKQcfaBA",
                    data_version=1)
    assert s.to_json() == (b'{"leaderId":1,"leaderEpoch":4,"votedId":1,'
                           b'"votedDirectoryId":"tbeE6Jgi0eWXhAQKQcfaBA","data_version":1}')
    assert QuorumState.from_json(s.to_json()) == s


def test_quorum_state_file_written_atomically(tmp_path):
    assert state_file.read(str(tmp_path)) is None
    s = QuorumState(leader_id=1, leader_epoch=1, current_voters=[1])
    state_file.write(str(tmp_path), s)
    assert sorted(os.listdir(tmp_path)) == ["quorum-state"]      # no .tmp left behind
    assert (tmp_path / "quorum-state").read_bytes() == (
        b'{"clusterId":"","leaderId":1,"leaderEpoch":1,"votedId":-1,"appliedOffset":0,'
        b'"currentVoters":[{"voterId":1}],"data_version":0}')
    assert state_file.read(str(tmp_path)) == s


@pytest.mark.parametrize("data", [b"", b"{", b'{"leaderId":1}', b'{"data_version":7}', b"[1,2]"])
def test_corrupt_quorum_state_is_refused(tmp_path, data):
    (tmp_path / "quorum-state").write_bytes(data)
    with pytest.raises(QuorumStateError):
        state_file.read(str(tmp_path))


# ---------------------------------------------------------------- snapshots

def test_snapshot_file_names():
    assert snapshots.file_name(0, 0) == "00000000000000000000-0000000000.checkpoint"
    assert snapshots.file_name(1234, 7) == "00000000000000001234-0000000007.checkpoint"
    assert snapshots.parse_file_name("00000000000000001234-0000000007.checkpoint") == (1234, 7)
    assert snapshots.parse_file_name("00000000000000001234-0000000007.checkpoint.part") is None
    assert snapshots.parse_file_name("00000000000000000000.log") is None


def test_bootstrap_checkpoint_matches_kafkas():
    kafka = (FIXTURES / "kafka-bootstrap.checkpoint").read_bytes()
    snap = snapshots.decode(kafka)
    assert snap.header.last_contained_log_timestamp == 0 and snap.end_offset == 3
    assert snap.records == [FeatureLevelRecord(name="metadata.version", feature_level=21)]
    times = tuple(h.base_timestamp for _p, h in rec.iter_batch_headers(kafka))
    assert snapshots.bootstrap_bytes(snap.records, now_ms=times) == kafka


def test_snapshot_layout(tmp_path):
    records = [TopicRecord(name=f"t{i}", topic_id=uuid.UUID(int=i + 1)) for i in range(5)]
    path = snapshots.write_snapshot(str(tmp_path), 42, 3, records, last_contained_timestamp=1700000000000)
    assert os.path.basename(path) == "00000000000000000042-0000000003.checkpoint"
    assert oct(os.stat(path).st_mode & 0o777) == "0o400"
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(path)]
    data = Path(path).read_bytes()
    headers = [h for _p, h in rec.iter_batch_headers(data, validate=True)]
    # header control batch, one data batch, footer control batch; offsets from 0; leader epoch 0
    assert [(h.base_offset, h.record_count, h.is_control, h.partition_leader_epoch) for h in headers] == [
        (0, 1, True, 0), (1, 5, False, 0), (6, 1, True, 0)]
    snap = snapshots.read(path)
    assert snap.records == records and snap.end_offset == 7
    assert snap.header.last_contained_log_timestamp == 1700000000000
    assert snapshots.list_snapshots(str(tmp_path)) == [(42, 3)]


def test_large_snapshot_is_split_into_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "MAX_BATCH_BYTES", 200)
    records = [TopicRecord(name="x" * 40 + str(i), topic_id=uuid.UUID(int=i + 1)) for i in range(20)]
    data = snapshots.encode(records, last_contained_timestamp=0)
    headers = [h for _p, h in rec.iter_batch_headers(data)]
    assert len(headers) > 4
    offsets = [h.base_offset for h in headers]
    assert offsets == sorted(offsets) and headers[-1].base_offset == 21
    assert snapshots.decode(data).records == records


def test_dynamic_quorum_snapshot_matches_kafkas():
    kafka = (FIXTURES / "kafka-standalone-0-0.checkpoint").read_bytes()
    snap = snapshots.decode(kafka)
    voters = dynamic_voters.parse("1@127.0.0.1:9093:tbeE6Jgi0eWXhAQKQcfaBA")
    assert snap.voters == dynamic_voters.voters_record(voters, "CONTROLLER")
    times = [h.base_timestamp for _p, h in rec.iter_batch_headers(kafka)]
    ours = snapshots.encode([], last_contained_timestamp=snap.header.last_contained_log_timestamp,
                            voters=snap.voters, kraft_version=1, now_ms=(times[0], times[0], times[1]))
    assert ours == kafka


def _corrupt(data: bytes) -> bytes:
    b = bytearray(data)
    b[-3] ^= 0xFF
    return bytes(b)


def test_incomplete_or_corrupt_snapshots_are_refused():
    good = snapshots.encode([FeatureLevelRecord(name="metadata.version", feature_level=21)],
                            last_contained_timestamp=0, now_ms=1)
    snapshots.decode(good)
    headers = [(p, h) for p, h in rec.iter_batch_headers(good)]
    no_footer = good[:headers[-1][0]]
    with pytest.raises(snapshots.SnapshotError, match="no SnapshotFooterRecord"):
        snapshots.decode(no_footer)
    no_header = good[headers[1][0]:]
    with pytest.raises(snapshots.SnapshotError, match="SnapshotHeaderRecord"):
        snapshots.decode(no_header)
    with pytest.raises(snapshots.SnapshotError):
        snapshots.decode(_corrupt(good))
    with pytest.raises(snapshots.SnapshotError):
        snapshots.decode(good + good)
    with pytest.raises(snapshots.SnapshotError):
        snapshots.decode(good[:-5])


# ---------------------------------------------------------------- control records

def test_leader_change_control_record_round_trip():
    msg = LeaderChangeMessage(version=0, leader_id=1, voters=[Voter(voter_id=1)], granting_voters=[Voter(voter_id=1)])
    batch = control.control_batch([msg], base_offset=5, leader_epoch=2, timestamp=1000)
    h = rec.BatchHeader(batch)
    assert (h.base_offset, h.partition_leader_epoch, h.is_control, h.is_transactional, h.producer_id) == (
        5, 2, True, False, -1)
    (r,) = list(rec.iter_records(batch))
    assert r.key == b"\x00\x00\x00\x02"
    assert control.decode_control(r) == (control.LEADER_CHANGE, msg)


def test_dynamic_voter_strings():
    v = dynamic_voters.parse("2@[::1]:9094:tbeE6Jgi0eWXhAQKQcfaBA, 1@localhost:9093:AAAAAAAAAAAAAAAAAAAAAQ")
    assert list(v) == [1, 2]
    assert (v[2].host, v[2].port) == ("::1", 9094)
    assert str(v[2]) == "2@[::1]:9094:tbeE6Jgi0eWXhAQKQcfaBA"
    for bad, message in [("", "No voters given."), ("@h:1:AAAAAAAAAAAAAAAAAAAAAQ", "Invalid @ at beginning"),
                         ("-1@h:1:AAAAAAAAAAAAAAAAAAAAAQ", "Invalid negative node id -1"),
                         ("1@[h:1:AAAAAAAAAAAAAAAAAAAAAQ", "no right bracket"),
                         ("1@h:x:AAAAAAAAAAAAAAAAAAAAAQ", "Failed to parse port"),
                         ("1@h:1:nope", "Failed to parse directory ID")]:
        with pytest.raises(ValueError, match=message):
            dynamic_voters.parse(bad)


# ---------------------------------------------------------------- the metadata log of a running node

def _batches(path):
    data = Path(path).read_bytes()
    out = []
    for pos, h in rec.iter_batch_headers(data, validate=True):
        rs = list(rec.iter_records(memoryview(data)[pos:pos + h.size]))
        out.append((h, rs))
    return out


def test_each_start_leads_a_new_epoch_with_a_leader_change_record(tmp_path):
    from broker.launch.process import BrokerProcess
    data = tmp_path / "data"
    meta = tmp_path / "meta"
    for _ in range(2):
        b = BrokerProcess(data_dir=str(data), settings={"metadata.log.dir": str(meta)}).start()
        assert b.stop() in (0, -15)   # -15: SIGTERM came before the signal handler was installed
    part = meta / "__cluster_metadata-0"
    assert not (data / "__cluster_metadata-0").exists()      # the metadata log lives in metadata.log.dir
    assert (meta / "meta.properties").exists() and (meta / "bootstrap.checkpoint").exists()
    assert (part / "quorum-state").read_bytes() == (
        b'{"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,'
        b'"currentVoters":[{"voterId":1}],"data_version":0}')
    assert (part / "leader-epoch-checkpoint").read_text() == "0\n2\n1 0\n2 5\n"
    assert (part / "partition.metadata").read_text() == "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"
    batches = _batches(part / "00000000000000000000.log")
    # 91 bytes: the size of Kafka's first batch; then the bootstrap records, as Kafka's controller writes them
    assert [(h.base_offset, h.partition_leader_epoch, h.is_control, h.size) for h, _ in batches] == [
        (0, 1, True, 91), (1, 1, False, 145), (5, 2, True, 91)]   # 145: as Kafka's
    assert [type(serde.decode(r.value)).__name__ for r in batches[1][1]] == [
        "BeginTransactionRecord", "FeatureLevelRecord", "ZkMigrationStateRecord", "EndTransactionRecord"]
    for epoch, (_h, (r,)) in enumerate([batches[0], batches[2]], start=1):
        assert control.decode_control(r) == (control.LEADER_CHANGE, LeaderChangeMessage(
            version=0, leader_id=1, voters=[Voter(voter_id=1)], granting_voters=[Voter(voter_id=1)]))


@pytest.mark.parametrize("name", ["kafka-static-epoch-start.batch", "kafka-dynamic-epoch-start.batch"])
def test_epoch_start_batch_is_byte_identical_to_kafkas(name):
    from broker.quorum import leadership
    kafka = (FIXTURES / name).read_bytes()
    h = rec.BatchHeader(kafka)
    records = list(rec.iter_records(kafka))
    voter_set = control.decode_control(records[2])[1] if len(records) == 3 else None
    ours = leadership.leader_change_batch(1, [1], [1], h.partition_leader_epoch, h.base_timestamp, voter_set)
    assert ours == kafka
    assert leadership.leader_change_batch(1, [1], [1], 2, h.base_timestamp, voter_set) != kafka


def test_dynamic_quorum_state_is_byte_identical_to_kafkas():
    kafka = (FIXTURES / "kafka-dynamic-quorum-state").read_bytes()
    assert QuorumState(leader_id=1, leader_epoch=1, data_version=1).to_json() == kafka


# ---------------------------------------------------------------- metadata snapshots

def _open_metadata(path):
    from broker.metadata.image import MetadataImage
    from broker.metadata.log import MetadataLog
    from broker.storage import LogManager
    mgr = LogManager.open(str(path), None, sync=False)
    plog = mgr.get_or_create("__cluster_metadata", 0, uuid.UUID(int=1), {"segment.bytes": 1 << 30})
    ml = MetadataLog(plog, MetadataImage())
    count = ml.replay()
    return mgr, plog, ml, count


def _state(image):
    return ({n: (t.topic_id, {i: (p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch)
                              for i, p in t.partitions.items()}, dict(t.configs))
             for n, t in image.topics.items()}, dict(image.configs), image.next_producer_id)


def test_metadata_snapshots_are_taken_and_loaded(tmp_path):
    from broker.quorum.leadership import become_sole_leader
    from broker.metadata.snapshotter import Snapshotter
    from kproto.metadata.config_record import ConfigRecord
    from kproto.metadata.partition_change_record import PartitionChangeRecord
    from kproto.metadata.partition_record import PartitionRecord
    from kproto.metadata.producer_ids_record import ProducerIdsRecord
    mgr, plog, ml, _ = _open_metadata(tmp_path)
    ml.leader_epoch = become_sole_leader(plog, 1, [1], sync=False)
    # a snapshot after every append of at least 200 bytes of records
    ml.snapshotter = Snapshotter(plog, ml.image, max_bytes=200, max_interval_ms=0, metadata_version=21,
                                 node_id=1, sync=False)
    tid = uuid.UUID(int=77)
    ml.append([TopicRecord(name="t", topic_id=tid),
               ConfigRecord(resource_type=2, resource_name="t", name="retention.ms", value="1000")]
              + [PartitionRecord(partition_id=i, topic_id=tid, replicas=[1], isr=[1], removing_replicas=[],
                                 adding_replicas=[], leader=1, leader_recovery_state=0, leader_epoch=0,
                                 partition_epoch=0, directories=[]) for i in range(3)])
    assert snapshots.list_snapshots(plog.dir) == [(6, 1)]    # LeaderChange at 0, the records at 1-5
    ml.append([ProducerIdsRecord(broker_id=1, broker_epoch=0, next_producer_id=2000)])   # < 200 bytes
    assert snapshots.list_snapshots(plog.dir) == [(6, 1)]
    ml.append([ConfigRecord(resource_type=4, resource_name="", name="log.cleaner.threads", value="2")] * 8
              + [PartitionChangeRecord(partition_id=1, topic_id=tid, leader=1, isr=[1])])
    assert snapshots.list_snapshots(plog.dir) == [(6, 1), (16, 1)]
    ml.append([ConfigRecord(resource_type=4, resource_name="", name="log.cleaner.threads", value="1")] * 8)
    assert snapshots.list_snapshots(plog.dir) == [(16, 1), (24, 1)]     # the two newest are kept
    expected = _state(ml.image)
    snap = snapshots.read(os.path.join(plog.dir, snapshots.file_name(24, 1)))
    assert [type(r).__name__ for r in snap.records][:3] == ["FeatureLevelRecord", "TopicRecord", "PartitionRecord"]
    mgr.close()

    # the restart rebuilds the same image from the snapshot
    mgr, plog, ml, count = _open_metadata(tmp_path)
    assert _state(ml.image) == expected and count == len(snap.records)
    mgr.close()

    # and really reads it: a snapshot at the log end with one more topic shows that topic
    extra = snap.records + [TopicRecord(name="only-in-snapshot", topic_id=uuid.UUID(int=78))]
    part = tmp_path / "__cluster_metadata-0"
    os.unlink(part / snapshots.file_name(24, 1))
    snapshots.write_snapshot(str(part), 24, 1, extra, last_contained_timestamp=0, sync=False)
    mgr, plog, ml, _ = _open_metadata(tmp_path)
    assert "only-in-snapshot" in ml.image.topics
    mgr.close()


def test_bootstrap_records_batch_is_byte_identical_to_kafkas():
    from broker.quorum.leadership import bootstrap_batch_records
    kafka = (FIXTURES / "kafka-bootstrap-records.batch").read_bytes()
    h = rec.BatchHeader(kafka)
    records = bootstrap_batch_records(str(FIXTURES / "no-such-dir"), 21)
    ours = rec.build_batch([(None, serde.encode(r), [], h.base_timestamp) for r in records],
                           base_offset=h.base_offset, partition_leader_epoch=h.partition_leader_epoch)
    assert ours == kafka

"""Tiered storage's pure parts: the __remote_log_metadata record layouts (Kafka's serde framing
and flexible v0 fields), the remote segment view built from them, and the copy / expiry
decisions of the remote log manager."""
from __future__ import annotations

import struct
import uuid

from broker.tiered import metadata_records as mr
from broker.tiered.planner import LocalSegment, RemoteSeg, remote_to_expire, segments_to_copy
from broker.tiered.segment_view import SegmentView

TP = mr.TopicIdPartition("orders", uuid.UUID(int=7), 3)
SID = uuid.UUID(int=42)


def test_segment_metadata_record_layout_and_round_trip():
    rec = mr.SegmentMetadata(TP, SID, 100, 199, 1, 1_700_000_000_000, 1_700_000_000_500,
                             [(0, 100), (2, 150)], 16384, mr.COPY_SEGMENT_STARTED)
    data = mr.encode(rec)
    # RemoteLogMetadataSerde: frame version 1, api key 0, version 0 (unsigned varints)
    assert data[:3] == b"\x01\x00\x00"
    # RemoteLogSegmentId { TopicIdPartition { Name (compact string), Id, Partition, tags }, Id, tags }
    assert data[3:10] == b"\x07orders"
    assert data[10:26] == TP.topic_id.bytes and struct.unpack(">i", data[26:30])[0] == 3
    assert data[30] == 0 and data[31:47] == SID.bytes and data[47] == 0
    assert struct.unpack(">qqiqq", data[48:84]) == (100, 199, 1, 1_700_000_000_000, 1_700_000_000_500)
    assert mr.decode(data) == rec
    upd = mr.SegmentUpdate(TP, SID, 2, 5, mr.COPY_SEGMENT_FINISHED)
    assert mr.encode(upd)[:3] == b"\x01\x01\x00" and mr.decode(mr.encode(upd)) == upd
    gone = mr.PartitionDelete(TP, 2, 6, mr.DELETE_PARTITION_FINISHED)
    assert mr.encode(gone)[:3] == b"\x01\x02\x00" and mr.decode(mr.encode(gone)) == gone


def test_metadata_partition_is_kafkas_partitioner():
    # toPositive(murmur2("<base64 id>:<topic>-<partition>")) % partitions
    assert str(TP) == f"{mr.uuid_to_kafka(TP.topic_id)}:orders-3"
    from broker.admin.partitioner import murmur2
    assert mr.metadata_partition(TP, 50) == (murmur2(str(TP).encode()) & 0x7FFFFFFF) % 50


def test_view_follows_the_segment_states():
    view = SegmentView()
    a, b = uuid.UUID(int=1), uuid.UUID(int=2)
    view.apply(mr.SegmentMetadata(TP, a, 0, 99, 1, 10, 0, [(0, 0)], 1000))
    p = view.get(TP.topic_id, 3)
    assert p.copied() == [] and p.highest_copied_offset() == -1 and [s.segment_id for s in p.unfinished()] == [a]
    view.apply(mr.SegmentUpdate(TP, a, 1, 0, mr.COPY_SEGMENT_FINISHED))
    view.apply(mr.SegmentMetadata(TP, b, 100, 199, 1, 20, 0, [(0, 100)], 1000))
    view.apply(mr.SegmentUpdate(TP, b, 1, 0, mr.COPY_SEGMENT_FINISHED))
    assert p.highest_copied_offset() == 199 and p.log_start_offset() == 0 and p.size() == 2000
    assert p.segment_for(150).segment_id == b and p.segment_for(0).segment_id == a
    assert p.segment_for(200) is None
    view.apply(mr.SegmentUpdate(TP, a, 1, 0, mr.DELETE_SEGMENT_STARTED))
    assert p.log_start_offset() == 100 and [s.segment_id for s in p.unfinished()] == [a]
    view.apply(mr.SegmentUpdate(TP, a, 1, 0, mr.DELETE_SEGMENT_FINISHED))
    assert a not in p.segments
    view.apply(mr.PartitionDelete(TP, 1, 0, mr.DELETE_PARTITION_FINISHED))
    assert p.segments == {} and p.deleted


def test_only_closed_segments_below_the_lso_and_above_the_copied_offset_are_copied():
    segs = [LocalSegment(0, 100, 10, 0), LocalSegment(100, 200, 10, 0), LocalSegment(200, 300, 10, 0),
            LocalSegment(300, 350, 5, 0)]   # the last one is active
    assert [s.base_offset for s in segments_to_copy(segs, -1, 350)] == [0, 100, 200]
    assert [s.base_offset for s in segments_to_copy(segs, 99, 350)] == [100, 200]
    assert [s.base_offset for s in segments_to_copy(segs, 299, 350)] == []
    # an open transaction at 150 holds the last stable offset back
    assert [s.base_offset for s in segments_to_copy(segs, -1, 150)] == [0]
    # a new leader whose segments are cut elsewhere continues from the segment holding the next offset
    assert [s.base_offset for s in segments_to_copy(segs, 149, 350)] == [100, 200]


def test_total_retention_expires_the_oldest_remote_segments():
    remote = [RemoteSeg(i, i * 100, i * 100 + 99, 1000, ts) for i, ts in enumerate((1000, 2000, 3000))]
    # retention.bytes: remote 3000 + 500 local-only bytes, limit 2000 -> the oldest goes (2500 left)
    assert [r.key for r in remote_to_expire(remote, 10_000, -1, 2000, 500)] == [0]
    assert [r.key for r in remote_to_expire(remote, 10_000, -1, 1500, 500)] == [0, 1]
    # retention.ms: older than now - retention by their largest timestamp
    assert [r.key for r in remote_to_expire(remote, 4000, 2500, -1, 0)] == [0]
    assert remote_to_expire(remote, 4000, -1, -1, 0) == []
    # below the log start offset (DeleteRecords)
    assert [r.key for r in remote_to_expire(remote, 0, -1, -1, 0, log_start_offset=150)] == [0]


def test_rlmm_settings_are_read_and_not_warned_about():
    from broker.config.broker_config import BrokerConfig
    from broker.tiered.settings import rlmm_setting
    cfg = BrokerConfig({"rlmm.config.remote.log.metadata.topic.num.partitions": "3"})
    assert cfg.warnings == []
    assert rlmm_setting(cfg, "remote.log.metadata.topic.num.partitions") == 3
    assert rlmm_setting(cfg, "remote.log.metadata.topic.replication.factor") == 3   # Kafka's default
    assert BrokerConfig({"rlmm.confg.x": "1"}).warnings   # a misspelt prefix still is

"""The log start offset replicas tell each other (Partition.replication_log_start_offset) and a
follower's adoption of its leader's (broker/replication/manager.py, Fetcher._adopt_log_start):
never backwards, never above the follower's high watermark, and for a tiered log whose remote
segments the leader does not know yet, the start DeleteRecords moved it to, not its local start
(a follower adopting the local start and later leading would delete remote records)."""
from __future__ import annotations

import uuid

from kproto.records import build_batch

from broker.partitions.partition import Partition
from broker.replication.fetcher import Fetcher
from broker.storage.log import PartitionLog
from broker.storage.log_retention import TierLimits


def _partition(tmp_path, name, tiered=False, records=10):
    plog = PartitionLog.open(str(tmp_path / f"{name}-0"), {
        "segment.bytes": "1100", "remote.storage.enable": "true" if tiered else "false"},
        topic_id=uuid.uuid4(), sync=False)
    for _ in range(records):
        plog.append(bytearray(build_batch([(None, b"v" * 1000)])), 0)   # a segment each
    return Partition(name, 0, plog.topic_id, plog, 0, {})


def test_a_follower_adopts_its_leaders_log_start_never_backwards_nor_above_its_high_watermark(tmp_path):
    part = _partition(tmp_path, "plain")
    Fetcher._adopt_log_start(part, 6)
    assert part.log_start_offset == part.replication_log_start_offset == 6
    Fetcher._adopt_log_start(part, 4)
    assert part.log_start_offset == 6
    part.replicated_hw = 8
    Fetcher._adopt_log_start(part, 9)
    assert part.log_start_offset == 8
    assert [s.base_offset for s in part.log.segments] == [8, 9]


def test_a_tiered_leader_says_the_deleted_to_offset_until_it_knows_its_remote_segments(tmp_path):
    leader = _partition(tmp_path, "tiered", tiered=True)
    leader.delete_records_before(3)
    # local retention of copied segments moves the local log start past it
    leader.log.tier = TierLimits(copied_end=8, retention_bytes=0)
    leader.log.apply_retention(None, leader.high_watermark)
    local = leader.local_log_start_offset
    assert local > 3
    # the remote view not read yet: the partition's own answer is its local start, what it tells
    # its followers is the checkpointed start
    assert leader.log_start_offset == local
    assert leader.replication_log_start_offset == 3
    leader.remote_log_start = 0   # the view read: the remote records from 0, deleted below 3
    assert leader.log_start_offset == leader.replication_log_start_offset == 3
    follower = _partition(tmp_path, "follower", tiered=True)
    leader.remote_log_start = None
    Fetcher._adopt_log_start(follower, leader.replication_log_start_offset)
    assert follower.log.deleted_below == 3 and follower.replication_log_start_offset == 3

"""The segment store against what a real Kafka 3.9 broker left on disk
(/work/shared/kafka-observations/segment-layout.md) and Kafka's log semantics."""
from __future__ import annotations

import os
import struct
import uuid

import pytest

from kproto._codec import FileRegion
from kproto.records import (
    TIMESTAMP_TYPE_BIT, BatchHeader, build_batch, iter_batch_headers, iter_records, validate_batch,
)
from broker.storage import (
    InconsistentTopicId, LogDirLocked, LogManager, OffsetOutOfRange, PartitionLog,
)
from broker.storage import checkpoints as cp

T0 = 1795350497742  # a timestamp from the recorded run
SEG_1M = {"segment.bytes": 1048576}
EMPTY_SNAPSHOT = bytes.fromhex("000148674bc700000000")


def kafka_batch(ts: int, value_size: int = 1024) -> bytearray:
    """One 1-record batch as the observed producer sent it (1094 bytes for 1024)."""
    return bytearray(build_batch([(None, b"v" * value_size, [], ts)]))


def multi_batch(timestamps, value=b"x") -> bytearray:
    return bytearray(build_batch([(None, value, [], ts) for ts in timestamps]))


def open_log(tmp_path, name="t-0", config=None, **kw) -> PartitionLog:
    kw.setdefault("sync", False)
    return PartitionLog.open(str(tmp_path / name), config, topic_id=kw.pop("topic_id", uuid.uuid4()), **kw)


def listing(dir) -> dict[str, int]:
    return {n: os.path.getsize(os.path.join(dir, n)) for n in sorted(os.listdir(dir))}


def index_entries(path, fmt=">ii"):
    data = open(path, "rb").read()
    size = struct.calcsize(fmt)
    return [struct.unpack_from(fmt, data, i) for i in range(0, len(data) - len(data) % size, size)]


def fill_like_kafka(plog: PartitionLog, n: int) -> None:
    """n produce requests of one 1094-byte batch each, leader epoch 0,
    strictly increasing timestamps."""
    plog.assign_epoch(0)
    for i in range(n):
        plog.append(kafka_batch(T0 + i), 0, now_ms=T0 + i)


def stored_batches(plog: PartitionLog) -> list[BatchHeader]:
    out = []
    for seg in plog.segments:
        data = seg.read_bytes(0, seg.size)
        out += [h for _, h in iter_batch_headers(data, validate=True)]
    return out


# ===================================================================== layout

def test_roll_by_size_reproduces_kafka_layout(tmp_path):
    plog = open_log(tmp_path, "obs-seg-a-0", SEG_1M)
    fill_like_kafka(plog, 10_000)
    d = plog.dir
    bases = [s.base_offset for s in plog.segments]
    assert bases == [958 * i for i in range(11)]
    files = listing(d)
    for base in bases[:-1]:
        name = f"{base:020d}"
        assert files[name + ".log"] == 1048052
        assert files[name + ".index"] == 1912
        assert files[name + ".timeindex"] == 2880  # 239 entries + the closing one
    active = f"{9580:020d}"
    assert files[active + ".log"] == 459480
    assert files[active + ".index"] == 10485760
    assert files[active + ".timeindex"] == 10485756
    # one snapshot per roll, named after the new segment, none for offset 0
    assert sorted(n for n in files if n.endswith(".snapshot")) == [f"{b:020d}.snapshot" for b in bases[1:]]
    assert open(os.path.join(d, active + ".snapshot"), "rb").read() == EMPTY_SNAPSHOT
    assert open(os.path.join(d, "leader-epoch-checkpoint"), "rb").read() == b"0\n1\n0 0\n"
    meta = open(os.path.join(d, "partition.metadata"), "rb").read()
    assert len(meta) == 43 and meta.startswith(b"version: 0\ntopic_id: ") and not meta.endswith(b"\n")
    assert cp.uuid_from_str(meta[21:].decode()) == plog.topic_id

    entries = index_entries(os.path.join(d, f"{0:020d}.index"))
    assert entries[:6] == [(4, 4376), (8, 8752), (12, 13128), (16, 17504), (20, 21880), (24, 26256)]
    assert entries[-3:] == [(948, 1037112), (952, 1041488), (956, 1045864)]
    times = index_entries(os.path.join(d, f"{0:020d}.timeindex"), ">qi")
    assert times[0] == (T0 + 4, 4) and times[-1] == (T0 + 957, 957)
    # the preallocated active index holds real entries then zeros
    active_entries = index_entries(os.path.join(d, active + ".index"))
    assert active_entries[:2] == [(4, 4376), (8, 8752)] and active_entries[104] == (0, 0)

    head = open(os.path.join(d, f"{0:020d}.log"), "rb").read(61)
    h = BatchHeader(head)
    assert (h.base_offset, h.batch_length, h.partition_leader_epoch, h.magic) == (0, 0x43A, 0, 2)
    assert plog.log_end_offset == 10_000
    assert plog.recovery_point == 0  # rolled segments are flushed by flush_rolled()
    assert plog.flush_rolled() and plog.recovery_point == 9580

    plog.close()
    files = listing(d)
    assert files[active + ".index"] == 832  # 104 entries
    assert files[active + ".timeindex"] == 1260  # 105 entries
    assert files[f"{10000:020d}.snapshot"] == 10


def test_time_index_only_grows_with_max_timestamp(tmp_path):
    plog = open_log(tmp_path, config={"index.interval.bytes": 100})
    # batch timestamps: 10, 10, 5, 20, 20 -> time index entries only when the max grows
    for ts in (10, 10, 5, 20, 20, 30):
        plog.append(multi_batch([T0 + ts], b"x" * 10), 0, now_ms=T0)  # 77 bytes
    seg = plog.active_segment
    offsets = [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)]
    times = [seg.time_index.entry(i) for i in range(seg.time_index.entries)]
    # an entry once more than 100 bytes were appended since the last: each 2nd batch
    assert [o for o, _ in offsets] == [2, 4]
    # at offset 2 the max (10) was first seen at offset 0; at 4 the max 20 at offset 3
    assert times == [(T0 + 10, 0), (T0 + 20, 3)]
    plog.close()
    times = index_entries(seg.time_index.path, ">qi")
    assert times[-1] == (T0 + 30, 5)  # the closing entry


# ===================================================================== append

def test_append_assigns_offsets_and_stamps_leader_epoch(tmp_path):
    plog = open_log(tmp_path)
    info = plog.append(multi_batch([T0, T0 + 1, T0 + 2]), 3, now_ms=T0)
    assert info == (0, 2, -1, 0)
    blob = multi_batch([T0 + 3]) + multi_batch([T0 + 4, T0 + 5])  # two batches, one write
    info = plog.append(blob, 3, now_ms=T0)
    assert (info.base_offset, info.last_offset) == (3, 5)
    # the caller's buffer was rewritten in place
    assert BatchHeader(blob).base_offset == 3 and BatchHeader(blob).partition_leader_epoch == 3
    headers = stored_batches(plog)  # validate=True: CRCs still hold
    assert [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in headers] == \
        [(0, 2, 3), (3, 3, 3), (4, 5, 3)]
    data = plog.read_bytes(0)
    records = [r for pos, _ in iter_batch_headers(data) for r in iter_records(data, pos)]
    assert [(r.offset, r.timestamp) for r in records] == [(i, T0 + i) for i in range(6)]
    assert plog.log_end_offset == 6
    assert open(os.path.join(plog.dir, "leader-epoch-checkpoint"), "rb").read() == b"0\n1\n3 0\n"
    plog.append(multi_batch([T0]), 4, now_ms=T0)
    assert open(os.path.join(plog.dir, "leader-epoch-checkpoint"), "rb").read() == b"0\n2\n3 0\n4 6\n"


def test_append_with_log_append_time(tmp_path):
    plog = open_log(tmp_path)
    now = T0 + 5000
    info = plog.append(multi_batch([T0, T0 + 1]), 0, now_ms=now, log_append_time=True)
    assert info.log_append_time == now
    h = validate_batch(plog.read_bytes(0))
    assert h.attributes & TIMESTAMP_TYPE_BIT and h.max_timestamp == now
    assert [r.timestamp for r in iter_records(plog.read_bytes(0))] == [now, now]
    assert plog.max_timestamp_offset() == (0, now, 0)


def test_append_keeping_offsets_for_replication(tmp_path):
    plog = open_log(tmp_path)
    plog.append(bytearray(build_batch([(None, b"a")], base_offset=0, partition_leader_epoch=2)),
                None, now_ms=T0, assign_offsets=False)
    plog.append(bytearray(build_batch([(None, b"b")], base_offset=5, partition_leader_epoch=3)),
                None, now_ms=T0, assign_offsets=False)
    assert plog.log_end_offset == 6
    assert plog.epochs.entries == [(2, 0), (3, 5)]
    with pytest.raises(ValueError):
        plog.append(bytearray(build_batch([(None, b"c")], base_offset=4)), None, assign_offsets=False)


def test_roll_by_segment_ms_uses_first_batch_timestamp(tmp_path):
    plog = open_log(tmp_path, config={"segment.ms": 1000})
    plog.append(multi_batch([T0]), 0, now_ms=T0)
    plog.append(multi_batch([T0 + 1000]), 0, now_ms=T0)  # exactly segment.ms: no roll
    assert len(plog.segments) == 1
    plog.append(multi_batch([T0 + 1001]), 0, now_ms=T0)
    assert [s.base_offset for s in plog.segments] == [0, 2]


def test_roll_when_index_is_full(tmp_path):
    # 24 bytes: 3 offset-index entries, 2 time-index entries
    plog = open_log(tmp_path, config={"segment.index.bytes": 24, "index.interval.bytes": 1})
    for i in range(7):
        plog.append(multi_batch([T0 + i]), 0, now_ms=T0)
    assert [s.base_offset for s in plog.segments] == [0, 3, 6]
    # offsets 1 and 2 got entries; the time index (2 slots) was full after offset 2
    assert plog.segments[0].offset_index.entries == 2 and plog.segments[0].time_index.entries == 2


# ====================================================================== fetch

@pytest.fixture
def ten_batches(tmp_path):
    """Offsets 0..29 in ten 3-record batches of 388 bytes, segments at 0, 12, 24."""
    plog = open_log(tmp_path, config={"segment.bytes": 1600, "index.interval.bytes": 300})
    for i in range(10):
        plog.append(multi_batch([T0 + 3 * i, T0 + 3 * i + 1, T0 + 3 * i + 2], b"y" * 100), 0, now_ms=T0)
    yield plog
    plog.close()


def batch_offsets(data: bytes) -> list[int]:
    return [h.base_offset for _, h in iter_batch_headers(data)]


def test_read_whole_batches_up_to_max_bytes(ten_batches):
    plog = ten_batches
    size = len(multi_batch([0, 1, 2], b"y" * 100))
    assert size == 388
    assert [s.base_offset for s in plog.segments] == [0, 12, 24]  # 4 batches fit in 1600
    # starts at the batch holding the offset, even mid-batch
    assert batch_offsets(plog.read_bytes(4, 10_000)) == [3, 6, 9]  # never crosses the segment
    assert batch_offsets(plog.read_bytes(0, 2 * size + size // 2)) == [0, 3]
    assert batch_offsets(plog.read_bytes(0, 2 * size)) == [0, 3]
    # KIP-74: at least one whole batch even when it is larger than max_bytes
    assert batch_offsets(plog.read_bytes(13, 10)) == [12]
    assert plog.read_bytes(13, 10, min_one_batch=False) == b""
    assert batch_offsets(plog.read_bytes(12, 10**6)) == [12, 15, 18, 21]
    assert batch_offsets(plog.read_bytes(24, 10**6)) == [24, 27]
    sl = plog.read(12, 3 * size)
    assert sl.length == 3 * size and sl.position == 0
    region = sl.region()
    assert type(region) is FileRegion and region.read() == sl.read()


def test_read_stops_at_upper_bound(ten_batches):
    plog = ten_batches
    assert batch_offsets(plog.read_bytes(12, 10**6, upper_bound_offset=21)) == [12, 15, 18]
    assert batch_offsets(plog.read_bytes(12, 10**6, upper_bound_offset=20)) == [12, 15, 18]
    assert batch_offsets(plog.read_bytes(0, 10**6, upper_bound_offset=3)) == [0]
    assert plog.read(21, 10**6, upper_bound_offset=21).length == 0
    assert plog.read(25, 10**6, upper_bound_offset=21).length == 0  # past the bound, within the log


def test_read_out_of_range(ten_batches):
    plog = ten_batches
    assert plog.read(30, 1000).length == 0  # the log end: nothing yet
    with pytest.raises(OffsetOutOfRange) as err:
        plog.read(31, 1000)
    assert err.value.code == 1 and err.value.log_end_offset == 30
    plog.delete_records_before(5)
    with pytest.raises(OffsetOutOfRange):
        plog.read(4, 1000)
    assert batch_offsets(plog.read_bytes(5, 1)) == [3]  # the batch holding offset 5


# =================================================================== recovery

def crash(plog: PartitionLog) -> None:
    """Forget the log without closing it, as a killed process would."""
    for seg in plog.segments:
        seg.offset_index._release()
        seg.time_index._release()
        seg.file.close()


def test_recovery_drops_torn_tail(tmp_path):
    plog = open_log(tmp_path, config={"segment.bytes": 5000, "index.interval.bytes": 1000})
    for i in range(20):
        plog.append(kafka_batch(T0 + i, 300), 0, now_ms=T0)
    size = len(kafka_batch(0, 300))
    last = plog.active_segment
    assert [s.base_offset for s in plog.segments] == [0, 13]
    crash(plog)
    os.truncate(last.log_path, 6 * size + 100)  # offsets 13..18 whole, 19 torn
    progress = []
    plog = open_log(tmp_path, config={"segment.bytes": 5000, "index.interval.bytes": 1000},
                    topic_id=plog.topic_id, clean_shutdown=False, recovery_point=13,
                    progress=lambda done, total: progress.append((done, total)))
    assert plog.log_end_offset == 19
    assert os.path.getsize(last.log_path) == 6 * size
    assert progress[-1] == (6 * size + 100, 6 * size + 100)
    assert batch_offsets(plog.read_bytes(17, 10**6)) == [17, 18]
    # the index was rebuilt: an entry after > 1000 bytes (3 batches of 355)
    assert plog.active_segment.offset_index.entry(0) == (16, 3 * size)
    assert plog.append(kafka_batch(T0 + 99, 300), 0, now_ms=T0).base_offset == 19
    assert [h.base_offset for h in stored_batches(plog)] == list(range(20))
    plog.close()


def test_recovery_cuts_at_corrupt_crc_and_drops_later_segments(tmp_path):
    cfg = {"segment.bytes": 5000}
    plog = open_log(tmp_path, config=cfg)
    for i in range(30):
        plog.append(kafka_batch(T0 + i, 300), 0, now_ms=T0)
    size = len(kafka_batch(0, 300))
    first = plog.segments[0]
    assert len(plog.segments) == 3
    crash(plog)
    with open(first.log_path, "r+b") as f:  # flip a value byte of offset 5
        f.seek(5 * size + 200)
        b = f.read(1)
        f.seek(5 * size + 200)
        f.write(bytes([b[0] ^ 0xFF]))
    plog = open_log(tmp_path, config=cfg, topic_id=plog.topic_id, clean_shutdown=False)
    assert plog.log_end_offset == 5
    assert [s.base_offset for s in plog.segments] == [0]
    assert [h.base_offset for h in stored_batches(plog)] == [0, 1, 2, 3, 4]
    assert plog.active_segment.offset_index.max_entries > 0  # active again
    assert plog.append(kafka_batch(T0, 300), 0, now_ms=T0).base_offset == 5
    plog.close()


def test_recovery_skips_segments_below_recovery_point(tmp_path):
    cfg = {"segment.bytes": 5000}
    plog = open_log(tmp_path, config=cfg)
    for i in range(30):
        plog.append(kafka_batch(T0 + i, 300), 0, now_ms=T0)
    plog.flush_rolled()
    rp = plog.recovery_point
    assert rp == plog.segments[-1].base_offset
    crash(plog)
    scanned = []
    plog = open_log(tmp_path, config=cfg, topic_id=plog.topic_id, clean_shutdown=False,
                    recovery_point=rp, progress=lambda d, t: scanned.append(t))
    assert scanned[-1] == plog.segments[-1].size
    assert plog.log_end_offset == 30 and plog.recovery_point == rp
    plog.close()


def test_restart_after_clean_close_keeps_everything(tmp_path):
    cfg = {"segment.bytes": 5000, "index.interval.bytes": 700}
    plog = open_log(tmp_path, config=cfg)
    plog.assign_epoch(0)
    for i in range(30):
        plog.append(kafka_batch(T0 + i, 300), 0 if i < 20 else 1, now_ms=T0)
    before = plog.read_bytes(0, 10**9)
    snapshot_files = sorted(n for n in os.listdir(plog.dir) if n.endswith(".snapshot"))
    plog.close()
    plog = open_log(tmp_path, config=cfg, topic_id=plog.topic_id)
    assert plog.log_end_offset == 30 and plog.recovery_point == 30
    assert plog.read_bytes(0, 10**9) == before
    assert plog.epochs.entries == [(0, 0), (1, 20)]
    assert plog.end_offset_for_epoch(0) == (0, 20)
    assert plog.active_segment.offset_index.max_entries == 10485760 // 8  # preallocated again
    assert sorted(n for n in os.listdir(plog.dir) if n.endswith(".snapshot")) == \
        snapshot_files + [f"{30:020d}.snapshot"]
    assert plog.offset_for_timestamp(T0 + 17).offset == 17
    assert plog.append(kafka_batch(T0 + 30, 300), 1, now_ms=T0).base_offset == 30
    plog.close()


def test_clean_open_recovers_a_tail_that_does_not_match(tmp_path):
    plog = open_log(tmp_path)
    for i in range(5):
        plog.append(kafka_batch(T0 + i, 300), 0, now_ms=T0)
    plog.close()
    path = plog.active_segment.log_path
    os.truncate(path, os.path.getsize(path) - 7)
    plog = open_log(tmp_path, topic_id=plog.topic_id, clean_shutdown=True)
    assert plog.log_end_offset == 4
    plog.close()


def test_topic_id_mismatch(tmp_path):
    plog = open_log(tmp_path)
    plog.close()
    with pytest.raises(InconsistentTopicId):
        open_log(tmp_path, topic_id=uuid.uuid4())


# ================================================================== retention

def test_retention_bytes_reproduces_kafka(tmp_path):
    plog = open_log(tmp_path, "obs-seg-b-0", {**SEG_1M, "retention.bytes": 3145728})
    fill_like_kafka(plog, 10_000)
    # only segments wholly below the high watermark may go
    assert plog.apply_retention(now_ms=T0 + 20_000, high_watermark=957) == 0
    assert plog.apply_retention(now_ms=T0 + 20_000, high_watermark=958) == 1
    assert plog.log_start_offset == 958
    now = T0 + 20_000
    assert plog.apply_retention(now_ms=now) == 6
    assert plog.log_start_offset == 6706
    assert [s.base_offset for s in plog.segments] == [6706, 7664, 8622, 9580]
    assert plog.size == 3603636
    assert open(os.path.join(plog.dir, "leader-epoch-checkpoint"), "rb").read() == b"0\n1\n0 6706\n"
    files = listing(plog.dir)
    assert files[f"{0:020d}.log.deleted"] == 1048052
    assert f"{0:020d}.snapshot.deleted" not in files
    assert files[f"{958:020d}.snapshot.deleted"] == 10
    assert files[f"{5748:020d}.timeindex.deleted"] in (2868, 2880)
    with pytest.raises(OffsetOutOfRange):
        plog.read(6705, 100)
    plog.purge_deleted(now + 59_999)
    assert f"{0:020d}.log.deleted" in os.listdir(plog.dir)
    plog.purge_deleted(now + 60_000)
    assert not any(n.endswith(".deleted") for n in os.listdir(plog.dir))
    plog.close()


def test_retention_ms_deletes_old_segments_and_then_the_active_one(tmp_path):
    plog = open_log(tmp_path, config={"segment.bytes": 2000, "retention.ms": 10_000})
    for i in range(12):
        plog.append(kafka_batch(T0 + 1000 * i, 300), 0, now_ms=T0)
    bases = [s.base_offset for s in plog.segments]
    assert bases == [0, 5, 10]  # timestamps 0-4 s, 5-9 s, 10-11 s
    assert plog.apply_retention(now_ms=T0 + 14_001) == 1  # segment 0 max ts 4 s: 10.001 s old
    assert plog.log_start_offset == 5
    assert plog.apply_retention(now_ms=T0 + 19_000) == 0
    # everything expired: Kafka rolls a new active segment and deletes all the old ones
    assert plog.apply_retention(now_ms=T0 + 30_000) == 2
    assert [s.base_offset for s in plog.segments] == [12]
    assert plog.log_start_offset == plog.log_end_offset == 12
    assert plog.read(12, 100).length == 0
    assert plog.append(kafka_batch(T0, 300), 0, now_ms=T0).base_offset == 12
    plog.close()


def test_delete_records(tmp_path):
    plog = open_log(tmp_path, config={"segment.bytes": 2000})
    for i in range(12):
        plog.append(kafka_batch(T0 + i, 300), 0, now_ms=T0)
    with pytest.raises(OffsetOutOfRange):
        plog.delete_records_before(11, high_watermark=10)
    assert plog.delete_records_before(7) == 7
    assert [s.base_offset for s in plog.segments] == [5, 10]  # 0-4 wholly below 7
    assert plog.log_start_offset == 7
    assert plog.epochs.entries == [(0, 7)]
    assert plog.delete_records_before(3) == 7  # never moves back
    assert plog.delete_records_before(-1) == 12  # -1: up to the high watermark
    # the active segment stays (Kafka deletes it only by retention, after a roll)
    assert [s.base_offset for s in plog.segments] == [10]
    assert plog.read(12, 100).length == 0
    with pytest.raises(OffsetOutOfRange):
        plog.read(11, 100)
    plog.close()


# ================================================================ timestamps

def test_offset_for_timestamp_finds_first_record_at_or_after(tmp_path):
    plog = open_log(tmp_path, config={"index.interval.bytes": 1})
    plog.append(multi_batch([T0 + 10, T0 + 30, T0 + 20]), 0, now_ms=T0)  # offsets 0-2
    plog.append(multi_batch([T0 + 25, T0 + 50]), 0, now_ms=T0)  # 3-4
    plog.append(multi_batch([T0 + 40, T0 + 50, T0 + 45]), 0, now_ms=T0)  # 5-7
    assert plog.offset_for_timestamp(T0) == (0, T0 + 10, 0)
    assert plog.offset_for_timestamp(T0 + 15) == (1, T0 + 30, 0)
    assert plog.offset_for_timestamp(T0 + 30) == (1, T0 + 30, 0)
    assert plog.offset_for_timestamp(T0 + 31) == (4, T0 + 50, 0)
    assert plog.offset_for_timestamp(T0 + 51) is None
    assert plog.max_timestamp_offset() == (4, T0 + 50, 0)
    plog.delete_records_before(2)
    assert plog.offset_for_timestamp(T0) == (2, T0 + 20, 0)


def test_timestamp_lookup_across_segments(ten_batches):
    plog = ten_batches
    assert plog.offset_for_timestamp(T0 + 13).offset == 13
    assert plog.offset_for_timestamp(T0 + 7).offset == 7
    assert plog.max_timestamp_offset().offset == 29


def test_empty_log_has_no_timestamps(tmp_path):
    plog = open_log(tmp_path)
    assert plog.offset_for_timestamp(0) is None
    assert plog.max_timestamp_offset() is None


# ============================================================== leader epochs

def test_end_offset_for_epoch(tmp_path):
    plog = open_log(tmp_path)
    for epoch, n in ((0, 10), (2, 10), (5, 10)):
        for _ in range(n):
            plog.append(multi_batch([T0]), epoch, now_ms=T0)
    assert plog.epochs.entries == [(0, 0), (2, 10), (5, 20)]
    assert plog.end_offset_for_epoch(5) == (5, 30)
    assert plog.end_offset_for_epoch(3) == (2, 20)
    assert plog.end_offset_for_epoch(2) == (2, 20)
    assert plog.end_offset_for_epoch(1) == (0, 10)
    assert plog.end_offset_for_epoch(6) == (-1, -1)
    assert plog.end_offset_for_epoch(-1) == (-1, -1)
    plog.truncate_to(15)
    assert plog.log_end_offset == 15 and plog.epochs.entries == [(0, 0), (2, 10)]
    assert plog.end_offset_for_epoch(2) == (2, 15)


def test_truncate_to_across_segments(tmp_path):
    plog = open_log(tmp_path, config={"segment.bytes": 2000, "index.interval.bytes": 500})
    for i in range(12):
        plog.append(kafka_batch(T0 + i, 300), 0, now_ms=T0)
    plog.truncate_to(7)
    assert [s.base_offset for s in plog.segments] == [0, 5]
    assert plog.log_end_offset == 7
    assert plog.active_segment.offset_index.max_entries > 0
    assert plog.append(kafka_batch(T0, 300), 0, now_ms=T0).base_offset == 7
    assert [h.base_offset for h in stored_batches(plog)] == list(range(8))
    assert plog.max_timestamp_offset().offset == 6
    plog.truncate_to(0)
    assert plog.log_end_offset == 0 and plog.read(0, 100).length == 0
    plog.close()


def test_a_truncation_at_the_log_end_drops_an_epoch_that_starts_there(tmp_path):
    # a leader elected in epoch 1 that appended nothing before it lost the leadership (here: to
    # a power loss of every node) keeps (1, end) in its checkpoint; the new leader never had epoch
    # 1 and answers its fetches with a diverging epoch that ends at that very offset. Truncating
    # there must drop the entry (Kafka's UnifiedLog.truncateTo does even when no record goes),
    # else the follower asks with epoch 1 again, forever (docs/chaos.md, the stuck follower).
    topic_id = uuid.uuid4()
    plog = open_log(tmp_path, topic_id=topic_id)
    for i in range(3):
        plog.append(kafka_batch(T0 + i, 100), 0, now_ms=T0)
    plog.assign_epoch(1)
    assert plog.latest_epoch == 1
    assert plog.truncate_to(3) is False            # no record to remove
    assert plog.latest_epoch == 0
    assert plog.end_offset_for_epoch(0) == (0, 3)       # what a follower asking with epoch 0 is told
    plog.close()
    reopened = open_log(tmp_path, topic_id=topic_id)   # the checkpoint file says so too
    assert reopened.latest_epoch == 0
    reopened.close()


# ================================================================ log manager

def test_log_manager_checkpoints_and_clean_shutdown(tmp_path):
    d = str(tmp_path / "logs")
    mgr = LogManager.open(d, sync=False)
    assert not mgr.had_clean_shutdown
    assert os.path.exists(os.path.join(d, ".lock"))
    with pytest.raises(LogDirLocked):
        LogManager.open(d, sync=False)
    tid = uuid.uuid4()
    a = mgr.get_or_create("obs-seg-a", 0, tid, SEG_1M)
    fill_like_kafka(a, 1000)
    e = mgr.get_or_create("obs-e2-fetch", 0, uuid.uuid4())
    for i in range(10):
        e.append(multi_batch([T0 + i]), 0, now_ms=T0)
    e.delete_records_before(5)
    assert mgr.get_or_create("obs-seg-a", 0, tid) is a
    with pytest.raises(InconsistentTopicId):
        mgr.get_or_create("obs-seg-a", 0, uuid.uuid4())
    mgr.periodic(now_ms=T0)  # flushes the rolled segment
    mgr.checkpoint()
    rp = open(os.path.join(d, "recovery-point-offset-checkpoint"), "rb").read()
    assert rp in (b"0\n2\nobs-seg-a 0 958\nobs-e2-fetch 0 0\n", b"0\n2\nobs-e2-fetch 0 0\nobs-seg-a 0 958\n")
    assert open(os.path.join(d, "log-start-offset-checkpoint"), "rb").read() == b"0\n1\nobs-e2-fetch 0 5\n"
    assert os.path.getsize(os.path.join(d, "cleaner-offset-checkpoint")) == 0
    mgr.close(broker_epoch=7)
    assert open(os.path.join(d, ".kafka_cleanshutdown"), "rb").read() == b'{"version":0,"brokerEpoch":7}'
    assert not os.path.exists(os.path.join(d, ".lock"))
    assert b"obs-seg-a 0 1000\n" in open(os.path.join(d, "recovery-point-offset-checkpoint"), "rb").read()

    mgr = LogManager.open(d, sync=False)
    assert mgr.had_clean_shutdown and mgr.previous_broker_epoch == 7
    assert not os.path.exists(os.path.join(d, ".kafka_cleanshutdown"))
    a = mgr.get("obs-seg-a", 0)
    assert a.topic_id == tid and a.log_end_offset == 1000
    assert mgr.get("obs-e2-fetch", 0).log_start_offset == 5
    mgr.close()


def test_a_tiered_logs_start_is_checkpointed_even_at_its_first_local_segment(tmp_path):
    """DeleteRecords to a segment boundary of a tiered log: the new start is its first local
    segment's base, and still comes back after a restart (the records below are remote)."""
    d = str(tmp_path / "logs")
    cfg = {"segment.bytes": "1100", "remote.storage.enable": "true"}
    mgr = LogManager.open(d, config_for=lambda t: cfg, sync=False)
    plog = mgr.get_or_create("tiered", 0, uuid.uuid4(), cfg)
    for i in range(6):
        plog.append(kafka_batch(T0 + i, 1000), 0, now_ms=T0)   # a segment each
    plog.delete_records_before(4)
    assert plog.segments[0].base_offset == 4
    mgr.close()
    mgr = LogManager.open(d, config_for=lambda t: cfg, sync=False)
    assert mgr.get("tiered", 0).checkpoint_log_start == 4
    mgr.close()

def test_log_manager_recovers_after_crash_with_progress(tmp_path):
    d = str(tmp_path / "logs")
    mgr = LogManager.open(d, sync=False)
    a = mgr.get_or_create("t", 0, uuid.uuid4(), {"segment.bytes": 5000})
    b = mgr.get_or_create("t", 1, uuid.uuid4())
    for i in range(30):
        a.append(kafka_batch(T0 + i, 300), 0, now_ms=T0)
        b.append(kafka_batch(T0 + i, 300), 0, now_ms=T0)
    tail = b.active_segment.log_path
    crash(a)
    crash(b)
    mgr._unlock()  # the process died: the OS drops its lock
    os.truncate(tail, os.path.getsize(tail) - 1)
    seen = []
    mgr = LogManager.open(d, lambda topic: {"segment.bytes": 5000}, sync=False,
                          progress=lambda done, total: seen.append((done, total)))
    assert not mgr.had_clean_shutdown
    size = len(kafka_batch(0, 300))
    total = 30 * size + 30 * size - 1  # no recovery-point checkpoint: everything is scanned
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    assert all(d1 <= d2 for (d1, _), (d2, _) in zip(seen, seen[1:]))
    assert mgr.get("t", 0).log_end_offset == 30
    assert mgr.get("t", 1).log_end_offset == 29
    mgr.close()


def test_log_manager_topic_deletion(tmp_path):
    d = str(tmp_path / "logs")
    mgr = LogManager.open(d, sync=False)
    for p in range(2):
        mgr.get_or_create("gone", p, uuid.uuid4()).append(multi_batch([T0]), 0, now_ms=T0)
    plog = mgr.get("gone", 0)
    held = plog.read(0, 100)
    assert mgr.delete("gone", now_ms=T0) == 2
    assert mgr.get("gone", 0) is None
    names = os.listdir(d)
    assert not any(n in ("gone-0", "gone-1") for n in names)
    assert sum(n.startswith("gone-0.") and n.endswith("-delete") for n in names) == 1
    assert validate_batch(held.read()).base_offset == 0  # an in-flight fetch still reads
    mgr.periodic(now_ms=T0 + 60_000)
    assert not any(n.endswith("-delete") for n in os.listdir(d))
    # the name is free for a new topic
    assert mgr.get_or_create("gone", 0, uuid.uuid4()).log_end_offset == 0
    mgr.close()


def test_meta_properties_format(tmp_path):
    d = str(tmp_path / "logs")
    mgr = LogManager.open(d, sync=False)
    cluster = "EGnSfmwgRTmRvcc8Bww_zg"
    props = mgr.ensure_meta_properties(1, cluster)
    raw = open(os.path.join(d, "meta.properties"), "rb").read()
    assert len(raw) == 122
    lines = raw.decode().split("\n")
    assert lines[0] == "#" and lines[1].startswith("#") and lines[1].endswith(" UTC " + lines[1][-4:])
    assert lines[2:] == ["node.id=1", f"directory.id={props['directory.id']}", "version=1",
                         f"cluster.id={cluster}", ""]
    assert mgr.ensure_meta_properties(1, cluster) == props
    with pytest.raises(ValueError):
        mgr.ensure_meta_properties(2, cluster)
    mgr.close()


def test_log_manager_keeps_metadata_log_out_of_checkpoints_and_retention(tmp_path):
    d = str(tmp_path / "logs")
    mgr = LogManager.open(d, sync=False)
    meta = mgr.get_or_create("__cluster_metadata", 0, None, {"retention.ms": 1})
    t = mgr.get_or_create("t", 0, uuid.uuid4(), {"retention.ms": 1, "segment.bytes": 100})
    for plog in (meta, t):
        for i in range(3):
            plog.append(multi_batch([T0 + i]), 0, now_ms=T0)
    assert mgr.apply_retention(now_ms=T0 + 10_000) == 3  # t only
    assert meta.log_start_offset == 0 and t.log_start_offset == 3
    mgr.close()
    assert open(os.path.join(d, "recovery-point-offset-checkpoint"), "rb").read() == b"0\n1\nt 0 3\n"
    mgr = LogManager.open(d, sync=False)
    assert mgr.get("__cluster_metadata", 0).log_end_offset == 3  # loaded like any other log
    # get_or_create applies the config it is given to a loaded log
    assert mgr.get_or_create("t", 0, None, {"retention.ms": 5}).config.retention_ms == 5
    mgr.close()


def test_periodic_removes_deleted_segments_after_their_delay_though_it_skips_idle_walks(tmp_path):
    # periodic() walks the logs only when one queued a chore (or one still waits): what retention
    # deleted is still removed from disk once file.delete.delay.ms has passed
    d = str(tmp_path / "logs")
    mgr = LogManager.open(d, sync=False)
    t = mgr.get_or_create("t", 0, uuid.uuid4(), {"retention.ms": 1, "segment.bytes": 100,
                                                "file.delete.delay.ms": 5_000})
    mgr.get_or_create("idle", 0, uuid.uuid4())
    mgr.periodic(now_ms=T0)
    mgr.periodic(now_ms=T0 + 1_000)     # nothing queued: no walk
    for i in range(3):
        t.append(multi_batch([T0 + i]), 0, now_ms=T0)
    mgr.periodic(now_ms=T0 + 2_000)     # (the rolled segments' flush)
    assert mgr.apply_retention(now_ms=T0 + 10_000) == 3
    tdir = os.path.join(d, "t-0")
    assert any(n.endswith(".deleted") for n in os.listdir(tdir))
    mgr.periodic(now_ms=T0 + 11_000)    # queued, not yet due
    assert any(n.endswith(".deleted") for n in os.listdir(tdir))
    mgr.periodic(now_ms=T0 + 16_000)    # due: removed, with no chore queued since the last walk
    assert not any(n.endswith(".deleted") for n in os.listdir(tdir))
    mgr.close()


def test_epoch_for_offset(tmp_path):
    plog = open_log(tmp_path)
    plog.assign_epoch(1, 0)
    plog.assign_epoch(3, 10)
    assert [plog.epoch_for_offset(o) for o in (0, 9, 10, 50)] == [1, 1, 3, 3]
    assert open_log(tmp_path, "u-0").epoch_for_offset(0) is None


def test_recovery_at_every_kind_of_cut(tmp_path):
    """Whatever the crash left (a cut anywhere), recovery keeps exactly the whole batches."""
    plog = open_log(tmp_path, config={"index.interval.bytes": 200})
    sizes = []
    for i in range(8):
        batch = multi_batch([T0 + i] * (i % 3 + 1), b"z" * (40 * i))
        sizes.append(len(batch))
        plog.append(batch, 0, now_ms=T0)
    path, tid = plog.active_segment.log_path, plog.topic_id
    crash(plog)
    original = open(path, "rb").read()
    ends = [sum(sizes[:i + 1]) for i in range(8)]
    last_offsets = []
    n = 0
    for i in range(8):
        n += i % 3 + 1
        last_offsets.append(n)
    for cut in list(range(0, len(original), 97)) + [e - 1 for e in ends] + ends:
        with open(path, "wb") as f:
            f.write(original[:cut])
        plog = open_log(tmp_path, topic_id=tid, clean_shutdown=False)
        whole = sum(1 for e in ends if e <= cut)
        assert plog.log_end_offset == (last_offsets[whole - 1] if whole else 0), cut
        assert os.path.getsize(path) == (ends[whole - 1] if whole else 0)
        assert len(stored_batches(plog)) == whole
        crash(plog)


def test_log_config_from_topic_config_strings():
    from broker.storage import LogConfig
    cfg = LogConfig.from_dict({"segment.bytes": "1048576", "retention.ms": "-1",
                               "cleanup.policy": "compact", "max.message.bytes": "100"})
    assert (cfg.segment_bytes, cfg.retention_ms, cfg.segment_index_bytes) == (1048576, -1, 10485760)
    assert not cfg.delete_enabled and LogConfig.from_dict({"cleanup.policy": "compact,delete"}).delete_enabled


def test_small_read_chunks_give_the_same_answers(tmp_path, monkeypatch):
    """Batches straddling the recovery and header-walk read chunks."""
    import broker.storage.segment as segment_mod
    monkeypatch.setattr(segment_mod, "_RECOVERY_CHUNK", 500)
    monkeypatch.setattr(segment_mod, "_WALK_CHUNK", 100)
    plog = open_log(tmp_path, config={"index.interval.bytes": 1000})
    sizes = []
    for i in range(40):
        batch = multi_batch([T0 + i], b"q" * (17 * (i % 5) + (900 if i % 7 == 0 else 0)))
        sizes.append(len(batch))
        plog.append(batch, 0, now_ms=T0)
    expected = plog.read_bytes(0)
    tid = plog.topic_id
    crash(plog)
    plog = open_log(tmp_path, topic_id=tid, clean_shutdown=False)
    assert plog.log_end_offset == 40 and plog.read_bytes(0) == expected
    assert batch_offsets(plog.read_bytes(21, 300)) == [21]  # a 990-byte batch
    limit = sum(sizes[22:26]) + 10
    assert batch_offsets(plog.read_bytes(22, limit)) == [22, 23, 24, 25]
    assert plog.offset_for_timestamp(T0 + 33).offset == 33
    plog.close()


# ============================================= reads at the tail (remembered appends)

def assert_every_offset_reads_right(plog: PartitionLog) -> None:
    """Each offset reads from the batch holding it, and a bound stops a read before the
    batch it starts, as a walk over every batch of the segment says."""
    for seg in plog.segments:
        data = seg.read_bytes(0, seg.size)
        bases = [h.base_offset for _, h in iter_batch_headers(data)]
        for i, (_, h) in enumerate(iter_batch_headers(data)):
            first = max(h.base_offset, plog.log_start_offset)
            if first > h.base_offset + h.last_offset_delta:
                continue   # (below DeleteRecords' log start)
            for o in range(first, h.base_offset + h.last_offset_delta + 1):
                assert batch_offsets(plog.read_bytes(o, 1)) == [h.base_offset], o
            bound = bases[i + 2] if i + 2 < len(bases) else None
            assert batch_offsets(plog.read_bytes(first, 10**6, upper_bound_offset=bound)) == \
                bases[i:i + 2 if bound is not None else None], h


def test_reads_after_a_truncation_and_appends_of_other_sizes(tmp_path):
    # no index entry: only the remembered appends and the walk from the segment's start find
    # batches. A follower truncates (its leader changed) and appends the new leader's batches,
    # smaller, at the same offsets: what it remembered of the cut appends must go
    plog = open_log(tmp_path, config={"index.interval.bytes": 10**6})
    for i in range(6):
        plog.append(multi_batch([T0 + i], b"a" * 500), 0, now_ms=T0)
    assert_every_offset_reads_right(plog)
    plog.truncate_to(2)
    for i in range(10):
        plog.append(multi_batch([T0 + i, T0 + i], b"b" * 20), 0, now_ms=T0)
    assert plog.log_end_offset == 22
    assert_every_offset_reads_right(plog)
    for i in range(40):   # (more appends than it remembers)
        plog.append(multi_batch([T0 + i], b"e" * 10), 0, now_ms=T0)
    assert_every_offset_reads_right(plog)
    plog.close()


def test_reads_after_a_segment_recovery_cut_its_tail(tmp_path):
    from broker.storage import LogConfig, LogSegment
    config = LogConfig.from_dict({"index.interval.bytes": 10**6})
    seg = LogSegment.create(str(tmp_path), 0, config, T0, fresh=True)

    def append(batch: bytearray, base: int) -> None:
        h = BatchHeader(batch)
        batch[:8] = struct.pack(">q", base)   # (base offset: outside the CRC)
        last = base + h.last_offset_delta
        seg.append(batch, last, h.max_timestamp, last, base)

    for i in range(12):
        append(multi_batch([T0 + i], b"a" * 500), i)
    size = seg.size // 12
    with open(seg.log_path, "r+b") as f:   # a torn write in offset 3's batch
        f.seek(3 * size + 100)
        f.write(b"\xff" * 8)
    assert seg.recover() == 9 * size
    for i in range(3):   # offsets 3-6, 7-10, 11-14 where 3-11 were
        append(multi_batch([T0 + i] * 4, b"b" * 200), 3 + 4 * i)
    for o in range(15):
        found = seg.translate_offset(o)
        assert found is not None and found[1].base_offset == (o if o < 3 else o - (o - 3) % 4), o
    assert seg.position_of_bound(7) == 3 * size + len(multi_batch([T0] * 4, b"b" * 200))
    seg.close()


def test_reads_across_rolls_and_delete_records(tmp_path):
    # a roll leaves the old segment's appends behind (it forgets them); DeleteRecords moves the
    # log start without touching a segment's bytes: every read stays where a walk finds it
    plog = open_log(tmp_path, config={"segment.bytes": 3000, "index.interval.bytes": 700})
    for i in range(40):
        plog.append(multi_batch([T0 + i] * (1 + i % 3), b"c" * (30 * (i % 7))), 0, now_ms=T0)
    assert len(plog.segments) > 3
    assert_every_offset_reads_right(plog)
    plog.delete_records_before(plog.segments[1].base_offset + 1)
    plog.append(multi_batch([T0, T0], b"d" * 50), 0, now_ms=T0)
    assert_every_offset_reads_right(plog)
    plog.close()

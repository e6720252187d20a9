"""Log compaction (cleanup.policy=compact) as Kafka's log cleaner does it:
the segment store directly, then a real broker through confluent-kafka."""
from __future__ import annotations

import os
import time
import uuid

import pytest

from kproto.records import (
    DELETE_HORIZON_BIT, BatchHeader, build_batch, build_control_batch, iter_batch_headers, iter_records,
    set_crc, validate_batch,
)
from broker.storage import LogManager, PartitionLog, ProducerSnapshotEntry
from broker.storage import checkpoints as cp
from broker.storage.compaction import CleanerSettings, CleaningRound, clean_log, log_to_clean
from broker.storage.swaps import recover_interrupted_swaps
from broker.storage.txnindex import AbortedTxn, TransactionIndex, read_entries

T0 = 1_700_000_000_000
DAY = 86_400_000
COMPACT = {"cleanup.policy": "compact", "segment.bytes": 1024, "min.cleanable.dirty.ratio": 0.01}


def open_log(tmp_path, config=None, name="t-0", **kw) -> PartitionLog:
    cfg = dict(COMPACT)
    cfg.update(config or {})
    kw.setdefault("sync", False)
    return PartitionLog.open(str(tmp_path / name), cfg, topic_id=uuid.uuid4(), **kw)


def put(plog: PartitionLog, pairs, ts: int = T0, **batch_kw) -> tuple[int, int]:
    """One batch of (key, value) records; returns its (first, last) offset."""
    records = [(k, v, [], ts) for k, v in pairs]
    info = plog.append(bytearray(build_batch(records, **batch_kw)), 0, now_ms=ts)
    return info.base_offset, info.last_offset


def records_of(plog: PartitionLog) -> list:
    out = []
    for seg in plog.segments:
        data = seg.read_bytes(0, seg.size)
        for pos, h in iter_batch_headers(data, validate=True):
            out += list(iter_records(memoryview(data)[pos:pos + h.size]))
    return out


def headers_of(plog: PartitionLog) -> list[BatchHeader]:
    out = []
    for seg in plog.segments:
        data = seg.read_bytes(0, seg.size)
        out += [h for _, h in iter_batch_headers(data, validate=True)]
    return out


def aborted_entries(plog: PartitionLog) -> list[AbortedTxn]:
    return [e for s in plog.segments for e in read_entries(os.path.join(plog.dir, f"{s.base_offset:020d}.txnindex"))]


def latest_by_key(plog: PartitionLog) -> dict:
    latest = {}
    for r in records_of(plog):
        latest[r.key] = (r.offset, r.value)
    return latest


def updates(plog: PartitionLog, keys: int, rounds: int, ts: int = T0, value_size: int = 40) -> dict:
    """``rounds`` single-record batches per key, round-robin; the expected
    latest (offset, value) per key."""
    expected = {}
    for r in range(rounds):
        for k in range(keys):
            key = f"k{k}".encode()
            value = f"{r}:".encode() + b"v" * value_size
            first, _ = put(plog, [(key, value)], ts)
            expected[key] = (first, value)
    return expected


# ============================================================== the basics

def test_latest_value_per_key_survives_with_its_offset(tmp_path):
    plog = open_log(tmp_path)
    expected = updates(plog, keys=5, rounds=40)
    before = records_of(plog)
    active = plog.active_segment
    active_before = active.read_bytes(0, active.size)
    assert len(plog.segments) > 5

    end = clean_log(plog, now_ms=T0)
    assert end == active.base_offset  # the whole closed part was cleaned

    after = records_of(plog)
    assert len(after) < len(before)
    offsets = [r.offset for r in after]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    # every surviving record is an original one, at its original offset
    original = {r.offset: r for r in before}
    assert all(original[r.offset] == r for r in after)
    assert latest_by_key(plog) == expected
    # in the cleaned part, one record per key at most
    cleaned = [r for r in after if r.offset < active.base_offset]
    assert len({r.key for r in cleaned}) == len(cleaned)
    # the active segment is untouched, byte for byte
    assert plog.active_segment is active
    assert active.read_bytes(0, active.size) == active_before
    assert plog.log_end_offset == 200


def test_cleaned_segments_are_merged_indexed_and_reloadable(tmp_path):
    plog = open_log(tmp_path, {"index.interval.bytes": 100})
    updates(plog, keys=30, rounds=10)
    n_before = len(plog.segments)
    end = clean_log(plog, now_ms=T0)
    # groups are formed by the sizes before cleaning: full segments shrink in place ...
    assert len(plog.segments) == n_before
    expected = updates(plog, keys=30, rounds=1)
    clean_log(plog, end, now_ms=T0)
    # ... and the next round merges the small ones, up to segment.bytes
    assert len(plog.segments) < n_before // 2
    assert all(seg.size <= 1024 for seg in plog.segments[:-1])
    # lookups through the rebuilt indexes find every surviving record
    for key, (offset, value) in expected.items():
        data = plog.read_bytes(offset, 1)
        found = [r for r in iter_records(data) if r.offset == offset]
        assert found and found[0].key == key and found[0].value == value
    plog.close()
    # the files on disk are whole: a reopen after an unclean shutdown rebuilds the same log
    reopened = PartitionLog.open(plog.dir, COMPACT | {"index.interval.bytes": 100}, clean_shutdown=False,
                                 sync=False)
    assert latest_by_key(reopened) == expected
    reopened.close()


def test_batches_keep_producer_fields_codec_and_timestamp_type(tmp_path):
    plog = open_log(tmp_path)
    # an idempotent producer, zstd, LogAppendTime: two keys per batch, the first key later overwritten
    for i in range(30):
        put(plog, [(b"a", b"old%d" % i), (b"b%d" % i, b"keep")], producer_id=7, producer_epoch=3,
            base_sequence=2 * i, compression=4, timestamp_type=1)
    put(plog, [(b"a", b"newest")])
    updates(plog, keys=2, rounds=20)  # so that all of the above is in closed segments
    before = {h.base_offset: h for h in headers_of(plog)}
    clean_log(plog, now_ms=T0)
    after = headers_of(plog)
    # every batch of producer 7 keeps a record ("b<i>")
    assert [h.base_offset for h in after if h.producer_id == 7] == [
        h.base_offset for h in before.values() if h.producer_id == 7]
    for h in after:
        old = before[h.base_offset]
        assert (h.last_offset_delta, h.producer_id, h.producer_epoch, h.base_sequence, h.compression,
                h.timestamp_type, h.partition_leader_epoch) == (
            old.last_offset_delta, old.producer_id, old.producer_epoch, old.base_sequence, old.compression,
            old.timestamp_type, old.partition_leader_epoch)
        assert h.max_timestamp == old.max_timestamp
    rebuilt = [h for h in after if h.record_count == 1 and h.producer_id == 7]
    assert rebuilt and all(h.compression == 4 for h in rebuilt)
    assert [r.value for r in records_of(plog) if r.key == b"a"] == [b"newest"]


def test_null_keys_are_dropped(tmp_path):
    plog = open_log(tmp_path)
    for i in range(20):
        put(plog, [(None, b"nokey%d" % i), (b"k", b"v%d" % i)])
    put(plog, [(b"k", b"last")])
    clean_log(plog, now_ms=T0)
    closed = [r for r in records_of(plog) if r.offset < plog.active_segment.base_offset]
    assert all(r.key is not None for r in closed)


# ============================================================== tombstones

def test_tombstones_stay_until_delete_retention_after_cleaning(tmp_path):
    plog = open_log(tmp_path, {"delete.retention.ms": DAY})
    updates(plog, keys=3, rounds=5)
    put(plog, [(b"k1", None)])  # delete k1
    updates(plog, keys=1, rounds=8)  # more data so k1's tombstone lands in a closed segment

    clean_log(plog, now_ms=T0)
    k1 = [r for r in records_of(plog) if r.key == b"k1"]
    assert len(k1) == 1 and k1[0].value is None  # the tombstone alone, older values gone
    holder = [h for h in headers_of(plog) if h.base_offset <= k1[0].offset <= h.last_offset][0]
    # Kafka's magic-2 delete horizon: attribute bit 6, horizon = cleaning time + delete.retention.ms
    assert holder.attributes & DELETE_HORIZON_BIT and holder.base_timestamp == T0 + DAY
    assert k1[0].timestamp == T0  # record timestamps are unchanged

    # a later round before the horizon keeps it
    updates(plog, keys=1, rounds=8)
    clean_log(plog, 0, now_ms=T0 + DAY - 1)
    assert [r.value for r in records_of(plog) if r.key == b"k1"] == [None]
    # once the horizon has passed it goes
    updates(plog, keys=1, rounds=8)
    clean_log(plog, 0, now_ms=T0 + DAY)
    assert [r for r in records_of(plog) if r.key == b"k1"] == []
    assert b"k2" in latest_by_key(plog)


# ============================================================== what is cleanable

def test_dirty_ratio_and_first_uncleanable_offset(tmp_path):
    plog = open_log(tmp_path, {"min.cleanable.dirty.ratio": 0.5})
    updates(plog, keys=60, rounds=3)
    to_clean = log_to_clean(plog, None, T0)
    assert to_clean.first_dirty_offset == 0
    assert to_clean.first_uncleanable_offset == plog.active_segment.base_offset
    assert to_clean.clean_bytes == 0 and to_clean.cleanable_ratio == 1.0
    assert to_clean.should_clean(0.5)

    end = clean_log(plog, now_ms=T0, force=False)
    assert end == plog.active_segment.base_offset
    # right after a round nothing is dirty
    assert log_to_clean(plog, end, T0).cleanable_bytes == 0
    assert clean_log(plog, end, now_ms=T0, force=False) is None

    # a little new data: dirty, but below the 0.5 ratio -> not cleaned
    clean_size = plog.size - plog.active_segment.size
    while log_to_clean(plog, end, T0).cleanable_bytes == 0:
        updates(plog, keys=1, rounds=1)
    small = log_to_clean(plog, end, T0)
    assert 0 < small.cleanable_ratio <= 0.5 and small.clean_bytes >= clean_size
    assert clean_log(plog, end, now_ms=T0, force=False) is None
    # the ratio Kafka computes: cleanable / (clean + cleanable)
    assert small.cleanable_ratio == small.cleanable_bytes / (small.clean_bytes + small.cleanable_bytes)


def test_stable_offset_and_min_compaction_lag_bound_the_dirty_section(tmp_path):
    plog = open_log(tmp_path, {"min.compaction.lag.ms": 60_000})
    updates(plog, keys=2, rounds=10, ts=T0)
    updates(plog, keys=2, rounds=10, ts=T0 + 120_000)
    bases = [s.base_offset for s in plog.segments]
    # segments whose newest record is within the lag of now are uncleanable
    to_clean = log_to_clean(plog, None, T0 + 150_000)
    assert to_clean.first_uncleanable_offset == next(
        s.base_offset for s in plog.segments if s.largest_timestamp() > T0 + 90_000)
    # the last stable offset rounds down to the base of its segment
    to_clean = log_to_clean(plog, None, T0 + 10**9, stable_offset=bases[2] + 1)
    assert to_clean.first_uncleanable_offset == bases[2]
    untouched = [(s.base_offset, s.read_bytes(0, s.size)) for s in plog.segments[2:]]
    first_two = records_of(plog)[:bases[2]]
    end = clean_log(plog, now_ms=T0 + 10**9, stable_offset=bases[2] + 1)
    assert end == bases[2]
    assert [(s.base_offset, s.read_bytes(0, s.size)) for s in plog.segments
            if s.base_offset >= bases[2]] == untouched
    assert len([r for r in records_of(plog) if r.offset < bases[2]]) < len(first_two)


def test_max_compaction_lag_forces_a_clean_below_the_ratio(tmp_path):
    plog = open_log(tmp_path, {"min.cleanable.dirty.ratio": 0.99, "max.compaction.lag.ms": 1000})
    updates(plog, keys=50, rounds=1)  # no duplicates at all: ratio 1.0 still
    end = clean_log(plog, now_ms=T0, force=False)
    assert end is not None
    updates(plog, keys=2, rounds=1, ts=T0 + 10)
    updates(plog, keys=50, rounds=1, ts=T0 + 20)
    to_clean = log_to_clean(plog, end, T0 + 5000)
    assert to_clean.cleanable_ratio < 0.99 and to_clean.need_compaction_now
    assert not log_to_clean(plog, end, T0 + 500).need_compaction_now


# ============================================================== transactions, producers

def test_aborted_data_goes_commit_markers_go_after_horizon_abort_markers_stay(tmp_path):
    plog = open_log(tmp_path, {"delete.retention.ms": 1000})
    # producer 5: a committed transaction, then an aborted one, each with its marker
    put(plog, [(b"c1", b"committed")], producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
    put(plog, [(b"c2", b"committed")], producer_id=5, producer_epoch=0, base_sequence=1, transactional=True)
    commit = plog.append(bytearray(build_control_batch("commit", 5, 0, 0, timestamp=T0)), 0, now_ms=T0)
    first, _ = put(plog, [(b"a1", b"aborted")], producer_id=5, producer_epoch=0, base_sequence=2,
                   transactional=True)
    put(plog, [(b"a2", b"aborted")], producer_id=5, producer_epoch=0, base_sequence=3, transactional=True)
    abort = plog.append(bytearray(build_control_batch("abort", 5, 0, 0, timestamp=T0)), 0, now_ms=T0)
    TransactionIndex(plog.dir, plog.active_segment.base_offset).append(
        AbortedTxn(5, first, abort.base_offset, abort.base_offset + 1))
    updates(plog, keys=2, rounds=30)  # plain data after it; all of the above in closed segments
    # producer 5 is still active: its last batch is the ABORT marker (no data offset)
    plog.snapshot_provider = lambda offset: [ProducerSnapshotEntry(5, 0, 3, -1, 0, T0, 0, -1)]

    clean_log(plog, now_ms=T0)
    recs = records_of(plog)
    assert {r.key for r in recs if r.key in (b"a1", b"a2")} == set()  # aborted data removed
    assert {r.value for r in recs if r.key in (b"c1", b"c2")} == {b"committed"}
    heads = {h.base_offset: h for h in headers_of(plog)}
    assert commit.base_offset in heads and abort.base_offset in heads
    # the COMMIT marker's transaction still has data: no horizon for it
    assert not heads[commit.base_offset].attributes & DELETE_HORIZON_BIT
    # the cleaned segment holding the ABORT marker lists the transaction whose data it removed
    txn = AbortedTxn(5, first, abort.base_offset, abort.base_offset + 1)
    assert aborted_entries(plog) == [txn]

    # the producer expires; the committed keys get overwritten: their transaction's batches go ...
    plog.snapshot_provider = lambda offset: []
    put(plog, [(b"c1", b"plain")])
    put(plog, [(b"c2", b"plain")])
    updates(plog, keys=2, rounds=30)
    clean_log(plog, 0, now_ms=T0 + 10)
    heads = {h.base_offset: h for h in headers_of(plog)}
    assert not any(h.producer_id == 5 and not h.is_control for h in heads.values())
    assert aborted_entries(plog) == []  # no data of it is left to skip (Kafka drops the entry)
    assert not heads[commit.base_offset].attributes & DELETE_HORIZON_BIT
    # ... the next round finds no batch of the transaction: the marker gets a horizon ...
    updates(plog, keys=2, rounds=30)
    clean_log(plog, 0, now_ms=T0 + 20)
    marker = {h.base_offset: h for h in headers_of(plog)}[commit.base_offset]
    assert marker.attributes & DELETE_HORIZON_BIT and marker.base_timestamp == T0 + 20 + 1000
    assert marker.record_count == 1
    # ... and goes in a round after the horizon
    updates(plog, keys=2, rounds=30)
    clean_log(plog, 0, now_ms=T0 + 1019)
    assert commit.base_offset in {h.base_offset for h in headers_of(plog)}
    updates(plog, keys=2, rounds=30)
    clean_log(plog, 0, now_ms=T0 + 1020)
    heads = {h.base_offset: h for h in headers_of(plog)}
    assert commit.base_offset not in heads
    # the ABORT marker stays (see broker/storage/compaction.py), with its record
    assert heads[abort.base_offset].record_count == 1


def test_last_batch_of_an_active_producer_is_kept_empty(tmp_path):
    plog = open_log(tmp_path)
    first, _ = put(plog, [(b"x", b"1")], producer_id=9, producer_epoch=2, base_sequence=0)
    last, _ = put(plog, [(b"x", b"2"), (b"y", b"1")], producer_id=9, producer_epoch=2, base_sequence=1)
    put(plog, [(b"x", b"3"), (b"y", b"2")])  # plain overwrites of both keys
    updates(plog, keys=2, rounds=30)
    clean_log(plog, now_ms=T0)  # no snapshot provider: producers' last batches come from the log
    heads = {h.base_offset: h for h in headers_of(plog)}
    assert first not in heads  # an older batch of the producer goes entirely
    kept = heads[last]
    # the producer's last batch stays, emptied, with its sequence range for duplicate detection
    assert kept.record_count == 0 and kept.last_offset_delta == 1
    assert (kept.producer_id, kept.producer_epoch, kept.base_sequence, kept.last_sequence) == (9, 2, 1, 2)
    assert kept.size == 61
    validate_batch(plog.read_bytes(last, 61))


# ============================================================== files and crashes

def test_old_segment_files_wait_for_the_delete_delay(tmp_path):
    plog = open_log(tmp_path, {"file.delete.delay.ms": 60_000})
    updates(plog, keys=3, rounds=20)
    first = plog.segments[0]
    slice_ = plog.read(0, 100)  # a fetch in flight holds the old file
    held = slice_.read()
    clean_log(plog, now_ms=T0)
    names = os.listdir(plog.dir)
    assert any(n.endswith(".log.deleted") for n in names)
    assert first.deleted and slice_.read() == held  # still readable
    plog.purge_deleted(now_ms=int(time.time() * 1000) + 61_000)
    assert not any(n.endswith(".deleted") for n in os.listdir(plog.dir))
    assert not any(n.endswith((".cleaned", ".swap")) for n in os.listdir(plog.dir))


def _interrupted_round(tmp_path, stop_after: str):
    """Clean a log up to the given step of the first group's swap, then 'crash'."""
    plog = open_log(tmp_path)
    expected = updates(plog, keys=4, rounds=30)
    original = records_of(plog)
    to_clean = log_to_clean(plog, None, T0)
    rnd = CleaningRound(plog, to_clean, T0, CleanerSettings(), sync=False)

    class Crash(Exception):
        pass

    real_replace = plog.replace_segments

    def replace(base, old, now_ms=None, sync=True):
        if stop_after == "swap-renamed":
            raise Crash()
        return real_replace(base, old, now_ms, sync)

    if stop_after == "cleaned-written":
        from broker.storage import compaction as mod
        real_rename = mod._CleanedSegmentWriter.rename_to_swap

        def no_rename(self):
            raise Crash()
        mod._CleanedSegmentWriter.rename_to_swap = no_rename
    plog.replace_segments = replace
    try:
        with pytest.raises(Crash):
            # the writer's files are discarded when a round fails: keep them as a crash would
            rnd.abort = lambda: None
            rnd.run_to_end()
    finally:
        if stop_after == "cleaned-written":
            mod._CleanedSegmentWriter.rename_to_swap = real_rename
    # a crash: nothing is closed cleanly
    for seg in plog.segments:
        seg.offset_index._release()
        seg.time_index._release()
        seg.file.close()
    return plog.dir, expected, original


def test_crash_with_cleaned_files_keeps_the_old_segments(tmp_path):
    dir, expected, original = _interrupted_round(tmp_path, "cleaned-written")
    assert any(n.endswith(".log.cleaned") for n in os.listdir(dir))
    plog = PartitionLog.open(dir, COMPACT, clean_shutdown=False, sync=False)
    assert not any(n.endswith((".cleaned", ".swap")) for n in os.listdir(dir))
    assert records_of(plog) == original  # nothing was lost nor compacted
    clean_log(plog, now_ms=T0)  # and the next round works
    assert latest_by_key(plog) == expected


def test_crash_after_swap_rename_completes_the_swap(tmp_path):
    dir, expected, original = _interrupted_round(tmp_path, "swap-renamed")
    names = os.listdir(dir)
    assert any(n.endswith(".log.swap") for n in names) and not any(n.endswith(".cleaned") for n in names)
    plog = PartitionLog.open(dir, COMPACT, clean_shutdown=False, sync=False)
    names = os.listdir(dir)
    assert not any(n.endswith((".cleaned", ".swap")) for n in names)
    after = records_of(plog)
    # the first group was replaced by its compacted copy; the rest is as it was
    assert len(after) < len(original)
    by_offset = {r.offset: r for r in original}
    assert all(by_offset[r.offset] == r for r in after)
    assert [r.offset for r in after] == sorted(r.offset for r in after)
    assert latest_by_key(plog) == expected
    assert plog.log_end_offset == original[-1].offset + 1


def test_swap_recovery_rules(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    # a swap at 0 covering offsets 0..9 replaces segments 0 and 5; segment 10 stays
    swap = build_batch([(b"k", b"v", [], T0)] * 10)
    (d / f"{0:020d}.log.swap").write_bytes(swap)
    for base in (0, 5, 10):
        (d / f"{base:020d}.log").write_bytes(b"old")
        (d / f"{base:020d}.index").write_bytes(b"")
    # a swap above a .cleaned file is part of an unfinished operation: dropped
    (d / f"{20:020d}.log.cleaned").write_bytes(b"x")
    (d / f"{30:020d}.log.swap").write_bytes(b"y")
    recover_interrupted_swaps(str(d))
    assert sorted(os.listdir(d)) == [f"{0:020d}.log", f"{10:020d}.index", f"{10:020d}.log"]
    assert (d / f"{0:020d}.log").read_bytes() == swap


def test_log_manager_cleans_in_slices_and_checkpoints(tmp_path):
    mgr = LogManager.open(str(tmp_path / "logs"), broker_config={"log.cleaner.backoff.ms": 0}, sync=False)
    plog = mgr.get_or_create("c", 0, uuid.uuid4(), COMPACT)
    expected = updates(plog, keys=5, rounds=200)
    other = mgr.get_or_create("d", 0, uuid.uuid4(), {"segment.bytes": 1024})  # delete policy: left alone
    updates(other, keys=1, rounds=100)
    other_size = other.size
    size = plog.size
    slices = 0
    while mgr.clean(budget_s=0.0005):
        slices += 1
    assert slices > 1  # the work was cut into slices
    assert plog.size < size and other.size == other_size
    assert latest_by_key(plog) == expected
    saved = cp.read_offsets_checkpoint(os.path.join(mgr.log_dir, "cleaner-offset-checkpoint"))
    assert saved == {("c", 0): plog.active_segment.base_offset}
    # nothing dirty: the next call backs off without work
    assert not mgr.clean()
    mgr.close()
    # the checkpoint survives a restart and names the first dirty offset
    mgr = LogManager.open(str(tmp_path / "logs"), sync=False)
    assert mgr.cleaner.checkpoints == saved
    mgr.delete_partition("c", 0)
    assert cp.read_offsets_checkpoint(os.path.join(mgr.log_dir, "cleaner-offset-checkpoint")) == {}
    mgr.close()


def test_round_is_abandoned_when_its_segments_go(tmp_path, caplog):
    mgr = LogManager.open(str(tmp_path / "logs"), broker_config={"log.cleaner.backoff.ms": 0}, sync=False)
    plog = mgr.get_or_create("c", 0, uuid.uuid4(), COMPACT | {"cleanup.policy": "compact,delete",
                                                            "retention.ms": 1000})
    updates(plog, keys=5, rounds=200)
    assert mgr.clean(budget_s=0.0005)  # a round under way
    plog.apply_retention(now_ms=T0 + 10**9)  # every closed segment expires meanwhile
    with caplog.at_level("INFO", logger="broker.storage.cleaner"):
        while mgr.clean(budget_s=0.0005):
            pass
    assert "abandoned" in caplog.text
    assert not any(n.endswith((".cleaned", ".swap")) for n in os.listdir(plog.dir))
    assert ("c", 0) not in mgr.cleaner.checkpoints or mgr.cleaner.checkpoints[("c", 0)] >= plog.log_start_offset
    mgr.close()


def test_a_log_that_fails_to_clean_is_left_alone(tmp_path, caplog):
    mgr = LogManager.open(str(tmp_path / "logs"), broker_config={"log.cleaner.backoff.ms": 0}, sync=False)
    bad = mgr.get_or_create("bad", 0, uuid.uuid4(), COMPACT)
    # a batch whose record count lies (its CRC is right): the cleaner cannot decode it
    batch = bytearray(build_batch([(b"k", b"v", [], T0)] * 3))
    batch[57:61] = (4).to_bytes(4, "big")
    set_crc(batch)
    bad.append(batch, 0, now_ms=T0)
    updates(bad, keys=3, rounds=30)
    good = mgr.get_or_create("good", 0, uuid.uuid4(), COMPACT)
    expected = updates(good, keys=3, rounds=30)
    size = good.size
    bad_before = records_of_raw(bad)
    with caplog.at_level("ERROR", logger="broker.storage.cleaner"):
        while mgr.clean(budget_s=1.0):
            pass
    assert "marked uncleanable" in caplog.text
    assert mgr.cleaner.uncleanable == {("bad", 0)}
    assert records_of_raw(bad) == bad_before  # untouched
    assert not any(n.endswith((".cleaned", ".swap")) for n in os.listdir(bad.dir))
    assert good.size < size and latest_by_key(good) == expected
    mgr.close()


def records_of_raw(plog: PartitionLog) -> list[bytes]:
    return [s.read_bytes(0, s.size) for s in plog.segments]


# ============================================================== a real broker

def disk_batches(partition_dir: str) -> list:
    """(segment name, header, batch) of what a running broker's partition holds
    on disk; the cleaner may swap files meanwhile, so a vanished file means: again."""
    for _ in range(50):
        out = []
        try:
            for name in sorted(os.listdir(partition_dir)):
                if name.endswith(".log"):
                    with open(os.path.join(partition_dir, name), "rb") as f:
                        data = f.read()
                    out += [(name, h, memoryview(data)[pos:pos + h.size])
                            for pos, h in iter_batch_headers(data, allow_partial_tail=True)]
            return out
        except FileNotFoundError:
            time.sleep(0.05)
    raise AssertionError(f"{partition_dir} kept changing")


def _wait(predicate, timeout=30.0, interval=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


@pytest.fixture
def compacting_broker(tmp_path):
    from broker.launch.process import BrokerProcess
    proc = BrokerProcess(str(tmp_path / "data"), settings={
        "log.cleaner.backoff.ms": "200",
        "offsets.topic.num.partitions": "1",
        "offsets.topic.segment.bytes": "4096",
    })
    proc.start()
    yield proc
    proc.stop()


def test_broker_compacts_a_topic_and_the_offsets_topic(compacting_broker, topic_name):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic
    bootstrap = compacting_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic_name, 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01"})])
    futures[topic_name].result(timeout=30)

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    latest = {}
    for j in range(10):  # written once: they stay, early in the log
        producer.produce(topic_name, key=f"static-{j}", value=f"static-{j}")
        latest[f"static-{j}"] = f"static-{j}"
    for i in range(600):
        key = f"key-{i % 6}"
        value = f"value-{i}-" + "x" * 40
        producer.produce(topic_name, key=key, value=value)
        latest[key] = value
        if i % 50 == 0:
            producer.flush()
    producer.flush()
    data_dir = os.path.join(compacting_broker.data_dir, f"{topic_name}-0")

    # 610 records were written; compaction leaves the latest of 16 keys plus the uncleaned tail
    assert _wait(lambda: sum(h.record_count for _, h, _ in disk_batches(data_dir)) < 200), \
        "the topic was not compacted"

    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "g-" + topic_name,
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic_name])
    seen = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            if seen and seen[-1][0] == 609:
                break
            continue
        assert not msg.error(), msg.error()
        seen.append((msg.offset(), msg.key().decode(), msg.value().decode()))
    offsets = [o for o, _, _ in seen]
    assert offsets == sorted(offsets) and offsets[-1] == 609
    assert offsets[:10] == list(range(10))
    assert len(seen) < 610 and any(b - a > 1 for a, b in zip(offsets, offsets[1:]))  # gaps
    final = {}
    for _, k, v in seen:
        final[k] = v
    assert final == latest  # each key's latest value is there
    # older values are gone: in the cleaned part each key appears once
    assert len(seen) < 200

    # many commits in a group: __consumer_offsets gets compacted too
    offsets_dir = os.path.join(compacting_broker.data_dir, "__consumer_offsets-0")
    from confluent_kafka import TopicPartition
    for i in range(400):
        consumer.commit(offsets=[TopicPartition(topic_name, 0, i + 1)], asynchronous=False)

    assert _wait(lambda: sum(h.record_count for _, h, _ in disk_batches(offsets_dir)) < 200), \
        "__consumer_offsets was not compacted"
    committed = consumer.committed([TopicPartition(topic_name, 0)], timeout=10)
    assert committed[0].offset == 400
    consumer.close()

    # after a crash the compacted logs load: the group's offset and every key's value are there
    compacting_broker.restart(clean=False)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "g-" + topic_name,
                                         "enable.auto.commit": False})
    committed = consumer.committed([TopicPartition(topic_name, 0)], timeout=30)
    assert committed[0].offset == 400
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    again = {}
    deadline = time.monotonic() + 30
    while len(again) < len(latest) or again != latest:
        assert time.monotonic() < deadline, again
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            again[msg.key().decode()] = msg.value().decode()
    consumer.close()


def test_broker_compacts_transactional_data(compacting_broker, topic_name):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic
    bootstrap = compacting_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"})]
    )[topic_name].result(timeout=30)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-" + topic_name,
                                         "linger.ms": 0})
    producer.init_transactions(30)
    expected = {}
    for round_ in range(30):
        producer.begin_transaction()
        for k in range(4):
            producer.produce(topic_name, key=f"k{k}", value=f"aborted-{round_}")
        producer.flush()
        producer.abort_transaction(30)
        producer.begin_transaction()
        for k in range(4):
            producer.produce(topic_name, key=f"k{k}", value=f"committed-{round_}")
            expected[f"k{k}"] = f"committed-{round_}"
        producer.commit_transaction(30)
    data_dir = os.path.join(compacting_broker.data_dir, f"{topic_name}-0")

    def values_on_disk():
        return [r.value for _, h, batch in disk_batches(data_dir) if not h.is_control
                for r in iter_records(batch)]

    # aborted records are removed from the cleaned part at once
    assert _wait(lambda: sum(v.startswith(b"aborted") for v in values_on_disk()) < 20)

    def consume(isolation):
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"g-{isolation}-{topic_name}",
            "auto.offset.reset": "earliest", "isolation.level": isolation, "enable.partition.eof": True})
        consumer.subscribe([topic_name])
        seen = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(msg.error())
            seen[msg.key().decode()] = msg.value().decode()
        consumer.close()
        return seen

    # read_committed sees exactly the last committed value of each key
    assert consume("read_committed") == expected

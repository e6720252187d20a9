"""The aborted-transaction index (broker/storage/txnindex.py) against the plain reading of Kafka's
collectAbortedTxns: every entry of the file, in order."""
from __future__ import annotations

import os
import random

from broker.storage.txnindex import ENTRY_SIZE, AbortedTxn, TransactionIndex, read_entries


def kafka_collect(entries, fetch_offset, upper_bound):
    """TransactionIndex.collectAbortedTxns as Kafka 3.9 writes it: a walk over the whole file."""
    found = []
    for e in entries:
        if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
            found.append(e)
        if e.last_stable_offset >= upper_bound:
            return found, True
    return found, False


def history(rng, n):
    """Aborted transactions as a leader records them: markers at increasing offsets, each with the
    last stable offset after it (the first offset of a transaction still open, or marker + 1)."""
    out, offset, open_first = [], rng.randrange(0, 50), []
    for _ in range(n):
        first = offset + rng.randrange(0, 5)
        last = first + rng.randrange(1, 20)
        offset = last + 1
        if rng.random() < 0.3:
            open_first.append(last - rng.randrange(0, 3))    # another producer's open transaction
        if open_first and rng.random() < 0.5:
            open_first.pop(0)
        lso = min(open_first, default=last + 1)
        lso = min(lso, last + 1)
        out.append(AbortedTxn(rng.randrange(1000), first, last, lso))
    return out


def test_collect_answers_as_kafkas_full_walk(tmp_path):
    rng = random.Random(26)
    for case in range(40):
        d = tmp_path / str(case)
        d.mkdir()
        entries = history(rng, rng.randrange(1, 60))
        idx = TransactionIndex(str(d), 0)
        for e in entries:
            idx.append(e)
        end = entries[-1].last_offset + 5
        for _ in range(60):
            fetch = rng.randrange(0, end)
            upper = rng.randrange(0, end + 5)      # empty ranges too (upper <= fetch)
            assert idx.collect(fetch, upper) == kafka_collect(entries, fetch, upper), (case, fetch, upper)
        # the file is Kafka's layout, entry for entry, and a reopened index answers the same
        assert os.path.getsize(idx.path) == len(entries) * ENTRY_SIZE
        again = TransactionIndex(str(d), 0)
        assert again.entries == entries == read_entries(idx.path)
        fetch = rng.randrange(0, end)
        assert again.collect(fetch, end) == kafka_collect(entries, fetch, end)


def test_truncation_keeps_the_entries_that_end_before_the_offset(tmp_path):
    idx = TransactionIndex(str(tmp_path), 0)
    entries = [AbortedTxn(1, 0, 4, 5), AbortedTxn(2, 6, 9, 10), AbortedTxn(3, 11, 15, 16)]
    for e in entries:
        idx.append(e)
    idx.truncate_to(10)
    assert idx.entries == entries[:2] and read_entries(idx.path) == entries[:2]
    idx.append(AbortedTxn(4, 12, 13, 14))      # appends go on after a truncation
    assert TransactionIndex(str(tmp_path), 0).entries == entries[:2] + [AbortedTxn(4, 12, 13, 14)]
    idx.truncate_to(0)
    assert idx.entries == [] and not os.path.exists(idx.path)


def test_a_torn_or_unknown_entry_ends_the_index(tmp_path):
    idx = TransactionIndex(str(tmp_path), 0)
    idx.append(AbortedTxn(1, 0, 4, 5))
    idx.append(AbortedTxn(2, 6, 9, 10))
    with open(idx.path, "ab") as f:
        f.write(b"\x00\x07" + bytes(20))           # a torn entry: the file is cut back to whole ones
    again = TransactionIndex(str(tmp_path), 0)
    assert len(again.entries) == 2 and os.path.getsize(idx.path) == 2 * ENTRY_SIZE
    with open(idx.path, "r+b") as f:
        f.seek(ENTRY_SIZE)
        f.write(b"\x00\x09")                        # version 9: the rest is ignored
    assert TransactionIndex(str(tmp_path), 0).entries == [AbortedTxn(1, 0, 4, 5)]

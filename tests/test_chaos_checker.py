"""The chaos checkers fail on hand-made histories holding each anomaly, and
pass the same histories without it (a checker that cannot fail proves nothing)."""
from __future__ import annotations

from tools.chaos.checker import check
from tools.chaos.history import HistoryWriter, read_history

T = "q"


class H:
    """A small history builder."""

    def __init__(self):
        self.ops = []
        self.t = 1000.0

    def op(self, **o):
        self.t += 0.01
        o.setdefault("ts", self.t)
        self.ops.append(o)
        return self

    def send(self, proc, p, off, value, ok=True):
        self.op(f="send", type="invoke", proc=proc, topic=T, partition=p, value=value)
        if ok:
            self.op(f="send", type="ok", proc=proc, topic=T, partition=p, offset=off, value=value)
        return self

    def poll(self, proc, *recs, iso="read_uncommitted", topic=T):
        return self.op(f="poll", type="ok", proc=proc, isolation=iso,
                       records=[[topic, p, off, v] for p, off, v in recs])

    def final(self, **kw):
        return self.op(f="final", type="ok", **kw)

    def kinds(self):
        return check(self.ops)["by_kind"]


def test_clean_queue_history_is_valid():
    h = H().send("p0", 0, 0, "a").send("p0", 0, 1, "b").poll("c0", (0, 0, "a"), (0, 1, "b"))
    h.poll("final", (0, 0, "a"), (0, 1, "b")).final(end_offsets={"q/0": 2})
    assert check(h.ops)["valid"]


def test_lost_write_read_once_then_gone_from_the_final_read():
    h = H().send("p0", 0, 0, "a").send("p0", 0, 1, "b").poll("c0", (0, 0, "a"), (0, 1, "b"))
    h.send("p1", 0, 1, "c").send("p1", 0, 2, "d")
    h.poll("final", (0, 0, "a"), (0, 1, "c"), (0, 2, "d")).final(end_offsets={"q/0": 3})
    assert h.kinds() == {"lost-write": 1, "inconsistent-offsets": 1}


def test_lost_write_when_reads_went_past_it():
    h = H().send("p0", 0, 0, "a").send("p0", 0, 1, "b").send("p0", 0, 2, "c")
    h.poll("c0", (0, 0, "a"), (0, 2, "c"))
    assert h.kinds() == {"lost-write": 1}


def test_lost_write_when_log_ends_below_acked_offset():
    h = H().send("p0", 0, 0, "a").send("p0", 0, 1, "b").poll("final", (0, 0, "a"))
    h.final(end_offsets={"q/0": 1})
    assert h.kinds() == {"lost-write": 1}


def test_truncated_and_overwritten_offset_is_lost_and_inconsistent():
    # what the drop-last-acked-batch-on-restart switch produces
    h = H().send("p0", 0, 0, "a").send("p0", 0, 1, "b").send("p1", 0, 1, "c")
    h.poll("final", (0, 0, "a"), (0, 1, "c"), (0, 2, "d")).send("p1", 0, 2, "d")
    assert h.kinds() == {"lost-write": 1, "inconsistent-offsets": 1}


def test_acknowledged_without_an_offset_must_still_be_read():
    # librdkafka may report an idempotent send as delivered with offset -1
    # (recorded as null): no offset to compare, but the value must be somewhere
    h = H().send("p0", 0, 0, "a").send("p0", 0, None, "b").send("p0", 0, None, "c")
    h.poll("final", (0, 0, "a"), (0, 1, "b")).final(end_offsets={"q/0": 2})
    assert h.kinds() == {"lost-write": 1}
    assert "'c' acknowledged at q/0@None" in check(h.ops)["anomalies"][0]["msg"]


def test_unseen_write_after_final_read():
    h = H().send("p0", 0, 0, "a").send("p0", 0, 1, "b").poll("final", (0, 0, "a"))
    h.final(end_offsets={"q/0": 2})
    assert h.kinds() == {"unseen": 1}
    # without a final read the run may simply have ended before the read
    h2 = H().send("p0", 0, 0, "a").send("p0", 0, 1, "b").poll("final", (0, 0, "a"))
    assert check(h2.ops)["valid"]


def test_duplicate():
    h = H().send("p0", 0, 0, "a").poll("c0", (0, 0, "a"), (0, 1, "a"))
    assert h.kinds() == {"duplicate": 1}


def test_duplicate_after_the_producers_timeouts_says_so():
    # what librdkafka's epoch bump after timed-out messages leaves (tools/chaos/epoch_bump.py):
    # the first copy never acknowledged, the re-send acknowledged; still a duplicate
    h = H().send("p0", 0, 0, "a").op(f="send", type="invoke", proc="p0", topic=T, partition=0, value="b")
    h.op(f="send", type="info", proc="p0", topic=T, partition=0, value="a0", error="_MSG_TIMED_OUT")
    h.op(f="send", type="ok", proc="p0", topic=T, partition=0, offset=2, value="b")
    h.poll("c0", (0, 0, "a"), (0, 1, "b"), (0, 2, "b"))
    result = check(h.ops)
    assert result["by_kind"] == {"duplicate": 1}
    assert "p0 had 1 sends time out in between" in result["anomalies"][0]["msg"]
    # without the timeout: no such explanation
    plain = H().send("p0", 0, 0, "a").send("p0", 0, 2, "b").poll("c0", (0, 0, "a"), (0, 1, "b"), (0, 2, "b"))
    assert "time out" not in check(plain.ops)["anomalies"][0]["msg"]


def test_unexpected_value():
    h = H().send("p0", 0, 0, "a").poll("c0", (0, 0, "a"), (0, 1, "zz"))
    assert h.kinds() == {"unexpected-value": 1}


def test_nonmonotonic_poll_and_reassignment_resets():
    h = H().send("p0", 0, 0, "a").send("p0", 0, 1, "b")
    h.poll("c0", (0, 0, "a"), (0, 1, "b")).poll("c0", (0, 0, "a"))
    assert h.kinds() == {"nonmonotonic-poll": 1}
    h = H().send("p0", 0, 0, "a").send("p0", 0, 1, "b").poll("c0", (0, 0, "a"), (0, 1, "b"))
    h.op(f="assign", type="ok", proc="c0", partitions=[[T, 0]]).poll("c0", (0, 0, "a"))
    assert check(h.ops)["valid"]


def test_nonmonotonic_send():
    h = H().send("p0", 1, 5, "a").send("p0", 1, 4, "b").poll("c0", (1, 4, "b"), (1, 5, "a"))
    assert h.kinds() == {"nonmonotonic-send": 1}


def txn(h, tid, outcome, writes, offsets=(), commit=True, ok=True):
    h.op(f="txn", type="invoke", proc="copier", txn=tid, outcome=outcome,
         writes=[["out", v] for v in writes], reads=[])
    if outcome == "commit" and commit:
        h.op(f="txn-commit", type="invoke", proc="copier", txn=tid)
    h.op(f="txn", type="ok" if ok else "info", proc="copier", txn=tid, outcome=outcome,
         offsets=[["out", 0, o, v] for o, v in offsets])
    return h


def test_aborted_read():
    h = H()
    txn(h, "t1", "abort", ["x"], [(0, "x")])
    txn(h, "t2", "commit", ["y"], [(2, "y")])
    h.poll("r", (0, 2, "y"), iso="read_committed", topic="out")
    assert check(h.ops)["valid"]
    h.poll("r2", (0, 0, "x"), iso="read_committed", topic="out")
    assert h.kinds() == {"aborted-read": 1}


def test_aborted_copy_beside_committed_copy_is_not_a_duplicate():
    h = H()
    txn(h, "t1", "abort", ["x"], [(0, "x")])
    txn(h, "t2", "commit", ["x"], [(2, "x")])
    h.poll("u", (0, 0, "x"), (0, 2, "x"), topic="out")          # read_uncommitted sees both
    h.poll("r", (0, 2, "x"), iso="read_committed", topic="out")
    assert check(h.ops)["valid"]
    h.poll("r", (0, 0, "x"), iso="read_committed", topic="out")
    assert set(h.kinds()) == {"aborted-read", "duplicate", "nonmonotonic-poll"}


def test_uncommitted_read():
    h = H()
    h.op(f="txn", type="invoke", proc="copier", txn="t1", outcome="commit", writes=[["out", "x"]], reads=[])
    h.poll("r", (0, 0, "x"), iso="read_committed", topic="out")
    h.op(f="txn-commit", type="invoke", proc="copier", txn="t1")
    h.op(f="txn", type="ok", proc="copier", txn="t1", outcome="commit")
    assert h.kinds() == {"uncommitted-read": 1}


def copier_history(copied, committed):
    h = H()
    for i, v in enumerate(["a", "b", "c"]):
        h.send("prod", 0, i, v)
    txn(h, "t1", "commit", [v + ">c" for v in copied])
    h.poll("final", *[(0, i, v) for i, v in enumerate(["a", "b", "c"])])
    h.poll("final", *[(0, i, v + ">c") for i, v in enumerate(copied)], iso="read_committed", topic="out")
    h.final(end_offsets={"q/0": 3, "out/0": len(copied)},
            committed={"copier": {"q/0": committed}},
            copier={"input": T, "output": "out", "group": "copier"})
    return h


def test_copier_exactly_its_committed_input():
    assert copier_history(["a", "b"], 2).kinds() == {}
    assert copier_history(["a"], 2).kinds() == {"copier-lost": 1}
    assert copier_history(["a", "b", "c"], 2).kinds() == {"copier-uncommitted-output": 1}
    h = copier_history(["a", "b"], 2)
    h.poll("final", (0, 5, "a>c"), iso="read_committed", topic="out")
    assert h.kinds() == {"copier-duplicate": 1, "duplicate": 1}


def commit(h, proc, off, ok=True):
    h.op(f="commit", type="invoke", proc=proc, group="g", offsets=[[T, 0, off]])
    h.op(f="commit", type="ok" if ok else "fail", proc=proc, group="g", offsets=[[T, 0, off]])
    return h


def test_offset_regression():
    h = commit(commit(commit(H(), "m1", 5), "m2", 7), "m1", 9)
    assert check(h.ops)["valid"]
    h = commit(commit(H(), "m1", 5), "m2", 3)
    assert h.kinds() == {"offset-regression": 1}
    h = commit(H(), "m1", 5).final(end_offsets={}, committed={"g": {"q/0": 4}})
    assert h.kinds() == {"offset-regression": 1}
    # a failed commit of a lower offset is no regression
    assert check(commit(commit(H(), "m1", 5), "m2", 3, ok=False).ops)["valid"]


def test_double_ownership_and_crash_releases():
    def assign(h, proc, f="assign"):
        return h.op(f=f, type="ok", proc=proc, group="g", partitions=[[T, 0]])
    h = assign(assign(assign(H(), "m1"), "m1", "revoke"), "m2")
    assert check(h.ops)["valid"]
    h = assign(H(), "m1").op(f="crash", type="info", proc="m1")
    assert check(assign(h, "m2").ops)["valid"]
    h = assign(assign(H(), "m1"), "m2")
    assert h.kinds() == {"double-ownership": 1}


def test_history_file_round_trip_skips_torn_line(tmp_path):
    path = str(tmp_path / "h.jsonl")
    w = HistoryWriter(path)
    w.write(f="send", type="invoke", proc="p0", topic=T, partition=0, value="a", ts=2.0)
    w.write(f="send", type="ok", proc="p0", topic=T, partition=0, offset=0, value="a", ts=1.0)
    w.close()
    with open(path, "a") as f:
        f.write('{"f":"poll","ty')
    ops = read_history(path)
    assert [o["type"] for o in ops] == ["ok", "invoke"]   # time order
    assert w.counts == {"send:invoke": 1, "send:ok": 1}

"""Transactions v2 (KIP-890 part 2) in the coordinator state machine, driven
with simulated time by the harness of tests/test_transactions_state.py:
every EndTxn v5 bumps the epoch (answered, written, used by the markers),
retries are answered idempotently, an abort needs no open transaction,
the producer id rotates when the epochs run out, and __transaction_state
values are written at version 1 with the v2 fields once transaction.version
is finalized. Version 0 clients keep the classic behaviour."""
from __future__ import annotations

from kproto.errors import ErrorCode as E

from broker.transactions import records as txn_records
from broker.transactions.model import MAX_EPOCH, TxnState
from broker.transactions.placement import partition_for
from broker.transactions.state import EndResult
from tests.test_transactions_state import Harness

TV2 = 2


def end2(h, pid, epoch, commit=True, txn_id="tx"):
    return h.call("end_txn", txn_id, pid, epoch, commit, TV2)


def add2(h, pid, epoch, *partitions, txn_id="tx"):
    return h.call("add_partitions", txn_id, pid, epoch, set(partitions) or {("t", 0)}, TV2)


def test_every_end_txn_bumps_the_epoch_and_markers_use_it():
    h = Harness()
    r = h.init()
    pid, epoch = r.producer_id, r.producer_epoch
    for n in range(3):
        assert add2(h, pid, epoch, ("t", 0), ("t", 1)) == E.NONE
        answer = end2(h, pid, epoch, commit=n != 1)
        assert answer == EndResult(E.NONE, pid, epoch + 1)
        # the markers carry the bumped epoch, so late writes of the old one are refused by the leaders
        assert {m[2] for m in h.markers[-2:]} == {epoch + 1}
        assert [m[4] for m in h.markers[-2:]] == [n != 1] * 2
        epoch += 1
        assert h.state() == ("CompleteCommit" if n != 1 else "CompleteAbort")
    # the old epoch is fenced; the current one goes on
    assert add2(h, pid, epoch - 1) == E.PRODUCER_FENCED
    assert add2(h, pid, epoch) == E.NONE


def test_classic_clients_keep_their_epoch():
    h = Harness()
    r = h.init()
    assert h.add("tx", r.producer_id, r.producer_epoch) == E.NONE
    assert h.end("tx", r.producer_id, r.producer_epoch) == E.NONE      # EndTxn v4: an error code, no bump
    assert h.markers[-1][2] == r.producer_epoch
    assert h.sm.describe("tx")[1].producer_epoch == r.producer_epoch
    assert h.end("tx", r.producer_id, r.producer_epoch) == E.NONE      # a retried commit
    assert h.end("tx", r.producer_id, r.producer_epoch, commit=False) == E.INVALID_TXN_STATE


def test_retries_are_answered_idempotently():
    h = Harness()
    r = h.init()
    pid, epoch = r.producer_id, r.producer_epoch
    assert add2(h, pid, epoch) == E.NONE
    assert end2(h, pid, epoch) == EndResult(E.NONE, pid, epoch + 1)
    written = len(h.log[partition_for("tx", 50)])
    # the answer was lost: the same request again gets the same answer and writes nothing
    assert end2(h, pid, epoch) == EndResult(E.NONE, pid, epoch + 1)
    assert len(h.log[partition_for("tx", 50)]) == written
    # a retried commit answered as an abort is a state error; two epochs back is fenced
    assert end2(h, pid, epoch, commit=False) == EndResult(E.INVALID_TXN_STATE)
    assert end2(h, pid, epoch - 1) == EndResult(E.PRODUCER_FENCED)
    # while the markers are in flight a retry is told to wait
    assert add2(h, pid, epoch + 1) == E.NONE
    h.hold_markers = True
    assert end2(h, pid, epoch + 1) == EndResult(E.NONE, pid, epoch + 2)
    assert end2(h, pid, epoch + 1) == EndResult(E.CONCURRENT_TRANSACTIONS)
    # the next transaction's abort (at the bumped epoch) waits for them too, rather than being fenced
    assert end2(h, pid, epoch + 2, commit=False) == EndResult(E.CONCURRENT_TRANSACTIONS)
    h.hold_markers = False
    h.release_markers()
    assert h.state() == "CompleteCommit"
    assert end2(h, pid, epoch + 2, commit=False) == EndResult(E.NONE, pid, epoch + 3)
    assert h.state() == "CompleteAbort"


def test_abort_without_a_transaction_bumps_the_epoch():
    h = Harness()
    r = h.init()
    pid, epoch = r.producer_id, r.producer_epoch
    assert end2(h, pid, epoch, commit=False) == EndResult(E.NONE, pid, epoch + 1)     # from Empty
    assert h.state() == "CompleteAbort"
    assert end2(h, pid, epoch + 1, commit=False) == EndResult(E.NONE, pid, epoch + 2)  # again, a new epoch
    assert end2(h, pid, epoch + 2, commit=True) == EndResult(E.INVALID_TXN_STATE)
    assert h.end("tx", pid, epoch + 2, commit=False) == E.NONE        # v4: the optimisation, nothing written
    assert h.sm.describe("tx")[1].producer_epoch == epoch + 2


def test_producer_id_rotates_when_the_epochs_run_out():
    h = Harness()
    r = h.init()
    pid = r.producer_id
    md = h.sm.txns["tx"]
    md.producer_epoch = MAX_EPOCH - 2                  # a long-lived producer
    assert add2(h, pid, MAX_EPOCH - 2) == E.NONE
    assert end2(h, pid, MAX_EPOCH - 2) == EndResult(E.NONE, pid, MAX_EPOCH - 1)
    assert add2(h, pid, MAX_EPOCH - 1) == E.NONE
    answer = end2(h, pid, MAX_EPOCH - 1)
    new_pid = answer.producer_id
    assert answer == EndResult(E.NONE, new_pid, 0) and new_pid != pid
    # the markers still close the old producer id's transaction, at Short.MaxValue
    assert h.markers[-1][1:3] == (pid, MAX_EPOCH)
    d = h.sm.describe("tx")[1]
    assert (d.producer_id, d.producer_epoch, d.state) == (new_pid, 0, "CompleteCommit")
    # a retry of the request that ran out of epochs gets the new id again
    assert end2(h, pid, MAX_EPOCH - 1) == EndResult(E.NONE, new_pid, 0)
    assert add2(h, new_pid, 0) == E.NONE and end2(h, new_pid, 0) == EndResult(E.NONE, new_pid, 1)


def test_timeout_fences_a_v2_transaction_past_every_epoch_it_knew():
    h = Harness(abort_timed_out_interval_ms=1000)
    r = h.init(timeout_ms=5000)
    pid, epoch = r.producer_id, r.producer_epoch
    assert add2(h, pid, epoch) == E.NONE
    h.tick(10000)
    d = h.sm.describe("tx")[1]
    assert d.state == "CompleteAbort" and d.producer_epoch > epoch + 1
    assert h.markers[-1][2] == d.producer_epoch and h.markers[-1][4] is False
    assert end2(h, pid, epoch) == EndResult(E.PRODUCER_FENCED)


def test_log_values_at_version_1_once_the_feature_is_finalized():
    h = Harness()
    r = h.init()
    key = txn_records.key_bytes("tx")
    last = lambda: [v for k, v in h.log[partition_for("tx", 50)] if k == key][-1]  # noqa: E731
    assert last()[:2] == b"\x00\x00"                 # transaction.version 0: value version 0
    h.sm.transaction_version = 2
    assert add2(h, r.producer_id, r.producer_epoch) == E.NONE
    h.hold_markers = True
    assert end2(h, r.producer_id, r.producer_epoch).error == E.NONE
    assert last()[:2] == b"\x00\x01"
    loaded = txn_records.decode_value("tx", last())
    assert (loaded.state, loaded.producer_epoch, loaded.client_tv, loaded.next_producer_id) == (
        TxnState.PREPARE_COMMIT, r.producer_epoch + 1, TV2, -1)
    # a coordinator that loads it completes the transaction with the bumped epoch
    h2 = Harness()
    h2.sm.transaction_version = 2
    p = partition_for("tx", 50)
    h2.run(h2.sm.begin_load(p, 1, 0))
    for k, v in h.log[p]:
        h2.sm.replay(p, k, v)
    h2.run(h2.sm.finish_load(p, 0))
    assert h2.markers[-1][1:3] == (r.producer_id, r.producer_epoch + 1)
    assert h2.state() == "CompleteCommit"
    done = txn_records.decode_value("tx", [v for k, v in h2.log[p] if k == key][-1])
    assert (done.state, done.producer_epoch, done.client_tv) == (TxnState.COMPLETE_COMMIT, r.producer_epoch + 1, TV2)

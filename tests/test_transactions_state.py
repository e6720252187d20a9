"""The transaction coordinator state machine, driven directly with simulated
time: no broker, no clock. A small harness plays the shell's part (it keeps
the `__transaction_state` records per partition, writes markers into a list,
can fail appends and hold markers back)."""
from __future__ import annotations

import itertools

from kproto.errors import ErrorCode as E

from broker.transactions import records as txn_records
from broker.transactions.config import TxnConfig
from broker.transactions.model import MAX_EPOCH, TxnState
from broker.transactions.placement import partition_for
from broker.transactions.state import InitResult, TransactionStateMachine

PENDING = "pending"


class Harness:
    def __init__(self, partitions: int = 50, **config):
        self.pids = itertools.count(1000)
        self.sm = TransactionStateMachine(TxnConfig(**config), lambda: next(self.pids))
        self.partitions = partitions
        self.log: dict[int, list] = {}           # __transaction_state partition -> [(key, value)]
        self.markers: list = []                  # (txn id, pid, epoch, coordinator epoch, commit, partition)
        self.answers: dict = {}
        self.fail_next_appends = 0
        self.fail_markers: set = set()           # partitions whose marker write fails
        self.hold_markers = False
        self.held: list = []
        self.now = 0
        self.run(self.sm.activate(partitions, {}, now_ms=0))

    def run(self, fx) -> None:
        queue = [fx]
        while queue:
            fx = queue.pop(0)
            for ticket, result in fx.responses:
                self.answers[ticket] = result
            for a in fx.appends:
                if self.fail_next_appends:
                    self.fail_next_appends -= 1
                    queue.append(self.sm.append_done(a.token, E.NOT_ENOUGH_REPLICAS, self.now))
                    continue
                self.log.setdefault(a.partition, []).append((a.key, a.value))
                queue.append(self.sm.append_done(a.token, E.NONE, self.now))
            for job in fx.markers:
                if self.hold_markers:
                    self.held.append(job)
                    continue
                queue.append(self.sm.markers_done(job, self._write(job), self.now))

    def _write(self, job) -> dict:
        results = {}
        for tp in job.partitions:
            if tp in self.fail_markers:
                results[tp] = E.KAFKA_STORAGE_ERROR
                continue
            self.markers.append((job.transactional_id, job.producer_id, job.producer_epoch, job.coordinator_epoch,
                                 job.commit, tp))
            results[tp] = None
        return results

    def release_markers(self) -> None:
        held, self.held = self.held, []
        for job in held:
            self.run(self.sm.markers_done(job, self._write(job), self.now))

    def call(self, method: str, *args, **kwargs):
        ticket = object()
        self.run(getattr(self.sm, method)(ticket, self.now, *args, **kwargs))
        return self.answers.pop(ticket, PENDING)

    def init(self, txn_id="tx", timeout_ms=60000, expected=None) -> InitResult:
        return self.call("init_producer_id", txn_id, timeout_ms, expected)

    def add(self, txn_id, pid, epoch, *partitions):
        return self.call("add_partitions", txn_id, pid, epoch, set(partitions) or {("t", 0)})

    def end(self, txn_id, pid, epoch, commit=True):
        return self.call("end_txn", txn_id, pid, epoch, commit)

    def state(self, txn_id="tx") -> str:
        return self.sm.describe(txn_id)[1].state

    def tick(self, now_ms: int) -> None:
        self.now = now_ms
        self.run(self.sm.tick(now_ms))

    def stored(self, txn_id="tx"):
        """The last record for txn_id, decoded as a load would."""
        records = self.log[partition_for(txn_id, self.partitions)]
        key = txn_records.key_bytes(txn_id)
        value = [v for k, v in records if k == key][-1]
        return txn_records.decode_value(txn_id, value)


# ============================================================ InitProducerId

def test_init_allocates_an_id_then_bumps_the_epoch():
    h = Harness()
    first = h.init()
    assert (first.error, first.producer_epoch) == (E.NONE, 0)
    again = h.init()   # error-cases: "InitProducerId again for the same transactional id"
    assert (again.error, again.producer_id, again.producer_epoch) == (E.NONE, first.producer_id, 1)
    d = h.sm.describe("tx")[1]
    assert (d.state, d.start_timestamp, d.partitions, d.timeout_ms) == ("Empty", -1, [], 60000)
    stored = h.stored()
    assert (stored.producer_id, stored.producer_epoch, stored.state) == (first.producer_id, 1, TxnState.EMPTY)


def test_init_validation():
    h = Harness()
    # error-cases: "InitProducerId with ... TransactionTimeoutMs 900001" and "with TransactionTimeoutMs 0"
    assert h.init(timeout_ms=900001) == InitResult(E.INVALID_TRANSACTION_TIMEOUT)
    assert h.init(timeout_ms=0) == InitResult(E.INVALID_TRANSACTION_TIMEOUT)
    assert h.init(txn_id="") == InitResult(E.INVALID_REQUEST)
    assert h.init(timeout_ms=900000).error == E.NONE
    idem = h.init(txn_id=None, timeout_ms=0)   # idempotent: no timeout check, a fresh id each time
    assert idem.error == E.NONE and idem.producer_epoch == 0
    assert h.init(txn_id=None).producer_id == idem.producer_id + 1
    assert not h.log.get(partition_for("tx", 50), [])[1:], "only the one valid init was written"


def test_kip360_bump_and_fencing_of_older_epochs():
    h = Harness()
    r = h.init()
    pid = r.producer_id
    bumped = h.init(expected=(pid, 0))           # the producer recovers: epoch 0 -> 1, last epoch 0
    assert (bumped.error, bumped.producer_id, bumped.producer_epoch) == (E.NONE, pid, 1)
    retry = h.init(expected=(pid, 0))            # the answer was lost: same epoch again
    assert (retry.error, retry.producer_epoch) == (E.NONE, 1)
    fresh = h.init()                             # a new instance: 2, last epoch forgotten
    assert fresh.producer_epoch == 2
    # error-cases: "InitProducerId with ProducerId/ProducerEpoch of an older epoch (KIP-360 bump request)"
    assert h.init(expected=(pid, 1)) == InitResult(E.PRODUCER_FENCED)
    assert h.init(expected=(pid + 77, 2)) == InitResult(E.PRODUCER_FENCED)


def test_exhausted_epoch_rotates_the_producer_id():
    h = Harness()
    pid = h.init().producer_id
    h.sm.txns["tx"].producer_epoch = MAX_EPOCH - 1
    r = h.init()
    assert r.error == E.NONE and r.producer_id != pid and r.producer_epoch == 0
    assert h.sm.txns["tx"].last_producer_id == pid


# ============================================================ a transaction's life

def test_commit_goes_through_prepare_and_complete_with_markers():
    h = Harness()
    r = h.init()
    pid = r.producer_id
    h.now = 1000
    assert h.add("tx", pid, 0, ("t", 0), ("t", 1)) == E.NONE
    d = h.sm.describe("tx")[1]
    assert (d.state, d.start_timestamp, d.partitions) == ("Ongoing", 1000, [("t", 0), ("t", 1)])
    assert h.add("tx", pid, 0, ("t", 1)) == E.NONE       # already in: nothing written
    assert h.add("tx", pid, 0, ("u", 0)) == E.NONE
    written = len(h.log[partition_for("tx", 50)])
    h.hold_markers = True
    h.now = 2000
    assert h.end("tx", pid, 0, commit=True) == E.NONE     # answered once PrepareCommit is written
    assert h.stored().state == TxnState.PREPARE_COMMIT
    assert len(h.log[partition_for("tx", 50)]) == written + 1
    assert h.state() == "PrepareCommit" and h.markers == []
    # while the markers are out everything else waits (error-cases: "EndTxn commit right after an abort")
    assert h.end("tx", pid, 0, commit=True) == E.CONCURRENT_TRANSACTIONS
    assert h.end("tx", pid, 0, commit=False) == E.CONCURRENT_TRANSACTIONS
    assert h.add("tx", pid, 0, ("t", 0)) == E.CONCURRENT_TRANSACTIONS
    assert h.init() == InitResult(E.CONCURRENT_TRANSACTIONS)
    assert h.sm.verify_partitions("tx", pid, 0, [("t", 0)]) == {("t", 0): E.CONCURRENT_TRANSACTIONS}
    h.hold_markers = False
    h.release_markers()
    assert sorted(m[-1] for m in h.markers) == [("t", 0), ("t", 1), ("u", 0)]
    assert all(m[1:5] == (pid, 0, 0, True) for m in h.markers)
    d = h.sm.describe("tx")[1]
    assert (d.state, d.partitions, d.start_timestamp) == ("CompleteCommit", [], 1000)
    assert h.stored().state == TxnState.COMPLETE_COMMIT
    assert h.end("tx", pid, 0, commit=True) == E.NONE              # a retried commit
    assert h.end("tx", pid, 0, commit=False) == E.INVALID_TXN_STATE
    # the next transaction starts from CompleteCommit
    h.now = 5000
    assert h.add("tx", pid, 0, ("t", 0)) == E.NONE
    assert h.sm.describe("tx")[1].start_timestamp == 5000
    assert h.end("tx", pid, 0, commit=False) == E.NONE
    assert h.state() == "CompleteAbort" and h.markers[-1][4] is False
    assert h.end("tx", pid, 0, commit=True) == E.INVALID_TXN_STATE


def test_end_txn_errors():
    h = Harness()
    pid = h.init().producer_id
    # error-cases: "EndTxn commit/abort with no ongoing transaction (state Empty after InitProducerId)"
    assert h.end("tx", pid, 0, True) == E.INVALID_TXN_STATE
    assert h.end("tx", pid, 0, False) == E.INVALID_TXN_STATE
    # error-cases: "EndTxn for a transactional id never initialised"
    assert h.end("never", pid, 0, True) == E.INVALID_PRODUCER_ID_MAPPING
    assert h.add("tx", pid, 0) == E.NONE
    # error-cases: "EndTxn with an older producer epoch" / "with a wrong producer id"
    assert h.end("tx", pid, -1, True) == E.PRODUCER_FENCED
    assert h.end("tx", pid, 1, True) == E.PRODUCER_FENCED
    assert h.end("tx", pid + 1, 0, True) == E.INVALID_PRODUCER_ID_MAPPING
    assert h.end("", pid, 0, True) == E.INVALID_REQUEST
    assert h.state() == "Ongoing", "nothing half-done"


def test_add_partitions_errors():
    h = Harness()
    pid = h.init().producer_id
    # error-cases: AddPartitionsToTxn "with epoch+1", "with epoch-1", "with wrong producer id", "never initialised"
    assert h.add("tx", pid, 1) == E.PRODUCER_FENCED
    assert h.add("tx", pid, -1) == E.PRODUCER_FENCED
    assert h.add("tx", pid + 5, 0) == E.INVALID_PRODUCER_ID_MAPPING
    assert h.add("never", pid, 0) == E.INVALID_PRODUCER_ID_MAPPING
    assert h.add("", pid, 0) == E.INVALID_REQUEST
    assert h.state() == "Empty"


def test_verify_partitions():
    h = Harness()
    pid = h.init().producer_id
    assert h.add("tx", pid, 0, ("t", 0)) == E.NONE
    v = h.sm.verify_partitions
    assert v("tx", pid, 0, [("t", 0), ("t", 1)]) == {("t", 0): E.NONE, ("t", 1): E.TRANSACTION_ABORTABLE}
    assert v("tx", pid, 1, [("t", 0)]) == {("t", 0): E.PRODUCER_FENCED}
    assert v("tx", pid + 1, 0, [("t", 0)]) == {("t", 0): E.INVALID_PRODUCER_ID_MAPPING}
    assert v("nope", pid, 0, [("t", 0)]) == {("t", 0): E.INVALID_PRODUCER_ID_MAPPING}
    assert v(None, pid, 0, [("t", 0)]) == {("t", 0): E.INVALID_REQUEST}


# ============================================================ fencing

def test_init_on_an_ongoing_transaction_fences_and_aborts_it():
    h = Harness()
    pid = h.init().producer_id
    assert h.add("tx", pid, 0, ("t", 0)) == E.NONE
    # the new instance is told to retry while the old transaction is aborted with the bumped epoch
    assert h.init() == InitResult(E.CONCURRENT_TRANSACTIONS)
    assert h.markers == [("tx", pid, 1, 0, False, ("t", 0))]
    assert h.state() == "CompleteAbort"
    retry = h.init()
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.NONE, pid, 2)
    # the zombie: every request with its epoch is fenced
    assert h.add("tx", pid, 0) == E.PRODUCER_FENCED
    assert h.end("tx", pid, 0, False) == E.PRODUCER_FENCED
    assert h.sm.verify_partitions("tx", pid, 0, [("t", 0)]) == {("t", 0): E.PRODUCER_FENCED}


def test_a_failed_fence_write_does_not_bump_twice():
    h = Harness()
    pid = h.init().producer_id
    assert h.add("tx", pid, 0, ("t", 0)) == E.NONE
    h.fail_next_appends = 1
    assert h.init() == InitResult(E.COORDINATOR_NOT_AVAILABLE)   # NOT_ENOUGH_REPLICAS as the coordinator says it
    md = h.sm.txns["tx"]
    assert md.has_failed_epoch_fence and md.producer_epoch == 1 and md.pending_state is None
    assert md.state == TxnState.ONGOING
    assert h.init() == InitResult(E.CONCURRENT_TRANSACTIONS)
    assert h.markers[-1][2] == 1, "the epoch used for the abort is the one bumped the first time"
    assert h.init().producer_epoch == 2


def test_timed_out_transaction_is_aborted_and_its_producer_fenced():
    h = Harness(abort_timed_out_interval_ms=1000)
    pid = h.init(timeout_ms=3000).producer_id
    h.now = 500
    assert h.add("tx", pid, 0, ("t", 0), ("t", 1)) == E.NONE
    assert h.sm.next_deadline() == 1000
    h.tick(1000)
    h.tick(3000)
    assert h.state() == "Ongoing", "not before start + timeout"
    h.tick(4000)
    assert h.state() == "CompleteAbort"
    assert sorted(h.markers) == [("tx", pid, 1, 0, False, ("t", 0)), ("tx", pid, 1, 0, False, ("t", 1))]
    assert h.end("tx", pid, 0, True) == E.PRODUCER_FENCED
    assert h.add("tx", pid, 0) == E.PRODUCER_FENCED
    assert h.init().producer_epoch == 2


# ============================================================ failures and retries

def test_marker_failures_are_retried_and_complete_later():
    h = Harness(marker_retry_backoff_ms=100)
    pid = h.init().producer_id
    assert h.add("tx", pid, 0, ("t", 0), ("t", 1)) == E.NONE
    h.fail_markers = {("t", 1)}
    assert h.end("tx", pid, 0, True) == E.NONE
    assert h.state() == "PrepareCommit"
    assert h.sm.describe("tx")[1].partitions == [("t", 1)], "only partitions without their marker"
    assert h.sm.next_deadline() == 100
    h.tick(100)
    assert h.state() == "PrepareCommit"
    h.fail_markers = set()
    h.tick(200)
    assert h.state() == "CompleteCommit"
    assert [m[-1] for m in h.markers] == [("t", 0), ("t", 1)]


def test_failed_appends_leave_nothing_half_done():
    h = Harness()
    h.fail_next_appends = 1
    assert h.init() == InitResult(E.COORDINATOR_NOT_AVAILABLE)
    pid = h.init().producer_id
    h.fail_next_appends = 1
    assert h.add("tx", pid, 0, ("t", 0)) == E.COORDINATOR_NOT_AVAILABLE
    assert h.state() == "Empty" and h.sm.txns["tx"].pending_state is None
    assert h.add("tx", pid, 0, ("t", 0)) == E.NONE
    h.fail_next_appends = 1
    assert h.end("tx", pid, 0, True) == E.COORDINATOR_NOT_AVAILABLE
    assert h.state() == "Ongoing" and h.markers == []
    assert h.end("tx", pid, 0, True) == E.NONE
    assert h.state() == "CompleteCommit"


def test_a_completion_that_fails_to_be_written_is_resumed():
    h = Harness(abort_timed_out_interval_ms=1000)
    pid = h.init().producer_id
    assert h.add("tx", pid, 0, ("t", 0)) == E.NONE
    h.hold_markers = True
    assert h.end("tx", pid, 0, True) == E.NONE
    h.hold_markers = False
    h.fail_next_appends = 1        # the CompleteCommit record
    h.release_markers()
    assert h.state() == "PrepareCommit" and h.sm.txns["tx"].pending_state is None
    h.tick(1000)
    assert h.state() == "CompleteCommit"


def test_a_marker_job_whose_write_raised_is_retried():
    """The shell reports an error code, not per-partition results, when a write raised
    (CoordinatorShell._write): the markers are tried again, the transaction is not left
    pending with nothing in flight (CONCURRENT_TRANSACTIONS to its producer for good)."""
    h = Harness(marker_retry_backoff_ms=100)
    pid = h.init().producer_id
    assert h.add("tx", pid, 0, ("t", 0), ("__consumer_offsets", 3)) == E.NONE
    h.hold_markers = True
    assert h.end("tx", pid, 0, True) == E.NONE
    (job,) = h.held
    h.held = []
    h.hold_markers = False
    h.run(h.sm.markers_done(job, E.UNKNOWN_SERVER_ERROR, h.now))
    assert h.state() == "PrepareCommit" and h.markers == []
    h.tick(100)
    assert sorted(m[-1] for m in h.markers) == [("__consumer_offsets", 3), ("t", 0)]
    assert h.state() == "CompleteCommit"
    assert h.add("tx", pid, 0, ("t", 0)) == E.NONE


# ============================================================ loading

def _replay_into(source: Harness, target: TransactionStateMachine, partition: int) -> None:
    for key, value in source.log.get(partition, []):
        target.replay(partition, key, value)


def test_state_is_rebuilt_from_the_log_and_prepared_transactions_complete():
    h = Harness()
    pid = h.init("a").producer_id
    assert h.add("a", pid, 0, ("t", 0)) == E.NONE
    h.hold_markers = True
    assert h.end("a", pid, 0, False) == E.NONE      # crash before the markers
    pid_b = h.init("b").producer_id
    assert h.add("b", pid_b, 0, ("t", 1)) == E.NONE

    fresh = Harness()
    fresh.sm = TransactionStateMachine(TxnConfig(), lambda: 99)
    parts = sorted({partition_for("a", 50), partition_for("b", 50)})
    fresh.run(fresh.sm.activate(50, {p: 3 for p in range(50)}, loading=parts, now_ms=0))
    assert fresh.init("a") == InitResult(E.COORDINATOR_LOAD_IN_PROGRESS)
    assert fresh.sm.describe("a") == (E.COORDINATOR_LOAD_IN_PROGRESS, None)
    assert fresh.sm.list_transactions()[0] == E.COORDINATOR_LOAD_IN_PROGRESS
    for p in parts:
        _replay_into(h, fresh.sm, p)
        fresh.run(fresh.sm.finish_load(p, 10))
    assert fresh.markers == [("a", pid, 0, 3, False, ("t", 0))], "the abort is finished with the loaded epoch"
    assert fresh.state("a") == "CompleteAbort"
    d = fresh.sm.describe("b")[1]
    assert (d.state, d.partitions, d.producer_id) == ("Ongoing", [("t", 1)], pid_b)
    assert fresh.end("b", pid_b, 0, True) == E.NONE


def test_transactional_ids_expire():
    h = Harness(transactional_id_expiration_ms=10_000, remove_expired_interval_ms=5_000)
    pid = h.init("idle").producer_id
    assert h.add("idle", pid, 0) == E.NONE    # an ongoing transaction never expires
    h.init("done")
    h.tick(5_000)
    h.tick(15_000)
    assert h.sm.describe("done") == (E.TRANSACTIONAL_ID_NOT_FOUND, None)
    assert h.sm.describe("idle")[1].state == "Ongoing"
    tomb = h.log[partition_for("done", 50)][-1]
    assert tomb == (txn_records.key_bytes("done"), None)
    again = h.init("done")
    assert again.producer_epoch == 0 and again.producer_id != pid


# ============================================================ admin views

def test_list_transactions_filters():
    h = Harness()
    a = h.init("a").producer_id
    h.init("b")
    assert h.add("a", a, 0) == E.NONE
    h.now = 10_000
    err, unknown, rows = h.sm.list_transactions(now_ms=h.now)
    assert err == E.NONE and unknown == [] and sorted(r[0] for r in rows) == ["a", "b"]
    assert h.sm.list_transactions(state_names=["Ongoing", "Bogus"])[1:] == (["Bogus"], [("a", a, "Ongoing")])
    assert h.sm.list_transactions(producer_ids=[a])[2] == [("a", a, "Ongoing")]
    # the duration filter keeps transactions running longer than it
    assert h.sm.list_transactions(state_names=["Ongoing"], duration_ms=5_000, now_ms=10_000)[2] == [
        ("a", a, "Ongoing")]
    assert h.sm.list_transactions(state_names=["Ongoing"], duration_ms=20_000, now_ms=10_000)[2] == []


def test_records_use_kafkas_layout():
    h = Harness()
    pid = h.init().producer_id
    h.now = 7
    h.add("tx", pid, 0, ("t", 2), ("t", 0), ("u", 1))
    key, value = h.log[partition_for("tx", 50)][-1]
    assert key == b"\x00\x00" + b"\x00\x02tx"      # version 0, then the string
    assert value[:2] == b"\x00\x00"                  # value version 0 (transaction.version 0)
    md = txn_records.decode_value("tx", value)
    assert (md.state, md.partitions, md.start_timestamp, md.update_timestamp) == (
        TxnState.ONGOING, {("t", 2), ("t", 0), ("u", 1)}, 7, 7)


def test_idle_producers_expire_but_not_with_an_open_transaction():
    from types import SimpleNamespace

    from kproto import records as rec

    from broker.partitions.producers import ProducerStateManager
    part = SimpleNamespace(topic="t", index=0, open_transactions={}, log_start_offset=0)
    mgr = ProducerStateManager()
    state = mgr.state(part)
    assert state.partition is part
    for pid, ts, txn in ((1, 1_000, False), (2, 1_000, True), (3, 90_000, False)):
        batch = rec.build_batch([(b"k", b"v", [], ts)], producer_id=pid, producer_epoch=0, base_sequence=0,
                                transactional=txn)
        mgr._record(part, rec.BatchHeader(batch), SimpleNamespace(base_offset=pid, last_offset=pid))
    assert part.open_transactions == {2: 2}
    assert mgr.remove_expired(100_000, 50_000) == 1
    assert sorted(state.producers) == [2, 3]
    assert mgr.producer_epoch(part, 1) is None and mgr.producer_epoch(part, 3) == 0


# ============================================================ leadership of __transaction_state (a cluster)

def test_resigned_partition_answers_not_coordinator_and_drops_its_transactions():
    h = Harness()
    r = h.init()
    assert h.add("tx", r.producer_id, r.producer_epoch) == E.NONE
    p = partition_for("tx", h.partitions)
    h.run(h.sm.resign(p, h.now))
    assert h.init() == InitResult(E.NOT_COORDINATOR)
    assert h.end("tx", r.producer_id, r.producer_epoch) == E.NOT_COORDINATOR
    assert "tx" not in h.sm.txns
    assert not h.sm.owns("tx", 0)


def test_new_leader_loads_and_completes_a_prepared_commit_with_its_epoch():
    old = Harness()
    r = old.init()
    old.add("tx", r.producer_id, r.producer_epoch, ("t", 0), ("u", 1))
    old.hold_markers = True                 # the old coordinator dies before its markers are written
    assert old.end("tx", r.producer_id, r.producer_epoch) == E.NONE
    new = Harness()
    p = partition_for("tx", new.partitions)
    new.run(new.sm.resign(p, 0))
    new.run(new.sm.begin_load(p, 7, 0))
    gen = new.sm.load_generation(p)
    assert new.init() == InitResult(E.COORDINATOR_LOAD_IN_PROGRESS)
    for key, value in old.log[p]:
        new.sm.replay(p, key, value, gen)
    new.run(new.sm.finish_load(p, 0, gen))
    assert sorted(m[5] for m in new.markers) == [("t", 0), ("u", 1)]
    assert {m[3] for m in new.markers} == {7} and {m[4] for m in new.markers} == {True}
    assert new.state() == "CompleteCommit"
    assert new.sm.owns("tx", 7) and not new.sm.owns("tx", 6)


def test_a_superseded_load_comes_to_nothing():
    old = Harness()
    r = old.init()
    other = Harness()                      # what an older load still being read would bring
    other.init()
    other.init()
    p = partition_for("tx", old.partitions)
    h = Harness()
    h.run(h.sm.begin_load(p, 1, 0))
    stale = h.sm.load_generation(p)
    h.run(h.sm.begin_load(p, 2, 0))         # elected again before the first load finished
    gen = h.sm.load_generation(p)
    for key, value in old.log[p]:
        h.sm.replay(p, key, value, gen)
    for key, value in other.log[p]:
        h.sm.replay(p, key, value, stale)   # ignored
    h.run(h.sm.finish_load(p, 0, stale))    # ignored: still loading
    assert h.init() == InitResult(E.COORDINATOR_LOAD_IN_PROGRESS)
    h.run(h.sm.finish_load(p, 0, gen))
    again = h.init()
    assert (again.error, again.producer_id, again.producer_epoch) == (E.NONE, r.producer_id, 1)


def test_deactivate_forgets_everything_until_activated_again():
    h = Harness()
    h.init()
    h.run(h.sm.deactivate(0))
    assert h.init() == InitResult(E.NOT_COORDINATOR)
    h.run(h.sm.activate(h.partitions, {}, now_ms=0))
    assert h.init().producer_epoch == 0      # a new topic: a new producer id


def test_no_producer_id_block_yet_is_a_retriable_answer_not_a_server_error(caplog):
    """A cluster broker gets its producer ids in blocks from the controller;
    right after start the first block may not be there yet. Kafka answers
    InitProducerId with COORDINATOR_LOAD_IN_PROGRESS then (the client retries)
    and logs nothing; it is no UNKNOWN_SERVER_ERROR and no ERROR line."""
    from types import SimpleNamespace

    from broker.quorum.liveness import QuorumProducerIds
    from broker.transactions.coordinator import TransactionCoordinator

    ids = QuorumProducerIds(SimpleNamespace(node_id=1, metadata=None, image=None))   # no block yet
    shell = SimpleNamespace(broker=SimpleNamespace(producer_ids=ids))
    h = Harness()
    h.sm._allocate = lambda: TransactionCoordinator._allocate_producer_id(shell)
    with caplog.at_level("ERROR", logger="kproto.transactions"):
        assert h.init("tx").error == E.COORDINATOR_LOAD_IN_PROGRESS
        assert h.call("init_producer_id", None, 60000, None).error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    ids._spare = (5000, 6000)                     # the block arrives: the retry gets an id
    assert h.init("tx").producer_id == 5000

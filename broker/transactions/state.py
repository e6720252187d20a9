"""The transaction coordinator as a pure state machine.

Inputs are requests and timer ticks, each with an explicit `now_ms`, plus
the outcomes of the work it asked for (`append_done` for a
`__transaction_state` record, `markers_done` for a round of COMMIT/ABORT
markers). Outputs (`Effects`) are answers for tickets, records to append,
marker jobs to run; `next_deadline()` tells the shell when to tick. No I/O,
no clock: the tests drive it with simulated time.

The logic follows Kafka 3.9's TransactionCoordinator, TransactionStateManager
and TransactionMetadata: every change is prepared (a pending state that
makes concurrent requests answer CONCURRENT_TRANSACTIONS), written to the
log, then completed. EndTxn answers once PrepareCommit/PrepareAbort is
written; the markers follow, then CompleteCommit/CompleteAbort is written.
InitProducerId on an ongoing transaction, and a transaction open past its
timeout, fence the producer: its epoch is bumped and the transaction
aborted with the new epoch, so the old producer's writes are refused.

Transactions v2 (KIP-890 part 2, Kafka 4.x's endTransaction for a client
transaction version 2, i.e. EndTxn v5+): every EndTxn bumps the epoch
(the answer carries the new producer id and epoch, the markers are written
with it), a retry is recognised by the epoch being one below the current
one, an abort needs no open transaction, and at epoch exhaustion the next
producer id is allocated with PrepareX and taken with CompleteX.
`transaction_version` (the finalized feature level, set by the shell)
chooses the `__transaction_state` value version.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kproto.errors import ErrorCode as E

from broker.transactions import records as rec
from broker.transactions.config import TxnConfig
from broker.transactions.model import (
    EXPIRATION_ALLOWED, MAX_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, STATE_NAMES, STATES_BY_NAME,
    IllegalTransition, Transit, TxnMetadata, TxnState, is_epoch_exhausted, supports_epoch_bump,
)
from broker.transactions.placement import partition_for

log = logging.getLogger("kproto.transactions")

S = TxnState


@dataclass
class InitResult:
    """InitProducerId's answer."""
    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass
class EndResult:
    """The answer to a v2 EndTxn: the producer id and epoch to go on with."""
    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass
class LogAppend:
    """One record for `__transaction_state-<partition>`; report its outcome
    with append_done(token, error)."""
    partition: int
    key: bytes
    value: bytes | None
    timestamp: int
    token: int


@dataclass
class MarkerJob:
    """Write a marker for producer_id into each partition; report with
    markers_done(job, {partition: error or None})."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: list                  # [(topic, partition)]
    transit: Transit = field(repr=False)


@dataclass
class TxnDescription:
    """One transaction as DescribeTransactions describes it."""
    transactional_id: str
    state: str
    timeout_ms: int
    start_timestamp: int
    producer_id: int
    producer_epoch: int
    partitions: list                  # [(topic, partition)]


class Effects:
    __slots__ = ("responses", "appends", "markers")

    def __init__(self):
        self.responses: list = []     # (ticket, result)
        self.appends: list[LogAppend] = []
        self.markers: list[MarkerJob] = []

    def __bool__(self) -> bool:
        return bool(self.responses or self.appends or self.markers)


@dataclass
class _Pending:
    """A transition waiting for its log append before it takes effect."""
    kind: str                         # init, add, end, complete, expire
    transactional_id: str
    metadata: TxnMetadata
    transit: Transit
    coordinator_epoch: int
    ticket: object = None
    reply: str = "client"             # for end: client, fence (InitProducerId), timeout
    commit: bool = False
    fence: bool = False
    client_tv: int = 0                # for end: the client transaction version


# log append errors as the coordinator reports them (appendTransactionToLog)
_APPEND_ERRORS = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
}


class ProducerIdUnavailable(Exception):
    """The producer id allocator failed; carries the error to answer."""

    def __init__(self, code: int = E.COORDINATOR_LOAD_IN_PROGRESS):
        super().__init__(E(code).name)
        self.code = code


class TransactionStateMachine:
    def __init__(self, config: TxnConfig | None = None, allocate_producer_id=None):
        self.config = config or TxnConfig()
        self._allocate = allocate_producer_id
        self.num_partitions: int | None = None
        self.coordinator_epochs: dict[int, int] = {}
        self.loading: set[int] = set()
        self.resigned: set[int] = set()     # partitions another broker leads: NOT_COORDINATOR
        self._loads: dict[int, dict[str, TxnMetadata | None]] = {}
        self._load_gen: dict[int, int] = {}  # a newer load of a partition makes an older one moot
        self.txns: dict[str, TxnMetadata] = {}
        self._pending: dict[int, _Pending] = {}
        self._token = 0
        self._next_abort_check: int | None = None
        self._next_expire_check: int | None = None
        self._marker_retries: list[tuple[int, MarkerJob]] = []
        self._fx: Effects | None = None
        self._now = 0
        # the finalized transaction.version: the __transaction_state value version
        self.transaction_version = 0

    def count_by_state(self) -> dict[str, int]:
        """Transactional ids per state, by Kafka's state names (every state listed, 0 included):
        the kproto_transactions gauge."""
        counts = dict.fromkeys(STATE_NAMES.values(), 0)
        for md in self.txns.values():
            name = STATE_NAMES.get(md.state, str(md.state))
            counts[name] = counts.get(name, 0) + 1
        return counts

    # ================================================================ plumbing

    def _begin(self, now_ms: int) -> None:
        self._fx = Effects()
        self._now = now_ms

    def _end(self) -> Effects:
        fx, self._fx = self._fx, None
        return fx

    def _respond(self, ticket, result) -> None:
        if ticket is not None:
            self._fx.responses.append((ticket, result))

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def _lookup(self, transactional_id: str) -> tuple[int | None, int, TxnMetadata | None]:
        """TransactionStateManager.getTransactionState: (error, coordinator epoch, metadata)."""
        if self.num_partitions is None:
            return E.NOT_COORDINATOR, -1, None
        p = self.partition_for(transactional_id)
        if p in self.resigned:
            return E.NOT_COORDINATOR, -1, None
        if p in self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, -1, None
        return None, self.coordinator_epochs.get(p, 0), self.txns.get(transactional_id)

    def owns(self, transactional_id: str, coordinator_epoch: int) -> bool:
        """Whether this coordinator still serves the transactional id at that epoch
        (a marker job of an older epoch is abandoned: the new coordinator resends)."""
        if self.num_partitions is None:
            return False
        p = self.partition_for(transactional_id)
        return (p not in self.resigned and p not in self.loading
                and self.coordinator_epochs.get(p, 0) == coordinator_epoch)

    def _new_producer_id(self) -> int:
        if self._allocate is None:
            raise ProducerIdUnavailable()
        return self._allocate()

    def _append(self, kind: str, md: TxnMetadata, transit: Transit | None, coordinator_epoch: int,
                ticket=None, **extra) -> None:
        self._token += 1
        txn_id = md.transactional_id
        self._pending[self._token] = _Pending(kind, txn_id, md, transit, coordinator_epoch, ticket, **extra)
        value = None if kind == "expire" else rec.value_bytes(transit, self.transaction_version)
        self._fx.appends.append(LogAppend(self.partition_for(txn_id), rec.key_bytes(txn_id), value, self._now,
                                          self._token))

    # ================================================================ ownership and loading

    def activate(self, num_partitions: int, coordinator_epochs: dict[int, int] | None = None, loading=(),
                 now_ms: int = 0) -> Effects:
        """__transaction_state exists with num_partitions; the listed partitions
        still have to be replayed (their transactional ids answer
        COORDINATOR_LOAD_IN_PROGRESS until finish_load)."""
        self._begin(now_ms)
        self.num_partitions = num_partitions
        self.coordinator_epochs = dict(coordinator_epochs or {})
        for p in loading:
            if p not in self.resigned:
                self.loading.add(p)
                self._loads[p] = {}
                self._load_gen[p] = self._load_gen.get(p, 0) + 1
        self._next_abort_check = now_ms + self.config.abort_timed_out_interval_ms
        self._next_expire_check = now_ms + self.config.remove_expired_interval_ms
        return self._end()

    def deactivate(self, now_ms: int) -> Effects:
        """__transaction_state is gone (a metadata rollback removed it, or it
        was recreated under another id): everything known from it goes; its
        transactional ids answer NOT_COORDINATOR until it exists again."""
        self._begin(now_ms)
        for p in set(self.loading) | set(self._loads):
            self._load_gen[p] = self._load_gen.get(p, 0) + 1
        self.num_partitions = None
        self.coordinator_epochs = {}
        self.loading.clear()
        self._loads.clear()
        self.resigned.clear()
        self.txns.clear()
        self._marker_retries = []
        return self._end()

    def resign(self, partition: int, now_ms: int) -> Effects:
        """Another broker leads __transaction_state-partition now (Kafka's
        onResignation): its transactional ids are forgotten here and answer
        NOT_COORDINATOR; writes and markers still in flight for them come to
        nothing (the new coordinator loads them from the log)."""
        self._begin(now_ms)
        self._drop_partition(partition)
        self.resigned.add(partition)
        return self._end()

    def begin_load(self, partition: int, coordinator_epoch: int, now_ms: int) -> Effects:
        """This broker became the leader of __transaction_state-partition at
        coordinator_epoch (Kafka's onElection): its ids answer
        COORDINATOR_LOAD_IN_PROGRESS until replay + finish_load with the
        generation load_generation(partition) gives."""
        self._begin(now_ms)
        self._drop_partition(partition)
        self.resigned.discard(partition)
        self.coordinator_epochs[partition] = coordinator_epoch
        self.loading.add(partition)
        self._loads[partition] = {}
        self._load_gen[partition] = self._load_gen.get(partition, 0) + 1
        return self._end()

    def load_generation(self, partition: int) -> int:
        return self._load_gen.get(partition, 0)

    def _drop_partition(self, partition: int) -> None:
        self.loading.discard(partition)
        self._loads.pop(partition, None)
        self._load_gen[partition] = self._load_gen.get(partition, 0) + 1
        if self.num_partitions is None:
            return
        for txn_id in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[txn_id]
        self._marker_retries = [(d, job) for d, job in self._marker_retries
                                if self.partition_for(job.transactional_id) != partition]

    def replay(self, partition: int, key, value, generation: int | None = None) -> None:
        """One `__transaction_state` record read while loading partition."""
        if partition not in self._loads or (generation is not None and generation != self._load_gen.get(partition)):
            return   # the load was superseded (resigned, or a newer load started)
        if key is None:
            log.warning("record without a key in __transaction_state-%d", partition)
            return
        txn_id = rec.decode_key(key)
        if txn_id is None:
            log.warning("unknown key version in __transaction_state-%d: ignored", partition)
            return
        try:
            self._loads[partition][txn_id] = rec.decode_value(txn_id, value)
        except Exception as exc:   # a corrupt value must not stop the load (Kafka logs and goes on)
            log.warning("unreadable transaction state of %r in __transaction_state-%d: %s", txn_id, partition, exc)

    def finish_load(self, partition: int, now_ms: int, generation: int | None = None) -> Effects:
        """The partition is replayed: its transactions are served from now on,
        and those caught between PrepareX and CompleteX are completed."""
        self._begin(now_ms)
        if partition not in self.loading or (generation is not None
                                             and generation != self._load_gen.get(partition)):
            return self._end()
        loaded = self._loads.pop(partition, {})
        self.loading.discard(partition)
        epoch = self.coordinator_epochs.get(partition, 0)
        for txn_id, md in loaded.items():
            if md is None:
                continue
            self.txns[txn_id] = md
            if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                log.info("completing %s of %r after loading __transaction_state-%d",
                         STATE_NAMES[md.state], txn_id, partition)
                self._send_markers(md, epoch)
        return self._end()

    # ================================================================ InitProducerId

    def init_producer_id(self, ticket, now_ms: int, transactional_id: str | None, timeout_ms: int,
                         expected: tuple[int, int] | None = None) -> Effects:
        """expected: the (producer id, epoch) a KIP-360 producer asks to bump."""
        self._begin(now_ms)
        if transactional_id is None:
            # an idempotent producer: a fresh id, whatever it sent
            try:
                self._respond(ticket, InitResult(E.NONE, self._new_producer_id(), 0))
            except ProducerIdUnavailable as exc:
                self._respond(ticket, InitResult(exc.code))
            return self._end()
        if transactional_id == "":
            self._respond(ticket, InitResult(E.INVALID_REQUEST))
            return self._end()
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            self._respond(ticket, InitResult(E.INVALID_TRANSACTION_TIMEOUT))
            return self._end()
        err, cepoch, md = self._lookup(transactional_id)
        if err is not None:
            self._respond(ticket, InitResult(err))
            return self._end()
        if md is None:
            try:
                pid = self._new_producer_id()
            except ProducerIdUnavailable as exc:
                self._respond(ticket, InitResult(exc.code))
                return self._end()
            md = self.txns[transactional_id] = TxnMetadata(
                transactional_id, pid, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, timeout_ms,
                S.EMPTY, (), -1, now_ms)
        transit = self._prepare_init(md, timeout_ms, expected, now_ms)
        if not isinstance(transit, Transit):
            self._respond(ticket, InitResult(transit))
            return self._end()
        if transit.state == S.PREPARE_EPOCH_FENCE:
            # abort the open transaction with the bumped epoch; the client
            # retries on CONCURRENT_TRANSACTIONS and gets the epoch after it
            self._end_transaction(ticket, transactional_id, transit.producer_id, transit.producer_epoch,
                                  commit=False, from_client=False, reply="fence")
            if md.pending_state == S.PREPARE_EPOCH_FENCE:
                md.pending_state = None
            return self._end()
        self._append("init", md, transit, cepoch, ticket)
        return self._end()

    def _prepare_init(self, md: TxnMetadata, timeout_ms: int, expected, now_ms: int):
        """prepareInitProducerIdTransit: a Transit or an error code."""
        if md.pending:
            return E.CONCURRENT_TRANSACTIONS
        if expected is not None:
            exp_pid, exp_epoch = expected
            valid = (md.producer_epoch == NO_PRODUCER_EPOCH or exp_pid == md.producer_id
                     or (exp_pid == md.last_producer_id and is_epoch_exhausted(exp_epoch)))
            if not valid:
                return E.PRODUCER_FENCED
        if md.state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            return E.CONCURRENT_TRANSACTIONS
        if md.state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT, S.EMPTY):
            if md.epoch_exhausted and (expected is None or expected[1] == md.producer_epoch):
                try:
                    pid = self._new_producer_id()
                except ProducerIdUnavailable as exc:
                    return exc.code
                return md.prepare_producer_id_rotation(pid, timeout_ms, now_ms, expected is not None)
            return md.prepare_increment_producer_epoch(timeout_ms, None if expected is None else expected[1], now_ms)
        if md.state == S.ONGOING:
            return md.prepare_fence_producer_epoch()
        raise IllegalTransition(f"found {md} in a state it never rests in")

    # ================================================================ AddPartitionsToTxn / AddOffsetsToTxn

    def add_partitions(self, ticket, now_ms: int, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions, client_tv: int = 0) -> Effects:
        self._begin(now_ms)
        partitions = set(partitions)
        if not transactional_id:
            self._respond(ticket, E.INVALID_REQUEST)
            return self._end()
        err, cepoch, md = self._lookup(transactional_id)
        if err is None:
            if md is None or md.producer_id != producer_id:
                err = E.INVALID_PRODUCER_ID_MAPPING
            elif md.producer_epoch != producer_epoch:
                err = E.PRODUCER_FENCED
            elif md.pending or md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                err = E.CONCURRENT_TRANSACTIONS
            elif md.state == S.ONGOING and partitions <= md.partitions:
                err = E.NONE
        if err is not None:
            self._respond(ticket, err)
            return self._end()
        self._append("add", md, md.prepare_add_partitions(partitions, now_ms, client_tv), cepoch, ticket)
        return self._end()

    def verify_partitions(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                          partitions) -> dict:
        """AddPartitionsToTxn verify-only (KIP-890): {partition: error}; no change."""
        partitions = list(partitions)
        if not transactional_id:
            return {tp: E.INVALID_REQUEST for tp in partitions}
        err, _cepoch, md = self._lookup(transactional_id)
        if err is None:
            if md is None or md.producer_id != producer_id:
                err = E.INVALID_PRODUCER_ID_MAPPING
            elif md.producer_epoch != producer_epoch:
                err = E.PRODUCER_FENCED
            elif md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                err = E.CONCURRENT_TRANSACTIONS
        if err is not None:
            return {tp: err for tp in partitions}
        return {tp: (E.NONE if tp in md.partitions else E.TRANSACTION_ABORTABLE) for tp in partitions}

    # ================================================================ EndTxn

    def end_txn(self, ticket, now_ms: int, transactional_id: str, producer_id: int, producer_epoch: int,
                commit: bool, client_tv: int = 0) -> Effects:
        """client_tv: 2 for EndTxn v5+ (answered with an EndResult), else 0 (an error code)."""
        self._begin(now_ms)
        self._end_transaction(ticket, transactional_id, producer_id, producer_epoch, commit, from_client=True,
                              reply="client", client_tv=client_tv)
        return self._end()

    def _reply_end(self, ticket, reply: str, error: int, transactional_id: str, client_tv: int = 0,
                   answer: tuple[int, int] = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)) -> None:
        if reply == "client":
            self._respond(ticket, EndResult(error, *answer) if supports_epoch_bump(client_tv) else error)
        elif reply == "fence":
            self._respond(ticket, InitResult(error if error != E.NONE else E.CONCURRENT_TRANSACTIONS))
        elif error == E.NONE:
            log.info("aborting transaction of %r: it timed out", transactional_id)
        else:
            log.debug("rollback of the timed out transaction of %r: %s", transactional_id, E(error).name)

    def _end_transaction(self, ticket, transactional_id: str, producer_id: int, producer_epoch: int,
                         commit: bool, from_client: bool, reply: str, client_tv: int | None = None) -> None:
        """client_tv None (the coordinator's own aborts): the transaction's own version."""
        if not transactional_id:
            self._reply_end(ticket, reply, E.INVALID_REQUEST, transactional_id, client_tv or 0)
            return
        err, cepoch, md = self._lookup(transactional_id)
        if client_tv is None:
            client_tv = md.client_tv if md is not None else 0
        if supports_epoch_bump(client_tv):
            self._end_transaction_v2(ticket, err, cepoch, md, transactional_id, producer_id, producer_epoch, commit,
                                     from_client, reply, client_tv)
            return
        if err is None:
            err = self._check_end(md, producer_id, producer_epoch, commit, from_client)
        if err is not None:
            self._reply_end(ticket, reply, err, transactional_id)
            return
        fence = False
        if not commit and md.pending_state == S.PREPARE_EPOCH_FENCE:
            # the fence becomes the abort: the bumped epoch applies at once
            fence = True
            md.pending_state = None
            md.producer_epoch = producer_epoch
            md.last_producer_epoch = NO_PRODUCER_EPOCH
        transit = md.prepare_abort_or_commit(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, self._now)
        self._append("end", md, transit, cepoch, ticket, reply=reply, commit=commit, fence=fence)

    def _end_transaction_v2(self, ticket, err, cepoch: int, md: TxnMetadata | None, transactional_id: str,
                            producer_id: int, producer_epoch: int, commit: bool, from_client: bool, reply: str,
                            client_tv: int) -> None:
        """Kafka 4.x's endTransaction for transaction version 2."""
        if err is None and md is None:
            err = E.INVALID_PRODUCER_ID_MAPPING
        answer = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        action = None
        if err is None:
            answer = (md.producer_id, md.producer_epoch)
            err, action = self._check_end_v2(md, producer_id, producer_epoch, commit, from_client)
        if action is None:
            self._reply_end(ticket, reply, err, transactional_id, client_tv,
                            answer if err == E.NONE else (NO_PRODUCER_ID, NO_PRODUCER_EPOCH))
            return
        state, no_partition_added = action
        fence = md.pending_state == S.PREPARE_EPOCH_FENCE
        next_pid = NO_PRODUCER_ID
        if not fence and md.epoch_exhausted:
            try:
                next_pid = self._new_producer_id()
            except ProducerIdUnavailable as exc:
                self._reply_end(ticket, reply, exc.code, transactional_id, client_tv)
                return
        if fence and state == S.PREPARE_ABORT:
            # the fence becomes the abort: the fenced epoch applies at once (and is bumped again)
            md.pending_state = None
            md.producer_epoch = producer_epoch
            md.last_producer_epoch = NO_PRODUCER_EPOCH
        transit = md.prepare_abort_or_commit(state, self._now, client_tv, next_pid, no_partition_added)
        self._append("end", md, transit, cepoch, ticket, reply=reply, commit=commit, fence=fence,
                     client_tv=client_tv)

    @staticmethod
    def _check_end_v2(md: TxnMetadata, producer_id: int, producer_epoch: int, commit: bool,
                      from_client: bool) -> tuple[int | None, tuple | None]:
        """(answer, None) or (None, (state to prepare, no partition added))."""
        fence = md.pending_state == S.PREPARE_EPOCH_FENCE
        # a retry whose first try exhausted the epochs: the new producer id is in force
        retry_on_overflow = (not fence and md.last_producer_id == producer_id and producer_epoch == MAX_EPOCH - 1
                             and md.producer_epoch == 0)
        # a retry of an EndTxn that bumped the epoch
        retry_on_bump = not fence and md.producer_epoch == producer_epoch + 1
        state = md.state
        if fence:
            valid = (not from_client or producer_epoch == md.producer_epoch) and producer_epoch >= md.producer_epoch
        elif state in (S.ONGOING, S.EMPTY, S.DEAD, S.PREPARE_EPOCH_FENCE):
            # the same epoch means the next EndTxn, not a retry
            valid = producer_epoch == md.producer_epoch
        elif state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            # the current epoch: the next transaction's end (an abort needs no partition) while this
            # one's markers are in flight; answered CONCURRENT_TRANSACTIONS below, which the client
            # retries (the Kafka code read answers PRODUCER_FENCED, fatal to a Java 4.3 producer that
            # aborts right after a commit on a cluster where markers take a moment)
            valid = retry_on_bump or producer_epoch == md.producer_epoch
        else:
            valid = retry_on_bump or retry_on_overflow or producer_epoch == md.producer_epoch
        retry = retry_on_bump or retry_on_overflow
        if md.producer_id != producer_id and not retry_on_overflow:
            return E.INVALID_PRODUCER_ID_MAPPING, None
        if not valid:
            return E.PRODUCER_FENCED, None
        if md.pending and not fence:
            return E.CONCURRENT_TRANSACTIONS, None
        if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT) and not retry:
            return E.CONCURRENT_TRANSACTIONS, None
        if state == S.ONGOING:
            return None, (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, False)
        if state == S.COMPLETE_COMMIT:
            if commit:
                return (E.NONE if retry else E.INVALID_TXN_STATE), None
            return (E.INVALID_TXN_STATE, None) if retry else (None, (S.PREPARE_ABORT, True))
        if state == S.COMPLETE_ABORT:
            if commit:
                return E.INVALID_TXN_STATE, None
            return (E.NONE, None) if retry else (None, (S.PREPARE_ABORT, True))
        if state == S.PREPARE_COMMIT:
            return (E.CONCURRENT_TRANSACTIONS if commit else E.INVALID_TXN_STATE), None
        if state == S.PREPARE_ABORT:
            return (E.CONCURRENT_TRANSACTIONS if not commit else E.INVALID_TXN_STATE), None
        if state == S.EMPTY:
            return (E.INVALID_TXN_STATE, None) if commit else (None, (S.PREPARE_ABORT, True))
        raise IllegalTransition(f"found {md} in a state it never rests in")

    @staticmethod
    def _check_end(md: TxnMetadata | None, producer_id: int, producer_epoch: int, commit: bool,
                   from_client: bool) -> int | None:
        """None to go ahead; otherwise the answer."""
        if md is None or md.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        # a client must use the current epoch; the coordinator's own aborts may bump it
        if (from_client and producer_epoch != md.producer_epoch) or producer_epoch < md.producer_epoch:
            return E.PRODUCER_FENCED
        if md.pending and md.pending_state != S.PREPARE_EPOCH_FENCE:
            return E.CONCURRENT_TRANSACTIONS
        state = md.state
        if state == S.ONGOING:
            return None
        if state == S.COMPLETE_COMMIT:
            return E.NONE if commit else E.INVALID_TXN_STATE     # a retried commit
        if state == S.COMPLETE_ABORT:
            return E.NONE if not commit else E.INVALID_TXN_STATE
        if state == S.PREPARE_COMMIT:
            return E.CONCURRENT_TRANSACTIONS if commit else E.INVALID_TXN_STATE
        if state == S.PREPARE_ABORT:
            return E.CONCURRENT_TRANSACTIONS if not commit else E.INVALID_TXN_STATE
        if state == S.EMPTY:
            return E.INVALID_TXN_STATE
        raise IllegalTransition(f"found {md} in a state it never rests in")

    def _after_end_written(self, p: _Pending, err: int) -> None:
        md = self.txns.get(p.transactional_id)
        if err != E.NONE:
            if p.fence and md is not None:
                md.has_failed_epoch_fence = True
                log.warning("the epoch fence of %r was not written (%s); the epoch stays %d unannounced",
                            p.transactional_id, E(err).name, md.producer_epoch)
            self._reply_end(p.ticket, p.reply, err, p.transactional_id, p.client_tv)
            return
        # sendTxnMarkersCallback: still the same transaction?
        if md is None:
            err = E.NOT_COORDINATOR
        elif md.producer_id != p.transit.producer_id:
            err = E.INVALID_PRODUCER_ID_MAPPING
        elif md.producer_epoch != p.transit.producer_epoch:
            err = E.PRODUCER_FENCED
        elif md.pending:
            err = E.CONCURRENT_TRANSACTIONS
        elif md.state != (S.PREPARE_COMMIT if p.commit else S.PREPARE_ABORT):
            err = E.INVALID_TXN_STATE
        if err != E.NONE:
            self._reply_end(p.ticket, p.reply, err, p.transactional_id, p.client_tv)
            return
        # the outcome is decided and durable: answer, then write the markers (v2: the producer goes
        # on with the bumped epoch, or with the next producer id once the epochs ran out)
        answer = ((md.next_producer_id, 0) if md.next_producer_id != NO_PRODUCER_ID
                  else (md.producer_id, md.producer_epoch))
        self._reply_end(p.ticket, p.reply, E.NONE, p.transactional_id, p.client_tv, answer)
        self._send_markers(md, p.coordinator_epoch)

    def _send_markers(self, md: TxnMetadata, coordinator_epoch: int) -> None:
        transit = md.prepare_complete(self._now)
        self._fx.markers.append(MarkerJob(md.transactional_id, md.producer_id, md.producer_epoch,
                                          coordinator_epoch, md.state == S.PREPARE_COMMIT,
                                          sorted(md.partitions), transit))

    def markers_done(self, job: MarkerJob, results: dict, now_ms: int) -> Effects:
        """results: {(topic, partition): None when written (or the partition is
        gone), else the error}. Failed partitions are tried again later;
        once all are written, CompleteCommit/CompleteAbort is logged. An error
        code instead of a dict (the write itself raised): every partition failed."""
        self._begin(now_ms)
        if not isinstance(results, dict):
            results = dict.fromkeys(job.partitions, results or E.UNKNOWN_SERVER_ERROR)
        md = self.txns.get(job.transactional_id)
        if md is None or md.pending_state != job.transit.state or md.producer_id != job.producer_id:
            log.warning("markers of %r finished after its transaction changed: %s", job.transactional_id, md)
            return self._end()
        failed = []
        for tp in job.partitions:
            error = results.get(tp)
            if error is None:
                md.partitions.discard(tp)
            else:
                failed.append(tp)
        if failed:
            log.warning("writing %s markers of %r to %s failed; retrying", "COMMIT" if job.commit else "ABORT",
                        job.transactional_id, failed)
            retry = MarkerJob(job.transactional_id, job.producer_id, job.producer_epoch, job.coordinator_epoch,
                              job.commit, failed, job.transit)
            self._marker_retries.append((now_ms + self.config.marker_retry_backoff_ms, retry))
            return self._end()
        self._append("complete", md, job.transit, job.coordinator_epoch)
        return self._end()

    # ================================================================ log append outcomes

    def append_done(self, token: int, error: int, now_ms: int) -> Effects:
        self._begin(now_ms)
        p = self._pending.pop(token, None)
        if p is None:
            return self._end()
        err = _APPEND_ERRORS.get(error, error) if error else E.NONE
        md = self.txns.get(p.transactional_id)
        if md is not p.metadata:
            # the id expired or was reloaded meanwhile
            err = err or E.NOT_COORDINATOR
            md = None
        if p.kind == "expire":
            if md is not None:
                if err == E.NONE and md.pending_state == S.DEAD:
                    del self.txns[p.transactional_id]
                    log.info("transactional id %r expired", p.transactional_id)
                else:
                    md.pending_state = None
            return self._end()
        if md is not None:
            if err == E.NONE:
                md.complete_transition(p.transit)
            else:
                log.info("writing %s of %r failed: %s", STATE_NAMES[p.transit.state], p.transactional_id,
                         E(err).name)
                md.pending_state = None
        if p.kind == "init":
            self._respond(p.ticket, InitResult(E.NONE, p.transit.producer_id, p.transit.producer_epoch)
                          if err == E.NONE else InitResult(err))
        elif p.kind == "add":
            self._respond(p.ticket, err)
        elif p.kind == "end":
            self._after_end_written(p, err)
        elif p.kind == "complete" and err != E.NONE:
            log.warning("could not complete the transaction of %r: %s; retrying", p.transactional_id, E(err).name)
        return self._end()

    # ================================================================ timers

    def next_deadline(self) -> int | None:
        deadlines = [d for d in (self._next_abort_check, self._next_expire_check) if d is not None]
        deadlines += [d for d, _job in self._marker_retries]
        return min(deadlines) if deadlines else None

    def tick(self, now_ms: int) -> Effects:
        self._begin(now_ms)
        due = [job for d, job in self._marker_retries if d <= now_ms]
        if due:
            self._marker_retries = [(d, job) for d, job in self._marker_retries if d > now_ms]
            self._fx.markers.extend(due)
        if self._next_abort_check is not None and now_ms >= self._next_abort_check:
            self._next_abort_check = now_ms + self.config.abort_timed_out_interval_ms
            self._abort_timed_out()
            self._resume_stuck()
        if self._next_expire_check is not None and now_ms >= self._next_expire_check:
            self._next_expire_check = now_ms + self.config.remove_expired_interval_ms
            self._expire_transactional_ids()
        return self._end()

    def _abort_timed_out(self) -> None:
        """abortTimedOutTransactions: fence and abort what stayed open too long."""
        for txn_id, md in list(self.txns.items()):
            if md.pending or md.state != S.ONGOING or md.start_timestamp + md.timeout_ms >= self._now:
                continue
            if self.partition_for(txn_id) in self.loading:
                continue
            transit = md.prepare_fence_producer_epoch()
            self._end_transaction(None, txn_id, transit.producer_id, transit.producer_epoch, commit=False,
                                  from_client=False, reply="timeout")
            if md.pending_state == S.PREPARE_EPOCH_FENCE:
                md.pending_state = None

    def _resume_stuck(self) -> None:
        """A transaction left in PrepareCommit/PrepareAbort with nothing in
        flight (its completion failed to be written): write its markers again."""
        retrying = {job.transactional_id for _d, job in self._marker_retries}
        for txn_id, md in self.txns.items():
            if md.pending or md.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT) or txn_id in retrying:
                continue
            p = self.partition_for(txn_id)
            if p not in self.loading:
                self._send_markers(md, self.coordinator_epochs.get(p, 0))

    def _expire_transactional_ids(self) -> None:
        """removeExpiredTransactionalIds: ids idle for transactional.id.expiration.ms
        get a tombstone and are forgotten."""
        limit = self._now - self.config.transactional_id_expiration_ms
        for txn_id, md in list(self.txns.items()):
            if md.pending or md.state not in EXPIRATION_ALLOWED or md.update_timestamp > limit:
                continue
            p = self.partition_for(txn_id)
            if p in self.loading:
                continue
            self._append("expire", md, md.prepare_dead(), self.coordinator_epochs.get(p, 0))

    # ================================================================ admin

    def describe(self, transactional_id: str | None) -> tuple[int, TxnDescription | None]:
        if not transactional_id:
            return E.INVALID_REQUEST, None
        err, _cepoch, md = self._lookup(transactional_id)
        if err is not None:
            return err, None
        if md is None or md.state == S.DEAD:
            return E.TRANSACTIONAL_ID_NOT_FOUND, None
        return E.NONE, TxnDescription(transactional_id, STATE_NAMES[md.state], md.timeout_ms, md.start_timestamp,
                                      md.producer_id, md.producer_epoch, sorted(md.partitions))

    def list_transactions(self, producer_ids=(), state_names=(), duration_ms: int = -1, now_ms: int = 0
                          ) -> tuple[int, list[str], list[tuple[str, int, str]]]:
        """(error, unknown state filters, [(transactional id, producer id, state)])."""
        if self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, [], []
        states = set()
        unknown = []
        for name in state_names:
            if name in STATES_BY_NAME:
                states.add(STATES_BY_NAME[name])
            else:
                unknown.append(name)
        pids = set(producer_ids)
        out = []
        for txn_id, md in self.txns.items():
            if md.state == S.DEAD:
                continue
            if pids and md.producer_id not in pids:
                continue
            if state_names and md.state not in states:
                continue
            if duration_ms >= 0 and now_ms - md.start_timestamp <= duration_ms:
                continue
            out.append((txn_id, md.producer_id, STATE_NAMES[md.state]))
        return E.NONE, unknown, out

"""Transaction metadata and its legal transitions, after Kafka's
TransactionMetadata: a change is first *prepared* (the target becomes the
pending state, which blocks other changes), written to
`__transaction_state`, and only *completed* once the write succeeded.

With transactions v2 (KIP-890 part 2: a client's EndTxn v5+, the metadata's
`client_tv` 2) every PrepareCommit/PrepareAbort bumps the producer epoch, so
the markers and the next transaction use a new epoch; when that exhausts the
epochs the next producer id is chosen with it and taken at completion."""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from kproto.errors import ErrorCode

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767


class TxnState(IntEnum):
    # ids as TransactionState.fromId: the byte stored in TransactionLogValue
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


S = TxnState

# the names DescribeTransactions / ListTransactions use
STATE_NAMES = {
    S.EMPTY: "Empty", S.ONGOING: "Ongoing", S.PREPARE_COMMIT: "PrepareCommit",
    S.PREPARE_ABORT: "PrepareAbort", S.COMPLETE_COMMIT: "CompleteCommit",
    S.COMPLETE_ABORT: "CompleteAbort", S.DEAD: "Dead", S.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
STATES_BY_NAME = {name: state for state, name in STATE_NAMES.items()}

VALID_PREVIOUS = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    # (v2 may abort with no transaction open: from Empty and the completed states)
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}
EXPIRATION_ALLOWED = {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}

TV_2 = 2      # the client transaction version from which every EndTxn bumps the epoch


def supports_epoch_bump(client_tv: int) -> bool:
    return client_tv >= TV_2


def is_epoch_exhausted(epoch: int) -> bool:
    # the coordinator keeps Short.MaxValue for itself, to be able to fence
    return epoch >= MAX_EPOCH - 1


class IllegalTransition(RuntimeError):
    """A transition the state machine must never attempt (a bug, as in Kafka)."""


@dataclass(frozen=True)
class Transit:
    """The target of a prepared transition (Kafka's TxnTransitMetadata)."""
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset            # {(topic, partition)}
    start_timestamp: int
    update_timestamp: int
    next_producer_id: int = NO_PRODUCER_ID     # v2: the producer id taken at completion
    client_tv: int = 0                         # the client transaction version


class TxnMetadata:
    def __init__(self, transactional_id: str, producer_id: int, last_producer_id: int, producer_epoch: int,
                 last_producer_epoch: int, timeout_ms: int, state: TxnState, partitions=(),
                 start_timestamp: int = -1, update_timestamp: int = -1):
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.last_producer_id = last_producer_id
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = last_producer_epoch
        self.timeout_ms = timeout_ms
        self.state = state
        self.partitions: set = set(partitions)
        self.start_timestamp = start_timestamp
        self.update_timestamp = update_timestamp
        self.pending_state: TxnState | None = None
        # a fence whose write failed: its epoch bump is not repeated
        self.has_failed_epoch_fence = False
        self.next_producer_id = NO_PRODUCER_ID
        self.client_tv = 0

    def __repr__(self) -> str:
        return (f"TxnMetadata({self.transactional_id!r}, pid={self.producer_id}, epoch={self.producer_epoch}, "
                f"state={STATE_NAMES[self.state]}, pending={self.pending_state and STATE_NAMES[self.pending_state]}, "
                f"partitions={sorted(self.partitions)})")

    @property
    def pending(self) -> bool:
        return self.pending_state is not None

    @property
    def epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    # -- preparing ------------------------------------------------------------------

    def _prepare(self, state, producer_id, epoch, last_epoch, timeout_ms, partitions, start_ts, update_ts,
                 next_producer_id: int = NO_PRODUCER_ID, client_tv: int | None = None) -> Transit:
        if self.pending_state is not None:
            raise IllegalTransition(f"{self}: preparing {STATE_NAMES[state]} while {self.pending_state} is pending")
        if producer_id < 0:
            raise IllegalTransition(f"illegal new producer id {producer_id}")
        if state != S.DEAD and epoch < 0:
            raise IllegalTransition(f"illegal new producer epoch {epoch}")
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(f"{self}: {STATE_NAMES[state]} cannot follow {STATE_NAMES[self.state]}")
        self.pending_state = state
        return Transit(producer_id, self.producer_id, epoch, last_epoch, timeout_ms, state,
                       frozenset(partitions), start_ts, update_ts, next_producer_id,
                       self.client_tv if client_tv is None else client_tv)

    def prepare_fence_producer_epoch(self) -> Transit:
        if self.producer_epoch == MAX_EPOCH:
            raise IllegalTransition("cannot fence a producer whose epoch is Short.MaxValue")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(S.PREPARE_EPOCH_FENCE, self.producer_id, bumped, NO_PRODUCER_EPOCH, self.timeout_ms,
                             self.partitions, self.start_timestamp, self.update_timestamp)

    def prepare_increment_producer_epoch(self, timeout_ms: int, expected_epoch: int | None, now_ms: int):
        """A Transit, or an error code (PRODUCER_FENCED) for a stale expected epoch."""
        if self.epoch_exhausted:
            raise IllegalTransition(f"no producer epochs left for producer id {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            # a new producer instance: bump and forget the last epoch
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            # KIP-360: the current producer recovers from an error
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # a retry of a bump whose answer was lost
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return ErrorCode.PRODUCER_FENCED
        return self._prepare(S.EMPTY, self.producer_id, epoch, last, timeout_ms, (), -1, now_ms)

    def prepare_producer_id_rotation(self, new_producer_id: int, timeout_ms: int, now_ms: int,
                                     record_last_epoch: bool) -> Transit:
        if self.state in (S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT):
            raise IllegalTransition("cannot rotate producer ids while a transaction is pending")
        return self._prepare(S.EMPTY, new_producer_id, 0,
                             self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             timeout_ms, (), -1, now_ms)

    def prepare_add_partitions(self, added: set, now_ms: int, client_tv: int | None = None) -> Transit:
        start = now_ms if self.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT) else self.start_timestamp
        return self._prepare(S.ONGOING, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.timeout_ms, self.partitions | set(added), start, now_ms, client_tv=client_tv)

    def prepare_abort_or_commit(self, state: TxnState, now_ms: int, client_tv: int = 0,
                                next_producer_id: int = NO_PRODUCER_ID, no_partition_added: bool = False) -> Transit:
        epoch, last = self.producer_epoch, self.last_producer_epoch
        if supports_epoch_bump(client_tv):
            # v2: the markers and the next transaction use a new epoch (an abort at Short.MaxValue, a
            # broken state, goes through without one so the producer can recover)
            if not (self.producer_epoch == MAX_EPOCH and state == S.PREPARE_ABORT):
                epoch = self.producer_epoch + 1
            last = self.producer_epoch
        # a v2 abort with no partition added has no start time of its own: the update time stands in
        start = now_ms if no_partition_added else self.start_timestamp
        return self._prepare(state, self.producer_id, epoch, last, self.timeout_ms, self.partitions, start, now_ms,
                             next_producer_id, client_tv)

    def prepare_complete(self, now_ms: int) -> Transit:
        state = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        self.has_failed_epoch_fence = False
        pid, epoch = self.producer_id, self.producer_epoch
        if supports_epoch_bump(self.client_tv) and self.next_producer_id != NO_PRODUCER_ID:
            # the epochs ran out with this transaction: the producer goes on with the next id
            pid, epoch = self.next_producer_id, 0
        return self._prepare(state, pid, epoch, self.last_producer_epoch, self.timeout_ms, (), self.start_timestamp,
                             now_ms)

    def prepare_dead(self) -> Transit:
        return self._prepare(S.DEAD, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.timeout_ms, (), self.start_timestamp, self.update_timestamp)

    # -- completing -----------------------------------------------------------------

    def complete_transition(self, t: Transit) -> None:
        """The prepared change was written: apply it (Kafka's completeTransitionTo,
        with its consistency checks)."""
        to = self.pending_state
        if to is None or to != t.state:
            raise IllegalTransition(f"{self}: completing {STATE_NAMES[t.state]} without it pending")
        same_producer = t.producer_epoch == self.producer_epoch and t.producer_id == self.producer_id
        if to == S.EMPTY:
            valid_bump = (t.producer_epoch == self.producer_epoch + 1
                          or (t.producer_epoch == 0 and t.producer_id != self.producer_id))
            if (self.producer_epoch != t.producer_epoch and not valid_bump) or t.partitions or t.start_timestamp != -1:
                raise IllegalTransition(f"{self}: bad transition to {t}")
            self.timeout_ms = t.timeout_ms
            self.producer_epoch = t.producer_epoch
            self.last_producer_epoch = t.last_producer_epoch
            self.producer_id = t.producer_id
            self.last_producer_id = t.last_producer_id
        elif to == S.ONGOING:
            if not same_producer or not self.partitions <= t.partitions or self.timeout_ms != t.timeout_ms:
                raise IllegalTransition(f"{self}: bad transition to {t}")
            self.start_timestamp = t.start_timestamp
            self.partitions |= t.partitions
            self.client_tv = t.client_tv
        elif to in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            v2 = supports_epoch_bump(t.client_tv)
            bumped = v2 and t.producer_epoch == self.producer_epoch + 1 and t.producer_id == self.producer_id
            empty_abort = v2 and to == S.PREPARE_ABORT and self.state in (S.EMPTY, S.COMPLETE_COMMIT,
                                                                          S.COMPLETE_ABORT)
            if (not (same_producer or bumped) or set(self.partitions) != set(t.partitions)
                    or self.timeout_ms != t.timeout_ms
                    or (self.start_timestamp != t.start_timestamp and not empty_abort)):
                raise IllegalTransition(f"{self}: bad transition to {t}")
            self.producer_epoch = t.producer_epoch
            self.last_producer_epoch = t.last_producer_epoch
            self.start_timestamp = t.start_timestamp
            self.next_producer_id = t.next_producer_id
            self.client_tv = t.client_tv
        elif to in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT):
            rotated = (t.producer_id == self.next_producer_id != NO_PRODUCER_ID and t.producer_epoch == 0)
            if not (same_producer or rotated) or self.timeout_ms != t.timeout_ms or t.start_timestamp == -1:
                raise IllegalTransition(f"{self}: bad transition to {t}")
            if rotated:
                self.last_producer_id = self.producer_id
                self.producer_id = t.producer_id
                self.producer_epoch = 0
            self.next_producer_id = NO_PRODUCER_ID
            self.start_timestamp = t.start_timestamp
            self.partitions.clear()
        else:
            raise IllegalTransition(f"{self}: {STATE_NAMES[to]} is never completed")
        self.update_timestamp = t.update_timestamp
        self.pending_state = None
        self.state = to

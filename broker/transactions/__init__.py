"""The transaction coordinator: transactional ids, producer epochs and the
two-phase commit of transactions, stored in the `__transaction_state`
topic in Kafka's record layout.

- `state.TransactionStateMachine`: the pure state machine (requests and
  timer ticks in, with an explicit `now_ms`; answers, `__transaction_state`
  records, marker writes and timers out), after Kafka 3.9's
  TransactionCoordinator / TransactionStateManager / TransactionMetadata.
- `coordinator.TransactionCoordinator`: the trio shell that drives it for
  the broker (`broker.transactions`): writes its records, writes the
  COMMIT/ABORT markers into the partitions and tells the group
  coordinator about transactional offset commits. It builds the state
  machine at first use: the package itself imports nothing, so a broker
  that never sees a transaction loads neither the machine nor its model
  (start-up CPU, issue #26).
"""

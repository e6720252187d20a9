"""KIP-890 partition verification on a cluster (Kafka's AddPartitionsToTxnManager):
before the first transactional batch of a producer is appended to a partition,
its leader asks the transaction coordinator whether the partition is in the
producer's transaction (for a transactions v2 producer, Produce v12+ or
TxnOffsetCommit v5+, it asks the coordinator to add it). When another broker coordinates the transactional id,
the leader sends it AddPartitionsToTxn v4 with verifyOnly; the answers are
kept for the synchronous checks of Produce and TxnOffsetCommit
(`TransactionCoordinator.verify_partitions`), which use each one once.

A coordinator that cannot be reached answers NETWORK_EXCEPTION (the client is
told NOT_ENOUGH_REPLICAS and retries, as Kafka does)."""
from __future__ import annotations

from kproto.errors import ErrorCode as E

from broker.transactions.lazy_peers import LazyPeers
from broker.transactions.placement import TRANSACTION_STATE_TOPIC, partition_for


ADD_PARTITIONS_VERSION = 4
ADD_PARTITIONS_ADD_VERSION = 5     # adding for a transactions v2 producer (TRANSACTION_ABORTABLE known)
_MAX_KEPT = 10000


class RemoteVerifier(LazyPeers):
    peers_client_id = "kproto-txn-verify"

    def __init__(self, broker):
        self.broker = broker
        self.answers: dict[tuple, int] = {}     # (txn id, pid, epoch, (topic, partition)) -> error

    def coordinator(self, transactional_id: str) -> int | None:
        """The broker leading the transactional id's __transaction_state partition."""
        t = self.broker.image.topics.get(TRANSACTION_STATE_TOPIC)
        if t is None or not t.partitions:
            return None
        p = t.partitions.get(partition_for(transactional_id, len(t.partitions)))
        return None if p is None else p.leader

    def take(self, transactional_id: str, producer_id: int, producer_epoch: int, tp) -> int | None:
        return self.answers.pop((transactional_id, producer_id, producer_epoch, tp), None)

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions,
                     add: bool = False) -> None:
        """Ask the remote coordinator about partitions (add: to add them, for a transactions v2
        client); keep its answers."""
        partitions = list(dict.fromkeys(partitions))
        if not partitions:
            return
        leader = self.coordinator(transactional_id)
        if leader is None or leader < 0:
            errors = {tp: E.COORDINATOR_NOT_AVAILABLE for tp in partitions}
        else:
            errors = await self._ask(leader, transactional_id, producer_id, producer_epoch, partitions, add)
        if len(self.answers) > _MAX_KEPT:
            self.answers.clear()   # answers never used (their batch failed earlier checks)
        for tp in partitions:
            self.answers[(transactional_id, producer_id, producer_epoch, tp)] = errors.get(tp, E.UNKNOWN_SERVER_ERROR)

    async def _ask(self, leader: int, transactional_id: str, producer_id: int, producer_epoch: int,
                   partitions, add: bool = False) -> dict:
        from kproto.messages.add_partitions_to_txn_request import AddPartitionsToTxnRequest
        from broker.transactions.peers import errors_by_partition
        repl = getattr(self.broker, "replication", None)
        endpoint = repl.endpoint_of(leader) if repl is not None else None

        def make_request(by_topic):
            return AddPartitionsToTxnRequest(transactions=[AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
                verify_only=not add, topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                          for t, ps in by_topic.items()])])

        def read_errors(resp):
            if resp.error_code:
                return {tp: resp.error_code for tp in partitions}
            return errors_by_partition(resp.results_by_transaction, "topic_results", "results_by_partition",
                                       "partition_error_code")
        return await self._peers.partition_errors(leader, endpoint, partitions, make_request,
                                                  ADD_PARTITIONS_ADD_VERSION if add else ADD_PARTITIONS_VERSION, 10,
                                                  read_errors)

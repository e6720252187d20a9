"""Keys and values of `__transaction_state` records, as Kafka's
TransactionLog writes them: a big-endian int16 version, then the struct
encoded at that version (MessageUtil.toVersionPrefixedBytes). Kafka writes
value version 0 unless the transaction.version feature is finalized above 0
(not on a fresh 3.9 cluster); version 1 adds PreviousProducerId,
NextProducerId and ClientTransactionVersion as tagged fields. A tombstone
(null value) removes an expired transactional id."""
from __future__ import annotations

import struct

from kproto.coordinator.transaction_log_key import TransactionLogKey
from kproto.coordinator.transaction_log_value import PartitionsSchema, TransactionLogValue

from broker.transactions.model import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnMetadata, TxnState, Transit

_VERSION = struct.Struct(">h")

KEY_VERSION = 0      # TransactionLogKey.HIGHEST_SUPPORTED_VERSION
VALUE_VERSION = 0    # flexible version 1 only with transaction.version > 0


def value_version(transaction_version: int) -> int:
    """TransactionLog.valueToBytes: the value version for the finalized transaction.version."""
    return 1 if transaction_version >= 1 else VALUE_VERSION


def _prefixed(version: int, struct_obj) -> bytes:
    out = bytearray(_VERSION.pack(version))
    # not strict: the v1 tagged fields are declared with taggedVersions only, which the generated
    # codec's strict check takes for fields of no version (it writes them all the same)
    struct_obj.encode_into(out, version, strict=False)
    return bytes(out)


def key_bytes(transactional_id: str) -> bytes:
    return _prefixed(KEY_VERSION, TransactionLogKey(transactional_id=transactional_id))


def value_bytes(t: Transit, transaction_version: int = 0) -> bytes:
    if t.state == TxnState.EMPTY and t.partitions:
        raise ValueError(f"an Empty transaction has no partitions: {t}")
    partitions = None
    if t.state != TxnState.EMPTY:
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(t.partitions):
            by_topic.setdefault(topic, []).append(index)
        partitions = [PartitionsSchema(topic=topic, partition_ids=ids) for topic, ids in by_topic.items()]
    version = value_version(transaction_version)
    value = TransactionLogValue(
        producer_id=t.producer_id, producer_epoch=t.producer_epoch, transaction_timeout_ms=t.timeout_ms,
        transaction_status=int(t.state), transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=t.update_timestamp,
        transaction_start_timestamp_ms=t.start_timestamp)
    if version >= 1:
        value.previous_producer_id = t.last_producer_id
        value.next_producer_id = t.next_producer_id
        value.client_transaction_version = t.client_tv
    return _prefixed(version, value)


def decode_key(data) -> str | None:
    """The transactional id, or None for a key version Kafka would skip."""
    mv = memoryview(data)
    version, = _VERSION.unpack_from(mv, 0)
    if not TransactionLogKey.MIN_VERSION <= version <= TransactionLogKey.MAX_VERSION:
        return None
    return TransactionLogKey.decode(mv, version, 2).transactional_id


def decode_value(transactional_id: str, data) -> TxnMetadata | None:
    """TransactionLog.readTxnRecordValue: the stored metadata (None for a
    tombstone). The last producer id, the next one and the client transaction
    version are stored from version 1; the last epoch never is."""
    if data is None:
        return None
    mv = memoryview(data)
    version, = _VERSION.unpack_from(mv, 0)
    if not TransactionLogValue.MIN_VERSION <= version <= TransactionLogValue.MAX_VERSION:
        raise ValueError(f"unknown version {version} of a transaction log value")
    v = TransactionLogValue.decode(mv, version, 2)
    state = TxnState(v.transaction_status)
    partitions = set()
    if state != TxnState.EMPTY:
        for ps in v.transaction_partitions or []:
            partitions.update((ps.topic, p) for p in ps.partition_ids)
    md = TxnMetadata(transactional_id, v.producer_id, v.previous_producer_id if version >= 1 else NO_PRODUCER_ID,
                     v.producer_epoch, NO_PRODUCER_EPOCH, v.transaction_timeout_ms, state, partitions,
                     v.transaction_start_timestamp_ms, v.transaction_last_update_timestamp_ms)
    if version >= 1:
        md.next_producer_id = v.next_producer_id
        md.client_tv = v.client_transaction_version
    return md

"""Transactions over the raw protocol against a real broker process: the
flow of /work/shared/kafka-observations/txn-flow.json step by step, and the
transaction rows of error-cases.csv (each assertion names its row)."""
from __future__ import annotations

import os
import struct
import time

import pytest

from kproto import records as rec
from kproto.messages.add_offsets_to_txn_request import AddOffsetsToTxnRequest
from kproto.messages.add_partitions_to_txn_request import AddPartitionsToTxnRequest
from kproto.messages.describe_groups_request import DescribeGroupsRequest
from kproto.messages.describe_producers_request import DescribeProducersRequest
from kproto.messages.describe_transactions_request import DescribeTransactionsRequest
from kproto.messages.end_txn_request import EndTxnRequest
from kproto.messages.find_coordinator_request import FindCoordinatorRequest
from kproto.messages.init_producer_id_request import InitProducerIdRequest
from kproto.messages.list_offsets_request import ListOffsetsRequest
from kproto.messages.list_transactions_request import ListTransactionsRequest
from kproto.messages.offset_fetch_request import OffsetFetchRequest
from kproto.messages.txn_offset_commit_request import TxnOffsetCommitRequest
from kproto.messages.write_txn_markers_request import WriteTxnMarkersRequest

from tests.wire_client import WireClient, create_topic, fetch_req, produce

APT = AddPartitionsToTxnRequest

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture
def c(broker):
    with WireClient(broker.bootstrap) as client:
        yield client


def find_coordinator(c, key: str, key_type: int = 1) -> None:
    """Until the coordinator is there (the first lookup creates its topic)."""
    for _ in range(100):
        res = c.call(FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key]), 4).coordinators[0]
        if res.error_code == 0:
            return
        assert res.error_code == 15   # COORDINATOR_NOT_AVAILABLE while the topic is being created
        time.sleep(0.05)
    raise AssertionError("no coordinator")


def wait_loaded(c, group: str) -> None:
    """Until the group's coordinator no longer answers COORDINATOR_LOAD_IN_PROGRESS."""
    for _ in range(100):
        if c.call(DescribeGroupsRequest(groups=[group]), 5).groups[0].error_code != 14:
            return
        time.sleep(0.05)
    raise AssertionError("the group's coordinator never loaded")


def init(c, txn_id, timeout_ms=60000, pid=-1, epoch=-1, version=5):
    for _ in range(100):
        res = c.call(InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=timeout_ms,
                                           producer_id=pid, producer_epoch=epoch), version)
        if res.error_code not in (14, 51):     # loading / a fenced transaction being aborted
            return res
        time.sleep(0.05)
    return res


def add_v3(c, txn_id, pid, epoch, *tps, version=3):
    topics = {}
    for t, p in tps:
        topics.setdefault(t, []).append(p)
    res = c.call(APT(v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
                     v3_and_below_producer_epoch=epoch,
                     v3_and_below_topics=[APT.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                          for t, ps in topics.items()]), version)
    return [(t.name, [(p.partition_index, p.partition_error_code) for p in t.results_by_partition])
            for t in res.results_by_topic_v3_and_below]


def add_v5(c, txn_id, pid, epoch, *tps, verify_only=False):
    topics = {}
    for t, p in tps:
        topics.setdefault(t, []).append(p)
    res = c.call(APT(transactions=[APT.AddPartitionsToTxnTransaction(
        transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, verify_only=verify_only,
        topics=[APT.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in topics.items()])]), 5)
    return res.error_code, [(r.transactional_id, [(t.name, [(p.partition_index, p.partition_error_code)
                                                            for p in t.results_by_partition])
                                                  for t in r.topic_results])
                            for r in res.results_by_transaction]


def end(c, txn_id, pid, epoch, commit, version=4):
    return c.call(EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                                committed=commit), version).error_code


def describe(c, txn_id):
    return c.call(DescribeTransactionsRequest(transactional_ids=[txn_id]), 0).transaction_states[0]


def txn_batch(pid, epoch, seq, values, transactional=True):
    return rec.build_batch([(f"k{i}".encode(), v) for i, v in enumerate(values)], producer_id=pid,
                           producer_epoch=epoch, base_sequence=seq, transactional=transactional)


def fetch_part(c, topic, offset, isolation):
    req = fetch_req(topic, offset)
    req.isolation_level = isolation
    return c.call(req, 12).responses[0].partitions[0]


def list_latest(c, topic, isolation):
    req = ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                                         timestamp=-1)])])
    return c.call(req, 9).topics[0].partitions[0].offset


def offset_fetch(c, group, topic, require_stable):
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    req = OffsetFetchRequest(groups=[G(group_id=group, member_id=None, member_epoch=-1, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])],
        require_stable=require_stable)
    p = c.call(req, 9).groups[0].topics[0].partitions[0]
    return p.committed_offset, p.metadata, p.error_code


def txn_offset_commit(c, txn_id, group, pid, epoch, topic, offset, version=4):
    T = TxnOffsetCommitRequest
    req = T(transactional_id=txn_id, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1,
            member_id="", group_instance_id=None, topics=[T.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                  committed_leader_epoch=-1, committed_metadata="txn")])])
    return c.call(req, version).topics[0].partitions[0].error_code


def layout(data) -> list:
    """(first offset, last offset, kind) per stored batch, as partition_after_all lists them."""
    out = []
    for _pos, h in rec.iter_batch_headers(data):
        if h.is_control:
            batch = bytes(data[_pos:_pos + h.size])
            r = next(rec.iter_records(batch))
            kind = "control:" + ("COMMIT" if rec.control_record_type(r) == rec.COMMIT else "ABORT")
            assert (h.attributes, h.base_sequence, r.key, r.value) == (
                48, -1, struct.pack(">hh", 0, rec.control_record_type(r)), b"\0" * 6)
        else:
            kind = "transactional data" if h.is_transactional else "plain data"
        out.append((h.base_offset, h.last_offset, kind))
    return out


def test_txn_flow_as_observed(broker, c, topic_name):
    """txn-flow.json, step by step (the step numbers are the file's)."""
    topic, txn_id, group = topic_name, f"{topic_name}-txn", f"{topic_name}-group"
    create_topic(broker.bootstrap, topic, 1)
    find_coordinator(c, txn_id)                                           # step 1
    r = init(c, txn_id)                                                   # step 2
    pid = r.producer_id
    assert (r.error_code, r.producer_epoch) == (0, 0)
    d = describe(c, txn_id)                                               # step 3
    assert (d.error_code, d.transaction_state, d.transaction_timeout_ms, d.transaction_start_time_ms,
            d.producer_id, d.producer_epoch, d.topics) == (0, "Empty", 60000, -1, pid, 0, [])
    assert add_v3(c, txn_id, pid, 0, (topic, 0)) == [(topic, [(0, 0)])]  # step 4
    d = describe(c, txn_id)                                               # step 5
    assert d.transaction_state == "Ongoing" and abs(d.transaction_start_time_ms - time.time() * 1000) < 10_000
    assert [(t.topic, t.partitions) for t in d.topics] == [(topic, [0])]
    started = d.transaction_start_time_ms
    p = produce(c, topic, txn_batch(pid, 0, 0, [b"commit-a-0", b"commit-a-1", b"commit-a-2"]),
                transactional_id=txn_id)                                  # step 6
    assert (p.error_code, p.base_offset) == (0, 0)
    p = produce(c, topic, txn_batch(pid, 0, 3, [b"commit-b-0", b"commit-b-1"]), transactional_id=txn_id)
    assert (p.error_code, p.base_offset) == (0, 3)                        # step 7
    f = fetch_part(c, topic, 0, 0)                                        # step 8
    assert (f.high_watermark, f.last_stable_offset, f.aborted_transactions) == (5, 0, None)
    f = fetch_part(c, topic, 0, 1)                                        # step 9
    assert (f.high_watermark, f.last_stable_offset, f.aborted_transactions, bytes(f.records)) == (5, 0, [], b"")
    assert (list_latest(c, topic, 0), list_latest(c, topic, 1)) == (5, 0)  # steps 10, 11
    dp = c.call(DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
        name=topic, partition_indexes=[0])]), 0).topics[0].partitions[0]  # step 12
    ap = dp.active_producers[0]
    assert (dp.error_code, dp.error_message, len(dp.active_producers)) == (0, None, 1)
    assert (ap.producer_id, ap.producer_epoch, ap.last_sequence, ap.coordinator_epoch,
            ap.current_txn_start_offset) == (pid, 0, 4, -1, 0)
    lt = c.call(ListTransactionsRequest(state_filters=[], producer_id_filters=[], duration_filter=-1), 1)
    assert (txn_id, pid, "Ongoing") in [(t.transactional_id, t.producer_id, t.transaction_state)
                                        for t in lt.transaction_states]  # step 13
    assert end(c, txn_id, pid, 0, True) == 0                              # step 14
    d = describe(c, txn_id)                                               # step 15
    assert (d.transaction_state, d.transaction_start_time_ms, d.topics) == ("CompleteCommit", started, [])
    f = fetch_part(c, topic, 0, 0)                                        # step 16
    assert (f.high_watermark, f.last_stable_offset, f.aborted_transactions) == (6, 6, None)
    f = fetch_part(c, topic, 0, 1)                                        # step 17
    assert (f.high_watermark, f.last_stable_offset, f.aborted_transactions) == (6, 6, [])
    assert (list_latest(c, topic, 0), list_latest(c, topic, 1)) == (6, 6)  # steps 18, 19

    assert add_v3(c, txn_id, pid, 0, (topic, 0)) == [(topic, [(0, 0)])]  # step 20
    p = produce(c, topic, txn_batch(pid, 0, 5, [b"abort-0", b"abort-1"]), transactional_id=txn_id)
    assert (p.error_code, p.base_offset) == (0, 6)                        # step 21
    assert end(c, txn_id, pid, 0, False) == 0                             # step 22
    p = produce(c, topic, rec.build_batch([(b"plain", b"non-transactional-after-abort")]))
    assert (p.error_code, p.base_offset) == (0, 9)                        # step 23
    f = fetch_part(c, topic, 0, 1)                                        # step 24
    assert (f.high_watermark, f.last_stable_offset) == (10, 10)
    assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions] == [(pid, 6)]
    assert (6, 7, "transactional data") in layout(f.records), "the aborted batch is still served"
    assert fetch_part(c, topic, 0, 0).aborted_transactions is None        # step 25
    f = fetch_part(c, topic, 6, 1)                                        # step 26
    assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions] == [(pid, 6)]
    assert fetch_part(c, topic, 9, 1).aborted_transactions == []          # step 27

    assert add_v3(c, txn_id, pid, 0, (topic, 0)) == [(topic, [(0, 0)])]  # step 28
    p = produce(c, topic, txn_batch(pid, 0, 7, [b"with-offsets-0"]), transactional_id=txn_id)
    assert (p.error_code, p.base_offset) == (0, 10)                       # step 29
    assert c.call(AddOffsetsToTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=0,
                                         group_id=group), 4).error_code == 0   # step 30
    find_coordinator(c, group, key_type=0)                                # step 31
    # (the coordinator loads the group's partition once its log is made: 14 until then, as Kafka)
    wait_loaded(c, group)
    assert txn_offset_commit(c, txn_id, group, pid, 0, topic, 42) == 0    # step 32
    assert offset_fetch(c, group, topic, True) == (-1, "", 88)            # step 33
    assert offset_fetch(c, group, topic, False) == (-1, "", 0)            # step 34
    assert end(c, txn_id, pid, 0, True) == 0                              # step 35
    assert offset_fetch(c, group, topic, True) == (42, "txn", 0)          # step 36
    f = fetch_part(c, topic, 0, 0)                                        # step 37
    assert (f.high_watermark, f.last_stable_offset, f.aborted_transactions) == (12, 12, None)
    assert layout(f.records) == [(0, 2, "transactional data"), (3, 4, "transactional data"),
                                 (5, 5, "control:COMMIT"), (6, 7, "transactional data"),
                                 (8, 8, "control:ABORT"), (9, 9, "plain data"),
                                 (10, 10, "transactional data"), (11, 11, "control:COMMIT")]
    f = fetch_part(c, topic, 0, 1)                                        # step 38
    assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions] == [(pid, 6)]
    d = describe(c, txn_id)                                               # step 39
    assert (d.transaction_state, d.producer_epoch, d.topics) == ("CompleteCommit", 0, [])
    # segment-layout.md section 5: one 34-byte .txnindex entry (version, pid, first 6, last 8, LSO 9)
    with open(os.path.join(broker.data_dir, f"{topic}-0", "00000000000000000000.txnindex"), "rb") as fh:
        assert fh.read() == struct.pack(">hqqqq", 0, pid, 6, 8, 9)


def test_transaction_error_cases(broker, c, topic_name):
    topic, txn_id = topic_name, f"{topic_name}-txn"
    create_topic(broker.bootstrap, topic, 1)
    find_coordinator(c, txn_id)
    # "InitProducerId with transactional id and TransactionTimeoutMs 900001" / "with TransactionTimeoutMs 0"
    for timeout in (900001, 0):
        r = init(c, txn_id, timeout_ms=timeout)
        assert (r.error_code, r.producer_id, r.producer_epoch) == (50, -1, -1)
    r = init(c, txn_id, pid=-1, epoch=3)
    assert r.error_code == 42, "an epoch without an id is an invalid request"
    pid = init(c, txn_id).producer_id                                # "InitProducerId valid (timeout 60000)"
    r = init(c, txn_id)                                              # "InitProducerId again for the same ..."
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, 1)
    # "InitProducerId with ProducerId/ProducerEpoch of an older epoch (KIP-360 bump request)"
    r = init(c, txn_id, pid=pid, epoch=0)
    assert (r.error_code, r.producer_epoch) == (90, -1)
    assert init(c, txn_id, pid=pid, epoch=0, version=3).error_code == 47, "PRODUCER_FENCED before v4 is 47"
    epoch = 1
    # "EndTxn commit with no ongoing transaction", "EndTxn abort ...", "(v3)", "never initialised"
    assert end(c, txn_id, pid, epoch, True) == 48
    assert end(c, txn_id, pid, epoch, False) == 48
    assert end(c, txn_id, pid, epoch, True, version=3) == 48
    assert end(c, f"{txn_id}-never", pid, epoch, True) == 49
    # AddPartitionsToTxn v3 and v5: "with epoch+1", "with epoch-1", "with wrong producer id"
    assert add_v3(c, txn_id, pid, epoch + 1, (topic, 0)) == [(topic, [(0, 90)])]
    assert add_v3(c, txn_id, pid, epoch - 1, (topic, 0)) == [(topic, [(0, 90)])]
    assert add_v3(c, txn_id, pid + 1, epoch, (topic, 0)) == [(topic, [(0, 49)])]
    assert add_v3(c, txn_id, pid, epoch - 1, (topic, 0), version=1) == [(topic, [(0, 47)])]
    assert add_v5(c, txn_id, pid, epoch + 1, (topic, 0)) == (0, [(txn_id, [(topic, [(0, 90)])])])
    assert add_v5(c, txn_id, pid, epoch - 1, (topic, 0)) == (0, [(txn_id, [(topic, [(0, 90)])])])
    assert add_v5(c, txn_id, pid + 1, epoch, (topic, 0)) == (0, [(txn_id, [(topic, [(0, 49)])])])
    # "AddPartitionsToTxn with one known and one unknown topic"
    assert add_v3(c, txn_id, pid, epoch, (topic, 0), ("obs-no-such-topic", 0)) == [
        (topic, [(0, 55)]), ("obs-no-such-topic", [(0, 3)])]
    assert add_v3(c, txn_id, pid, epoch, ("__consumer_offsets", 0)) == [("__consumer_offsets", [(0, 29)])]
    # "AddPartitionsToTxn for a transactional id never initialised"
    assert add_v3(c, f"{txn_id}-never", pid, epoch, (topic, 0)) == [(topic, [(0, 49)])]
    assert describe(c, txn_id).transaction_state == "Empty", "nothing was added"
    # "transactional produce to a partition not added to the transaction"
    p = produce(c, topic, txn_batch(pid, epoch, 0, [b"x"]), transactional_id=txn_id)
    assert (p.error_code, p.error_message) == (48, "Partition was not added to the transaction")
    # "transactional batch sent with TransactionalId null in the request"
    assert produce(c, topic, txn_batch(pid, epoch, 0, [b"x"])).error_code == 53
    assert add_v3(c, txn_id, pid, epoch, (topic, 0)) == [(topic, [(0, 0)])]   # "setup: ... correct epoch"
    # verify-only (what another broker asks before appending)
    assert add_v5(c, txn_id, pid, epoch, (topic, 0), (topic, 1), verify_only=True)[1] == [
        (txn_id, [(topic, [(0, 55), (1, 3)])])]
    assert add_v5(c, txn_id, pid, epoch, (topic, 0), verify_only=True)[1] == [(txn_id, [(topic, [(0, 0)])])]
    # "transactional produce with an older producer epoch"
    assert produce(c, topic, txn_batch(pid, epoch - 1, 0, [b"x"]), transactional_id=txn_id).error_code == 47
    # "EndTxn with an older producer epoch (transaction ongoing)" / "with a wrong producer id"
    assert end(c, txn_id, pid, epoch - 1, True) == 90
    assert end(c, txn_id, pid, epoch - 1, True, version=1) == 47
    assert end(c, txn_id, pid + 1, epoch, True) == 49
    # "TxnOffsetCommit without AddOffsetsToTxn for that group" (v4); older clients get INVALID_TXN_STATE
    find_coordinator(c, "g-" + topic, key_type=0)
    assert txn_offset_commit(c, txn_id, "g-" + topic, pid, epoch, topic, 5) == 120
    assert txn_offset_commit(c, txn_id, "g-" + topic, pid, epoch, topic, 5, version=3) == 48
    assert txn_offset_commit(c, txn_id, "g-" + topic, pid, epoch, "no-such-topic", 5) == 3
    assert offset_fetch(c, "g-" + topic, topic, True) == (-1, "", 0), "nothing was committed"
    # "EndTxn abort of the (empty-data) ongoing transaction"
    assert end(c, txn_id, pid, epoch, False) == 0
    # "EndTxn commit right after an abort": Kafka answered 51 while its markers were still being sent;
    # kproto writes them before it answers the abort, so the commit meets CompleteAbort
    assert end(c, txn_id, pid, epoch, True) == 48
    assert describe(c, txn_id).transaction_state == "CompleteAbort"
    assert describe(c, f"{txn_id}-never").error_code == 105       # TRANSACTIONAL_ID_NOT_FOUND
    dp = c.call(DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
        name="no-such-topic", partition_indexes=[0])]), 0).topics[0].partitions[0]
    assert dp.error_code == 3


def test_idempotent_sequence_and_epoch_errors(broker, c, topic_name):
    """error-cases.csv, the "idempotent produce" rows in order (BaseOffsets relative to the first write)."""
    topic = topic_name
    create_topic(broker.bootstrap, topic, 1)
    r = init(c, None)
    pid = r.producer_id
    assert (r.error_code, r.producer_epoch) == (0, 0)

    def send(seq, epoch=0, producer=None):
        batch = rec.build_batch([(b"k", b"v")], producer_id=pid if producer is None else producer,
                                producer_epoch=epoch, base_sequence=seq)
        p = produce(c, topic, batch)
        return p.error_code, p.base_offset

    assert send(0) == (0, 0)                       # "idempotent produce seq 0 (first)"
    assert send(0) == (0, 0)                       # "seq 0 again (duplicate of the last batch)"
    assert send(5)[0] == 45                        # "seq 5 when 1 is expected (gap)"
    assert send(1) == (0, 1)                       # "seq 1 (next expected)"
    assert send(3, epoch=1)[0] == 45               # "with epoch+1 and seq 3 (new epoch must start at seq 0)"
    assert send(0, epoch=1) == (0, 2)              # "with epoch+1 and seq 0"
    assert send(2, epoch=0)[0] == 47               # "with the old epoch after the bump"
    assert send(7, producer=pid + 500_000) == (0, 3)   # "with a never-allocated producer id, seq 7"
    assert send(0, producer=pid + 600_000) == (0, 4)   # "... seq 0"
    # a non-transactional batch from a producer whose transaction is open
    txn_id = f"{topic}-txn"
    find_coordinator(c, txn_id)
    tpid = init(c, txn_id).producer_id
    assert add_v3(c, txn_id, tpid, 0, (topic, 0)) == [(topic, [(0, 0)])]
    assert produce(c, topic, txn_batch(tpid, 0, 0, [b"a"]), transactional_id=txn_id).error_code == 0
    assert produce(c, topic, txn_batch(tpid, 0, 1, [b"b"], transactional=False)).error_code == 48
    assert end(c, txn_id, tpid, 0, True) == 0


def test_write_txn_markers_api(broker, c, topic_name):
    """WriteTxnMarkers (the inter-broker API) ends a producer's transaction in a partition."""
    topic, txn_id = topic_name, f"{topic_name}-txn"
    create_topic(broker.bootstrap, topic, 1)
    find_coordinator(c, txn_id)
    pid = init(c, txn_id).producer_id
    assert add_v3(c, txn_id, pid, 0, (topic, 0)) == [(topic, [(0, 0)])]
    assert produce(c, topic, txn_batch(pid, 0, 0, [b"x", b"y"]), transactional_id=txn_id).error_code == 0
    assert fetch_part(c, topic, 0, 1).last_stable_offset == 0
    W = WriteTxnMarkersRequest
    req = W(markers=[W.WritableTxnMarker(producer_id=pid, producer_epoch=0, transaction_result=False,
                                         coordinator_epoch=0, topics=[
        W.WritableTxnMarkerTopic(name=topic, partition_indexes=[0]),
        W.WritableTxnMarkerTopic(name="no-such-topic", partition_indexes=[0])])])
    res = c.call(req, 1).markers[0]
    assert res.producer_id == pid
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in res.topics] == [
        (topic, [(0, 0)]), ("no-such-topic", [(0, 3)])]
    f = fetch_part(c, topic, 0, 1)
    assert (f.last_stable_offset, f.high_watermark) == (3, 3)
    assert layout(f.records)[-1] == (2, 2, "control:ABORT")
    assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions] == [(pid, 0)]
    # an older epoch than the partition has seen is refused
    stale = W(markers=[W.WritableTxnMarker(producer_id=pid, producer_epoch=0, transaction_result=True,
                                           coordinator_epoch=0, topics=[
        W.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])])
    assert end(c, txn_id, pid, 0, False) == 0
    assert init(c, txn_id).producer_epoch == 1
    assert add_v3(c, txn_id, pid, 1, (topic, 0)) == [(topic, [(0, 0)])]
    assert produce(c, topic, txn_batch(pid, 1, 0, [b"z"]), transactional_id=txn_id).error_code == 0
    assert c.call(stale, 1).markers[0].topics[0].partitions[0].error_code == 47
    assert end(c, txn_id, pid, 1, True) == 0
    # v2 (Kafka 4.2+, KIP-1228) names the transaction version: a transactions v2 marker must carry a
    # newer epoch than the open transaction's records (the coordinator bumped it), or be the retry of
    # a marker already written (the same epoch once nothing is open)
    assert add_v3(c, txn_id, pid, 1, (topic, 0)) == [(topic, [(0, 0)])]
    assert produce(c, topic, txn_batch(pid, 1, 1, [b"w"]), transactional_id=txn_id).error_code == 0

    def marker_v2(epoch, tv):
        return W(markers=[W.WritableTxnMarker(producer_id=pid, producer_epoch=epoch, transaction_result=True,
                                              coordinator_epoch=0, transaction_version=tv, topics=[
            W.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])])
    assert c.call(marker_v2(1, 2), 2).markers[0].topics[0].partitions[0].error_code == 47
    assert fetch_part(c, topic, 0, 1).last_stable_offset < fetch_part(c, topic, 0, 0).high_watermark
    assert c.call(marker_v2(1, 0), 2).markers[0].topics[0].partitions[0].error_code == 0   # as v0-1 check it
    f = fetch_part(c, topic, 0, 1)
    assert f.last_stable_offset == f.high_watermark
    assert c.call(marker_v2(1, 2), 2).markers[0].topics[0].partitions[0].error_code == 0   # a retry
    assert c.call(marker_v2(2, 2), 2).markers[0].topics[0].partitions[0].error_code == 0


def test_transactions_survive_a_broker_kill(tmp_path, topic_name):
    """kill -9 with one transaction aborted and one open: after the restart
    the coordinator has the open transaction, the partition still holds its
    last stable offset at the open transaction, the aborted-transaction index
    is rebuilt from the log (its file was deleted) and a retried batch is
    still recognised."""
    from broker.launch.process import BrokerProcess
    proc = BrokerProcess(str(tmp_path / "data")).start()
    try:
        topic, txn_id = topic_name, f"{topic_name}-txn"
        create_topic(proc.bootstrap, topic, 1)
        with WireClient(proc.bootstrap) as c:
            find_coordinator(c, txn_id)
            pid = init(c, txn_id).producer_id
            assert add_v3(c, txn_id, pid, 0, (topic, 0)) == [(topic, [(0, 0)])]
            assert produce(c, topic, txn_batch(pid, 0, 0, [b"a0", b"a1"]), transactional_id=txn_id).base_offset == 0
            assert end(c, txn_id, pid, 0, False) == 0                         # ABORT marker at 2
            assert add_v3(c, txn_id, pid, 0, (topic, 0)) == [(topic, [(0, 0)])]
            open_batch = txn_batch(pid, 0, 2, [b"o0"])
            assert produce(c, topic, open_batch, transactional_id=txn_id).base_offset == 3
        index = os.path.join(proc.data_dir, f"{topic}-0", "00000000000000000000.txnindex")
        with open(index, "rb") as fh:
            stored = fh.read()
        assert stored == struct.pack(">hqqqq", 0, pid, 0, 2, 3)
        proc.kill()
        os.unlink(index)
        proc.start()
        with WireClient(proc.bootstrap) as c:
            for _ in range(100):
                d = describe(c, txn_id)
                if d.error_code != 14:
                    break
                time.sleep(0.05)
            assert (d.transaction_state, [(t.topic, t.partitions) for t in d.topics]) == ("Ongoing", [(topic, [0])])
            f = fetch_part(c, topic, 0, 1)
            assert (f.high_watermark, f.last_stable_offset) == (4, 3)
            assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions] == [(pid, 0)]
            retried = produce(c, topic, open_batch, transactional_id=txn_id)
            assert (retried.error_code, retried.base_offset) == (0, 3), "the duplicate gets its first offset"
            assert end(c, txn_id, pid, 0, True) == 0
            f = fetch_part(c, topic, 0, 1)
            assert (f.high_watermark, f.last_stable_offset) == (5, 5)
            assert layout(f.records)[-2:] == [(3, 3, "transactional data"), (4, 4, "control:COMMIT")]
        with open(index, "rb") as fh:
            assert fh.read() == stored
    finally:
        proc.stop()


def test_aborted_index_across_segment_rolls_is_rebuilt_from_snapshots(tmp_path, topic_name):
    """An aborted transaction that spans segments: its entry goes to the index
    of the segment holding the ABORT marker; after a kill -9 with the indexes
    gone, the producer snapshot taken at the last roll (which remembers the
    open transaction's first offset) and the replay after it rebuild it."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from broker.launch.process import BrokerProcess
    proc = BrokerProcess(str(tmp_path / "data")).start()
    try:
        topic, txn_id = topic_name, f"{topic_name}-txn"
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        for fut in admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "300"})]).values():
            fut.result(15)
        with WireClient(proc.bootstrap) as c:
            find_coordinator(c, txn_id)
            pid = init(c, txn_id).producer_id
            assert add_v3(c, txn_id, pid, 0, (topic, 0)) == [(topic, [(0, 0)])]
            for seq in range(6):
                p = produce(c, topic, txn_batch(pid, 0, seq, [b"x" * 100]), transactional_id=txn_id)
                assert (p.error_code, p.base_offset) == (0, seq)
            assert end(c, txn_id, pid, 0, False) == 0                      # ABORT at 6
            f = fetch_part(c, topic, 4, 1)
            assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions] == [(pid, 0)]
        pdir = os.path.join(proc.data_dir, f"{topic}-0")
        segments = sorted(n for n in os.listdir(pdir) if n.endswith(".log"))
        indexes = [n for n in os.listdir(pdir) if n.endswith(".txnindex")]
        assert len(segments) > 2 and len(indexes) == 1 and indexes[0] != "00000000000000000000.txnindex"
        proc.kill()
        os.unlink(os.path.join(pdir, indexes[0]))
        proc.start()
        with WireClient(proc.bootstrap) as c:
            for start in (0, 3, 6):
                f = fetch_part(c, topic, start, 1)
                assert [(a.producer_id, a.first_offset) for a in f.aborted_transactions] == [(pid, 0)], start
            assert fetch_part(c, topic, 7, 1).aborted_transactions == []
        assert sorted(n for n in os.listdir(pdir) if n.endswith(".txnindex")) == indexes
    finally:
        proc.stop()


def test_every_advertised_version_answers(broker, c, topic_name):
    """Each version of the transaction APIs, as Kafka 3.9 advertises them, in a working flow."""
    from kproto.messages.api_versions_request import ApiVersionsRequest
    topic, txn_id, group = topic_name, f"{topic_name}-txn", f"{topic_name}-g"
    create_topic(broker.bootstrap, topic, 1)
    advertised = {k.api_key: (k.min_version, k.max_version) for k in c.call(ApiVersionsRequest(), 3).api_keys}
    assert {k: advertised.get(k) for k in (22, 24, 25, 26, 27, 28, 61, 65, 66)} == {
        22: (0, 5), 24: (0, 5), 25: (0, 4), 26: (0, 5), 27: (0, 2), 28: (0, 5), 61: (0, 0), 65: (0, 0), 66: (0, 2)}
    find_coordinator(c, txn_id)
    find_coordinator(c, group, key_type=0)
    epochs = []
    for v in range(6):
        r = init(c, txn_id, version=v)
        assert r.error_code == 0, v
        epochs.append(r.producer_epoch)
    pid, epoch = r.producer_id, epochs[-1]
    assert epochs == list(range(6))
    for v in range(5):
        if v <= 3:
            assert add_v3(c, txn_id, pid, epoch, (topic, 0), version=v) == [(topic, [(0, 0)])], v
        else:
            assert add_v5(c, txn_id, pid, epoch, (topic, 0)) == (0, [(txn_id, [(topic, [(0, 0)])])])
        assert produce(c, topic, txn_batch(pid, epoch, v, [b"v"]), transactional_id=txn_id).error_code == 0
        assert c.call(AddOffsetsToTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                                             group_id=group), v).error_code == 0, v
        assert txn_offset_commit(c, txn_id, group, pid, epoch, topic, 100 + v, version=v) == 0, v
        assert end(c, txn_id, pid, epoch, True, version=v) == 0, v
        assert offset_fetch(c, group, topic, True)[0] == 100 + v
    # EndTxn v5 (transactions v2, a Kafka 4.x version): the answer names the bumped epoch
    assert add_v5(c, txn_id, pid, epoch, (topic, 0)) == (0, [(txn_id, [(topic, [(0, 0)])])])
    assert produce(c, topic, txn_batch(pid, epoch, 5, [b"v"]), transactional_id=txn_id).error_code == 0
    r = c.call(EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=True), 5)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, epoch + 1)
    epoch += 1
    for v in (0, 1):
        res = c.call(ListTransactionsRequest(state_filters=["CompleteCommit"], producer_id_filters=[pid],
                                             duration_filter=-1), v)
        assert [(t.transactional_id, t.transaction_state) for t in res.transaction_states] == [
            (txn_id, "CompleteCommit")]
    W = WriteTxnMarkersRequest
    for v in (0, 1, 2):
        # (v2 as transactions v2: the commit's markers carried this epoch, so this is a retry)
        req = W(markers=[W.WritableTxnMarker(producer_id=pid, producer_epoch=epoch, transaction_result=True,
                                             coordinator_epoch=0, transaction_version=2 if v >= 2 else 0,
                                             topics=[W.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])])
        assert c.call(req, v).markers[0].topics[0].partitions[0].error_code == 0

"""Fetch size limits, side by side with Kafka: the same records, then a grid
of raw Fetch requests (every version family, response and partition limits
from negative to ample, partition orders, fetch offsets inside and at batch
starts) and what each partition of each answer carried.

    python -m tools.fetch_limits --bootstrap 127.0.0.1:9092 --out answers.json

run against a fresh Kafka 3.9 wrote tests/fixtures/fetch_limits_kafka39.json;
tests/test_fetch_limits.py runs the grid against kproto and compares.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import uuid

from kproto import records as rec
from kproto.messages.add_partitions_to_txn_request import AddPartitionsToTxnRequest
from kproto.messages.end_txn_request import EndTxnRequest
from kproto.messages.fetch_request import FetchRequest
from kproto.messages.find_coordinator_request import FindCoordinatorRequest
from kproto.messages.init_producer_id_request import InitProducerIdRequest
from kproto.messages.produce_request import ProduceRequest

TOPIC = "fetch-limits"
TIMESTAMP = 1_760_000_000_000
# record value sizes of each batch, per partition (partition 2 stays empty)
LAYOUT = {
    0: [[20, 20, 20], [2000], [100] * 5, [700]],
    1: [[3000], [50, 50], [1500]],
    2: [],
    3: [],  # TXN_STEPS
}
# partition 3: plain and transactional batches (committed, aborted, one left
# open), for read_committed limits, control batches and v0-3 conversion
TXN_PARTITION = 3
TXN_STEPS = [("plain", [300]), ("commit", [200, 200]), ("abort", [400]), ("plain", [100]), ("open", [250])]
TXN_ORDERS = [[3], [3, 0]]
TXN_OFFSETS = [0, 2, 5]  # the start, the committed batch's second record, the plain batch after the abort
VERSIONS = [0, 2, 3, 4, 11, 13, 17]
MAX_BYTES = [-1, 0, 1, 150, 1000, 2100, 3200, 1 << 20]
PARTITION_MAX_BYTES = [-1, 0, 150, 1000, 2100, 3200, 1 << 20]
ORDERS = [[0, 1, 2], [2, 1, 0], [1, 0], [0]]
# fetch offsets: batch starts, inside a batch, the big batches
OFFSETS = [{0: 0, 1: 0, 2: 0}, {0: 5, 1: 2, 2: 0}, {0: 3, 1: 3, 2: 0}]


def _client(bootstrap: str):
    from tests.wire_client import WireClient
    return WireClient(bootstrap, timeout=30)


def prepare(bootstrap: str, topic: str = TOPIC) -> uuid.UUID:
    """Create the topic, write the layout's batches; the topic id."""
    from tests.wire_client import create_led_topic, produce_once_led
    with _client(bootstrap) as c:
        t = create_led_topic(c, topic, len(LAYOUT), hint=" (the grid needs a new topic: --topic)")
        for partition, batches in LAYOUT.items():
            for n, sizes in enumerate(batches):
                records = [(f"k{partition}-{n}-{i}".encode(), bytes([65 + n]) * size, [], TIMESTAMP + i)
                           for i, size in enumerate(sizes)]
                req = ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[ProduceRequest.TopicProduceData(
                    name=topic, partition_data=[ProduceRequest.PartitionProduceData(
                        index=partition, records=rec.build_batch(records))])])
                produce_once_led(c, req, f"Produce to {topic}-{partition}")
        _write_transactions(c, topic)
        return t.topic_id


def _retry(call, what: str, retriable=(14, 15, 51)):
    """call() until its error code is not a coordinator / concurrent-
    transactions error (Kafka loads its coordinator and writes markers
    asynchronously)."""
    for _ in range(150):
        code = call()
        if code not in retriable:
            break
        time.sleep(0.2)
    if code:
        raise SystemExit(f"{what}: error {code}")


def _settled(c, topic: str) -> None:
    """Wait until the transaction partition's markers are written (LSO =
    high watermark), so the next batch gets the same offset on any broker."""
    for _ in range(150):
        req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, isolation_level=1, topics=[
            FetchRequest.FetchTopic(topic=topic, partitions=[
                FetchRequest.FetchPartition(partition=TXN_PARTITION, partition_max_bytes=0)])])
        p = c.call(req, 11).responses[0].partitions[0]
        if p.last_stable_offset == p.high_watermark:
            return
        time.sleep(0.1)
    raise SystemExit("transaction markers were not written")


def _write_transactions(c, topic: str) -> None:
    txn_id = f"{topic}-txn"
    pid = epoch = None

    def init():
        nonlocal pid, epoch
        r = c.call(InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=900_000,
                                         producer_id=-1, producer_epoch=-1), 4)
        pid, epoch = r.producer_id, r.producer_epoch
        return r.error_code
    find = FindCoordinatorRequest(key=txn_id, key_type=1)
    _retry(lambda: c.call(find, 2).error_code, "FindCoordinator")
    _retry(init, "InitProducerId", (14, 15, 16, 51))
    sequence = 0
    for n, (kind, sizes) in enumerate(TXN_STEPS):
        records = [(f"k3-{n}-{i}".encode(), bytes([65 + n]) * size, [], TIMESTAMP + i)
                   for i, size in enumerate(sizes)]
        if kind == "plain":
            _settled(c, topic)
            batch, txn = rec.build_batch(records), None
        else:
            add = AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                    AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[TXN_PARTITION])])
            _retry(lambda: c.call(add, 3).results_by_topic_v3_and_below[0].results_by_partition[0]
                   .partition_error_code, "AddPartitionsToTxn")
            batch = rec.build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=sequence,
                                    transactional=True)
            sequence += len(records)
            txn = txn_id
        req = ProduceRequest(transactional_id=txn, acks=-1, timeout_ms=30000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.PartitionProduceData(index=TXN_PARTITION, records=batch)])])
        err = c.call(req, 9).responses[0].partition_responses[0].error_code
        if err:
            raise SystemExit(f"Produce to {topic}-{TXN_PARTITION}: error {err}")
        if kind in ("commit", "abort"):
            end = EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                                committed=kind == "commit")
            _retry(lambda: c.call(end, 3).error_code, "EndTxn")


def cases():
    """(key, version, max_bytes, partition_max_bytes, order, offsets, isolation)."""
    for v in VERSIONS:
        for mb in (MAX_BYTES if v >= 3 else [None]):
            for pmb in PARTITION_MAX_BYTES:
                for oi, order in enumerate(ORDERS):
                    for fi, offsets in enumerate(OFFSETS):
                        key = f"v{v} max={mb} pmax={pmb} order={oi} offsets={fi}"
                        yield key, v, mb, pmb, order, offsets, 0
    for v in VERSIONS:
        for isolation in ((0, 1) if v >= 4 else (0,)):
            for mb in (MAX_BYTES if v >= 3 else [None]):
                for pmb in PARTITION_MAX_BYTES:
                    for oi, order in enumerate(TXN_ORDERS):
                        for offset in TXN_OFFSETS:
                            key = f"txn v{v} isolation={isolation} max={mb} pmax={pmb} order={oi} offset={offset}"
                            yield key, v, mb, pmb, order, {0: 0, TXN_PARTITION: offset}, isolation


def _normalized(data: bytes) -> bytes:
    """v2 batches with what differs between brokers by design blanked: the
    CRC, the producer id (brokers number producers their own way) and a
    control batch's timestamps (the time of the EndTxn)."""
    out, pos = bytearray(data), 0
    while pos + 12 <= len(out) and out[pos + 16:pos + 17] == b"\x02":
        end = pos + 12 + int.from_bytes(out[pos + 8:pos + 12], "big")
        control = len(out) > pos + 22 and out[pos + 22] & 0x20
        for a, b in ((17, 21), (43, 51)) + (((27, 43),) if control else ()):
            out[min(pos + a, len(out)):min(pos + b, len(out))] = bytes(max(0, min(pos + b, len(out)) - min(pos + a, len(out))))
        pos = end
    return bytes(out)


def _summary(p, v: int = 0, txn: bool = False) -> list:
    data = bytes(p.records.read() if hasattr(p.records, "read") else (p.records or b""))
    if not txn:
        return [p.partition_index, p.error_code, p.high_watermark, p.log_start_offset,
                len(data), hashlib.sha1(data).hexdigest()[:12]]
    aborted = (None if p.aborted_transactions is None else
               sorted(a.first_offset for a in p.aborted_transactions))
    return [p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset, aborted,
            len(data), hashlib.sha1(_normalized(data) if v >= 4 else data).hexdigest()[:12]]


def run(bootstrap: str, topic_id: uuid.UUID, topic: str = TOPIC) -> dict:
    """Every case's answer: per partition [index, error, high watermark,
    log start, record bytes, sha1 of the record bytes]."""
    out = {}
    with _client(bootstrap) as c:
        for key, v, mb, pmb, order, offsets, isolation in cases():
            req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0,
                               max_bytes=mb if mb is not None else 0x7FFFFFFF,
                               isolation_level=isolation, session_id=0, session_epoch=-1, topics=[
                                   FetchRequest.FetchTopic(topic=topic, topic_id=topic_id, partitions=[
                                       FetchRequest.FetchPartition(partition=i, fetch_offset=offsets[i],
                                                                   partition_max_bytes=pmb)
                                       for i in order])])
            resp = c.call(req, v)
            txn = key.startswith("txn")
            out[key] = [_summary(p, v, txn) for t in resp.responses for p in t.partitions]
    return out


def layout() -> dict:
    """What the fixture was recorded with (a test refuses a stale one)."""
    return {**{str(k): v for k, v in LAYOUT.items()}, "txn": [[k, sz] for k, sz in TXN_STEPS]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.fetch_limits", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True, help="host:port of a fresh broker (Kafka or kproto)")
    ap.add_argument("--out", help="write the answers here as JSON (else compare counts only)")
    ap.add_argument("--topic", default=TOPIC, help=f"a topic name not used yet (default {TOPIC})")
    args = ap.parse_args(argv)
    topic_id = prepare(args.bootstrap, args.topic)
    started = time.monotonic()
    answers = run(args.bootstrap, topic_id, args.topic)
    print(f"{len(answers)} fetches in {time.monotonic() - started:.1f} s", file=sys.stderr)
    if args.out:
        with open(args.out, "w") as f:  # one line per fetch: readable diffs
            f.write('{"layout":' + json.dumps(layout(), separators=(",", ":")) + ',"answers":{\n')
            f.write(",\n".join(json.dumps(k) + ":" + json.dumps(v, separators=(",", ":"))
                                for k, v in sorted(answers.items())))
            f.write("\n}}\n")


if __name__ == "__main__":
    main()

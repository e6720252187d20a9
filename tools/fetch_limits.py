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
from kproto.messages.create_topics_request import CreateTopicsRequest
from kproto.messages.fetch_request import FetchRequest
from kproto.messages.metadata_request import MetadataRequest
from kproto.messages.produce_request import ProduceRequest

TOPIC = "fetch-limits"
TIMESTAMP = 1_760_000_000_000
# record value sizes of each batch, per partition (partition 2 stays empty)
LAYOUT = {
    0: [[20, 20, 20], [2000], [100] * 5, [700]],
    1: [[3000], [50, 50], [1500]],
    2: [],
}
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
    with _client(bootstrap) as c:
        req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=topic, num_partitions=len(LAYOUT), replication_factor=1)], timeout_ms=30000)
        code = c.call(req, 5).topics[0].error_code
        if code:
            raise SystemExit(f"CreateTopics {topic}: error {code} (the grid needs a new topic: --topic)")
        deadline = time.monotonic() + 30
        while True:
            md = c.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
            t = md.topics[0]
            if t.error_code == 0 and len(t.partitions) == len(LAYOUT) and all(p.leader_id >= 0 for p in t.partitions):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"topic {topic} has no leaders")
            time.sleep(0.1)
        for partition, batches in LAYOUT.items():
            for n, sizes in enumerate(batches):
                records = [(f"k{partition}-{n}-{i}".encode(), bytes([65 + n]) * size, [], TIMESTAMP + i)
                           for i, size in enumerate(sizes)]
                req = ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[ProduceRequest.TopicProduceData(
                    name=topic, partition_data=[ProduceRequest.PartitionProduceData(
                        index=partition, records=rec.build_batch(records))])])
                for _ in range(100):  # (a new Kafka topic's leader needs a moment)
                    err = c.call(req, 9).responses[0].partition_responses[0].error_code
                    if err not in (3, 5, 6):
                        break
                    time.sleep(0.2)
                if err:
                    raise SystemExit(f"Produce to {topic}-{partition}: error {err}")
        return t.topic_id


def cases():
    """(key, version, max_bytes, partition_max_bytes, order, offsets)."""
    for v in VERSIONS:
        for mb in (MAX_BYTES if v >= 3 else [None]):
            for pmb in PARTITION_MAX_BYTES:
                for oi, order in enumerate(ORDERS):
                    for fi, offsets in enumerate(OFFSETS):
                        key = f"v{v} max={mb} pmax={pmb} order={oi} offsets={fi}"
                        yield key, v, mb, pmb, order, offsets


def _summary(p) -> list:
    data = bytes(p.records.read() if hasattr(p.records, "read") else (p.records or b""))
    return [p.partition_index, p.error_code, p.high_watermark, p.log_start_offset,
            len(data), hashlib.sha1(data).hexdigest()[:12]]


def run(bootstrap: str, topic_id: uuid.UUID, topic: str = TOPIC) -> dict:
    """Every case's answer: per partition [index, error, high watermark,
    log start, record bytes, sha1 of the record bytes]."""
    out = {}
    with _client(bootstrap) as c:
        for key, v, mb, pmb, order, offsets in cases():
            req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0,
                               max_bytes=mb if mb is not None else 0x7FFFFFFF,
                               isolation_level=0, session_id=0, session_epoch=-1, topics=[
                                   FetchRequest.FetchTopic(topic=topic, topic_id=topic_id, partitions=[
                                       FetchRequest.FetchPartition(partition=i, fetch_offset=offsets[i],
                                                                   partition_max_bytes=pmb)
                                       for i in order])])
            resp = c.call(req, v)
            out[key] = [_summary(p) for t in resp.responses for p in t.partitions]
    return out


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
        with open(args.out, "w") as f:
            json.dump({"layout": {str(k): v for k, v in LAYOUT.items()}, "answers": answers}, f, indent=0,
                      sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()

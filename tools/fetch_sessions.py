"""Incremental fetch sessions (KIP-227), side by side with Kafka: scripted
sequences of raw Fetch requests (full, incremental, stale and unknown
sessions, partitions added, forgotten, unknown topics, byte limits with the
session's round-robin order, a session used across versions, closing) with
produces and record deletions between them, and what each answer carried:
the top-level error, which session (by label, 0 = none), and which
partitions in which order with their error, high watermark, log start and
record byte count.

    python -m tools.fetch_sessions --bootstrap 127.0.0.1:9092 --out answers.json
    python -m tools.fetch_sessions --bootstrap 127.0.0.1:9093 --eviction --out evict.json

The first runs the "names v12" and "ids v17" sequences; --eviction runs the
cache eviction sequence, which needs a fresh broker started with
max.incremental.fetch.session.cache.slots=8 (one session per shard) that no
other client fetched from. Run against fresh Kafka 3.9 brokers these wrote
tests/fixtures/fetch_sessions_kafka39.json; tests/test_fetch_sessions_kafka.py
runs them against kproto and compares.
"""
from __future__ import annotations

import argparse
import json
import sys
import uuid

from kproto import records as rec
from kproto.messages.fetch_request import FetchRequest
from kproto.messages.produce_request import ProduceRequest

TIMESTAMP = 1_760_000_000_000
TOPICS = {"A": 3, "B": 2}
HUGE_ID = 0x7FFFFFFF   # beyond Kafka's 8 shards of ids

# One step: ("produce", topic, partition, record count) | ("delete", topic, partition, offset)
# | ("fetch", {session, epoch, parts, forget, new, max_bytes, version, replica, record}).
#  session: None (id 0), a label of a session made earlier, or "bogus"/"huge"/"minus" ids;
#  epoch: an int, or "next" (the label's next epoch), "stale" (the one before);
#  parts: [(topic, partition, offset or "pos")] ("pos": the next offset after what was read);
#  new: the label for the session id the answer brings; version: None = the sequence's.
SEQUENCE = [
    ("produce", "A", 0, 3), ("produce", "A", 1, 2), ("produce", "B", 0, 1),
    ("fetch", dict(epoch=0, new="S1", parts=[("A", 0, 0), ("A", 1, 0), ("A", 2, 0), ("B", 0, 0)])),
    # positions move: updated partitions without news are left out
    ("fetch", dict(session="S1", epoch="next", parts=[("A", 0, "pos"), ("A", 1, "pos"), ("B", 0, "pos")])),
    ("produce", "A", 2, 2),
    ("fetch", dict(session="S1", epoch="next")),                      # new data
    ("fetch", dict(session="S1", epoch="next", parts=[("A", 2, "pos")])),
    ("fetch", dict(session="S1", epoch="stale")),                     # INVALID_FETCH_SESSION_EPOCH
    ("fetch", dict(session="S1", epoch="next")),                      # the session is still there
    ("fetch", dict(session="S1", epoch="next", parts=[("B", 1, 0)])),  # added: always answered once
    ("fetch", dict(session="S1", epoch="next", forget=[("A", 0), ("A", 1)])),
    ("produce", "A", 0, 1),
    ("fetch", dict(session="S1", epoch="next")),                      # A-0 forgotten: not read
    ("fetch", dict(session="S1", epoch="next", parts=[("A", 0, "pos")])),
    ("fetch", dict(session="S1", epoch="next", parts=[("?", 0, 0)])),  # an unknown topic joins
    ("fetch", dict(session="S1", epoch="next")),                      # its error, every time
    ("fetch", dict(session="S1", epoch="next", parts=[("A", 0, "pos"), ("?", 1, 0)])),
    ("fetch", dict(session="S1", epoch="next", forget=[("?", 0), ("?", 1)])),
    ("delete", "A", 2, 1),
    ("fetch", dict(session="S1", epoch="next")),                      # log start moved
    ("fetch", dict(session="S1", epoch="next", max_bytes=0)),         # nothing new
    ("fetch", dict(session="bogus", epoch=1)),                        # FETCH_SESSION_ID_NOT_FOUND
    ("fetch", dict(session="S1", epoch="next", version="other")),     # FETCH_SESSION_TOPIC_ID_ERROR
    ("fetch", dict(session="S1", epoch="next")),
    ("fetch", dict(session="S1", epoch=-1, parts=[("A", 0, 0)])),     # closes S1, sessionless
    ("fetch", dict(session="S1", epoch="next")),                      # gone
    ("fetch", dict(epoch=0, new="S2", parts=[])),                     # a session of no partitions
    ("fetch", dict(session="S2", epoch="next")),                      # empty: closed, sessionless
    ("fetch", dict(session="S2", epoch="next")),
    # byte limits: partitions that returned data go to the back of the session
    ("fetch", dict(epoch=0, new="S3", max_bytes=1, parts=[("A", 0, 0), ("A", 1, 0), ("A", 2, 1)])),
    ("fetch", dict(session="S3", epoch="next", max_bytes=1)),
    ("fetch", dict(session="S3", epoch="next", max_bytes=1)),
    ("fetch", dict(session="S3", epoch="next", max_bytes=1)),
    ("fetch", dict(session="S3", epoch="next", max_bytes=1, parts=[("A", 1, "pos")])),
    ("fetch", dict(session="S3", epoch=0, new="S4", parts=[("B", 0, 0)])),  # replaces S3
    ("fetch", dict(session="S3", epoch="next")),
    ("fetch", dict(session="S4", epoch="next")),
    ("fetch", dict(session="minus", epoch=1)),
    ("fetch", dict(session=None, epoch=3)),
    ("fetch", dict(session="huge", epoch=1)),                         # no shard: UNKNOWN_SERVER_ERROR
    ("fetch", dict(session="S4", epoch="next", version=7)),
]

# max.incremental.fetch.session.cache.slots=8: 8 shards of one session each,
# new sessions go to the shards in turn. Followers (replica id >= 0) evict
# consumers at once; consumers evict nobody younger than 120 s.
EVICTION = (
    [("fetch", dict(epoch=0, new=f"C{i}", parts=[("A", 0, 0)])) for i in range(8)]
    + [
        ("fetch", dict(epoch=0, new="X", parts=[("A", 0, 0)])),                # no room
        ("fetch", dict(session="C0", epoch="next")),
        ("fetch", dict(epoch=0, new="F1", parts=[("A", 0, 0)], replica=2)),    # evicts C1
        ("fetch", dict(session="C1", epoch="next")),
        ("fetch", dict(session="C2", epoch="next")),
        ("fetch", dict(epoch=0, new="Y", parts=[("A", 0, 0)])),                # C2 is young: no room
        ("fetch", dict(session="C3", epoch=-1, parts=[("A", 0, 0)])),          # closes C3
        ("fetch", dict(epoch=0, new="Z", parts=[("A", 0, 0)])),                # shard 3 again: room
        ("fetch", dict(epoch=0, new="F4", parts=[("A", 0, 0)], replica=2)),
        ("fetch", dict(epoch=0, new="F5", parts=[("A", 0, 0), ("A", 1, 0)], replica=2)),
        ("fetch", dict(epoch=0, new="F6", parts=[], replica=2)),
        ("fetch", dict(epoch=0, new="F7", parts=[("A", 0, 0)], replica=2)),
        ("fetch", dict(epoch=0, new="F8", parts=[("A", 0, 0)], replica=2)),   # shard 0: evicts C0
        ("fetch", dict(epoch=0, new="F9", parts=[("A", 0, 0)], replica=2)),   # shard 1: F1 is a follower
        ("fetch", dict(session="C0", epoch="next")),
        ("fetch", dict(session="F1", epoch="next", replica=2)),
        ("fetch", dict(session="C4", epoch="next")),
        ("fetch", dict(session="Z", epoch="next")),
    ]
)

SEQUENCES = {"names v12": (12, SEQUENCE), "ids v17": (17, SEQUENCE)}


def _client(bootstrap: str):
    from tests.wire_client import WireClient
    return WireClient(bootstrap, timeout=30)


def prepare(bootstrap: str, prefix: str) -> dict:
    """Create the topics (``prefix`` + A/B); their ids."""
    from tests.wire_client import create_led_topic
    ids = {}
    with _client(bootstrap) as c:
        for label, count in TOPICS.items():
            ids[label] = create_led_topic(c, prefix + label, count, hint=" (use a new --prefix)").topic_id
    return ids


class Runner:
    def __init__(self, c, prefix: str, ids: dict, version: int):
        self.c = c
        self.prefix = prefix
        self.ids = dict(ids)
        self.ids["?"] = uuid.UUID("00000000-0000-4000-8000-00000000beef")
        self.version = version
        self.sessions: dict[str, list] = {}   # label -> [id, next epoch]
        self.labels: dict[int, str] = {}
        self.positions: dict[tuple, int] = {}
        self.produced = 0

    def name(self, label: str) -> str:
        return self.prefix + (label if label != "?" else "nosuch")

    def produce(self, topic, partition, count) -> None:
        records = [(f"k{self.produced}-{i}".encode(), b"v" * (10 + i), [], TIMESTAMP + i) for i in range(count)]
        self.produced += 1
        req = ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[ProduceRequest.TopicProduceData(
            name=self.name(topic), partition_data=[ProduceRequest.PartitionProduceData(
                index=partition, records=rec.build_batch(records))])])
        from tests.wire_client import produce_once_led
        produce_once_led(self.c, req, f"Produce to {topic}-{partition}")

    def delete(self, topic, partition, offset) -> None:
        from tests.wire_client import delete_records
        code = delete_records(self.c, self.name(topic), offset, partition).error_code
        if code:
            raise SystemExit(f"DeleteRecords {topic}-{partition}: error {code}")

    def _session(self, ref):
        if ref is None:
            return 0
        return {"bogus": 12345, "huge": HUGE_ID, "minus": -7}.get(ref) or self.sessions[ref][0]

    def _epoch(self, ref, epoch):
        if isinstance(epoch, int):
            return epoch
        nxt = self.sessions[ref][1]
        return nxt if epoch == "next" else nxt - 1

    def fetch(self, spec: dict) -> list:
        v = spec.get("version") or self.version
        if v == "other":
            v = 12 if self.version >= 13 else 13
        ref = spec.get("session")
        sid, epoch = self._session(ref), self._epoch(ref, spec.get("epoch", 0))
        topics: dict[str, list] = {}
        for topic, partition, offset in spec.get("parts", []):
            off = self.positions.get((topic, partition), 0) if offset == "pos" else offset
            topics.setdefault(topic, []).append(FetchRequest.FetchPartition(
                partition=partition, fetch_offset=off, partition_max_bytes=1 << 20))
        forget: dict[str, list] = {}
        for topic, partition in spec.get("forget", []):
            forget.setdefault(topic, []).append(partition)
        replica = spec.get("replica", -1)
        req = FetchRequest(
            replica_id=replica, max_wait_ms=0, min_bytes=0, max_bytes=spec.get("max_bytes", 1 << 24),
            isolation_level=0, session_id=sid, session_epoch=epoch,
            topics=[FetchRequest.FetchTopic(topic=self.name(t), topic_id=self.ids[t], partitions=ps)
                    for t, ps in topics.items()],
            forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=self.name(t), topic_id=self.ids[t],
                                                               partitions=ps) for t, ps in forget.items()])
        if v >= 15:
            req.replica_state = FetchRequest.ReplicaState(replica_id=replica, replica_epoch=-1)
        resp = self.c.call(req, v)
        # the session bookkeeping of a client (Kafka's FetchSessionHandler)
        if ref in self.sessions and not resp.error_code and epoch > 0:
            self.sessions[ref][1] += 1
        label = 0
        if resp.session_id:
            label = self.labels.get(resp.session_id)
            if label is None:
                label = spec.get("new", "?new")
                self.labels[resp.session_id] = label
                self.sessions[label] = [resp.session_id, 1]
        by_id = {v_: k for k, v_ in self.ids.items()}
        by_name = {self.name(k): k for k in self.ids}
        parts = []
        for t in resp.responses:
            topic = by_id.get(t.topic_id) if v >= 13 else by_name.get(t.topic)
            for p in t.partitions:
                data = bytes(p.records.read() if hasattr(p.records, "read") else (p.records or b""))
                self._advance(topic, p.partition_index, data)
                parts.append([topic, p.partition_index, p.error_code, p.high_watermark, p.log_start_offset,
                              len(data)])
        if replica >= 0:
            # a follower of a single node: Kafka answers each partition NOT_LEADER_OR_FOLLOWER
            # (no such replica), kproto serves it; only the session outcome compares
            parts = None
        return [resp.error_code, label, parts]

    def _advance(self, topic, partition, data: bytes) -> None:
        pos = 0
        while pos + rec.HEADER_SIZE <= len(data):
            header = rec.BatchHeader(data, pos)
            if pos + header.size > len(data):
                break
            self.positions[(topic, partition)] = header.last_offset + 1
            pos += header.size

    def run(self, steps) -> list:
        out = []
        for step in steps:
            if step[0] == "produce":
                self.produce(*step[1:])
            elif step[0] == "delete":
                self.delete(*step[1:])
            else:
                out.append(self.fetch(step[1]))
        return out


def run(bootstrap: str, prefix: str, eviction: bool = False) -> dict:
    """Every sequence's answers: per fetch [error, session label, partitions]."""
    out = {}
    seqs = {"eviction": (12, EVICTION)} if eviction else SEQUENCES
    for n, (key, (version, steps)) in enumerate(seqs.items()):
        ids = prepare(bootstrap, f"{prefix}{n}-")
        with _client(bootstrap) as c:
            out[key] = Runner(c, f"{prefix}{n}-", ids, version).run(steps)
    return out


def script() -> list:
    """What the fixture was recorded with (a test refuses a stale one)."""
    return json.loads(json.dumps([SEQUENCE, EVICTION]))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.fetch_sessions", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True, help="host:port of a broker (Kafka or kproto)")
    ap.add_argument("--prefix", default="fs", help="topic name prefix not used yet on that broker")
    ap.add_argument("--eviction", action="store_true",
                    help="the eviction sequence (a fresh broker with max.incremental.fetch.session.cache.slots=8)")
    ap.add_argument("--out", help="write the answers here as JSON")
    args = ap.parse_args(argv)
    answers = run(args.bootstrap, args.prefix, args.eviction)
    if args.out:
        with open(args.out, "w") as f:  # one line per fetch: readable diffs
            json.dump(answers, f, indent=None, separators=(",", ":"))
    else:
        json.dump(answers, sys.stdout, indent=1)


if __name__ == "__main__":
    main()

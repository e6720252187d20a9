"""fetch sessions: a consumer of many mostly idle partitions, with and without KIP-227 sessions

One client fetches all partitions of a topic (default 200) from one broker,
as a consumer does, in two ways: sessionless (every fetch names every
partition, epoch -1, and every answer carries every partition) and with an
incremental fetch session (one full fetch, then fetches naming only the
partitions whose position moved; answers carry only partitions with news).
Two phases each: "idle" (nothing is produced: the cost of asking) and
"trickle" (one small batch to one partition before each fetch). Reported per
fetch (the trickle's produce requests not counted, except in CPU, where
they cost the same in both ways): the broker's CPU time (from /proc, so the
broker must run on this machine), request and answer bytes, and the
client's round-trip time.

kproto is started here; a running Kafka is measured beside it with
--kafka HOST:PORT (its process is found by its listening port).

  python -m tools.bench fetch_sessions --partitions 200 --fetches 400 --kafka 127.0.0.1:22092
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from kproto import api
from kproto import records as rec
from kproto.messages.fetch_request import FetchRequest
from kproto.messages.produce_request import ProduceRequest
from tools.bench.procstat import cpu_seconds

VERSION = 12   # topic names, as kafka-python and older Java clients; v13+ differ only by 16-byte ids


def pid_listening(port: int) -> int | None:
    """The process with a TCP socket listening on port (Linux /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(cols[9])
        except OSError:
            continue
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(pid)
        except OSError:
            continue
    return None


class Client:
    def __init__(self, bootstrap: str):
        from tests.wire_client import WireClient
        self.c = WireClient(bootstrap, timeout=30)
        self.sent = self.received = 0

    def call(self, req, version: int):
        frame = api.encode_request(req, version, 1, "bench-fetch-sessions")
        self.c.send_raw(frame)
        body = self.c.recv_frame()
        self.sent += len(frame)
        self.received += 4 + len(body)
        return api.decode_response(body, req.API_KEY, version)[1]


def prepare(c: Client, topic: str, partitions: int) -> None:
    from tests.wire_client import create_led_topic
    create_led_topic(c, topic, partitions, timeout=60)


def produce(c: Client, topic: str, partition: int, n: int) -> None:
    from tests.wire_client import produce_once_led
    batch = rec.build_batch([(b"k", b"x" * 100)] * n)
    req = ProduceRequest(acks=1, timeout_ms=30000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
    produce_once_led(c, req, "produce")


class Consumer:
    """Positions of every partition; fetch sessionless or through a session."""

    def __init__(self, c: Client, topic: str, partitions: int, session: bool):
        self.c, self.topic, self.session = c, topic, session
        self.positions = {p: 0 for p in range(partitions)}
        self.sent_positions: dict[int, int] = {}
        self.sid, self.epoch = 0, 0 if session else -1

    def fetch(self):
        if self.session and self.epoch > 0:
            named = [p for p, o in self.positions.items() if self.sent_positions.get(p) != o]
        else:
            named = list(self.positions)
        req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, isolation_level=0,
                           session_id=self.sid, session_epoch=self.epoch, topics=[FetchRequest.FetchTopic(
                               topic=self.topic, partitions=[FetchRequest.FetchPartition(
                                   partition=p, fetch_offset=self.positions[p], partition_max_bytes=1 << 20)
                                   for p in named])] if named else [])
        resp = self.c.call(req, VERSION)
        if resp.error_code:
            raise SystemExit(f"fetch: error {resp.error_code}")
        for p in named:
            self.sent_positions[p] = self.positions[p]
        if self.session:
            if self.epoch == 0:
                self.sid, self.epoch = resp.session_id, 1 if resp.session_id else 0
            else:
                self.epoch += 1
        for t in resp.responses:
            for part in t.partitions:
                data = bytes(part.records or b"")
                pos = 0
                while pos + rec.HEADER_SIZE <= len(data):
                    h = rec.BatchHeader(data, pos)
                    if pos + h.size > len(data):
                        break
                    self.positions[part.partition_index] = h.last_offset + 1
                    pos += h.size
        return resp


def measure(bootstrap: str, pid: int | None, topic: str, partitions: int, fetches: int, session: bool) -> dict:
    c = Client(bootstrap)
    consumer = Consumer(c, topic, partitions, session)
    out = {}
    for phase in ("idle", "trickle"):
        consumer.fetch()   # positions current (and the session made)
        consumer.fetch()
        rtt = 0.0
        request_bytes = answer_bytes = 0
        cpu0 = cpu_seconds(pid) if pid else None
        for i in range(fetches):
            if phase == "trickle":
                produce(c, topic, (i * 7) % partitions, 1)   # (the same in both modes)
            sent0, received0 = c.sent, c.received
            t0 = time.perf_counter()
            consumer.fetch()
            rtt += time.perf_counter() - t0
            request_bytes += c.sent - sent0
            answer_bytes += c.received - received0
        cpu = (cpu_seconds(pid) - cpu0) if pid else None
        out[phase] = {
            "broker_cpu_ms_per_fetch": round(cpu * 1000 / fetches, 3) if cpu is not None else None,
            "request_bytes": round(request_bytes / fetches),
            "answer_bytes": round(answer_bytes / fetches),
            "rtt_ms": round(rtt * 1000 / fetches, 3)}
    c.c.close()
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench fetch_sessions", description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--fetches", type=int, default=400)
    ap.add_argument("--kafka", help="HOST:PORT of a running Kafka to measure beside kproto")
    ap.add_argument("--kproto", help="HOST:PORT of a running kproto (default: start one)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    targets = {}
    proc = None
    if args.kproto:
        targets["kproto"] = args.kproto
    else:
        from broker.launch.process import BrokerProcess
        proc = BrokerProcess(tempfile.mkdtemp(prefix="bench-fs-"), new_session=True).start()
        targets["kproto"] = proc.bootstrap
    if args.kafka:
        targets["kafka"] = args.kafka
    results = {}
    try:
        for name, bootstrap in targets.items():
            pid = proc.proc.pid if (name == "kproto" and proc) else pid_listening(int(bootstrap.rsplit(":", 1)[1]))
            topic = f"bench-fs-{int(time.time())}"
            prepare(Client(bootstrap), topic, args.partitions)
            results[name] = {mode: measure(bootstrap, pid, topic, args.partitions, args.fetches, mode == "session")
                             for mode in ("sessionless", "session")}
    finally:
        if proc is not None:
            proc.stop()
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{args.partitions} partitions, {args.fetches} fetches per phase; per fetch:")
    print(f"{'target':<8} {'mode':<12} {'phase':<8} {'broker CPU ms':>13} {'request B':>9} {'answer B':>9} "
          f"{'rtt ms':>8}")
    for name, modes in results.items():
        for mode, phases in modes.items():
            for phase, r in phases.items():
                cpu = r["broker_cpu_ms_per_fetch"]
                print(f"{name:<8} {mode:<12} {phase:<8} {cpu if cpu is not None else '-':>13} "
                      f"{r['request_bytes']:>9} {r['answer_bytes']:>9} {r['rtt_ms']:>8}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

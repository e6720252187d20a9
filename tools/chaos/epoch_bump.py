"""Why an idempotent producer's values can be written twice: librdkafka's
epoch bump after timed-out messages (KIP-360), on kproto or real Kafka 3.9.

The leader of a partition keeps appending while both followers are paused
(SIGSTOP) for longer than the producer's message.timeout.ms, so acks=all
cannot be answered. librdkafka times the oldest messages out
(`_MSG_TIMED_OUT`, status possibly-persisted), drains the partition, bumps
its producer epoch and re-sends the messages still unacknowledged at
sequence 0 of the new epoch. The broker has no duplicate to find across
epochs (Kafka 3.9's ProducerStateManager: a new epoch must start at sequence
0, and then it is a new series), so a batch the leader had already written
is written again. Once the followers resume, both copies are committed: the
chaos `duplicate` checker reports them, some acknowledged once (at the
second copy), some never acknowledged. The same command with --kafka shows
real Kafka 3.9 doing the same, so such a duplicate is the client's, not the
broker's (docs/chaos.md, "duplicates after message timeouts").

    python3 -m tools.chaos.epoch_bump                 # kproto, ~40 s
    KAFKA_HOME=... python3 -m tools.chaos.epoch_bump --kafka

Exit status 0 when the run completed (duplicates or not); the last line
says how many values were written twice.
"""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
import tempfile
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .cluster import Cluster

TOPIC = "epoch-bump"
# followers stay in the ISR while paused: neither fenced nor dropped for lag
# during the pause, so the leader appends but cannot answer acks=all
PROPS = {"broker.session.timeout.ms": "30000", "replica.lag.time.max.ms": "30000"}


def run(workdir: str, kafka_home: str | None, pause_s: float, message_timeout_ms: int, log=print) -> dict:
    cluster = Cluster("kafka" if kafka_home else "kproto", 3, workdir, use_netns=False,
                      kafka_home=kafka_home, log=log, props=dict(PROPS))
    cluster.start()
    try:
        bootstrap = ",".join(n.bootstrap for n in cluster.nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        deadline = time.monotonic() + 60
        while True:   # until every broker has registered
            try:
                admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
                break
            except Exception as exc:   # noqa: BLE001  (INVALID_REPLICATION_FACTOR while brokers register)
                if "TOPIC_ALREADY_EXISTS" in str(exc):
                    break   # an earlier attempt that timed out did create it
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        time.sleep(3)
        leader = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0].leader
        acked: dict[str, int] = {}
        errors: collections.Counter = collections.Counter()

        def delivered(err, msg):
            if err:
                errors[err.name()] += 1
            else:
                acked[msg.value().decode()] = msg.offset()

        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 5, "message.timeout.ms": message_timeout_ms, "request.timeout.ms": 3000,
                      "log_level": 3})
        sent = 0

        def send_for(seconds: float) -> None:
            nonlocal sent
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                p.produce(TOPIC, f"v{sent}".encode(), partition=0, on_delivery=delivered)
                p.poll(0.1)
                sent += 1

        send_for(2)
        p.flush(30)
        followers = [n for n in cluster.nodes if n.index + 1 != leader]   # node.id = index + 1
        for n in followers:
            n.pause()
        log(f"leader {leader}: followers {[n.index + 1 for n in followers]} paused for {pause_s:.0f} s")
        try:
            send_for(pause_s)
        finally:
            for n in followers:
                n.resume()
        send_for(5)
        p.flush(60)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "epoch-bump-reader",
                             "enable.auto.commit": False, "log_level": 3})
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        offsets = collections.defaultdict(list)
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < 5:
            for m in consumer.consume(500, 1.0):
                if m.error() is None:
                    offsets[m.value().decode()].append(m.offset())
                    quiet_since = time.monotonic()
        consumer.close()
        dups = {v: o for v, o in offsets.items() if len(o) > 1}
        return {"kind": cluster.kind, "sent": sent, "acked": len(acked), "errors": dict(errors),
                "read": len(offsets), "duplicates": dups,
                "dups_acked": sorted(v for v in dups if v in acked), "acked_at": acked}
    finally:
        cluster.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.chaos.epoch_bump", description=__doc__.split("\n\n")[0])
    ap.add_argument("--kafka", action="store_true", help="real Kafka 3.9 from KAFKA_HOME")
    ap.add_argument("--pause", type=float, default=12.0, help="seconds both followers stay paused")
    ap.add_argument("--message-timeout-ms", type=int, default=6000)
    ap.add_argument("--out", help="work directory (kept); default a temporary one, removed")
    args = ap.parse_args(argv)
    kafka_home = os.environ.get("KAFKA_HOME") if args.kafka else None
    if args.kafka and not kafka_home:
        print("--kafka needs KAFKA_HOME", file=sys.stderr)
        return 2
    workdir = args.out or tempfile.mkdtemp(prefix="epoch-bump-")
    try:
        r = run(workdir, kafka_home, args.pause, args.message_timeout_ms)
    finally:
        if not args.out:
            shutil.rmtree(workdir, ignore_errors=True)
    dups = r["duplicates"]
    print(f"{r['kind']}: sent {r['sent']}, acknowledged {r['acked']}, errors {r['errors'] or 'none'}, "
          f"read {r['read']} distinct values")
    for v, offs in sorted(dups.items(), key=lambda kv: kv[1])[:5]:
        print(f"  {v!r} at offsets {offs}, acknowledged at {r['acked_at'].get(v, 'none')}")
    print(f"{len(dups)} values written twice ({len(r['dups_acked'])} of them acknowledged once, "
          f"{len(dups) - len(r['dups_acked'])} never)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

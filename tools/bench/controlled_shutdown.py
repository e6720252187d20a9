"""Produce pause when a partition leader stops: SIGTERM (controlled shutdown) against kill -9,
on a 3-node KRaft cluster of kproto processes and, with --kafka, of real Kafka 3.9 nodes
(KAFKA_HOME), both started by tools/chaos/cluster.py on loopback with the same settings.

An idempotent acks=all confluent-kafka producer writes to a RF=3 partition (min.insync.replicas=2)
(5000 records a second by default, --rate); each round stops the partition's leader (SIGTERM, then kill -9 rounds), waits
for acks to resume, restarts the node and waits for the ISR of 3. The pause is the last ack
before the signal to the first ack after it. At the end every acknowledged record must be read
back exactly once, in order.

    python3 -m tools.bench.controlled_shutdown --rounds 5 [--kafka]
"""
from __future__ import annotations

import argparse
import bisect
import os
import shutil
import signal
import statistics
import tempfile
import threading
import time

SETTINGS = {"broker.heartbeat.interval.ms": "500", "broker.session.timeout.ms": "9000",
            "replica.lag.time.max.ms": "10000", "auto.leader.rebalance.enable": "false"}
TOPIC = "pause"


def _wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except Exception:   # noqa: BLE001 - a node may be down meanwhile
            pass
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def run(kind: str, rounds: int, kafka_home: str | None, rate: int = 5000) -> dict:
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic

    from tools.chaos.cluster import Cluster
    quiet = {"log_level": 0, "logger": lambda *a, **k: None}
    work = tempfile.mkdtemp(prefix=f"kproto-pause-{kind}-")
    cluster = Cluster(kind, 3, work, use_netns=False, kafka_home=kafka_home, log=lambda *a: None,
                      props=dict(SETTINGS))
    cluster.start()
    try:
        boot = ",".join(n.bootstrap for n in cluster.nodes)
        admin = AdminClient({"bootstrap.servers": boot, **quiet})

        def create():
            try:
                admin.create_topics([NewTopic(TOPIC, 1, 3)], request_timeout=15)[TOPIC].result(30)
            except confluent_kafka.KafkaException as exc:
                if exc.args[0].code() != confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
            return True

        def part():
            p = admin.list_topics(TOPIC, timeout=5).topics[TOPIC].partitions[0]
            return p.leader, list(p.isrs)
        _wait(create, 120, "the topic")
        _wait(lambda: len(part()[1]) == 3, 60, "an ISR of 3")
        acked, ack_times, errors = [], [], []
        stop = threading.Event()

        def on_delivery(err, msg):
            if err is None:
                acked.append(msg.value())
                ack_times.append(time.monotonic())
            else:
                errors.append(str(err))

        def produce():
            p = confluent_kafka.Producer({"bootstrap.servers": boot, "enable.idempotence": True, "acks": "all",
                                          "linger.ms": 5, "message.timeout.ms": 120000, **quiet})
            seq = 0
            started = time.monotonic()
            while not stop.is_set():
                if rate and seq > (time.monotonic() - started) * rate:
                    time.sleep(0.002)   # (the read-back must stay short: a bounded rate)
                    p.poll(0)
                    continue
                try:
                    p.produce(TOPIC, b"m%09d" % seq, partition=0, on_delivery=on_delivery)
                    seq += 1
                except BufferError:
                    p.poll(0.01)
                p.poll(0)
            p.flush(120)
        t = threading.Thread(target=produce)
        t.start()
        pauses = {"sigterm": [], "kill -9": []}
        exits = []
        try:
            for how in ["sigterm"] * rounds + ["kill -9"] * rounds:
                target = len(acked) + 2000
                _wait(lambda: len(acked) >= target, 120, "acks")
                leader = part()[0]
                node = cluster.nodes[leader - 1]
                at = time.monotonic()
                if how == "sigterm":
                    os.kill(node.proc.pid, signal.SIGTERM)
                    node.proc.wait(300)
                    exits.append(time.monotonic() - at)
                else:
                    node.kill()
                target = len(acked) + 500
                _wait(lambda: len(acked) >= target, 120, "acks after the leader stopped")
                # the longest time without an ack from the last one before the signal until now (a
                # delivery report can reach its callback a little after the ack arrived)
                times = list(ack_times)
                start = max(0, bisect.bisect_right(times, at) - 1)
                window = times[start:]
                pauses[how].append(max(b - a for a, b in zip(window, window[1:])))
                new_leader = part()[0]
                print(f"  {kind} {how} of leader {leader}: pause {pauses[how][-1]:.3f} s, new leader {new_leader}",
                      flush=True)
                node.start()
                _wait(lambda: len(part()[1]) == 3, 120, "the ISR of 3 again")
        finally:
            stop.set()
            t.join(180)
        consumer = confluent_kafka.Consumer({"bootstrap.servers": boot, "group.id": "pause-readback",
                                             "auto.offset.reset": "earliest", "enable.auto.commit": False, **quiet})
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
        values = []
        deadline = time.monotonic() + 300
        while len(values) < len(acked) and time.monotonic() < deadline:
            for m in consumer.consume(10000, 1.0):
                if not m.error():
                    values.append(m.value())
        consumer.close()
        return {"kind": kind, "pauses": pauses, "exits": exits, "acked": len(acked), "errors": errors[:3],
                "exactly_once_in_order": values == acked}
    finally:
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)


def _fmt(v):
    return f"p50 {statistics.median(v):.3f} s, max {max(v):.3f} s (n={len(v)})" if v else "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rate", type=int, default=5000, help="records a second (0: as fast as it goes)")
    ap.add_argument("--kafka", action="store_true", help="also a real Kafka 3.9 cluster (KAFKA_HOME)")
    args = ap.parse_args(argv)
    kinds = ["kproto"] + (["kafka"] if args.kafka else [])
    ok = True
    for kind in kinds:
        r = run(kind, args.rounds, os.environ.get("KAFKA_HOME"), args.rate)
        ok &= r["exactly_once_in_order"] and not r["errors"]
        print(f"{kind}: SIGTERM pause {_fmt(r['pauses']['sigterm'])}; kill -9 pause {_fmt(r['pauses']['kill -9'])}; "
              f"SIGTERM to exit {_fmt(r['exits'])}; {r['acked']} acked, read back once in order: "
              f"{r['exactly_once_in_order']}, errors {r['errors']}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

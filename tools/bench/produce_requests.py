"""produce requests: a broker's CPU per GiB written and per Produce request, builds in turn

    python -m tools.bench produce_requests --size 100 --count 2000000 --reps 2 \\
        --targets kproto@/tmp/kproto-1122,kproto@/tmp/kproto-main,kproto

Each repetition starts every target's broker fresh, the targets in turn
(kproto: this checkout; kproto@PATH: another build's), creates a topic of 6
partitions and has one librdkafka producer (acks=1, linger.ms 5) send `count`
records of `size` bytes. The broker's process CPU (/proc, all threads) is read around the
records, after one acknowledged record has set up the connection; the
producer's statistics give the Produce requests it sent meanwhile.

Why requests beside GiB: the producer fills its batches while it waits for
acks, so a broker that answers sooner gets more, smaller requests for the same
records, and a request's fixed cost (framing, decode, dispatch, the answer) is
paid more times per GiB. A run's CPU per GiB then moves with its request count
as much as with the build (issue 26, docs/performance.md "A single node's
produce path"); the KiB a request carried says which runs compare."""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from confluent_kafka import Producer

from tools.bench.startup import add_pycache_option, kproto_target, use_pycache

GiB = 1 << 30


def _run(name: str, size: int, count: int) -> dict:
    target = kproto_target(name, tempfile.mkdtemp(prefix="produce-requests-"), bench="produce_requests")
    try:
        target.start()
        target.create_topics({"t": 6})
        sent = {}

        def on_stats(doc):
            sent["tx"] = sum(b["tx"] for b in json.loads(doc)["brokers"].values())

        producer = Producer({"bootstrap.servers": target.bootstrap, "acks": "1", "linger.ms": 5,
                             "statistics.interval.ms": 100, "stats_cb": on_stats})
        producer.produce("t", b"w")
        producer.flush(30)
        time.sleep(0.3)
        producer.poll(0.3)
        tx0, cpu0 = sent.get("tx", 0), target.cpu_seconds()
        value = b"x" * size
        for i in range(count):
            while True:
                try:
                    producer.produce("t", value)
                    break
                except BufferError:
                    producer.poll(0.0005)
            if not i % 1000:
                producer.poll(0)
        if producer.flush(120):
            raise RuntimeError(f"{name}: records left unacknowledged")
        cpu = target.cpu_seconds() - cpu0
        time.sleep(0.3)
        producer.poll(0.3)   # (the statistics after the last answer)
        requests = max(sent["tx"] - tx0, 1)
        return {"cpu_per_gib": cpu / (size * count / GiB), "requests": requests,
                "us_per_request": cpu / requests * 1e6, "kib_per_request": size * count / requests / 1024}
    finally:
        target.stop()
        target.cleanup()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench produce_requests", description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default="kproto", help="kproto and/or kproto@PATH, comma-separated")
    ap.add_argument("--size", type=int, default=100, help="record value bytes (default 100)")
    ap.add_argument("--count", type=int, default=2_000_000, help="records a run (default 2,000,000)")
    ap.add_argument("--reps", type=int, default=2, help="repetitions, the targets in turn in each (default 2)")
    add_pycache_option(ap)
    args = ap.parse_args(argv)
    use_pycache(args)
    names = [t.strip() for t in args.targets.split(",") if t.strip()]
    for rep in range(args.reps):
        for name in names:
            r = _run(name, args.size, args.count)
            print(f"{time.strftime('%H:%M:%S')} rep {rep + 1} {os.path.basename(name.rstrip('/')):24s} "
                  f"CPU s/GiB {r['cpu_per_gib']:.3f}  requests {r['requests']}  "
                  f"KiB/request {r['kib_per_request']:.0f}  CPU us/request {r['us_per_request']:.0f}", flush=True)


if __name__ == "__main__":
    main()

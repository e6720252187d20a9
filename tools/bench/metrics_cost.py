"""What the Prometheus metrics cost: kproto with the metrics listener on
and off, alternating, on the same workloads.

    python -m tools.bench metrics_cost [--reps 3] [--records 200000] [--requests 20000]

  cpu/produce  broker CPU per Produce request (one 100 B record each, 100
               requests in flight on one connection): the worst case, the
               smallest request
  cpu/rec produced, cpu/rec consumed: broker CPU per record of the bulk runs, us
  (with metrics on, /metrics is scraped every --scrape-interval seconds)
  cpu/fetch    broker CPU per Fetch request (a few records each)
  produce      librdkafka producer, 100 B records, acks=1: records/s
  consume      one librdkafka consumer reading them back: records/s
  start        process start to the ready line, s
  idle RSS     resident set 1 s after ready, MiB (with one scrape when on)

Ratios are on/off of the medians (CPU: >1 means metrics cost more; records/s:
<1 means slower).
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
import urllib.request

from tools.bench import procstat, workloads
from broker.launch.process import BrokerProcess


def cpu_seconds(pid: int) -> float:
    """CPU time of the process's threads in ns resolution (schedstat), where
    /proc/PID/stat counts 10 ms ticks: the differences measured here are
    far smaller than a tick per run. Threads that already exited are not
    counted (the broker's are long-lived)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, IndexError, ValueError):
            pass    # a thread that just exited, or a kernel without schedstats
    return total / 1e9


def _wire():
    from tests.wire_client import WireClient, create_topic, fetch_req, produce_req
    return WireClient, create_topic, fetch_req, produce_req


def _pipelined(client, requests, version: int, depth: int = 100) -> None:
    sent = 0
    pending = 0
    for req in requests:
        client.send(req, version)
        sent += 1
        pending += 1
        if pending >= depth:
            for _ in range(pending):
                client.recv_frame()
            pending = 0
    for _ in range(pending):
        client.recv_frame()


def _small_fetch(req):
    req.topics[0].partitions[0].partition_max_bytes = 1024   # a few batches, not a MiB
    return req


class _Scraper:
    """Scrapes /metrics once a second, as Prometheus would (only when on)."""

    def __init__(self, url: str | None, interval: float):
        self.url = url
        self.interval = interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            with urllib.request.urlopen(self.url, timeout=5) as r:
                r.read()

    def __enter__(self):
        if self.url:
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.url:
            self.thread.join()


def one_run(metrics: bool, records: int, requests: int, scrape_interval: float = 15.0) -> dict:
    from kproto import records as rec
    WireClient, create_topic, fetch_req, produce_req = _wire()
    out = {}
    b = BrokerProcess(tempfile.mkdtemp(prefix="kproto-mcost-"), metrics=metrics)
    t0 = time.monotonic()
    b.start()
    out["start s"] = time.monotonic() - t0
    pid = b.proc.pid
    try:
        time.sleep(1.0)
        if metrics:
            with urllib.request.urlopen(b.metrics_url, timeout=5) as r:
                r.read()
        out["idle RSS MiB"] = procstat.status_kib(pid, "VmRSS") / 1024
        create_topic(b.bootstrap, "wire")
        batch = rec.build_batch([(None, b"x" * 100, [], 1_700_000_000_000)])
        with _Scraper(b.metrics_url, scrape_interval), WireClient(b.bootstrap) as c:
            cpu = cpu_seconds(pid)
            _pipelined(c, (produce_req("wire", bytearray(batch), acks=1) for _ in range(requests)), 9)
            out["cpu/produce us"] = (cpu_seconds(pid) - cpu) / requests * 1e6
            cpu = cpu_seconds(pid)
            _pipelined(c, (_small_fetch(fetch_req("wire", (i * 37) % requests)) for i in range(requests)), 12)
            out["cpu/fetch us"] = (cpu_seconds(pid) - cpu) / requests * 1e6
            create_topic(b.bootstrap, "bulk")
            cpu = cpu_seconds(pid)
            out["produce rec/s"] = workloads.produce(b.bootstrap, "bulk", records, 100, "1")["records/s"]
            out["cpu/rec produced us"] = (cpu_seconds(pid) - cpu) / records * 1e6
            cpu = cpu_seconds(pid)
            out["consume rec/s"] = workloads.consume_assigned(b.bootstrap, "bulk", 1, records, 100)["records/s"]
            out["cpu/rec consumed us"] = (cpu_seconds(pid) - cpu) / records * 1e6
    finally:
        b.stop()
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench metrics_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--requests", type=int, default=60_000)
    ap.add_argument("--scrape-interval", type=float, default=15.0,
                    help="seconds between scrapes while metrics are on (default 15, a usual Prometheus setting)")
    args = ap.parse_args(argv)
    runs = {False: [], True: []}
    for rep in range(args.reps):
        for metrics in ((False, True) if rep % 2 == 0 else (True, False)):
            r = one_run(metrics, args.records, args.requests, args.scrape_interval)
            runs[metrics].append(r)
            print(f"rep {rep + 1} metrics {'on ' if metrics else 'off'}: "
                  + ", ".join(f"{k} {v:,.3f}" for k, v in r.items()), flush=True)
    # medians, and the best run of each (on a shared machine the best run is
    # the one least disturbed by other load)
    print(f"\n{'':22}{'off':>12}{'on':>12}{'on/off':>8}{'best off':>12}{'best on':>12}{'on/off':>8}")
    for key in runs[False][0]:
        offs = [r[key] for r in runs[False]]
        ons = [r[key] for r in runs[True]]
        off, on = statistics.median(offs), statistics.median(ons)
        pick = max if key.endswith("rec/s") else min
        boff, bon = pick(offs), pick(ons)
        print(f"{key:22}{off:>12,.3f}{on:>12,.3f}{on / off:>8.3f}{boff:>12,.3f}{bon:>12,.3f}{bon / boff:>8.3f}")


if __name__ == "__main__":
    main()

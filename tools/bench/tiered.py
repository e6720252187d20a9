"""Tiered storage: local disk bounded while producing 20x local.retention.bytes, copy throughput
and broker CPU per GiB copied, bytes read from the store per timestamp lookup in the tier, read
throughput of the tiered range vs the local range (same run)."""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from broker.launch.process import BrokerProcess
from tools.bench.procstat import cpu_seconds

MIB = 1024 * 1024


def _dir_bytes(path: str) -> int:
    total = 0
    for d, _s, files in os.walk(path):
        for f in files:
            if f.endswith(".log"):
                try:
                    total += os.path.getsize(os.path.join(d, f))
                except FileNotFoundError:
                    pass
    return total


def _offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from tests.wire_client import WireClient, list_offset
    with WireClient(bootstrap) as c:
        return {ts: list_offset(c, topic, ts).offset for ts in (-1, -2, -4, -5)}


def _read(bootstrap: str, topic: str, start: int, end: int) -> tuple[int, float]:
    """(bytes, seconds) to consume offsets [start, end) with confluent-kafka."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "fetch.max.bytes": 52428800, "auto.offset.reset": "error"})
    c.assign([TopicPartition(topic, 0, start)])
    got, size = start, 0
    began = finished = None   # from the first record: the consumer's start-up is not the read
    try:
        while got < end:
            for m in c.consume(10000, 1.0):
                if m.error():
                    raise RuntimeError(m.error())
                if began is None:
                    began = time.perf_counter()
                    continue
                size += len(m.value())
                got = m.offset() + 1
                finished = time.perf_counter()   # (consume() may wait out its timeout after the last one)
    finally:
        c.close()
    return size, finished - began


def _scrape(proc, name: str) -> float:
    import urllib.request
    with urllib.request.urlopen(proc.metrics_url, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise RuntimeError(f"{name} not on /metrics")


def _timestamp_lookups(proc, topic: str, span_ms: int, local_start: int,
                       lookups: int = 20) -> tuple[list[float], list[float], float]:
    """ListOffsets by timestamp at ``lookups`` timestamps spread over the first ``span_ms`` of
    the topic, before anything else read the tier (its indexes are fetched too): bytes and GETs
    from the store per lookup that answered a tiered offset, and the mean seconds per lookup."""
    from tests.wire_client import WireClient, list_offset
    with WireClient(proc.bootstrap) as c:
        first = list_offset(c, topic, 0).timestamp
        step = max(1, span_ms // lookups)
        read, gets, spent = [], [], 0.0
        for k in range(lookups):
            b0, g0 = (_scrape(proc, "kproto_tiered_store_read_bytes_total"),
                      _scrape(proc, "kproto_tiered_store_reads_total"))
            t = time.perf_counter()
            found = list_offset(c, topic, first + k * step + step // 2)
            spent += time.perf_counter() - t
            if 0 <= found.offset < local_start:
                read.append(_scrape(proc, "kproto_tiered_store_read_bytes_total") - b0)
                gets.append(_scrape(proc, "kproto_tiered_store_reads_total") - g0)
    return read, gets, spent / lookups


def main(args=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench tiered", description=__doc__)
    ap.add_argument("--local-bytes", type=int, default=32 * MIB, help="local.retention.bytes (default 32 MiB)")
    ap.add_argument("--segment-bytes", type=int, default=4 * MIB, help="segment.bytes (default 4 MiB)")
    ap.add_argument("--factor", type=int, default=20, help="produce this many times local.retention.bytes")
    ap.add_argument("--value-size", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=8.0, help="produce rate in MiB/s (0: as fast as possible)")
    opts = ap.parse_args(args)
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    base = tempfile.mkdtemp(prefix="kproto-bench-tiered-")
    remote = os.path.join(base, "remote")
    proc = BrokerProcess(os.path.join(base, "data"), settings={
        "remote.log.storage.system.enable": "true", "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "500", "log.segment.delete.delay.ms": "0", "rsm.config.dir": remote,
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1"}, metrics=True)
    proc.start()
    try:
        topic = "bench-tiered"
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config={
            "remote.storage.enable": "true", "segment.bytes": str(opts.segment_bytes),
            "local.retention.bytes": str(opts.local_bytes)})])[topic].result(15)
        total = opts.factor * opts.local_bytes
        count = total // opts.value_size
        value = os.urandom(opts.value_size)
        p = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 20, "batch.size": 262144})
        local_dir = os.path.join(proc.data_dir, f"{topic}-0")
        peak = 0
        cpu0, t0 = cpu_seconds(proc.proc.pid), time.perf_counter()
        for i in range(count):
            while True:
                try:
                    p.produce(topic, value=value)
                    break
                except BufferError:
                    p.poll(0.05)
            if i % 2000 == 0:
                p.poll(0)
                peak = max(peak, _dir_bytes(local_dir))
                if opts.rate > 0:
                    ahead = t0 + i * opts.value_size / (opts.rate * MIB) - time.perf_counter()
                    if ahead > 0:
                        time.sleep(ahead)
        p.flush(120)
        produced_s = time.perf_counter() - t0
        # until everything closed is copied (the active segment stays local)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            peak = max(peak, _dir_bytes(local_dir))
            o = _offsets(proc.bootstrap, topic)
            if o[-5] >= 0 and o[-1] - o[-5] - 1 <= opts.segment_bytes // opts.value_size + 1:
                break
            time.sleep(0.5)
        copied_s = time.perf_counter() - t0
        cpu = cpu_seconds(proc.proc.pid) - cpu0
        time.sleep(2)   # the last local deletions
        o = _offsets(proc.bootstrap, topic)
        remote_bytes = _dir_bytes(remote)
        # the tiered range's share of the produce time (records were produced at an even rate)
        span_ms = int(produced_s * 1000 * o[-4] / count)
        lookup_bytes, lookup_gets, lookup_s = _timestamp_lookups(proc, topic, span_ms, o[-4])
        tier_bytes, tier_s = _read(proc.bootstrap, topic, 0, o[-4])
        local_bytes, local_s = _read(proc.bootstrap, topic, o[-4], o[-1])
        print(f"produced {total / MIB:.0f} MiB ({count} records of {opts.value_size} B) in {produced_s:.1f} s; "
              f"local.retention.bytes {opts.local_bytes / MIB:.0f} MiB, segment.bytes {opts.segment_bytes / MIB:.0f} MiB")
        print(f"local .log bytes: peak {peak / MIB:.1f} MiB (bound: local retention + active segment = "
              f"{(opts.local_bytes + opts.segment_bytes) / MIB:.1f} MiB + segments waiting for their copy); "
              f"now {_dir_bytes(local_dir) / MIB:.1f} MiB")
        print(f"copied {remote_bytes / MIB:.0f} MiB; all copied {copied_s:.1f} s after the first record: "
              f"{remote_bytes / MIB / copied_s:.1f} MiB/s; broker CPU {cpu:.1f} s = "
              f"{cpu / (remote_bytes / 1024 ** 3):.1f} s per GiB produced and copied")
        if lookup_bytes:
            lookup_bytes.sort()
            print(f"timestamp lookups in the tier: {len(lookup_bytes)}, store bytes read per lookup: median "
                  f"{lookup_bytes[len(lookup_bytes) // 2] / 1024:.0f} KiB, max {lookup_bytes[-1] / 1024:.0f} KiB "
                  f"(segment {opts.segment_bytes / MIB:.0f} MiB), GETs per lookup max {max(lookup_gets):.0f}, "
                  f"{lookup_s * 1000:.1f} ms each")
        print(f"read tiered range [0, {o[-4]}): {tier_bytes / MIB:.0f} MiB at {tier_bytes / MIB / tier_s:.1f} MiB/s; "
              f"local range [{o[-4]}, {o[-1]}): {local_bytes / MIB:.0f} MiB at "
              f"{local_bytes / MIB / max(local_s, 1e-9):.1f} MiB/s")
    finally:
        proc.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

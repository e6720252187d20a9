"""Tiered storage: local disk bounded while producing 20x local.retention.bytes, copy throughput
and broker CPU per GiB copied, bytes read from the store per timestamp lookup in the tier, read
throughput of the tiered range vs the local range (same run); with --kafka the same scenario against
Apache Kafka with its LocalTieredStorage, side by side."""
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
            # no more than are left: consume() returns a short batch only after its timeout, which
            # the last batch's records would otherwise count as read time
            for m in c.consume(min(10000, end - got), 1.0):
                if m.error():
                    raise RuntimeError(m.error())
                if began is None:
                    began = time.perf_counter()
                    continue
                size += len(m.value())
                got = m.offset() + 1
                finished = time.perf_counter()
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


def _timestamp_lookups(bootstrap: str, topic: str, span_ms: int, local_start: int, counters=None,
                       lookups: int = 20) -> tuple[list[float], list[float], float]:
    """ListOffsets by timestamp at ``lookups`` timestamps spread over the first ``span_ms`` of
    the topic, before anything else read the tier (its indexes are fetched too): bytes and GETs
    from the store per lookup that answered a tiered offset (when ``counters()`` gives the store's
    (bytes, reads) so far; Kafka's are JMX only), and the mean seconds per lookup."""
    from tests.wire_client import WireClient, list_offset
    with WireClient(bootstrap) as c:
        first = list_offset(c, topic, 0).timestamp
        step = max(1, span_ms // lookups)
        read, gets, spent = [], [], 0.0
        for k in range(lookups):
            before = counters() if counters else None
            t = time.perf_counter()
            found = list_offset(c, topic, first + k * step + step // 2)
            spent += time.perf_counter() - t
            if before and 0 <= found.offset < local_start:
                after = counters()
                read.append(after[0] - before[0])
                gets.append(after[1] - before[1])
    return read, gets, spent / lookups


def _scenario(opts, bootstrap: str, pid: int, local_dir: str, remote: str, counters=None) -> dict:
    """Create the tiered topic, produce, wait for the copies, look up timestamps, read both ranges."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    topic = "bench-tiered"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "remote.storage.enable": "true", "segment.bytes": str(opts.segment_bytes),
        "local.retention.bytes": str(opts.local_bytes)})])[topic].result(60)
    local_dir = os.path.join(local_dir, f"{topic}-0")
    total = opts.factor * opts.local_bytes
    count = total // opts.value_size
    value = os.urandom(opts.value_size)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 262144})
    peak = 0
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
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
        o = _offsets(bootstrap, topic)
        if o[-5] >= 0 and o[-1] - o[-5] - 1 <= opts.segment_bytes // opts.value_size + 1:
            break
        time.sleep(0.5)
    copied_s = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    # the last local deletions (each broker's retention pass), at most a minute
    deadline = time.monotonic() + 60
    while _dir_bytes(local_dir) > opts.local_bytes + opts.segment_bytes and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(1)
    o = _offsets(bootstrap, topic)
    remote_bytes = _dir_bytes(remote)
    # the tiered range's share of the produce time (records were produced at an even rate)
    span_ms = int(produced_s * 1000 * o[-4] / count)
    lookup_bytes, lookup_gets, lookup_s = _timestamp_lookups(bootstrap, topic, span_ms, o[-4], counters)
    tier_bytes, tier_s = _read(bootstrap, topic, 0, o[-4])
    local_bytes, local_s = _read(bootstrap, topic, o[-4], o[-1])
    return dict(total=total, count=count, produced_s=produced_s, peak=peak, now=_dir_bytes(local_dir),
                remote_bytes=remote_bytes, copied_s=copied_s, cpu=cpu, lookup_bytes=sorted(lookup_bytes),
                lookup_gets=lookup_gets, lookup_s=lookup_s, offsets=o, tier_bytes=tier_bytes, tier_s=tier_s,
                local_read_bytes=local_bytes, local_s=local_s)


def _print(label: str, opts, r: dict) -> None:
    o = r["offsets"]
    print(f"[{label}] produced {r['total'] / MIB:.0f} MiB ({r['count']} records of {opts.value_size} B) in "
          f"{r['produced_s']:.1f} s; local.retention.bytes {opts.local_bytes / MIB:.0f} MiB, "
          f"segment.bytes {opts.segment_bytes / MIB:.0f} MiB")
    print(f"[{label}] local .log bytes: peak {r['peak'] / MIB:.1f} MiB (bound: local retention + active segment = "
          f"{(opts.local_bytes + opts.segment_bytes) / MIB:.1f} MiB + segments waiting for their copy); "
          f"now {r['now'] / MIB:.1f} MiB")
    print(f"[{label}] copied {r['remote_bytes'] / MIB:.0f} MiB; all copied {r['copied_s']:.1f} s after the first "
          f"record: {r['remote_bytes'] / MIB / r['copied_s']:.1f} MiB/s; broker CPU {r['cpu']:.1f} s = "
          f"{_cpu_per_gib(r):.1f} s per GiB produced and copied")
    lb = r["lookup_bytes"]
    if lb:
        print(f"[{label}] timestamp lookups in the tier: {len(lb)}, store bytes read per lookup: median "
              f"{lb[len(lb) // 2] / 1024:.0f} KiB, max {lb[-1] / 1024:.0f} KiB "
              f"(segment {opts.segment_bytes / MIB:.0f} MiB), GETs per lookup max {max(r['lookup_gets']):.0f}, "
              f"{r['lookup_s'] * 1000:.1f} ms each")
    else:
        print(f"[{label}] timestamp lookups: {r['lookup_s'] * 1000:.1f} ms each")
    print(f"[{label}] read tiered range [0, {o[-4]}): {r['tier_bytes'] / MIB:.0f} MiB at "
          f"{_tier_rate(r):.1f} MiB/s; local range [{o[-4]}, {o[-1]}): "
          f"{r['local_read_bytes'] / MIB:.0f} MiB at {_local_rate(r):.1f} MiB/s")


def _cpu_per_gib(r: dict) -> float:
    return r["cpu"] / max(r["remote_bytes"] / 1024 ** 3, 1e-9)


def _tier_rate(r: dict) -> float:
    return r["tier_bytes"] / MIB / max(r["tier_s"], 1e-9)


def _local_rate(r: dict) -> float:
    return r["local_read_bytes"] / MIB / max(r["local_s"], 1e-9)


def _table(opts, results: dict[str, dict]) -> None:
    """The figures side by side, one column per target."""
    bound = (opts.local_bytes + opts.segment_bytes) / MIB
    rows = [
        ("produce time (s)", lambda r: f"{r['produced_s']:.1f}"),
        (f"local .log peak (MiB; bound {bound:.0f} + waiting copies)", lambda r: f"{r['peak'] / MIB:.1f}"),
        ("local .log at the end (MiB)", lambda r: f"{r['now'] / MIB:.1f}"),
        ("copied (MiB)", lambda r: f"{r['remote_bytes'] / MIB:.0f}"),
        ("all copied after first record (s)", lambda r: f"{r['copied_s']:.1f}"),
        ("copy throughput (MiB/s)", lambda r: f"{r['remote_bytes'] / MIB / r['copied_s']:.1f}"),
        ("broker CPU per GiB produced and copied (s)", lambda r: f"{_cpu_per_gib(r):.1f}"),
        ("timestamp lookup (ms each)", lambda r: f"{r['lookup_s'] * 1000:.1f}"),
        ("read tiered range (MiB/s)", lambda r: f"{_tier_rate(r):.1f}"),
        ("read local range (MiB/s)", lambda r: f"{_local_rate(r):.1f}"),
    ]
    names = list(results)
    width = max(len(n) for n, _ in rows)
    print("\n| figure | " + " | ".join(names) + " |")
    print("| --- | " + " | ".join("---:" for _ in names) + " |")
    for name, cell in rows:
        print(f"| {name:<{width}} | " + " | ".join(cell(results[t]) for t in names) + " |")


def _run_kproto(opts) -> dict:
    base = tempfile.mkdtemp(prefix="kproto-bench-tiered-")
    remote = os.path.join(base, "remote")
    proc = BrokerProcess(os.path.join(base, "data"), settings={
        "remote.log.storage.system.enable": "true", "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "500", "log.segment.delete.delay.ms": "0", "rsm.config.dir": remote,
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1"}, metrics=True)
    proc.start()
    try:
        def counters():
            return (_scrape(proc, "kproto_tiered_store_read_bytes_total"),
                    _scrape(proc, "kproto_tiered_store_reads_total"))
        return _scenario(opts, proc.bootstrap, proc.proc.pid, proc.data_dir, remote, counters)
    finally:
        proc.stop()
        shutil.rmtree(base, ignore_errors=True)


def _run_kafka(opts) -> dict:
    from tools.bench import tiered_kafka
    from tools.bench.targets import KafkaTarget
    base = tempfile.mkdtemp(prefix="kproto-bench-tiered-kafka-")
    remote = os.path.join(base, "remote")
    target = KafkaTarget(base, opts.kafka, tiered_kafka.settings(remote, opts.lts_jar))
    target.start()
    try:
        return _scenario(opts, target.bootstrap, target.pid, os.path.join(base, "data"), remote)
    finally:
        target.stop()
        target.cleanup()


def main(args=None) -> None:
    from tools.bench import tiered_kafka
    ap = argparse.ArgumentParser(prog="python -m tools.bench tiered", description=__doc__)
    ap.add_argument("--local-bytes", type=int, default=32 * MIB, help="local.retention.bytes (default 32 MiB)")
    ap.add_argument("--segment-bytes", type=int, default=4 * MIB, help="segment.bytes (default 4 MiB)")
    ap.add_argument("--factor", type=int, default=20, help="produce this many times local.retention.bytes")
    ap.add_argument("--value-size", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=8.0, help="produce rate in MiB/s (0: as fast as possible)")
    ap.add_argument("--kafka", metavar="KAFKA_HOME",
                    help="also run the scenario against this Apache Kafka (3.9) with LocalTieredStorage, "
                         "after kproto, and print the figures side by side")
    ap.add_argument("--lts-jar", default=tiered_kafka.default_jar(),
                    help="jar of Kafka's LocalTieredStorage (test sources) for --kafka "
                         "(default: $KPROTO_LTS_JAR or %(default)s)")
    ap.add_argument("--targets", default=None,
                    help="comma-separated: kproto, kafka (default: kproto, plus kafka with --kafka)")
    opts = ap.parse_args(args)
    names = (opts.targets or ("kproto,kafka" if opts.kafka else "kproto")).split(",")
    if any(n not in ("kproto", "kafka") for n in names):
        ap.error(f"--targets: kproto and/or kafka, got {opts.targets!r}")
    if "kafka" in names:
        why = tiered_kafka.check(opts.kafka, opts.lts_jar) if opts.kafka else "target kafka needs --kafka KAFKA_HOME"
        if why:
            ap.error(why)
    results = {}
    for name in names:
        label = "kproto" if name == "kproto" else "Kafka 3.9 + LocalTieredStorage"
        results[label] = _run_kproto(opts) if name == "kproto" else _run_kafka(opts)
        _print(label, opts, results[label])
    if len(results) > 1:
        _table(opts, results)


if __name__ == "__main__":
    main()

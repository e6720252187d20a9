"""Partitions at seed scale on one node: create T topics x P partitions through the admin API, then
report create time (answered, every partition listed by Metadata, every partition writable: a record
to each acknowledged), the longest produce to an existing partition meanwhile, Metadata latency for all topics (through librdkafka, and on the wire alone),
idle CPU, RSS, open files and memory maps, and the restart time after kill -9 (until ready, and
until Metadata lists every partition; --no-restart skips it).

    python3 -m tools.bench partitions [--topics 100] [--partitions 100] [--idle 20] [--ulimit N]
                                      [--targets kproto,kafka] [--loopwatch DIR]

--loopwatch DIR runs kproto under tools/bench/loopwatch.py and reports the event loop's steps
longer than --loopwatch-ms (10) from the first CreateTopics until every partition is writable:
how many, the longest, and the ten longest with their task and what was running in them
(DIR/kproto-loopwatch.json holds them all, DIR/probe.json the probe's latencies with their times).

The kafka target (Apache Kafka, single KRaft node, from KAFKA_HOME) runs the same steps after
kproto, one broker at a time. A shared machine's other load shows in the CPU figures: run it
twice and compare.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time

from tools.bench.options import partition_count_arguments, target_arguments, target_names


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def _listed(admin) -> int:
    """Partitions of the created topics that Metadata lists (0 while unreachable)."""
    try:
        md = admin.list_topics(timeout=30)
    except Exception:   # noqa: BLE001 - restarting
        return 0
    return sum(len(t.partitions) for name, t in md.topics.items() if name.startswith("seed-"))


def _write_every_partition(bootstrap: str, names: list[str], partitions: int, out: dict, t0: float) -> None:
    """A record to every partition, sent right after the answers (a partition whose log is not
    made yet answers NOT_LEADER_OR_FOLLOWER and the producer retries): out["create_writable_s"]
    once every one is acknowledged, from t0."""
    from confluent_kafka import Producer
    failed = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 0,
                         "message.timeout.ms": 600000, "queue.buffering.max.messages": 1000000})

    def delivered(err, _msg):
        if err is not None:
            failed.append(str(err))

    for n in names:
        for p in range(partitions):
            producer.produce(n, value=b"w", partition=p, on_delivery=delivered)
        producer.poll(0)
    left = producer.flush(600)
    out["create_writable_s"] = round(time.monotonic() - t0, 2)
    out["writable_errors"] = (failed[:3] + ([f"{left} not delivered"] if left else [])) or None


def _logs_made(data: str, total: int, out: dict, t0: float) -> None:
    """out["create_logs_made_s"] once ``data`` holds a directory for each of the ``total`` new
    partitions, from t0 (looked at every 0.1 s, for up to 600 s): the log making alone, without
    the producer's retry schedule that the writable time includes."""
    while time.monotonic() - t0 < 600:
        try:
            made = sum(1 for e in os.scandir(data) if e.name.startswith("seed-"))
        except OSError:
            made = 0
        if made >= total:
            out["create_logs_made_s"] = round(time.monotonic() - t0, 2)
            return
        time.sleep(0.1)


def _probe_produce(bootstrap: str, stop, latencies: list, started: list | None = None) -> None:
    """Produce to an existing one-partition topic, one record at a time, while the creation runs:
    how long the broker's other clients wait behind it (``started``: each one's time.monotonic)."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 0})
    while not stop.is_set():
        at = time.monotonic()
        t = time.perf_counter()
        producer.produce("probe", value=b"p")
        producer.flush(60)
        latencies.append((time.perf_counter() - t) * 1000)
        if started is not None:
            started.append(at)
        time.sleep(0.01)


def _watch(target, folder: str, threshold_ms: float) -> str:
    """Run the kproto target under tools/bench/loopwatch.py; returns its report's path."""
    os.makedirs(folder, exist_ok=True)
    report = os.path.abspath(os.path.join(folder, "kproto-loopwatch.json"))
    real = target._process

    def process(data):
        proc = real(data)
        command = proc.command

        def watched():
            cmd = command()
            i = cmd.index("broker.launch.cli")
            return cmd[:i] + ["tools.bench.loopwatch", "--out", report, "--threshold-ms", str(threshold_ms),
                              "--"] + cmd[i + 1:]
        proc.command = watched
        return proc
    target._process = process
    return report


def _stalls(report: str, start: float, end: float) -> dict:
    """The loop's steps over the threshold between ``start`` and ``end`` (time.monotonic), and the
    garbage collector's pauses over it (a pause also lengthens the step it fell in)."""
    with open(report) as f:
        every = [s for s in json.load(f).get("long steps", []) if start <= s["at"] <= end]
    gcs = [s for s in every if s["task"].startswith("gc ")]
    steps = sorted((s for s in every if not s["task"].startswith("gc ")), key=lambda s: -s["ms"])
    return {"count": len(steps), "max_ms": steps[0]["ms"] if steps else 0.0,
            "total_ms": round(sum(s["ms"] for s in steps), 1),
            # by the trio thread's CPU time: the loop's own work, not a preemption by the machine's
            # other processes or a system call blocked in the kernel
            "max_cpu_ms": max((s["cpu ms"] for s in steps), default=0.0),
            "over_10_cpu_ms": sum(1 for s in steps if s["cpu ms"] >= 10),
            "gc_pauses": {"count": len(gcs), "max_ms": max((s["ms"] for s in gcs), default=0.0),
                          "total_ms": round(sum(s["ms"] for s in gcs), 1)},
            "longest": [{"ms": s["ms"], "cpu ms": s["cpu ms"], "at s": round(s["at"] - start, 2), "task": s["task"],
                         "in": " < ".join(line.strip() for line in reversed(s["stack"].splitlines()[1:]))[:400]}
                        for s in steps[:10]]}


def _metadata_ms(admin, runs: int = 7) -> float:
    """Median wall time of a Metadata request for all topics (client parse included)."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        admin.list_topics(timeout=60)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _metadata_wire_ms(bootstrap: str, runs: int = 7) -> float:
    """Median time from sending a Metadata v12 request for all topics to the last byte of its
    answer, over one connection, with no decoding: the broker's share of _metadata_ms."""
    import socket
    import struct
    from kproto import api
    from kproto.messages.metadata_request import MetadataRequest
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    times = []
    with socket.create_connection((host, int(port)), timeout=60) as s:
        for i in range(runs + 1):
            frame = api.encode_request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12, i,
                                       client_id="bench")
            t0 = time.perf_counter()
            s.sendall(frame)
            head = b""
            while len(head) < 4:
                head += s.recv(4 - len(head))
            left = struct.unpack(">i", head)[0]
            while left:
                left -= len(s.recv(min(left, 1 << 20)))
            if i:   # the first answer may build what later ones reuse
                times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _counts(pid: int) -> dict:
    from tools.bench.procstat import status_kib
    with open(f"/proc/{pid}/maps", "rb") as f:
        maps = sum(1 for _ in f)
    return {"rss_mib": round((status_kib(pid, "VmRSS") or 0) / 1024, 1),
            "open_files": len(os.listdir(f"/proc/{pid}/fd")), "memory_maps": maps}


def _idle_cpu(pid: int, seconds: float) -> float:
    """Share of one core the process used over ``seconds`` of no client requests."""
    from tools.bench.procstat import cpu_seconds
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


def run(target, topics: int, partitions: int, idle: float, per_request: int, settle: float,
        restart: bool = True, loopwatch: str | None = None, loopwatch_ms: float = 10.0) -> dict:
    """The steps on one target (tools.bench.targets: kproto or kafka), started fresh, then killed."""
    from confluent_kafka.admin import NewTopic
    out: dict = {"target": target.label, "topics": topics, "partitions_per_topic": partitions,
                 "load_average": round(os.getloadavg()[0], 2)}
    report = _watch(target, loopwatch, loopwatch_ms) if loopwatch and target.name == "kproto" else None
    try:
        t0 = time.monotonic()
        target.start(fresh=True)
        out["start_empty_s"] = round(time.monotonic() - t0, 2)
        pid = target.pid
        admin = _admin(target.bootstrap)
        total = topics * partitions
        names = [f"seed-{i:03d}" for i in range(topics)]
        errors = []
        admin.create_topics([NewTopic("probe", num_partitions=1, replication_factor=1)])["probe"].result(timeout=60)
        stop, latencies, probed = threading.Event(), [], []
        prober = threading.Thread(target=_probe_produce, args=(target.bootstrap, stop, latencies, probed), daemon=True)
        prober.start()
        time.sleep(1.0)
        latencies.clear()   # (its first produce waits for metadata and a connection)
        probed.clear()
        t0 = time.monotonic()
        for i in range(0, topics, per_request):
            futures = admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1)
                                           for n in names[i:i + per_request]],
                                          operation_timeout=300, request_timeout=300)
            for name, fut in futures.items():
                try:
                    fut.result(timeout=300)
                except Exception as exc:   # noqa: BLE001 - reported
                    errors.append(f"{name}: {exc}")
        out["create_answered_s"] = round(time.monotonic() - t0, 2)
        writer = threading.Thread(target=_write_every_partition,
                                  args=(target.bootstrap, names, partitions, out, t0), daemon=True)
        writer.start()
        data = getattr(getattr(target, "proc", None), "data_dir", None)
        if data:
            threading.Thread(target=_logs_made, args=(data, total, out, t0), daemon=True).start()
        while _listed(admin) < total and time.monotonic() - t0 < 600:
            time.sleep(0.2)
        out["create_visible_s"] = round(time.monotonic() - t0, 2)
        writer.join(660)
        writable_end = time.monotonic()
        stop.set()
        prober.join(60)
        if report:
            time.sleep(3.5)   # (the report is rewritten every 3 s)
            out["loop_stalls_during_creation"] = _stalls(report, t0, writable_end)
            with open(os.path.join(loopwatch, "probe.json"), "w") as f:
                json.dump([[round(a - t0, 3), round(ms, 2)] for a, ms in zip(probed, latencies)], f)
        if latencies:
            ordered = sorted(latencies)
            out["probe_produce_during_creation_ms"] = {
                "count": len(ordered), "p50": round(ordered[len(ordered) // 2], 1),
                "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1),
                "max": round(ordered[-1], 1)}
        out["load_average_end"] = round(os.getloadavg()[0], 2)
        out["create_errors"] = errors[:5]
        out["partitions_listed"] = _listed(admin)
        out["metadata_all_topics_ms"] = round(_metadata_ms(admin), 1)
        out["metadata_all_topics_wire_ms"] = round(_metadata_wire_ms(target.bootstrap), 1)
        # the creation's deferred work (kproto: five fsyncs per partition on the checkpoint
        # writer's thread; Kafka: log and checkpoint flushes) runs for a while after the answers:
        # reported apart from the idle figure
        out["settling_cpu_core"] = round(_idle_cpu(pid, settle), 4)
        out["idle_cpu_core"] = round(_idle_cpu(pid, idle), 4)
        out.update(_counts(pid))
        if not restart:
            return out

        target.kill()
        t0 = time.monotonic()
        target.start(fresh=False)
        out["restart_ready_s"] = round(time.monotonic() - t0, 2)
        admin = _admin(target.bootstrap)
        while _listed(admin) < total and time.monotonic() - t0 < 600:
            time.sleep(0.2)
        out["restart_listed_s"] = round(time.monotonic() - t0, 2)
        out["after_restart"] = _counts(target.pid)
        return out
    finally:
        target.kill()
        target.cleanup()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench partitions", description=__doc__.split("\n\n")[0])
    partition_count_arguments(ap)
    ap.add_argument("--ulimit", type=int, default=None, help="`ulimit -n` of the broker (default: inherited)")
    ap.add_argument("--loopwatch", metavar="DIR", help="run kproto under tools/bench/loopwatch.py and report its "
                    "event loop's long steps during the creation (DIR/kproto-loopwatch.json)")
    ap.add_argument("--loopwatch-ms", type=float, default=10.0, help="with --loopwatch: a long step (default 10)")
    target_arguments(ap)
    args = ap.parse_args(argv)
    from tools.bench.targets import make_targets
    names = target_names(args.targets)
    if any(n not in ("kproto", "kafka") for n in names):
        ap.error(f"--targets: kproto and/or kafka, got {args.targets!r}")
    results = []
    for target in make_targets(names, args.kafka_home):
        target.new_session = True           # a kill -9 takes the broker, not this process group
        target.open_files_limit = args.ulimit
        results.append(run(target, args.topics, args.partitions, args.idle, args.per_request, args.settle,
                           not args.no_restart, args.loopwatch, args.loopwatch_ms))
        print(json.dumps(results[-1], indent=2), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Kafka's own load generators (kafka-producer-perf-test.sh and
kafka-consumer-perf-test.sh from KAFKA_HOME) pointed at any endpoint: the Java
client's view of the same broker."""
from __future__ import annotations

import os
import re
import subprocess

# "500000 records sent, 148148.1 records/sec (144.68 MB/sec), 190.12 ms avg latency,
#  402.00 ms max latency, 187 ms 50th, 330 ms 95th, 380 ms 99th, 400 ms 99.9th."
_PRODUCER = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")


def _run(cmd: list[str], timeout: float) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                         env=dict(os.environ, KAFKA_HEAP_OPTS=os.environ.get("KAFKA_HEAP_OPTS", "-Xmx1G")))
    if out.returncode != 0:
        raise RuntimeError(f"{os.path.basename(cmd[0])} failed ({out.returncode}): {out.stderr[-2000:]}")
    return out.stdout


def producer_perf(home: str, bootstrap: str, topic: str, count: int, size: int, acks: str,
                  linger_ms: int = 5, timeout: float = 900) -> dict:
    stdout = _run([os.path.join(home, "bin", "kafka-producer-perf-test.sh"), "--topic", topic,
                   "--num-records", str(count), "--record-size", str(size), "--throughput", "-1",
                   "--producer-props", f"bootstrap.servers={bootstrap}", f"acks={acks}",
                   f"linger.ms={linger_ms}"], timeout)
    m = None
    for m in _PRODUCER.finditer(stdout):
        pass  # the last line is the summary
    if m is None:
        raise RuntimeError(f"unexpected kafka-producer-perf-test output: {stdout[-500:]}")
    return {"records/s": float(m.group(2)), "MiB/s": float(m.group(2)) * size / (1 << 20),
            "ack p50 ms": float(m.group(6)), "ack p99 ms": float(m.group(8)),
            "ack p999 ms": float(m.group(9))}


def consumer_perf(home: str, bootstrap: str, topic: str, count: int, size: int, timeout: float = 900) -> dict:
    """kafka-consumer-perf-test subscribes in a group, so it needs group support."""
    stdout = _run([os.path.join(home, "bin", "kafka-consumer-perf-test.sh"), "--bootstrap-server", bootstrap,
                   "--topic", topic, "--messages", str(count), "--timeout", "60000",
                   "--hide-header"], timeout)
    # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
    # rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    line = [ln for ln in stdout.splitlines() if ln.count(",") >= 9][-1]
    f = [x.strip() for x in line.split(",")]
    fetch_ms = float(f[7])
    n = float(f[4])
    if fetch_ms <= 0:
        raise RuntimeError(f"kafka-consumer-perf-test read nothing: {line}")
    # fetch.* excludes the group join, like the librdkafka figures
    return {"records/s": n / fetch_ms * 1000, "MiB/s": n * size / fetch_ms * 1000 / (1 << 20)}

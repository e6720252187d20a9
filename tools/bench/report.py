"""The results table (plain text for the terminal, Markdown for
docs/performance.md), the machine description and the raw JSON."""
from __future__ import annotations

import json
import math
import os
import platform
import re
import sys

from tools.bench.stats import spread

# Figures measured on real Apache Kafka elsewhere; quoted, never produced by this tool.
REFERENCE = """\
| figure | Apache Kafka 3.9.0 |
| --- | --- |
| librdkafka producer, 1 KiB records, acks=1 | about 150 MiB/s |
| librdkafka consumer reading back 1 KiB records | about 215-220 MiB/s |
| one record per ms, acks=1: produce-ack p50 / p99 | 0.45 ms / 7.5 ms |
| one record per ms, acks=1: end-to-end p99 | 9 ms |
| broker CPU while serving the producer | 0.4-0.6 core |
| loopback TCP on this machine type | about 1.5 GiB/s |
"""

SECTION_ORDER = ("produce", "fsync loop", "latency beside fsync", "consume", "latency", "Kafka's perf tools",
                 "broker cost")

MARKER = "<!-- Everything below this line is hand-written; python -m tools.bench --markdown keeps it. -->"

DEFAULT_TAIL = MARKER + """

## Where the time goes

(not profiled yet: run `python -m tools.bench profile` and summarise here)
"""


def machine() -> dict[str, str]:
    info = {"processors (nproc)": str(os.cpu_count())}
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
            if m:
                info["CPU model"] = m.group(1).strip()
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            m = re.search(r"^MemTotal:\s*(\d+) kB", f.read(), re.M)
            if m:
                info["memory"] = f"{int(m.group(1)) / (1 << 20):.1f} GiB"
    except OSError:
        pass
    info["kernel"] = f"{platform.system()} {platform.release()}"
    info["Python"] = sys.version.split()[0]
    try:
        import trio
        info["trio"] = trio.__version__
    except ImportError:
        pass
    try:
        import confluent_kafka
        client = confluent_kafka.version()
        client = client[0] if isinstance(client, tuple) else client
        info["confluent-kafka / librdkafka"] = f"{client} / {confluent_kafka.libversion()[0]}"
    except ImportError:
        pass
    return info


def fmt(x: float) -> str:
    if not math.isfinite(x):
        return "-"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def cell(values: list) -> tuple[str, float | None]:
    """A cell's text (median, and min-max when there are several) and its median."""
    s = spread(values)
    if s is None:
        text = next((v for v in values if isinstance(v, str)), "")
        return text, None
    lo, med, hi = s
    n = sum(1 for v in values if isinstance(v, (int, float)))
    if n > 1:
        return f"{fmt(med)} ({fmt(lo)}-{fmt(hi)})", med
    return fmt(med), med


def rows(results) -> tuple[list[str], list[tuple[str, list[list[str]]]]]:
    """(column headers, [(section, rows)]): one row per figure, a column per
    target, and kproto's ratio to each other target."""
    names = list(results.runs)
    others = [n for n in names if n != "kproto"] if "kproto" in names else []
    headers = ["case", "figure"] + [results.labels[n] for n in names] + \
        [f"kproto / {results.labels[o].split(' (')[0]}" for o in others]
    sections: dict[str, list[list[str]]] = {}
    last_case = {}
    for section, case, metric in results.keys():
        if metric == "error" and case == "start":
            continue
        out = []
        medians = {}
        for n in names:
            text, med = cell([rep.get((section, case, metric)) for rep in results.runs[n]])
            out.append(text)
            medians[n] = med
        for o in others:
            a, b = medians.get("kproto"), medians.get(o)
            out.append(f"{a / b:.2f}x" if a is not None and b else "")
        sec_rows = sections.setdefault(section, [])
        shown_case = case if last_case.get(section) != case else ""
        last_case[section] = case
        sec_rows.append([shown_case, metric] + out)
    order = {s: i for i, s in enumerate(SECTION_ORDER)}
    return headers, sorted(sections.items(), key=lambda kv: order.get(kv[0], len(order)))


def text_table(results) -> str:
    headers, sections = rows(results)
    all_rows = [r for _s, rs in sections for r in rs]
    widths = [max([len(h)] + [len(r[i]) for r in all_rows]) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    out = []
    for section, rs in sections:
        out.append("")
        out.append(f"== {section} ==")
        out.append(line(headers))
        out.append("  ".join("-" * w for w in widths))
        out.extend(line(r) for r in rs)
    reps = results.plan.reps
    out.append("")
    out.append(f"{'median (min-max) over ' + str(reps) + ' repetitions' if reps > 1 else 'one repetition'}; "
               f"MiB = 2^20 bytes of record values; ran {results.seconds:.0f} s")
    if results.errors:
        out.append(f"{len(results.errors)} error(s):")
        out.extend("  " + e for e in results.errors)
    return "\n".join(out)


def markdown_tables(results) -> str:
    headers, sections = rows(results)
    out = []
    for section, rs in sections:
        out.append(f"### {section}")
        out.append("")
        out.append("| " + " | ".join(headers) + " |")
        out.append("| " + " | ".join(["---", "---"] + ["---:"] * (len(headers) - 2)) + " |")
        for r in rs:
            out.append("| " + " | ".join(c.replace("|", "/") for c in r) + " |")
        out.append("")
    return "\n".join(out)


def method(results) -> str:
    p = results.plan
    recs = ", ".join(f"{v:,} records of {k} B" for k, v in p.records.items())
    return f"""\
- Command: `python -m tools.bench {' '.join(sorted(p.workloads)) if len(p.workloads) < 5 else 'all'} --reps {p.reps}`
  ({', '.join(results.labels[t] for t in results.runs)}). Every target is a separate process on
  127.0.0.1 with its data in a temporary folder; within each repetition the targets take turns, and
  each repetition starts the next target first. Cells are the median and, in brackets, the
  minimum and maximum over the repetitions; ratios compare medians.
- Client: confluent-kafka (librdkafka) in the benchmark process, default settings except those
  named. Consumers set fetch.queue.backoff.ms=10: with librdkafka's default of 1000 ms a reader that
  falls behind for a moment stops fetching for a whole second, which made the spread between runs
  several-fold; every target gets the same setting.
- **produce**: one producer sends {recs} to each topic (a topic per size, acks
  and partition count: {', '.join(map(str, p.partitions))} partitions), acks=1 and acks=all,
  linger.ms={p.linger_ms}, no compression, no keys. Time runs from the first `produce()` to the last
  delivery callback; one acknowledged warm-up record before the clock starts. Produce-ack latency
  is librdkafka's per-message latency (`Message.latency()`: `produce()` to the delivery callback,
  microsecond clock), callbacks served by a poller thread; under a saturating load it is mostly
  time spent queued in the client.
- **consume**: the acks={p.acks[0]} topics read back from offset 0 by one consumer (`assign`) and by a
  group of {p.group_members} consumers (`subscribe`, threads in one process) where the target serves
  JoinGroup. Throughput runs from the assignment (after the consumer has connected and fetched
  metadata; for the group, the first member's partitions assigned) to the last record, so
  connecting and the group join are excluded. MiB/s counts record values only.
- **latency**: one 100 B record every millisecond for {p.latency_seconds:g} s, linger.ms=0, one partition;
  produce-ack as above; end to end is the consumer's arrival time minus the send time stamped in
  the value (same process, monotonic clock), the consumer polling in its own thread.
- **broker cost**: CPU is utime+stime of the broker process from /proc/<pid>/stat across the
  produce (or consume) runs, divided by the record bytes moved; "cores busy" is that CPU time over
  the wall time of those runs. "Bytes sent per byte read" is the broker's wchar from
  /proc/<pid>/io (the bytes it passed to sendfile and file writes) across the consume runs over the
  record bytes the consumers kept: a fetch answer cut at max.partition.fetch.bytes ends in a partial
  batch, as Kafka cuts it, which the consumer drops and fetches again; "CPU s per GiB sent" divides
  the same CPU by those bytes. Peak RSS is VmHWM from /proc/<pid>/status after all workloads.
  Start to ready is spawn to the ready line on a fresh data folder. Recovery: {p.recovery_mib} MiB of
  1 KiB records written to one partition, the broker killed with SIGKILL, then restarted on the
  same folder; seconds from spawn to ready (the log end offset is checked after).
- **sink (ceiling)**: `tools/bench/sink.py`, a trio server using kproto's codecs that acknowledges
  Produce without storing (it keeps only the last 4 MiB produced per partition, so the latency
  probe reads its own records) and answers Fetch with copies of a pre-built 64 KiB batch. The client, Python's codecs and
  loopback TCP bound every target; kproto's figures read as a fraction of the sink's. The sink is
  not a broker: cost figures do not apply to it.
- Kafka's own `kafka-producer-perf-test.sh` / `kafka-consumer-perf-test.sh` run against each broker
  when KAFKA_HOME names an Apache Kafka distribution (also started single-node KRaft on loopback).
"""


def markdown(results) -> str:
    info = machine()
    if "kproto" in results.versions:
        info["kproto commit"] = results.versions["kproto"]
    if "kafka" in results.versions:
        info["Apache Kafka"] = results.versions["kafka"]
    date = results.started
    mach = "\n".join(f"| {k} | {v} |" for k, v in info.items())
    errors = ""
    if results.errors:
        errors = "\nErrors in this run:\n\n" + "\n".join(f"- {e}" for e in results.errors) + "\n"
    return f"""\
# Performance

Written by `python -m tools.bench --markdown docs/performance.md`; the part above the marker line
is replaced on every run, the part below is kept.

## Method

{method(results)}
## Machine

| | |
| --- | --- |
{mach}

## Baseline: Apache Kafka 3.9.0, recorded elsewhere (not this run)

Recorded on the same machine type (2 vCPU) with the same client; quoted for comparison, not
measured by this tool.

{REFERENCE}
## Results, {date}

{markdown_tables(results)}{errors}"""


def write_markdown(path: str, results) -> None:
    tail = DEFAULT_TAIL
    try:
        with open(path) as f:
            old = f.read()
        if MARKER in old:
            tail = old[old.index(MARKER):]
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(markdown(results).rstrip() + "\n\n" + tail.rstrip() + "\n")


def write_json(path: str, results) -> None:
    data = {
        "started": results.started, "seconds": results.seconds, "plan": results.plan.describe(),
        "machine": machine(), "labels": results.labels, "versions": results.versions,
        "errors": results.errors,
        "runs": {t: [[{"section": k[0], "case": k[1], "metric": k[2], "value": v} for k, v in rep.items()]
                     for rep in reps] for t, reps in results.runs.items()},
    }
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


def load_json(path: str):
    """Results saved with --json, for re-rendering the table or the Markdown."""
    from tools.bench.runner import Plan, Results
    with open(path) as f:
        data = json.load(f)
    d = data["plan"]
    plan = Plan(workloads=set(d["workloads"]), targets=d["targets"], reps=d["reps"], sizes=tuple(d["sizes"]),
                records={int(k): v for k, v in d["records"].items()}, acks=tuple(d["acks"]),
                partitions=tuple(d["partitions"]), linger_ms=d["linger_ms"], group_members=d["group_members"],
                latency_seconds=d["latency_seconds"], recovery_mib=d["recovery_mib"],
                perf_records=d["perf_records"], broker_settings=d.get("broker_settings", {}),
                fsync_seconds=d.get("fsync_seconds", 3.0), producers=d.get("producers", 1))
    res = Results(plan, labels=data["labels"], errors=data["errors"], started=data["started"],
                  seconds=data["seconds"], versions=data["versions"])
    res.runs = {t: [{(f["section"], f["case"], f["metric"]): f["value"] for f in rep} for rep in reps]
                for t, reps in data["runs"].items()}
    return res

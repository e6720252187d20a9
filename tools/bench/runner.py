"""Runs the benchmark plan against each target, alternating targets within
every repetition, and collects the figures.

Figures are keyed (section, case, metric); a value is a number, or a string
saying why there is none ("n/a ...", "error: ...")."""
from __future__ import annotations

import datetime
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition

from tools.bench import fsyncloop, perftools, workloads
from tools.bench.progress import Progress
from tools.bench.targets import Target, make_targets

GiB = 1 << 30
MiB = 1 << 20
NO_GROUPS = "n/a (no group support)"


@dataclass
class Plan:
    workloads: set[str]
    targets: list[str]
    reps: int = 3
    sizes: tuple[int, ...] = (100, 1024)
    records: dict[int, int] = field(default_factory=lambda: {100: 1_000_000, 1024: 250_000})
    acks: tuple[str, ...] = ("1", "all")
    partitions: tuple[int, ...] = (1, 6)
    linger_ms: int = 5
    group_members: int = 3
    latency_seconds: float = 10.0
    recovery_mib: int = 1024
    perf_records: int = 250_000
    kafka_home: str | None = None
    broker_settings: dict[str, str] = field(default_factory=dict)  # --broker-set
    producers: int = 1  # producer connections per produce run
    fsync_seconds: float = 3.0

    def describe(self) -> dict:
        return {"workloads": sorted(self.workloads), "targets": self.targets, "reps": self.reps,
                "sizes": list(self.sizes), "records": {str(k): v for k, v in self.records.items()},
                "acks": list(self.acks), "partitions": list(self.partitions), "linger_ms": self.linger_ms,
                "group_members": self.group_members, "latency_seconds": self.latency_seconds,
                "recovery_mib": self.recovery_mib, "perf_records": self.perf_records,
                "broker_settings": self.broker_settings, "fsync_seconds": self.fsync_seconds,
                "producers": self.producers}


@dataclass
class Results:
    plan: Plan
    labels: dict[str, str] = field(default_factory=dict)
    # target -> one dict per repetition: (section, case, metric) -> value
    runs: dict[str, list[dict]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    started: str = ""
    seconds: float = 0.0
    versions: dict[str, str] = field(default_factory=dict)

    def keys(self) -> list[tuple]:
        seen = {}
        for reps in self.runs.values():
            for rep in reps:
                for k in rep:
                    seen.setdefault(k, None)
        return list(seen)


def size_label(size: int) -> str:
    return f"{size // 1024} KiB" if size % 1024 == 0 else f"{size} B"


def produce_case(size: int, acks: str, parts: int, producers: int = 1) -> str:
    many = f", {producers} producers" if producers > 1 else ""
    return f"{size_label(size)}, acks={acks}, {parts} partition{'s' if parts > 1 else ''}{many}"


def consume_case(size: int, parts: int, mode: str) -> str:
    return f"{size_label(size)}, {parts} partition{'s' if parts > 1 else ''}, {mode}"


BESIDE_FSYNC_TOPIC = "beside-fsync-p1"
BESIDE_PROBE_TOPIC = "beside-probe-p1"


def topic_name(size: int, parts: int, acks: str) -> str:
    # the sink reads the partition count from "-p<N>-"
    return f"bench-s{size}-p{parts}-a{acks}"


class Runner:
    def __init__(self, plan: Plan, progress: Progress | None = None):
        self.plan = plan
        self.progress = progress or Progress()
        self.results = Results(plan)
        self._rep = 0

    # -- plan ----------------------------------------------------------------

    def _steps_per_target(self, target: Target) -> int:
        p, w = self.plan, self.plan.workloads
        n = 1  # start
        if "produce" in w or "consume" in w:
            n += len(p.sizes) * len(p.acks) * len(p.partitions)
        if "consume" in w:
            n += len(p.sizes) * len(p.partitions) * 2
        if "latency" in w:
            n += len(p.acks)
        if "perf" in w and p.kafka_home and target.name != "sink":
            n += 2
        if "cost" in w and target.recoverable:
            n += 1
        if "fsync" in w and target.is_broker:
            n += 1
        if "beside" in w and target.is_broker:
            n += 1
        return n

    def run(self) -> Results:
        plan = self.plan
        targets = make_targets(plan.targets, plan.kafka_home, plan.broker_settings)
        res = self.results
        res.started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        t0 = time.monotonic()
        for t in targets:
            res.labels[t.name] = t.label
            res.runs[t.name] = []
            if t.name == "kafka":
                res.versions["kafka"] = t.version
        res.versions["kproto"] = _kproto_version()
        self.progress.total_steps = plan.reps * sum(self._steps_per_target(t) for t in targets)
        try:
            for rep in range(plan.reps):
                # alternate: each repetition starts with the next target
                order = targets[rep % len(targets):] + targets[:rep % len(targets)]
                for target in order:
                    figures: dict = {}
                    res.runs[target.name].append(figures)
                    self._run_target(target, rep, figures)
        finally:
            for t in targets:
                t.kill()
                t.cleanup()
        res.seconds = time.monotonic() - t0
        return res

    # -- one target, one repetition ---------------------------------------------

    def _record_error(self, target: Target, rep: int, figures: dict, key_prefix: tuple, exc: Exception) -> None:
        msg = f"error: {type(exc).__name__}: {exc}".splitlines()[0][:200]
        figures[key_prefix + ("error",)] = "error (listed below)"
        self.results.errors.append(f"{target.name} rep {rep + 1} {' / '.join(key_prefix)}: {msg}")
        self.progress.finish(msg)

    def _run_target(self, target: Target, rep: int, figures: dict) -> None:
        plan, w, prog = self.plan, self.plan.workloads, self.progress
        self._rep = rep
        tag = f"rep {rep + 1}/{plan.reps} {target.name}"
        prog.step(f"{tag}: start")
        try:
            ready = target.start(fresh=True)
        except Exception as exc:
            self._record_error(target, rep, figures, ("broker cost", "start"), exc)
            return
        prog.finish(f"ready in {ready:.2f} s")
        if target.is_broker:
            figures[("broker cost", "", "start to ready s")] = ready
        cost = {"produce_cpu": 0.0, "produce_wall": 0.0, "produce_bytes": 0,
                "consume_cpu": 0.0, "consume_wall": 0.0, "consume_bytes": 0}
        try:
            topics = {}
            if w & {"produce", "consume"}:
                topics.update({topic_name(s, n, a): n for s in plan.sizes for n in plan.partitions for a in plan.acks})
            if "latency" in w:
                topics.update({f"latency-a{a}-p1": 1 for a in plan.acks})
            if "perf" in w and plan.kafka_home:
                topics["perf-s1024-p1-a1"] = 1
            configs = {}
            if "beside" in w and target.is_broker:
                topics.update({BESIDE_FSYNC_TOPIC: 1, BESIDE_PROBE_TOPIC: 1})
                configs[BESIDE_FSYNC_TOPIC] = {"flush.messages": "1"}
                # Kafka's default, set on the topic so a broker-wide setting does not reach it
                configs[BESIDE_PROBE_TOPIC] = {"flush.messages": str(2**63 - 1)}
            target.create_topics(topics, configs)

            if w & {"produce", "consume"}:
                for size in plan.sizes:
                    for parts in plan.partitions:
                        for acks in plan.acks:
                            self._produce(target, tag, figures, cost, size, parts, acks)
            if "consume" in w:
                groups = target.supports_groups()
                for size in plan.sizes:
                    for parts in plan.partitions:
                        self._consume(target, tag, figures, cost, size, parts, groups)
            if "latency" in w:
                for acks in plan.acks:
                    self._latency(target, tag, figures, acks)
            if "perf" in w and plan.kafka_home and target.name != "sink":
                self._perf_tools(target, tag, figures)
            if "fsync" in w and target.is_broker:
                self._fsync_loop(target, tag, figures)
            if "beside" in w and target.is_broker:
                self._beside_fsync(target, tag, figures)
            if target.is_broker:
                self._cost_figures(target, figures, cost)
        finally:
            target.stop()
        if "cost" in w and target.recoverable:
            self._recovery(target, tag, figures)

    def _measured(self, target: Target, cost: dict, kind: str, fn):
        cpu0 = target.cpu_seconds() if target.is_broker else 0.0
        written0 = target.written_bytes() if target.is_broker else None
        wall0 = time.perf_counter()
        out = fn()
        if target.is_broker:
            cost[kind + "_cpu"] += target.cpu_seconds() - cpu0
            cost[kind + "_wall"] += time.perf_counter() - wall0
            cost[kind + "_bytes"] += out["bytes"]
            written = target.written_bytes()
            if written0 is None or written is None:
                cost[kind + "_written"] = None
            elif cost.get(kind + "_written", 0) is not None:
                cost[kind + "_written"] = cost.get(kind + "_written", 0) + written - written0
        return out

    def _produce(self, target, tag, figures, cost, size, parts, acks) -> None:
        plan, prog = self.plan, self.progress
        case = produce_case(size, acks, parts, plan.producers)
        prog.step(f"{tag}: produce {case}")
        try:
            out = self._measured(target, cost, "produce", lambda: workloads.produce(
                target.bootstrap, topic_name(size, parts, acks), plan.records[size], size, acks,
                plan.linger_ms, progress=prog.update, producers=plan.producers))
        except Exception as exc:
            self._record_error(target, self._rep, figures, ("produce", case), exc)
            return
        for m in ("records/s", "MiB/s", "ack p50 ms", "ack p99 ms", "ack p999 ms"):
            figures[("produce", case, m)] = out[m]
        prog.finish(f"{out['MiB/s']:.1f} MiB/s, ack p99 {out['ack p99 ms']:.1f} ms")

    def _fsync_loop(self, target, tag, figures) -> None:
        """The device's limit for fsync before ack, measured next to the
        target's data (same file system) right after its produce runs."""
        prog = self.progress
        case = "write + fdatasync of 1 KiB, one file, one thread"
        prog.step(f"{tag}: {case}")
        try:
            out = fsyncloop.write_fdatasync_loop(target.workdir, 1024, self.plan.fsync_seconds)
        except Exception as exc:
            self._record_error(target, self._rep, figures, ("fsync loop", case), exc)
            return
        for m in ("fsyncs/s", "MiB/s", "p50 ms", "p99 ms"):
            figures[("fsync loop", case, m)] = out[m]
        prog.finish(f"{out['fsyncs/s']:,.0f} fsyncs/s, p99 {out['p99 ms']:.2f} ms")

    def _beside_fsync(self, target, tag, figures) -> None:
        """What fsyncs cost everyone else: the latency probe (one record per
        ms, acks=1) on a topic that never fsyncs while producers send 1 KiB
        acks=all records as fast as they can to a topic that fsyncs every
        message."""
        plan, prog = self.plan, self.progress
        who = f"{plan.producers} producers" if plan.producers > 1 else "a producer"
        case = (f"1 record/ms, acks=1, topic without fsyncs, beside {who} of 1 KiB acks=all "
                f"to a flush.messages=1 topic")
        prog.step(f"{tag}: latency beside fsync load")
        stop, errors, load = threading.Event(), [], {"bytes": 0, "seconds": 0.0}

        def fsync_load():
            try:
                while not stop.is_set():
                    out = workloads.produce(target.bootstrap, BESIDE_FSYNC_TOPIC, 50_000, 1024, "all",
                                            plan.linger_ms, producers=plan.producers)
                    load["bytes"] += out["bytes"]
                    load["seconds"] += out["seconds"]
            except Exception as exc:
                errors.append(exc)

        loader = threading.Thread(target=fsync_load, daemon=True)
        loader.start()
        try:
            time.sleep(1.0)  # the load under way
            out = workloads.latency(target.bootstrap, BESIDE_PROBE_TOPIC, plan.latency_seconds, "1",
                                    progress=prog.update)
        except Exception as exc:
            self._record_error(target, self._rep, figures, ("latency beside fsync", case), exc)
            return
        finally:
            stop.set()
            loader.join()
        if errors:
            self._record_error(target, self._rep, figures, ("latency beside fsync", case), errors[0])
            return
        for m in ("ack p50 ms", "ack p99 ms", "ack p999 ms", "e2e p50 ms", "e2e p99 ms"):
            figures[("latency beside fsync", case, m)] = out[m]
        if load["seconds"]:
            figures[("latency beside fsync", case, "fsync load MiB/s")] = load["bytes"] / load["seconds"] / MiB
        prog.finish(f"ack p99 {out['ack p99 ms']:.2f} ms beside the fsync load")

    def _consume(self, target, tag, figures, cost, size, parts, groups: bool) -> None:
        plan, prog = self.plan, self.progress
        # read back what the acks=1 run wrote, plus its warm-up record
        acks = plan.acks[0]
        topic = topic_name(size, parts, acks)
        expected = plan.records[size] + 1
        modes = [("assign", lambda: workloads.consume_assigned(
            target.bootstrap, topic, parts, expected, size, progress=prog.update))]
        modes.append((f"group of {plan.group_members}", lambda: workloads.consume_group(
            target.bootstrap, topic, expected, size, plan.group_members, progress=prog.update)))
        for mode, fn in modes:
            case = consume_case(size, parts, mode)
            prog.step(f"{tag}: consume {case}")
            if mode != "assign" and not groups:
                figures[("consume", case, "records/s")] = NO_GROUPS
                figures[("consume", case, "MiB/s")] = NO_GROUPS
                prog.finish(NO_GROUPS)
                continue
            try:
                out = self._measured(target, cost, "consume", fn)
            except Exception as exc:
                self._record_error(target, self._rep, figures, ("consume", case), exc)
                continue
            figures[("consume", case, "records/s")] = out["records/s"]
            figures[("consume", case, "MiB/s")] = out["MiB/s"]
            prog.finish(f"{out['MiB/s']:.1f} MiB/s")

    def _latency(self, target, tag, figures, acks) -> None:
        plan, prog = self.plan, self.progress
        case = f"1 record/ms for {plan.latency_seconds:g} s, acks={acks}, linger 0"
        prog.step(f"{tag}: latency acks={acks}")
        try:
            out = workloads.latency(target.bootstrap, f"latency-a{acks}-p1", plan.latency_seconds, acks,
                                    progress=prog.update)
        except Exception as exc:
            self._record_error(target, self._rep, figures, ("latency", case), exc)
            return
        for m in ("ack p50 ms", "ack p99 ms", "ack p999 ms", "e2e p50 ms", "e2e p99 ms"):
            figures[("latency", case, m)] = out[m]
        prog.finish(f"ack p50 {out['ack p50 ms']:.2f} ms, e2e p99 {out['e2e p99 ms']:.2f} ms")

    def _perf_tools(self, target, tag, figures) -> None:
        plan, prog = self.plan, self.progress
        topic = "perf-s1024-p1-a1"
        case = "kafka-producer-perf-test, 1 KiB, acks=1, linger 5, 1 partition"
        prog.step(f"{tag}: {case}")
        try:
            out = perftools.producer_perf(plan.kafka_home, target.bootstrap, topic, plan.perf_records, 1024, "1",
                                          plan.linger_ms)
            for m in ("records/s", "MiB/s", "ack p50 ms", "ack p99 ms", "ack p999 ms"):
                figures[("Kafka's perf tools", case, m)] = out[m]
            prog.finish(f"{out['MiB/s']:.1f} MiB/s")
        except Exception as exc:
            self._record_error(target, self._rep, figures, ("Kafka's perf tools", case), exc)
            return
        case = "kafka-consumer-perf-test, 1 KiB, 1 partition (group)"
        prog.step(f"{tag}: {case}")
        if not target.supports_groups():
            figures[("Kafka's perf tools", case, "MiB/s")] = NO_GROUPS
            prog.finish(NO_GROUPS)
            return
        try:
            out = perftools.consumer_perf(plan.kafka_home, target.bootstrap, topic, plan.perf_records, 1024)
            figures[("Kafka's perf tools", case, "records/s")] = out["records/s"]
            figures[("Kafka's perf tools", case, "MiB/s")] = out["MiB/s"]
            prog.finish(f"{out['MiB/s']:.1f} MiB/s")
        except Exception as exc:
            self._record_error(target, self._rep, figures, ("Kafka's perf tools", case), exc)

    def _cost_figures(self, target, figures, cost) -> None:
        c = "broker cost"
        if cost["produce_bytes"]:
            figures[(c, "", "CPU s per GiB written")] = cost["produce_cpu"] / (cost["produce_bytes"] / GiB)
            figures[(c, "", "cores busy while producing")] = cost["produce_cpu"] / cost["produce_wall"]
        if cost["consume_bytes"]:
            figures[(c, "", "CPU s per GiB read")] = cost["consume_cpu"] / (cost["consume_bytes"] / GiB)
            figures[(c, "", "cores busy while consuming")] = cost["consume_cpu"] / cost["consume_wall"]
            if cost.get("consume_written"):
                # the bytes sent by sendfile per record byte the consumers kept: a fetch answer
                # cut at max.partition.fetch.bytes ends in a partial batch (as Kafka cuts it),
                # which the consumer drops and fetches again; CPU per GiB read grows with it
                sent = cost["consume_written"]
                figures[(c, "", "bytes sent per byte read")] = sent / cost["consume_bytes"]
                figures[(c, "", "CPU s per GiB sent")] = cost["consume_cpu"] / (sent / GiB)
        rss = target.peak_rss()
        if rss:
            figures[(c, "", "peak RSS MiB")] = rss / MiB

    def _recovery(self, target, tag, figures) -> None:
        """Write a log, kill -9, restart on the same data: seconds to ready."""
        plan, prog = self.plan, self.progress
        metric = f"recovery of {plan.recovery_mib} MiB after kill -9, s"
        prog.step(f"{tag}: recovery of {plan.recovery_mib} MiB after kill -9")
        try:
            target.start(fresh=True)
            topic = "recovery-p1"
            target.create_topics({topic: 1})
            count = plan.recovery_mib * MiB // 1024
            workloads.produce(target.bootstrap, topic, count, 1024, "1", plan.linger_ms, progress=prog.update)
            target.kill()
            seconds = target.start(fresh=False)
            end = _high_watermark(target.bootstrap, topic)
            if end != count + 1:
                raise RuntimeError(f"after recovery the log ends at offset {end}, expected {count + 1}")
            figures[("broker cost", "", metric)] = seconds
            prog.finish(f"ready in {seconds:.2f} s")
        except Exception as exc:
            self._record_error(target, self._rep, figures, ("broker cost", "recovery"), exc)
        finally:
            target.stop()


def _high_watermark(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-recovery", "logger": workloads._quiet})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
    finally:
        c.close()


def _kproto_version() -> str:
    """The commit the broker ran from (the work tree may have moved on during the run)."""
    import os
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "broker", "kproto"],
                               cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (commit or "unknown") + (" with local changes to broker/ or kproto/" if dirty else "")

"""tail latency at fixed offered rates, kproto beside Apache Kafka in the same run

Each case (offered records/s, record size, acks, partitions) runs against
every target in turn, alternating A B A B over the repetitions, on brokers
that stay up for the whole run (the ones not being measured are paused
with SIGSTOP, so an idle JVM's background work does not take the CPU of the
broker being measured), each in a session of its own (a scheduler
autogroup: the broker competes with the machine's other work as one unit,
not thread by thread with the clients). Several producer processes share the offered
rate; each sends the records due in a burst and sleeps until the next is
due (no busy-waiting: on a small machine the load generator's CPU is the
broker's, and the table shows what each side took); each record carries the time it was
*scheduled* to be sent (CLOCK_MONOTONIC, shared by the processes of one
machine), so a client or broker that falls behind is charged for the
records it delayed (no coordinated omission). Ack latency is measured in
the producer's delivery callback, end-to-end latency by a consumer process
(assigned every partition of a fresh topic and fetching before the producers
start). Both go into log-linear histograms (tools/bench/hist.py, under 1 %
error). The table also has the machine's load average during the case and,
for kproto, the broker's event-loop lag percentiles (its metrics endpoint).

  KAFKA_HOME=~/.cache/kproto-ref/kafka python -m tools.bench latency \\
      --rates 1000,2000,5000,10000,20000,50000,75000,100000 --sizes 1024 --acks all \\
      --partitions 1 --seconds 10 --reps 2 --json lat.json --plot lat.png
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import struct
import sys
import time
import urllib.request

from tools.bench.hist import Histogram

STAMP = struct.Struct(">q")
WARM = b"w"          # warm-up records: shorter than a stamp, skipped by the consumer
STALL_SECONDS = 30.0
_CTX = mp.get_context("spawn")   # no threads of the parent in the workers


def _quiet_logger():
    import logging
    log = logging.getLogger("tools.bench.latency.rdkafka")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    return log


# -- worker processes ------------------------------------------------------------------------------


def _thread_wait_s() -> float:
    """Seconds this process's threads (librdkafka's included) spent
    runnable but not running (schedstat)."""
    return runqueue_wait_s(os.getpid())


def producer_worker(bootstrap: str, topic: str, partitions: int, rate: float, seconds: float, size: int,
                    acks: str, linger_ms: int, ready, go, start, first_partition: int, out,
                    tick_ms: float = 0.2) -> None:
    """Warms up, says so on ``ready``, then sends ``rate`` records/s for
    ``seconds`` from ``start.value`` (monotonic ns, set before ``go``),
    round-robin over the partitions, each record stamped with its scheduled
    send time; puts its ack histogram, counts and CPU time on ``out``.
    Between bursts it sleeps (no busy-waiting: on a small machine the load
    generator's CPU is the broker's), at least ``tick_ms``."""
    from confluent_kafka import Producer
    tick_ns = int(tick_ms * 1e6)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": linger_ms,
                         "logger": _quiet_logger(), "client.id": "kproto-bench-latency",
                         "queue.buffering.max.messages": 1_000_000})
    hist = Histogram()
    errors = []
    acked = [0]
    record = hist.record

    def delivered(err, msg):
        if err is not None:
            errors.append(str(err))
            return
        v = msg.value()
        if len(v) >= 8:
            acked[0] += 1
            record((time.monotonic_ns() - STAMP.unpack_from(v, 0)[0]) // 1000)

    try:
        for p in range(partitions):  # connection and metadata before the clock starts
            producer.produce(topic, WARM, partition=p, on_delivery=delivered)
        if producer.flush(STALL_SECONDS):
            raise RuntimeError("warm-up records not acknowledged")
        if errors:
            raise RuntimeError(f"warm-up failed: {errors[0]}")
        ready.put(os.getpid())
        if not go.wait(STALL_SECONDS * 2):
            raise RuntimeError("no start signal")
        start_ns = start.value
        pad = b"\x00" * max(size - STAMP.size, 0)
        count = int(rate * seconds)
        interval_ns = 1e9 / rate
        produce, poll, now_ns, sleep = producer.produce, producer.poll, time.monotonic_ns, time.sleep
        part = first_partition
        i = 0
        behind = 0
        cpu0, wait0 = time.process_time(), _thread_wait_s()
        while i < count:
            now = now_ns()
            due = min(count, int((now - start_ns) / interval_ns) + 1) if now >= start_ns else 0
            if due - i > rate * 0.05:
                behind += 1      # more than 50 ms worth queued in this process: the client lags
            while i < due:       # every record now due, in one burst
                stamp = start_ns + int(i * interval_ns)
                try:
                    produce(topic, STAMP.pack(stamp) + pad, partition=part, on_delivery=delivered)
                except BufferError:
                    poll(0.001)
                    continue
                part = part + 1 if part + 1 < partitions else 0
                i += 1
            if i >= count:
                break
            # Sleep until the next record is due, serving delivery callbacks.
            # librdkafka's poll() takes whole milliseconds (a timeout under
            # 1 ms is poll(0), which returns at once: the old loop spun here
            # and its producers took the CPU the broker needed); it returns
            # early when a delivery report arrives, so acks are timed when they
            # come. A wait under 1 ms is a plain sleep, at least ``tick``.
            wait = start_ns + int(i * interval_ns) - now_ns()
            if wait >= 1_000_000:
                poll((wait // 1_000_000) / 1000)
            else:
                poll(0)
                if wait > 0:
                    sleep(max(wait, tick_ns) / 1e9)
        cpu = time.process_time() - cpu0
        wait_s = _thread_wait_s() - wait0
        deadline = time.monotonic() + STALL_SECONDS
        while producer.flush(0.1) and time.monotonic() < deadline:
            pass
        out.put({"ack": hist.to_dict(), "sent": count, "acked": acked[0], "errors": errors[:3],
                 "error_count": len(errors), "behind_ticks": behind, "cpu_s": cpu, "runq_s": wait_s})
    except Exception as exc:  # reported by the parent
        out.put({"fatal": f"{type(exc).__name__}: {exc}"})


def consumer_worker(bootstrap: str, topic: str, partitions: int, expected: int, ready, go, out,
                    deadline_s: float) -> None:
    """Fetches every partition from offset 0 (skipping warm-up records) and
    records arrival minus scheduled send time."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    try:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{os.getpid()}-{time.time_ns()}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "fetch.queue.backoff.ms": 10, "logger": _quiet_logger()})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        # one warm record per partition, consumed: every partition is being fetched
        warm = Producer({"bootstrap.servers": bootstrap, "logger": _quiet_logger()})
        for p in range(partitions):
            warm.produce(topic, WARM, partition=p)
        warm.flush(STALL_SECONDS)
        seen = set()
        limit = time.monotonic() + STALL_SECONDS
        while len(seen) < partitions:
            m = consumer.poll(0.05)
            if m is not None and m.error() is None:
                seen.add(m.partition())
            if time.monotonic() > limit:
                raise RuntimeError(f"consumer saw warm-up records of {len(seen)}/{partitions} partitions")
        ready.set()
        go.wait(STALL_SECONDS)
        cpu0 = time.process_time()
        hist = Histogram()
        record = hist.record
        got = 0
        now_ns = time.monotonic_ns
        end = time.monotonic() + deadline_s
        while got < expected and time.monotonic() < end:
            # poll() returns with the first record that arrives; consume(n, 0)
            # then takes those already queued behind it. (consume(n, timeout)
            # waits out its whole timeout unless n records come: 5 ms of it
            # was in every end-to-end figure, 2.5 ms on average.)
            first = consumer.poll(0.1)
            if first is None:
                continue
            now = now_ns()
            batch = [first]
            while True:
                for m in batch:
                    if m.error() is not None:
                        continue
                    v = m.value()
                    if v is None or len(v) < 8:
                        continue
                    record((now - STAMP.unpack_from(v, 0)[0]) // 1000)
                    got += 1
                batch = consumer.consume(1000, 0)
                if not batch:
                    break
                now = now_ns()
        cpu = time.process_time() - cpu0
        consumer.close()
        out.put({"e2e": hist.to_dict(), "consumed": got, "cpu_s": cpu})
    except Exception as exc:
        ready.set()
        out.put({"fatal": f"consumer: {type(exc).__name__}: {exc}"})


# -- the broker's event-loop lag ------------------------------------------------------------------


def scrape_loop_lag(metrics_url: str | None) -> dict | None:
    """The broker's event-loop lag histogram (kproto_event_loop_delay_seconds)
    as {upper bound seconds: cumulative count}; None without metrics."""
    if not metrics_url:
        return None
    url = metrics_url.rstrip("/")
    if not url.endswith("/metrics"):
        url += "/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        if line.startswith("kafka_network_requestmetrics_requests_total{"):
            req = line.split('request="', 1)[1].split('"', 1)[0]
            if req in ("Produce", "Fetch"):
                out[req] = out.get(req, 0.0) + float(line.rsplit(" ", 1)[1])
        if line.startswith("kproto_event_loop_delay_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[math.inf if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
    return out or None


def lag_percentiles(before: dict | None, after: dict | None) -> dict:
    """p50/p99/p999/max-bucket of the lag samples taken between two scrapes
    (upper bounds of the buckets, milliseconds)."""
    if not before or not after:
        return {}
    res = {}
    for req in ("Produce", "Fetch"):   # request counts ride along in the same scrape
        if req in after:
            res[f"{req.lower()} requests"] = int(after.pop(req) - before.pop(req, 0.0))
        before.pop(req, None)
    diff = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = diff[-1][1]
    if total <= 0:
        return res
    res["loop samples"] = int(total)
    for name, q in (("loop p50 ms", 50), ("loop p99 ms", 99), ("loop p999 ms", 99.9), ("loop max ms", 100)):
        rank = max(1.0, math.ceil(q / 100 * total))
        le = next(le for le, n in diff if n >= rank)
        res[name] = le * 1e3 if math.isfinite(le) else math.inf
    return res


def runqueue_wait_s(pid: int) -> float:
    """Seconds the process's threads spent runnable but not running
    (/proc/PID/task/*/schedstat, second field, ns): the machine's other
    work taking the CPU from the broker, not the broker's own slowness. For
    kproto the main thread is the one that matters; for a JVM this sums
    over its threads."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[1])
            except (OSError, IndexError, ValueError):
                pass
    except OSError:
        return 0.0
    return total / 1e9


# -- one case against one target ------------------------------------------------------------------


def run_case(target, rate: int, size: int, acks: str, partitions: int, seconds: float, producers: int,
             linger_ms: int, topic: str, tick_ms: float = 0.2) -> dict:
    from tools.bench import procstat
    target.create_topics({topic: partitions})
    out = _CTX.Queue()
    expected = int(rate / producers * seconds) * producers
    rate_each = rate / producers
    ready, go = _CTX.Event(), _CTX.Event()
    consumer = _CTX.Process(target=consumer_worker, daemon=True,
                            args=(target.bootstrap, topic, partitions, expected, ready, go, out,
                                  seconds + STALL_SECONDS + 30))
    consumer.start()
    if not ready.wait(STALL_SECONDS + 30):
        consumer.kill()
        raise RuntimeError("latency consumer did not get ready")
    # every producer warmed up (imports, connection, metadata), then all
    # start on one tick: start-up never counts as latency
    ready_q, go_p, start = _CTX.Queue(), _CTX.Event(), _CTX.Value("q", 0)
    procs = [_CTX.Process(target=producer_worker, daemon=True,
                          args=(target.bootstrap, topic, partitions, rate_each, seconds, size, acks, linger_ms,
                                ready_q, go_p, start, i % partitions, out, tick_ms))
             for i in range(producers)]
    for p in procs:
        p.start()
    go.set()
    try:
        for _ in procs:
            ready_q.get(timeout=STALL_SECONDS * 2)
    except Exception:
        for p in procs + [consumer]:
            p.kill()
        raise RuntimeError("producers did not warm up")
    start.value = time.monotonic_ns() + int(0.05e9)
    go_p.set()
    lag_before = scrape_loop_lag(getattr(target, "metrics_url", None))
    wait_before = runqueue_wait_s(target.pid)
    cpu_before = procstat.cpu_seconds(target.pid)
    load_before = os.getloadavg()[0]
    t0 = time.monotonic()
    results = []
    for _ in range(producers + 1):
        try:
            results.append(out.get(timeout=seconds + 2 * STALL_SECONDS + 40))
        except Exception:
            results.append({"fatal": "a worker sent nothing"})
    cpu = procstat.cpu_seconds(target.pid) - cpu_before
    wait = runqueue_wait_s(target.pid) - wait_before
    elapsed = time.monotonic() - t0
    lag_after = scrape_loop_lag(getattr(target, "metrics_url", None))
    load_after = os.getloadavg()[0]
    for p in procs + [consumer]:
        p.join(10)
        if p.is_alive():
            p.kill()
    fatal = [r["fatal"] for r in results if "fatal" in r]
    if fatal:
        raise RuntimeError(fatal[0])
    ack, e2e = Histogram(), Histogram()
    sent = acked = consumed = errors = behind = 0
    producer_cpu = consumer_cpu = 0.0
    for r in results:
        if "ack" in r:
            ack.merge(Histogram.from_dict(r["ack"]))
            sent += r["sent"]
            acked += r["acked"]
            errors += r["error_count"]
            behind += r["behind_ticks"]
            producer_cpu += r["cpu_s"]
        if "e2e" in r:
            e2e.merge(Histogram.from_dict(r["e2e"]))
            consumed = r["consumed"]
            consumer_cpu = r["cpu_s"]
    res = {"sent": sent, "acked": acked, "consumed": consumed, "errors": errors, "client behind ticks": behind,
           "broker cpu %": 100.0 * cpu / max(elapsed, 1e-9),
           "runq wait %": 100.0 * wait / max(elapsed, 1e-9), "load avg": (load_before + load_after) / 2,
           # the load generator's share, as % of one core over the case's
           # wall time: on a small machine what it takes, the broker lacks
           "producers cpu %": 100.0 * producer_cpu / max(elapsed, 1e-9),
           "consumer cpu %": 100.0 * consumer_cpu / max(elapsed, 1e-9),
           "ack": ack.to_dict(), "e2e": e2e.to_dict()}
    for name, h in (("ack", ack), ("e2e", e2e)):
        for label, q in (("p50", 50), ("p99", 99), ("p999", 99.9)):
            res[f"{name} {label} ms"] = h.percentile(q) / 1e3
        res[f"{name} max ms"] = h.max / 1e3 if h.total else math.nan
    res.update(lag_percentiles(lag_before, lag_after))
    n = res.get("produce requests", 0) + res.get("fetch requests", 0)
    if n:   # what the broker's CPU went on: kproto's cost is per request more than per record
        res["requests/s"] = n / max(elapsed, 1e-9)
        res["cpu us/request"] = cpu * 1e6 / n
    return res


# -- the run --------------------------------------------------------------------------------------


def case_label(rate: int, size: int, acks: str, partitions: int) -> str:
    sz = f"{size // 1024} KiB" if size % 1024 == 0 else f"{size} B"
    return f"{rate:>6}/s {sz:>6} acks={acks:<3} p={partitions}"


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parser() -> argparse.ArgumentParser:
    doc = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(prog="python -m tools.bench latency", description=doc[0] + ".\n\n" + doc[1],
                                 epilog=doc[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", help="kproto, kafka (default kproto,kafka; kafka only with KAFKA_HOME)")
    ap.add_argument("--rates", type=_ints, default=[1000, 10000, 50000], help="offered records/s (default 1000,10000,50000)")
    ap.add_argument("--sizes", type=_ints, default=[100, 1024], help="record sizes in bytes (default 100,1024)")
    ap.add_argument("--acks", default="1,all", help="acks settings (default 1,all)")
    ap.add_argument("--partitions", type=_ints, default=[1, 6], help="partition counts (default 1,6)")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each case (default 10)")
    ap.add_argument("--reps", type=int, default=2, help="repetitions, targets alternating A B A B (default 2)")
    ap.add_argument("--warmup-seconds", type=float, default=10.0,
                    help="a discarded run per target first, at the highest rate (default 10; JIT warm-up)")
    ap.add_argument("--producers", type=int, default=3, help="producer processes sharing the rate (default 3)")
    ap.add_argument("--linger-ms", type=int, default=1, help="producers' linger.ms (default 1)")
    ap.add_argument("--tick-ms", type=float, default=0.2,
                    help="producers' shortest sleep between bursts of due records (default 0.2)")
    ap.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting for every broker (kproto --set, a line of Kafka's server.properties)")
    ap.add_argument("--kafka-home", default=os.environ.get("KAFKA_HOME"), help="default $KAFKA_HOME")
    ap.add_argument("--same-session", dest="own_session", action="store_false",
                    help="start the brokers in the benchmark's session (default: each in a session, hence a "
                    "scheduler autogroup, of its own, niced like the benchmark)")
    ap.add_argument("--no-pause-idle", dest="pause_idle", action="store_false",
                    help="keep the other brokers running during a case (default: SIGSTOP them, SIGCONT after)")
    ap.add_argument("--loopwatch", metavar="DIR", help="run kproto under tools/bench/loopwatch.py: slow event-loop "
                    "steps with their stacks, gc pauses (DIR/kproto-loopwatch.json)")
    ap.add_argument("--no-freeze", action="store_true", help="with --loopwatch: kproto without gc.freeze() "
                    "after start-up (the before of a before/after)")
    ap.add_argument("--json", metavar="PATH", help="write every case's figures and histograms to PATH")
    ap.add_argument("--plot", metavar="PNG", help="plot percentiles against offered load (matplotlib)")
    ap.add_argument("--from-json", metavar="PATH", help="run nothing: print (and --plot) the results in PATH")
    return ap


def _watched_kproto(workdir: str, settings: dict[str, str], report: str, no_freeze: bool = False):
    """A kproto target run under tools/bench/loopwatch.py (slow task steps,
    their stacks and gc pauses, written to ``report``)."""
    from tools.bench.targets import KprotoTarget
    from broker.launch.process import BrokerProcess

    class Watched(BrokerProcess):
        def command(self):
            cmd = super().command()
            i = cmd.index("broker.launch.cli")
            own = ["--out", report] + (["--no-freeze"] if no_freeze else [])
            return cmd[:i] + ["tools.bench.loopwatch"] + own + ["--"] + cmd[i + 1:]

    class Target(KprotoTarget):
        def start(self, fresh: bool = True) -> float:
            import tools.bench.targets as targets_module
            real = targets_module.BrokerProcess
            targets_module.BrokerProcess = Watched
            try:
                return super().start(fresh)
            finally:
                targets_module.BrokerProcess = real

    return Target(workdir, settings)


def make_targets(names: list[str], kafka_home: str | None, settings: dict[str, str],
                 loopwatch: str | None = None, no_freeze: bool = False) -> list:
    import tempfile
    from tools.bench.targets import KafkaTarget, KprotoTarget
    out = []
    for name in names:
        workdir = tempfile.mkdtemp(prefix=f"kproto-latency-{name}-")
        if name == "kproto":
            kp = {"kproto.metrics.listener": "http://127.0.0.1:0"} | settings
            if loopwatch:
                os.makedirs(loopwatch, exist_ok=True)
                report = os.path.abspath(os.path.join(loopwatch, "kproto-loopwatch.json"))
                print(f"kproto: under tools/bench/loopwatch.py, report {report}", flush=True)
                out.append(_watched_kproto(workdir, kp, report, no_freeze))
            else:
                out.append(KprotoTarget(workdir, kp))
        elif name == "kafka":
            if not kafka_home:
                print("kafka: skipped (set KAFKA_HOME to an Apache Kafka distribution to compare)", flush=True)
                continue
            # Paused with SIGSTOP while kproto is measured, Kafka's controller
            # fences its own broker at SIGCONT (no heartbeat for longer than
            # broker.session.timeout.ms, 9 s) and the broker then missed the
            # next topic's creation for as long as the next pause (CreateTopics
            # timed out: an error case). Liveness detection only; one node.
            out.append(KafkaTarget(workdir, kafka_home, {"broker.session.timeout.ms": "3600000"} | settings))
        else:
            raise SystemExit(f"unknown target {name!r} (kproto, kafka)")
    return out


def _autogroup_nice(pid: int) -> None:
    """A broker in a session of its own is a scheduler autogroup of its own
    (Linux, sched_autogroup_enabled): it competes with the machine's other
    sessions as one, whatever its thread count, instead of with the clients
    in the benchmark's session, where one trio thread weighs as little as
    one of the JVM's hundred. Its group gets the benchmark session's group
    weight (its autogroup nice), so it takes no more than the session that
    started it would."""
    try:
        with open("/proc/self/autogroup") as f:
            words = f.read().split()    # "/autogroup-123 nice 0"; empty in some containers
        if words:
            with open(f"/proc/{pid}/autogroup", "w") as f:
                f.write(words[-1])
    except OSError:
        pass


def _pause_others(active, targets: list, pause: bool) -> None:
    """SIGSTOP every broker but ``active`` (SIGCONT it): an idle JVM still
    spends CPU (its GC, timers, the log cleaner), and on a small machine that
    CPU is taken from the broker being measured. Both brokers get the same
    treatment."""
    import signal
    for t in targets:
        try:
            if t is active or not pause:
                os.kill(t.pid, signal.SIGCONT)
            else:
                os.kill(t.pid, signal.SIGSTOP)
        except (OSError, AttributeError):
            pass


def run(args) -> dict:
    settings = dict(s.split("=", 1) for s in args.broker_set)
    names = [t.strip() for t in (args.targets or "kproto,kafka").split(",") if t.strip()]
    targets = make_targets(names, args.kafka_home, settings, args.loopwatch, args.no_freeze)
    acks = [a.strip() for a in args.acks.split(",") if a.strip()]
    cases = [(r, s, a, p) for s in args.sizes for a in acks for p in args.partitions for r in args.rates]
    doc = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count(),
           "command": " ".join(["python -m tools.bench latency"] + list(getattr(args, "argv", None) or [])),
           "load avg at start": os.getloadavg(),
           "args": {k: v for k, v in vars(args).items() if k not in ("from_json",)},
           "targets": {}, "cases": []}
    try:
        for t in targets:
            t.new_session = args.own_session
            t.start()
            if args.own_session:
                _autogroup_nice(t.pid)
            if t.name == "kproto":
                t.metrics_url = t.proc.metrics_url
            doc["targets"][t.name] = t.label + (f" {t.version}" if getattr(t, "version", None) else "")
            print(f"{t.label}: ready at {t.bootstrap}", flush=True)
        if args.warmup_seconds > 0:
            # a fresh JVM compiles its hot paths under the first load; kproto
            # gets the same treatment. Not reported.
            for t in targets:
                _pause_others(t, targets, args.pause_idle)
                print(f"{t.label}: warming up {args.warmup_seconds:.0f} s at {max(args.rates)}/s", flush=True)
                try:
                    run_case(t, max(args.rates), max(args.sizes), acks[-1], max(args.partitions),
                             args.warmup_seconds, args.producers, args.linger_ms, f"lat-{t.name}-warmup",
                             args.tick_ms)
                except Exception as exc:
                    print(f"{t.label}: warm-up failed: {exc}", flush=True)
        n = 0
        for rep in range(args.reps):
            for rate, size, ack, parts in cases:
                for t in targets:  # A B, then A B again in the next repetition
                    _pause_others(t, targets, args.pause_idle)
                    n += 1
                    topic = f"lat-{t.name}-r{rate}-s{size}-a{ack}-p{parts}-{rep}"
                    entry = {"target": t.name, "rep": rep, "rate": rate, "size": size, "acks": ack,
                             "partitions": parts}
                    try:
                        entry |= run_case(t, rate, size, ack, parts, args.seconds, args.producers,
                                          args.linger_ms, topic, args.tick_ms)
                    except Exception as exc:
                        entry["error"] = f"{type(exc).__name__}: {exc}"
                    doc["cases"].append(entry)
                    print(row(entry), flush=True)
        doc["load avg at end"] = os.getloadavg()
    finally:
        _pause_others(None, targets, False)    # every broker running again, to shut down cleanly
        for t in targets:
            try:
                t.stop()
            finally:
                t.cleanup()
    return doc


COLUMNS = ("ack p50 ms", "ack p99 ms", "ack p999 ms", "ack max ms", "e2e p50 ms", "e2e p99 ms", "e2e p999 ms",
           "e2e max ms", "loop p99 ms", "loop max ms", "broker cpu %", "runq wait %", "producers cpu %",
           "consumer cpu %", "requests/s", "cpu us/request", "load avg")
# column headings of at most 9 characters (the figures' width)
SHORT = {"broker cpu %": "brk cpu%", "runq wait %": "brk runq%", "producers cpu %": "prod cpu%",
         "consumer cpu %": "cons cpu%", "requests/s": "req/s", "cpu us/request": "us/req", "load avg": "load"}
HEADER = f"{'case':<30} {'target':<7} {'rep':>3} " + " ".join(
    f"{SHORT.get(c, c.replace(' ms', '')):>9}" for c in COLUMNS)
GOAL_MS = 10.0      # issue 18: ack p99 under 10 ms


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        return f"{v:.2f}" if v < 100 else f"{v:.0f}"
    return str(v)


def row(e: dict) -> str:
    head = f"{case_label(e['rate'], e['size'], e['acks'], e['partitions']):<30} {e['target']:<7} {e['rep']:>3} "
    if "error" in e:
        return head + "error: " + e["error"]
    short = ""
    if e["acked"] < e["sent"] or e["consumed"] < e["sent"]:
        short = f"  (acked {e['acked']}, consumed {e['consumed']} of {e['sent']})"
    return head + " ".join(f"{_fmt(e.get(c)):>9}" for c in COLUMNS) + short


def _median(xs):
    xs = sorted(x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x)))
    if not xs:
        return math.nan
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


MEDIAN_COLUMNS = ("ack p50 ms", "ack p99 ms", "ack p999 ms", "e2e p50 ms", "e2e p99 ms", "broker cpu %", "runq wait %",
                  "producers cpu %", "consumer cpu %", "load avg")


def summary(doc: dict) -> str:
    """Every run, then per case every target's median over the repetitions
    with the CPU each side had (who had the CPU decides a contended run),
    kproto's p99s as a ratio of Kafka's (below 1: kproto is faster), and
    the goal check: the highest rate at which each keeps ack p99 under
    10 ms."""
    lines = [HEADER]
    for e in doc["cases"]:
        lines.append(row(e))
    by = {}
    for e in doc["cases"]:
        if "error" not in e:
            by.setdefault((e["rate"], e["size"], e["acks"], e["partitions"]), {}).setdefault(e["target"], []).append(e)
    lines += ["", "medians over repetitions (ms; cpu % of one core; runq: broker runnable but waiting for a CPU):",
              f"{'case':<30} {'target':<7} {'n':>2} " + " ".join(
                  f"{SHORT.get(c, c.replace(' ms', '')):>9}" for c in MEDIAN_COLUMNS)]
    for key in sorted(by):
        for name in sorted(by[key], key=lambda n: (n != "kproto", n)):
            es = by[key][name]
            lines.append(f"{case_label(*key):<30} {name:<7} {len(es):>2} "
                         + " ".join(f"{_fmt(_median(e.get(c) for e in es)):>9}" for c in MEDIAN_COLUMNS))
    ratios = []
    for key in sorted(by):
        per = by[key]
        if "kproto" in per and "kafka" in per:
            parts = []
            for metric in ("ack p99 ms", "ack p999 ms", "e2e p99 ms"):
                k = _median(x[metric] for x in per["kproto"])
                f = _median(x[metric] for x in per["kafka"])
                parts.append(f"{metric.replace(' ms', '')} {k:.2f}/{f:.2f} = {k / f:.2f}x" if f else metric + " -")
            ratios.append(f"{case_label(*key):<30} kproto/kafka: " + ", ".join(parts))
    if ratios:
        lines += ["", "kproto / Kafka, medians over repetitions, ms:"] + ratios
    goals = goal_check(by)
    if goals:
        lines += ["", f"highest offered rate with median ack p99 under {GOAL_MS:g} ms (every lower rate too):"] + goals
    return "\n".join(lines)


def goal_check(by: dict) -> list[str]:
    """Per (size, acks, partitions): each target's highest rate whose
    median ack p99 is under GOAL_MS, with every lower rate also under."""
    out = []
    groups = sorted({k[1:] for k in by})
    for size, acks, parts in groups:
        rates = sorted(k[0] for k in by if k[1:] == (size, acks, parts))
        targets = sorted({n for k in by if k[1:] == (size, acks, parts) for n in by[k]},
                         key=lambda n: (n != "kproto", n))
        cells = []
        for name in targets:
            best, note = None, ""
            under = [r for r in rates if by[(r, size, acks, parts)].get(name)
                     and _median(e["ack p99 ms"] for e in by[(r, size, acks, parts)][name]) < GOAL_MS]
            for r in rates:
                es = by[(r, size, acks, parts)].get(name)
                if not es:
                    note = f" (no result at {r}/s)"
                    break
                if not _median(e["ack p99 ms"] for e in es) < GOAL_MS:
                    break
                best = r
            cells.append(f"{name} {f'{best}/s' if best is not None else 'none'}{note} "
                         f"[under at {', '.join(map(str, under)) or 'none'}]")
        label = case_label(0, size, acks, parts).split("/s", 1)[1].strip()
        out.append(f"  {label:<22} " + "; ".join(cells) + f" (rates tried: {', '.join(map(str, rates))})")
    return out


def plot(doc: dict, path: str) -> None:
    """Per (size, acks, partitions): ack and e2e p50/p99/p99.9 against
    offered rate, one line per target and percentile (median over reps),
    the 10 ms goal as a line, and each broker's CPU share and run-queue
    wait (who had the CPU)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    groups = sorted({(e["size"], e["acks"], e["partitions"]) for e in doc["cases"] if "error" not in e})
    if not groups:
        return
    fig, axes = plt.subplots(len(groups), 3, figsize=(15, 3.8 * len(groups)), squeeze=False)
    colors = {"kproto": "tab:blue", "kafka": "tab:orange"}
    styles = {"p50": ":", "p99": "-", "p999": "--"}
    targets = sorted({e["target"] for e in doc["cases"]})
    for row_i, (size, acks, parts) in enumerate(groups):
        per = {t: [e for e in doc["cases"] if "error" not in e and e["target"] == t
                   and (e["size"], e["acks"], e["partitions"]) == (size, acks, parts)] for t in targets}
        for col, kind in enumerate(("ack", "e2e")):
            ax = axes[row_i][col]
            for target, es in per.items():
                rates = sorted({e["rate"] for e in es})
                for pct, style in styles.items():
                    ys = [_median(e[f"{kind} {pct} ms"] for e in es if e["rate"] == r) for r in rates]
                    ax.plot(rates, ys, style, marker="o", color=colors.get(target), label=f"{target} {pct}")
            ax.axhline(GOAL_MS, color="grey", linewidth=0.8)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("offered records/s")
            ax.set_ylabel(f"{kind} latency ms")
            ax.set_title(f"{kind}: {size} B, acks={acks}, {parts} partition(s)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        ax = axes[row_i][2]
        for target, es in per.items():
            rates = sorted({e["rate"] for e in es})
            for metric, style in (("broker cpu %", "-"), ("runq wait %", "--")):
                ys = [_median(e[metric] for e in es if e["rate"] == r) for r in rates]
                ax.plot(rates, ys, style, marker="o", color=colors.get(target), label=f"{target} {metric}")
        ax.set_xscale("log")
        ax.set_xlabel("offered records/s")
        ax.set_ylabel("% of one core")
        ax.set_title("broker CPU, and time runnable but waiting for a CPU")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    loads = [e["load avg"] for e in doc["cases"] if "load avg" in e]
    load = f", load avg {min(loads):.1f}-{max(loads):.1f}" if loads else ""
    fig.suptitle(f"latency vs offered load ({doc.get('started', '')}, {doc.get('cpus')} CPUs{load}; "
                 f"median of {doc.get('args', {}).get('reps', '?')} reps; grey line: {GOAL_MS:g} ms)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    args.argv = list(sys.argv[2:] if argv is None else argv)
    if args.from_json:
        with open(args.from_json) as f:
            doc = json.load(f)
    else:
        print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
              f"({os.cpu_count()} CPUs; under 1 for figures that are the brokers' own)", flush=True)
        print(HEADER, flush=True)
        doc = run(args)
        print()
    print(summary(doc))
    if "load avg at end" in doc:
        print(f"load average at start / end: {doc['load avg at start'][0]:.2f} / {doc['load avg at end'][0]:.2f}")
    if args.json and not args.from_json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1, default=lambda x: None)
        print(f"wrote {args.json}")
    if args.plot:
        plot(doc, args.plot)
        print(f"wrote {args.plot}")
    return 1 if any("error" in e for e in doc["cases"]) else 0


if __name__ == "__main__":
    sys.exit(main())

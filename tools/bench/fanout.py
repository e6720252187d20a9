"""fan-out reads: 5 consumer groups reading what one producer writes, kproto beside Kafka

The seed workload's 5:1 read-to-write ratio on one broker per target (kproto,
and Apache Kafka from KAFKA_HOME in the same run): a topic is preloaded with
--preload records (Kafka's kafka-producer-perf-test.sh when KAFKA_HOME is set,
else librdkafka), then one producer process writes --rate records/s of --size
bytes (acks=all, librdkafka) for the whole run and --groups consumer
processes, each its own consumer group (subscribe, auto.offset.reset=earliest,
confluent-kafka), start together and read the topic from the start:

  baseline  the producer alone (--baseline seconds): its ack latency without readers
  catch-up  from the first record any group reads until the last group reads
            records written under a second before on every partition (it has read
            the preload and reached the tail); the groups' join before it (the
            initial rebalance delay, 3 s on both) is reported apart
  tail      --tail seconds more: every group keeps up with the producer

Reported per phase: the groups' read MiB/s together, the producer's ack p50/p99
(librdkafka's per-message latency), the broker's CPU share; for the tail, the
end-to-end p99 (record timestamp to consumer). With --offsets-first,
`__consumer_offsets` is made and every group's coordinator loaded before the
producer starts (FindCoordinator, then OffsetFetch of the groups until they
answer without error), so the topic's making is outside every phase. The
catch-up's CPU is also split at the first record read: the join's CPU seconds
("join cpu"), and the reading's CPU seconds per GiB ("read/GiB"). Every
process is on this machine:
the consumers and the broker share its cores, so catch-up MiB/s is what the
machine allows, reported beside Kafka's under the same bound.

  python -m tools.bench fanout --preload 200000 --size 1024 --rate 1000 --tail 20
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue as queue_mod
import sys
import time

from tools.bench.options import target_arguments, target_names, write_rows

_CTX = mp.get_context("spawn")
BUCKET_S = 0.25    # consumers count bytes per quarter second of wall clock
TOPIC = "fanout"


def consumer(bootstrap: str, group: str, index: int, preload: int, partitions: int, stop, out) -> None:
    """One group of one member: bytes per bucket, when it caught up, end-to-end latencies once caught up."""
    try:
        from confluent_kafka import Consumer

        from tools.bench.workloads import FETCH_QUEUE_BACKOFF_MS
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": True,
                      "auto.offset.reset": "earliest", "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
                      "client.id": f"fanout-{index}"})
        c.subscribe([TOPIC])
        buckets: dict[int, int] = {}
        n, first, caught, e2e = 0, None, None, []
        newest: dict[int, float] = {}   # partition -> timestamp of the last record read
        while not stop.is_set():
            # (a short wait: consume(n, timeout) returns at n records or at the timeout, which
            # would otherwise hold tailing records back and show as end-to-end latency)
            msgs = c.consume(1000, 0.01)
            if not msgs:
                continue
            now = time.time()
            first = first or now
            got = 0
            for m in msgs:
                if m.error() is None:
                    got += len(m.value())
                    if caught is not None:
                        e2e.append(now - m.timestamp()[1] / 1000.0)
            n += len(msgs)
            b = int(now / BUCKET_S)
            buckets[b] = buckets.get(b, 0) + got
            if caught is None:
                for m in msgs:
                    if m.error() is None:
                        newest[m.partition()] = m.timestamp()[1] / 1000.0
            # caught up: the preload read, and every partition's last record written under a second ago
            if caught is None and n >= preload and len(newest) == partitions \
                    and all(now - ts < 1.0 for ts in newest.values()):
                caught = now
                out.put(("caught", index, now))
        c.close()
        out.put(("done", index, {"buckets": buckets, "records": n, "first": first, "caught": caught,
                                 "e2e": e2e}))
    except Exception as exc:   # noqa: BLE001  (reported by the parent)
        out.put(("fatal", index, f"{type(exc).__name__}: {exc}"))


def producer(bootstrap: str, rate: float, size: int, stop, out) -> None:
    """Fixed-rate acks=all producer: (send wall time, ack latency s) of every record."""
    try:
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "client.id": "fanout-p"})
        acks: list[tuple[float, float]] = []
        errors: list[str] = []

        def done(err, msg):
            if err is not None:
                errors.append(str(err))
            else:
                acks.append((time.time() - msg.latency(), msg.latency()))
        value = b"\x5a" * size
        interval = 1.0 / rate
        next_at = time.monotonic()
        out.put(("started", -1, time.time()))
        while not stop.is_set():
            p.produce(TOPIC, value, on_delivery=done)
            next_at += interval
            delay = next_at - time.monotonic()
            p.poll(max(0.0, delay))
            if delay < -1.0:   # fell behind by a second: do not burst to catch up
                next_at = time.monotonic()
        p.flush(30)
        out.put(("done", -1, {"acks": acks, "errors": errors[:5], "failed": len(errors)}))
    except Exception as exc:   # noqa: BLE001
        out.put(("fatal", -1, f"{type(exc).__name__}: {exc}"))


def _p(xs: list[float], q: float) -> float | None:
    from tools.bench.stats import percentile
    return percentile(sorted(xs), q) * 1000 if xs else None


def preload(target, home: str | None, count: int, size: int) -> str:
    if home:
        from tools.bench.perftools import producer_perf
        producer_perf(home, target.bootstrap, TOPIC, count, size, "1")
        return "kafka-producer-perf-test"
    from tools.bench.workloads import produce
    produce(target.bootstrap, TOPIC, count, size, "1")
    return "librdkafka"


def offsets_first(bootstrap: str, groups: list[str], timeout: float = 60.0) -> float:
    """Make `__consumer_offsets` and load the groups' coordinators before anything is measured:
    FindCoordinator of every group, then OffsetFetch of every group (it answers
    COORDINATOR_LOAD_IN_PROGRESS until the coordinator is loaded), each again until it answers
    without error, as a client retries. Commits nothing: the groups still start from the earliest
    offset. Returns the seconds it took."""
    from kproto.messages.find_coordinator_request import FindCoordinatorRequest
    from kproto.messages.offset_fetch_request import OffsetFetchRequest
    from tests.wire_client import WireClient
    t = time.monotonic()
    deadline = t + timeout
    find = FindCoordinatorRequest(key_type=0, coordinator_keys=groups)
    fetch = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=g, topics=None)
                                       for g in groups])
    with WireClient(bootstrap) as c:
        for request, version, errors in ((find, 4, lambda r: [x.error_code for x in r.coordinators]),
                                         (fetch, 8, lambda r: [g.error_code for g in r.groups])):
            while any(errors(c.call(request, version))):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"__consumer_offsets not ready within {timeout:.0f} s")
                time.sleep(0.05)
    return time.monotonic() - t


class _CpuSampler:
    """The broker's CPU seconds every 50 ms in a thread (wall time, CPU), to split a phase's CPU
    at a moment known only afterwards (the first record a group read)."""

    def __init__(self, pid: int):
        import threading
        from tools.bench import procstat
        self._cpu, self._pid = procstat.cpu_seconds, pid
        self.samples: list[tuple[float, float]] = [(time.time(), self._cpu(pid))]
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(0.05):
            try:
                self.samples.append((time.time(), self._cpu(self._pid)))
            except OSError:   # (the broker exited: the run fails elsewhere)
                return

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)

    def at(self, t: float) -> float:
        """The CPU seconds of the last sample at or before ``t``."""
        return max((s for s in self.samples if s[0] <= t), default=self.samples[0])[1]


def run_target(target, args, home: str | None) -> dict:
    from tools.bench import procstat
    target.start()
    try:
        target.create_topics({TOPIC: args.partitions})
        t = time.time()
        how = preload(target, home, args.preload, args.size)
        preload_s = time.time() - t
        offsets_s = offsets_first(target.bootstrap, [f"fanout-g{i}" for i in range(args.groups)]) \
            if args.offsets_first else None
        out = _CTX.Queue()
        stop = _CTX.Event()
        prod = _CTX.Process(target=producer, args=(target.bootstrap, args.rate, args.size, stop, out), daemon=True)
        prod.start()
        msgs: list[tuple] = []

        def take(timeout: float):
            kind, i, payload = out.get(timeout=timeout)
            if kind == "fatal":
                raise RuntimeError(f"{'producer' if i < 0 else f'consumer {i}'}: {payload}")
            msgs.append((kind, i, payload))
            return kind, i, payload
        _, _, p_start = take(60)
        time.sleep(args.baseline)
        cpu = {"baseline": procstat.cpu_seconds(target.pid)}
        t_consumers = time.time()
        sampler = _CpuSampler(target.pid)
        cons = [_CTX.Process(target=consumer, daemon=True,
                             args=(target.bootstrap, f"fanout-g{i}", i, args.preload, args.partitions, stop, out))
                for i in range(args.groups)]
        for c in cons:
            c.start()
        caught = {}
        deadline = time.monotonic() + args.catchup_timeout
        while len(caught) < args.groups:
            try:
                kind, i, payload = take(max(0.1, deadline - time.monotonic()))
            except queue_mod.Empty:
                raise RuntimeError(f"only {len(caught)} of {args.groups} groups caught up within "
                                   f"{args.catchup_timeout:.0f} s") from None
            if kind == "caught":
                caught[i] = payload
        t_caught = max(caught.values())
        cpu["catch-up"] = procstat.cpu_seconds(target.pid)
        sampler.stop()
        time.sleep(args.tail)
        t_stop = time.time()
        cpu["tail"] = procstat.cpu_seconds(target.pid)
        stop.set()
        results = {}
        while len(results) < args.groups + 1:
            kind, i, payload = take(120)
            if kind == "done":
                results[i] = payload
        for proc in [prod, *cons]:
            proc.join(30)
        p_res = results[-1]
        acks = p_res["acks"]
        # catch-up counts from the first record any group read: the groups' join (the initial
        # rebalance delay, 3 s by default on both) is reported apart, as "join s"
        t_first = min(results[i]["first"] for i in range(args.groups))
        phases = {"baseline": (p_start + 2.0, t_consumers), "catch-up": (t_first, t_caught),
                  "tail": (t_caught, t_stop)}
        cpu_before = {"baseline": None, "catch-up": cpu["baseline"], "tail": cpu["catch-up"]}
        row = {"target": target.label, "preload by": how, "preload s": round(preload_s, 1),
               "offsets first s": offsets_s and round(offsets_s, 2),
               "groups": args.groups, "failed sends": p_res["failed"]}
        for name, (a, b) in phases.items():
            lat = [lat for ts, lat in acks if a <= ts < b]
            read = sum(n for r in (results[i] for i in range(args.groups))
                       for bk, n in r["buckets"].items() if a <= bk * BUCKET_S < b)
            row[name] = {"seconds": round(b - a, 2), "read MiB/s": read / max(b - a, 1e-9) / (1 << 20),
                         "ack p50 ms": _p(lat, 50), "ack p99 ms": _p(lat, 99), "acks": len(lat)}
        for name, a, b in (("catch-up", t_consumers, t_caught), ("tail", t_caught, t_stop)):
            row[name]["broker cpu %"] = 100 * (cpu[name] - cpu_before[name]) / max(b - a, 1e-9)
        row["catch-up"]["join s"] = round(t_first - t_consumers, 2)
        # the same CPU split at the first record read: the join's (which includes making
        # `__consumer_offsets` unless --offsets-first) and the reading's alone
        cpu_first = sampler.at(t_first)
        row["catch-up"]["join cpu s"] = cpu_first - cpu["baseline"]
        row["catch-up"]["reading cpu s per GiB"] = (cpu["catch-up"] - cpu_first) / max(
            args.groups * args.preload * args.size / (1 << 30), 1e-9)
        # the broker's CPU over the join and catch-up per GiB the groups read from the preload
        # (the producer's few records meanwhile are a small part of it)
        row["catch-up"]["broker cpu s per GiB"] = (cpu["catch-up"] - cpu["baseline"]) / max(
            args.groups * args.preload * args.size / (1 << 30), 1e-9)
        # when each group read its first record, from the readers' start: the joins' spread
        row["catch-up"]["per group start s"] = [round(results[i]["first"] - t_consumers, 2) for i in range(args.groups)]
        row["catch-up"]["per group s"] = [round(caught[i] - results[i]["first"], 2) for i in range(args.groups)]
        e2e = [x for i in range(args.groups) for x in results[i]["e2e"]]
        row["tail"]["e2e p99 ms"] = _p(e2e, 99)
        row["tail"]["written MiB/s"] = len([1 for ts, _ in acks if t_caught <= ts < t_stop]) * args.size / (
            max(t_stop - t_caught, 1e-9)) / (1 << 20)
        return row
    finally:
        target.stop()
        target.cleanup()


def _targets(names: list[str], home: str | None, loopwatch: str | None) -> list:
    from tools.bench.targets import make_targets
    targets = make_targets(names, home)
    if not loopwatch:
        return targets
    from tools.bench.latency import _watched_kproto
    os.makedirs(loopwatch, exist_ok=True)
    report = os.path.abspath(os.path.join(loopwatch, "kproto-loopwatch.json"))
    print(f"kproto: under tools/bench/loopwatch.py, report {report}", flush=True)
    return [_watched_kproto(t.workdir, t.settings, report) if t.name == "kproto" else t for t in targets]


def _f(v, fmt=".1f") -> str:
    return "-" if v is None else format(v, fmt)


def print_row(r: dict) -> None:
    if "error" in r:
        print(f"{r['target']:<14} error: {r['error']}", flush=True)
        return
    b, c, t = r["baseline"], r["catch-up"], r["tail"]
    print(f"{r['target']:<14} {c['join s']:>6.1f} {c['seconds']:>8.1f} {c['read MiB/s']:>9.1f} {_f(c['ack p99 ms']):>9} "
          f"{_f(c.get('broker cpu %'), '.0f'):>5} {_f(c.get('broker cpu s per GiB'), '.2f'):>6} "
          f"{_f(c.get('join cpu s'), '.2f'):>8} {_f(c.get('reading cpu s per GiB'), '.2f'):>7} {t['read MiB/s']:>9.1f} {_f(t['ack p99 ms']):>9} "
          f"{_f(t['e2e p99 ms']):>9} {_f(t.get('broker cpu %'), '.0f'):>5} {_f(b['ack p99 ms']):>9}", flush=True)


def main(argv=None) -> int:
    doc = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(prog="python -m tools.bench fanout", description="\n\n".join(doc[:4]),
                                 epilog=doc[4], formatter_class=argparse.RawDescriptionHelpFormatter)
    target_arguments(ap, default="kproto,kafka", kafka_home=False)
    ap.add_argument("--groups", type=int, default=5, help="consumer groups (default 5)")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--size", type=int, default=1024, help="record size (default 1024)")
    ap.add_argument("--preload", type=int, default=200_000, help="records written before the readers start")
    ap.add_argument("--rate", type=float, default=1000, help="producer records/s during the run (default 1000)")
    ap.add_argument("--baseline", type=float, default=8, help="seconds of the producer alone")
    ap.add_argument("--tail", type=float, default=20, help="seconds of tailing after the last group caught up")
    ap.add_argument("--catchup-timeout", type=float, default=300)
    ap.add_argument("--reps", type=int, default=1, help="repetitions, targets alternating")
    ap.add_argument("--offsets-first", action="store_true", help="make __consumer_offsets and load the groups' "
                    "coordinators before the producer starts, so no phase includes that")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--loopwatch", metavar="DIR", help="run kproto under tools/bench/loopwatch.py: slow event-loop "
                    "steps with their stacks (DIR/kproto-loopwatch.json)")
    args = ap.parse_args(argv)
    home = os.environ.get("KAFKA_HOME")
    names = target_names(args.targets)
    print(f"fan-out: {args.groups} groups, 1 producer at {args.rate:.0f} records/s of {args.size} B, "
          f"preload {args.preload} records, {args.partitions} partitions, one broker per target", flush=True)
    print(f"{'':<14} {'------------------------- catch-up -------------------------':>66} {'------------- tail -------------':>35} baseline",
          flush=True)
    print(f"{'target':<14} {'join s':>6} {'seconds':>8} {'read MiB/s':>9} {'ack p99':>9} {'cpu%':>5} {'s/GiB':>6} {'join cpu':>8} {'read/GiB':>7} {'read MiB/s':>9} "
          f"{'ack p99':>9} {'e2e p99':>9} {'cpu%':>5} {'ack p99':>9}", flush=True)
    rows = []
    for rep in range(args.reps):
        for target in _targets(names, home, args.loopwatch):
            try:
                r = run_target(target, args, home) | {"rep": rep}
            except Exception as exc:   # noqa: BLE001  (a row says what failed; the others still run)
                r = {"target": target.label, "rep": rep, "error": f"{type(exc).__name__}: {exc}"}
            rows.append(r)
            print_row(r)
    if args.json:
        write_rows(args.json, args, rows, **{"load avg": os.getloadavg()})
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

"""request cost: the broker's CPU per request of each kind, a fixed request sequence over raw TCP

    python -m tools.bench request_cost --targets kproto@/tmp/kproto-1122,kproto@/tmp/fc-main,kproto

Each repetition starts every target fresh, all at once, loads each with
Produce requests (2 partitions of one topic, acks=1), then drives them in
rounds, the targets taking turns within each round so that a change of the
machine's load falls on every build alike. The requests are shaped as a
librdkafka group member sends them: the first group's requests (its
FindCoordinator makes `__consumer_offsets`), then per round one group's
life (FindCoordinator, JoinGroup twice: MEMBER_ID_REQUIRED then with the id,
SyncGroup, Heartbeats, OffsetCommits and OffsetFetches, LeaveGroup), full
sessionless Fetch requests of both partitions (librdkafka's fetch.max.bytes
and max.partition.fetch.bytes, read_committed; reading the topic again from
the start once at its end), ListOffsets and Metadata.

Reported per request kind: the broker process's CPU time from its process CPU
clock (all threads, exited ones included, in nanoseconds: `clock_gettime` of
the pid's CPU clock, so the broker must run on this machine) from one
request's send to the next one's, divided by the requests of that kind; and
the event loop thread's share of it (its schedstat). The last request of each
block (a group's life, the fetches, the lookups) has no next send: its span
ends when no broker thread runs any more after its answer. Read from outside
while the broker runs, either clock lacks what the broker did since the
scheduler last accounted it (at a tick, 1-4 ms apart, or when it left the CPU),
so a span read at the answer, while the broker finished its pass, came out
short by an amount that depended on how soon this process got the answer:
LeaveGroup, the last of a group's life, read 25 µs for the 2026-11-22 build on
a quiet machine, a third of a Heartbeat (issue 26). `--clock-reads now` ends
those spans at the answer, as the bench did before.
Medians over the repetitions, and each target's ratio to the first target's
within each repetition. CPU per request moves far less with the machine's
load than throughput does, so builds can be compared on a shared machine;
what is left of the load's effect (a busy sibling core slows every
instruction) is why the builds take turns. Each kind is sent once to each
fresh broker before counting (handler modules imported at a first request)."""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import tempfile
import time
import uuid

from kproto import api
from kproto import records as rec
from kproto.messages.fetch_request import FetchRequest
from kproto.messages.find_coordinator_request import FindCoordinatorRequest
from kproto.messages.heartbeat_request import HeartbeatRequest
from kproto.messages.join_group_request import JoinGroupRequest, JoinGroupRequestProtocol
from kproto.messages.leave_group_request import LeaveGroupRequest
from kproto.messages.list_offsets_request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kproto.messages.metadata_request import MetadataRequest
from kproto.messages.offset_commit_request import (OffsetCommitRequest, OffsetCommitRequestPartition,
                                                   OffsetCommitRequestTopic)
from kproto.messages.offset_fetch_request import OffsetFetchRequest, OffsetFetchRequestTopic
from kproto.messages.produce_request import ProduceRequest
from kproto.messages.sync_group_request import SyncGroupRequest, SyncGroupRequestAssignment
from tools.bench import procstat
from tools.bench.startup import add_pycache_option, kproto_target, stopped_after, use_pycache

# the versions librdkafka 2.x sends (lowered to what a target serves)
VERSIONS = {"Produce": 9, "Fetch": 13, "ListOffsets": 7, "Metadata": 12, "OffsetCommit": 7, "OffsetFetch": 7,
            "FindCoordinator": 2, "JoinGroup": 5, "Heartbeat": 3, "LeaveGroup": 1, "SyncGroup": 3}
KEYS = {"Produce": 0, "Fetch": 1, "ListOffsets": 2, "Metadata": 3, "OffsetCommit": 8, "OffsetFetch": 9,
        "FindCoordinator": 10, "JoinGroup": 11, "Heartbeat": 12, "LeaveGroup": 13, "SyncGroup": 14}
PARTITIONS = 2
FETCH_MAX_BYTES = 52428800          # librdkafka fetch.max.bytes
PARTITION_MAX_BYTES = 1048576       # librdkafka max.partition.fetch.bytes
READ_COMMITTED = 1                  # librdkafka isolation.level
RETRIABLE = (14, 15)                # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE


def cpu_ns(pid: int) -> int:
    """The process's CPU clock (user+system of all its threads, exited ones
    included), as clock_getcpuclockid(pid) names it: ((~pid) << 3) | CPUCLOCK_SCHED."""
    return time.clock_gettime_ns(((~pid) << 3) | 2)


def loop_ns(pid: int) -> int:
    """CPU of the process's first thread (the broker's event loop), from its schedstat."""
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        return int(f.read().split()[0])


SETTLED = True     # a block's last span ends once the broker rests, not at the answer (--clock-reads)


class Driver:
    """One connection to one broker. Each request's process CPU from its send
    to the next request's send (what follows an answer included) is added to
    its kind, and so is the event loop thread's CPU over the same span."""

    def __init__(self, target, versions: dict[int, tuple[int, int]]):
        from tests.wire_client import WireClient
        self.pid = target.pid
        self.c = WireClient(target.bootstrap, timeout=60)
        self.v = {k: min(v, versions[KEYS[k]][1]) for k, v in VERSIONS.items()}
        self.cpu: dict[str, int] = {}
        self.loop: dict[str, int] = {}
        self.count: dict[str, int] = {}
        self.bytes_read = 0       # Fetch answers' bytes
        self.whole_bytes = 0      # ... of which whole batches (what a consumer keeps)
        self._open: tuple[str, int, int] | None = None
        self.counting = True
        self.label: str | None = None     # counts every request under this name instead of its kind

    def close(self) -> None:
        self.settle()
        self.c.close()

    def settle(self, now: tuple[int, int] | None = None) -> None:
        """Close the last request's CPU span: at the next send (now: the process's and the loop's
        clocks then), or, with no next send, once the broker has finished the work that follows
        its answer (the clocks read while it still runs lack that work: see the docstring)."""
        if self._open:
            kind, t0, l0 = self._open
            self._open = None
            if now is None:
                if SETTLED:
                    procstat.wait_off_cpu(self.pid)
                now = cpu_ns(self.pid), loop_ns(self.pid)
            if self.counting:
                self.cpu[kind] = self.cpu.get(kind, 0) + now[0] - t0
                self.loop[kind] = self.loop.get(kind, 0) + now[1] - l0
                self.count[kind] = self.count.get(kind, 0) + 1

    def call(self, kind: str, req, label: str | None = None):
        name = self.label or label or kind
        version = self.v[kind]
        frame = api.encode_request(req, version, 1, "rdkafka")
        now = cpu_ns(self.pid), loop_ns(self.pid)
        self.settle(now)
        self._open = (name, *now)
        self.c.send_raw(frame)
        body = self.c.recv_frame()
        if body is None:
            raise SystemExit(f"{kind}: the broker closed the connection")
        if kind == "Fetch":
            self.bytes_read += 4 + len(body)
        return api.decode_response(body, req.API_KEY, version)[1]


def produce(d: Driver, topic: str, requests: int, per_batch: int, size: int) -> None:
    """Produce requests of one batch of per_batch records per partition (acks=1, as the consume bench's --acks 1)."""
    batch = rec.build_batch([(None, b"x" * size)] * per_batch)
    for _ in range(requests):
        req = ProduceRequest(acks=1, timeout_ms=30000, topic_data=[ProduceRequest.TopicProduceData(
            name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=p, records=batch)
                                        for p in range(PARTITIONS)])])
        resp = d.call("Produce", req)
        errs = [p.error_code for t in resp.responses for p in t.partition_responses]
        if any(errs):
            raise SystemExit(f"produce: errors {errs}")


def find_coordinator(d: Driver, group: str) -> None:
    for _ in range(300):
        resp = d.call("FindCoordinator", FindCoordinatorRequest(key=group, key_type=0))
        if resp.error_code == 0:
            return
        if resp.error_code not in RETRIABLE:
            raise SystemExit(f"FindCoordinator: error {resp.error_code}")
        time.sleep(0.05)      # (counted with the request: a coordinator made in the background)
    raise SystemExit("FindCoordinator: no coordinator in 15 s")


def one_group(d: Driver, topic: str, group: str, heartbeats: int, commits: int, offset: int) -> None:
    """A member's life in a group of its own: find the coordinator, join, sync (as leader), heartbeats,
    commits and offset fetches, leave."""
    find_coordinator(d, group)
    protocols = [JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01\x00\x00\x00\x01\x00\x02rc\xff\xff"
                                          b"\xff\xff\x00\x00\x00\x00")]
    req = JoinGroupRequest(group_id=group, session_timeout_ms=45000, rebalance_timeout_ms=300000, member_id="",
                           protocol_type="consumer", protocols=protocols)
    for _ in range(300):
        resp = d.call("JoinGroup", req)
        if resp.error_code == 79:          # MEMBER_ID_REQUIRED: join again with the id (librdkafka does)
            req.member_id = resp.member_id
            continue
        if resp.error_code in RETRIABLE:
            time.sleep(0.05)
            continue
        break
    if resp.error_code:
        raise SystemExit(f"JoinGroup: error {resp.error_code}")
    member, generation = resp.member_id, resp.generation_id
    sync = d.call("SyncGroup", SyncGroupRequest(group_id=group, generation_id=generation, member_id=member,
                                                protocol_type="consumer", protocol_name="range",
                                                assignments=[SyncGroupRequestAssignment(
                                                    member_id=member, assignment=b"\x00\x01")]))
    if sync.error_code:
        raise SystemExit(f"SyncGroup: error {sync.error_code}")
    for _ in range(heartbeats):
        hb = d.call("Heartbeat", HeartbeatRequest(group_id=group, generation_id=generation, member_id=member))
        if hb.error_code:
            raise SystemExit(f"Heartbeat: error {hb.error_code}")
    for i in range(commits):
        oc = d.call("OffsetCommit", OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=generation, member_id=member, topics=[
                OffsetCommitRequestTopic(name=topic, partitions=[OffsetCommitRequestPartition(
                    partition_index=p, committed_offset=offset + i) for p in range(PARTITIONS)])]))
        errs = [p.error_code for t in oc.topics for p in t.partitions]
        if any(errs):
            raise SystemExit(f"OffsetCommit: errors {errs}")
        of = d.call("OffsetFetch", OffsetFetchRequest(group_id=group, require_stable=True, topics=[
            OffsetFetchRequestTopic(name=topic, partition_indexes=list(range(PARTITIONS)))]))
        if of.error_code:
            raise SystemExit(f"OffsetFetch: error {of.error_code}")
    d.call("LeaveGroup", LeaveGroupRequest(group_id=group, member_id=member))


def lookups(d: Driver, topic: str, n: int) -> None:
    for i in range(n):
        d.call("ListOffsets", ListOffsetsRequest(replica_id=-1, isolation_level=READ_COMMITTED, topics=[
            ListOffsetsTopic(name=topic, partitions=[ListOffsetsPartition(partition_index=p, timestamp=-1 - (i % 2))
                                                     for p in range(PARTITIONS)])]))
        d.call("Metadata", MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                           allow_auto_topic_creation=False))


class Run:
    """One target through one repetition: started fresh, its topic loaded, a reader's positions."""

    topic = "rc"

    def __init__(self, target, args):
        from tests.wire_client import create_led_topic
        self.target, self.args = target, args
        target.start(fresh=True)
        self.d = Driver(target, target.versions())
        meta = create_led_topic(self.d.c, self.topic, PARTITIONS, timeout=60)
        self.topic_id = getattr(meta, "topic_id", None) if self.d.v["Fetch"] >= 13 else uuid.UUID(int=0)
        self.pos = {p: 0 for p in range(PARTITIONS)}
        self.end = {p: 1 for p in range(PARTITIONS)}      # (the warm-up's record)
        self.groups = 0
        # warm-up: each kind once, not counted (first-request imports, the partition's caches)
        self.d.counting = False
        produce(self.d, self.topic, 1, 1, args.size)
        lookups(self.d, self.topic, 2)
        self.d.settle()
        self.d.counting = True
        self.whole = 0
        self.idle = 0.0

    def timed(self, fn) -> None:
        """Run fn, adding the broker's CPU to the whole sequence's."""
        c0 = cpu_ns(self.d.pid)
        fn()
        self.d.settle()
        self.whole += cpu_ns(self.d.pid) - c0

    def load(self, requests: int) -> None:
        self.timed(lambda: produce(self.d, self.topic, requests, self.args.batch, self.args.size))
        for p in range(PARTITIONS):
            self.end[p] += requests * self.args.batch

    def first_group(self) -> None:
        """The first group: its FindCoordinator makes __consumer_offsets, its JoinGroup may wait for the
        load. What the broker finishes in the background (the new logs' fsyncs, by a worker thread) is
        counted with it: the CPU of the 2 s after it, when nothing else is sent."""
        label = self.d.label = "the first group's 20 requests (making __consumer_offsets)"
        self.timed(lambda: one_group(self.d, self.topic, "rc-first", self.args.heartbeats, self.args.commits, 0))
        self.d.label = None
        c0 = cpu_ns(self.d.pid)
        time.sleep(2.0)
        after = cpu_ns(self.d.pid) - c0
        self.d.cpu[label] += after
        self.whole += after

    def group(self) -> None:
        self.groups += 1
        self.timed(lambda: one_group(self.d, self.topic, f"rc-g{self.groups}", self.args.heartbeats,
                                     self.args.commits, self.groups))

    def fetches(self, n: int) -> None:
        self.timed(lambda: [self.fetch() for _ in range(n)])

    def fetch(self) -> None:
        """One full sessionless fetch of the partitions not yet read to the end (from 0 again once all are)."""
        want = [p for p in range(PARTITIONS) if self.pos[p] < self.end[p]]
        if not want:
            self.pos = {p: 0 for p in range(PARTITIONS)}
            want = list(range(PARTITIONS))
        req = FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=FETCH_MAX_BYTES,
                           isolation_level=READ_COMMITTED, session_id=0, session_epoch=-1, rack_id="",
                           topics=[FetchRequest.FetchTopic(topic=self.topic, topic_id=self.topic_id, partitions=[
                               FetchRequest.FetchPartition(partition=p, fetch_offset=self.pos[p],
                                                           current_leader_epoch=-1,
                                                           partition_max_bytes=PARTITION_MAX_BYTES)
                               for p in want])])
        resp = self.d.call("Fetch", req)
        for t in resp.responses:
            for part in t.partitions:
                if part.error_code:
                    raise SystemExit(f"fetch: error {part.error_code}")
                data = bytes(part.records or b"")
                at = 0
                while at + rec.HEADER_SIZE <= len(data):
                    h = rec.BatchHeader(data, at)
                    if at + h.size > len(data):
                        break     # a trailing partial batch (Kafka sends one): fetched again next time
                    self.pos[part.partition_index] = h.last_offset + 1
                    at += h.size
                self.d.whole_bytes += at

    def lookups(self, n: int) -> None:
        self.timed(lambda: lookups(self.d, self.topic, n))

    def finish(self) -> dict:
        """Idle CPU (what a timer or sweep costs while no request comes: it falls into the figures above
        in proportion to each request's wall time), then stop."""
        d = self.d
        d.close()
        idle0, t0 = cpu_ns(d.pid), time.perf_counter()
        time.sleep(self.args.idle)
        idle = (cpu_ns(d.pid) - idle0) / (time.perf_counter() - t0)
        self.target.stop()
        return {"cpu": d.cpu, "loop": d.loop, "count": d.count, "bytes_read": d.bytes_read,
                "whole_bytes": d.whole_bytes, "whole": self.whole,
                "idle": idle}


def one_repetition(targets, args, rep: int) -> list[dict]:
    """Every target fresh, then the sequence in rounds, the targets taking turns within each round (so
    a change of the machine's load falls on every build alike)."""
    runs, spies = [], []
    try:
        for t in targets:
            runs.append(Run(t, args))
            if args.py_spy:
                os.makedirs(args.py_spy, exist_ok=True)
                spies.append(subprocess.Popen(
                    ["py-spy", "record", "-r", "500", "--nonblocking", "-f", "raw", "-o",
                     os.path.join(args.py_spy, f"{t.name}-{rep}.raw"), "-p", str(t.pid)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        rounds = args.rounds
        per_round = max(1, args.records // (args.batch * PARTITIONS * rounds))
        for _ in range(rounds):
            for r in runs:
                r.load(per_round)
        for r in runs:
            r.first_group()
        for _ in range(rounds):
            for r in runs:
                r.group()
                r.fetches(args.fetches)
                r.lookups(args.lookups)
        return [r.finish() for r in runs]
    finally:
        for sp in spies:
            sp.send_signal(signal.SIGINT)
            sp.wait(60)
        for t in targets:
            t.stop()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench request_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default="kproto", help="kproto and/or kproto@PATH, comma-separated; ratios are "
                    "to the first")
    ap.add_argument("--reps", type=int, default=5, help="repetitions, the targets in turn in each (default 5)")
    ap.add_argument("--records", type=int, default=40000, help="records loaded (default 40,000)")
    ap.add_argument("--size", type=int, default=1024, help="record value bytes (default 1024)")
    ap.add_argument("--batch", type=int, default=64, help="records per partition per Produce request (default 64)")
    ap.add_argument("--rounds", type=int, default=20, help="rounds per repetition, the targets in turn in each: "
                    "a group's life, fetches, lookups (default 20)")
    ap.add_argument("--fetches", type=int, default=5, help="Fetch requests per round (default 5; 2 MiB each)")
    ap.add_argument("--heartbeats", type=int, default=5, help="heartbeats per group (default 5)")
    ap.add_argument("--commits", type=int, default=5, help="commits (and offset fetches) per group (default 5)")
    ap.add_argument("--lookups", type=int, default=3, help="ListOffsets and Metadata requests per round (default 3 each)")
    ap.add_argument("--idle", type=float, default=2.0, help="seconds of idle CPU measured at the end (default 2)")
    ap.add_argument("--clock-reads", choices=("settled", "now"), default="settled",
                    help="end a block's last span once no broker thread runs (default), or at its answer (as "
                    "before 2026-12-04: the span comes out short while the broker still runs then)")
    ap.add_argument("--py-spy", metavar="DIR", help="record each broker with py-spy (-r 500 --nonblocking -f raw) "
                    "into DIR/<target>-<rep>.raw (the figures then include py-spy's cost)")
    add_pycache_option(ap)
    args = ap.parse_args(argv)
    use_pycache(args)
    global SETTLED
    SETTLED = args.clock_reads == "settled"
    names = [t.strip() for t in args.targets.split(",") if t.strip()]
    root = tempfile.mkdtemp(prefix="kproto-request-cost-")
    settings = {"group.initial.rebalance.delay.ms": "0"}   # a new group's join answers at once
    targets = [kproto_target(n, os.path.join(root, str(i)), settings, "request_cost") for i, n in enumerate(names)]
    runs: dict[str, list[dict]] = {t.name: [] for t in targets}
    began = time.time()
    with stopped_after(targets, root):
        for i in range(args.reps):
            for t, r in zip(targets, one_repetition(targets, args, i)):
                runs[t.name].append(r)
            print(f"repetition {i + 1}/{args.reps}: " + ", ".join(
                f"{t.name} {runs[t.name][-1]['whole'] / 1e9:.2f} s CPU" for t in targets), flush=True)
    load_avg = procstat.load_average()
    print(f"\n{time.strftime('%H:%M', time.gmtime(began))}-{time.strftime('%H:%M', time.gmtime())} UTC, "
          f"load average at the end {load_avg}; clock reads {args.clock_reads}; broker CPU µs per request (all "
          f"threads, from its send to the next request's), median (min-max) of {args.reps}; ratios: each "
          f"repetition's, median (min-max)")
    print(report(runs))


def report(runs: dict[str, list[dict]]) -> str:
    names = list(runs)
    kinds = list(dict.fromkeys(k for rs in runs.values() for r in rs for k in r["count"]))
    head = "| request (count per repetition) | " + " | ".join(names) + " | " + " | ".join(
        f"{n} / {names[0]}" for n in names[1:]) + " |"
    lines = [head, "| --- |" + " ---: |" * (2 * len(names) - 1)]

    def row(label, values):
        meds = [statistics.median(v) for v in values]
        cells = [f"{m:,.0f} ({min(v):,.0f}-{max(v):,.0f})" if m >= 100 else f"{m:.3g} ({min(v):.3g}-{max(v):.3g})"
                 for m, v in zip(meds, values)]
        # the ratio within each repetition (the builds took turns in it, under the same load), median
        # (min-max) over the repetitions: steadier than the ratio of the medians
        ratios = []
        for v in values[1:]:
            per_rep = [a / b for a, b in zip(v, values[0]) if b]
            ratios.append(f"{statistics.median(per_rep):.2f}x ({min(per_rep):.2f}-{max(per_rep):.2f})"
                          if per_rep else "-")
        lines.append(f"| {label} | " + " | ".join(cells + ratios) + " |")

    for k in kinds:
        count = runs[names[0]][0]["count"].get(k, 0)
        row(f"{k} ({count})", [[r["cpu"].get(k, 0) / 1e3 / max(1, r["count"].get(k, 1)) for r in runs[n]]
                                for n in names])
    lines.append("| the event loop thread's share, µs | |" + " |" * (2 * len(names) - 2))
    for k in kinds:
        row(f"{k}, loop", [[r["loop"].get(k, 0) / 1e3 / max(1, r["count"].get(k, 1)) for r in runs[n]]
                           for n in names])
    row("Fetch: CPU s per GiB of answers", [[r["cpu"].get("Fetch", 0) / 1e9 / (r["bytes_read"] / 2**30 or 1)
                                              for r in runs[n]] for n in names])
    row("Fetch: CPU s per GiB of whole batches (what the consumer keeps)",
        [[r["cpu"].get("Fetch", 0) / 1e9 / (r["whole_bytes"] / 2**30 or 1) for r in runs[n]] for n in names])
    row("Fetch: answer bytes per whole-batch byte", [[r["bytes_read"] / (r["whole_bytes"] or 1) for r in runs[n]]
                                                      for n in names])
    row("the whole sequence (after the warm-up), CPU s", [[r["whole"] / 1e9 for r in runs[n]] for n in names])
    row("idle afterwards, CPU ms per second", [[r["idle"] / 1e6 for r in runs[n]] for n in names])
    return "\n".join(lines)


if __name__ == "__main__":
    main()

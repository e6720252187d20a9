"""Power-loss scenarios on a replicated 3-node kproto cluster whose nodes
keep their data directories on LazyFS (tools/chaos/lazyfs.py): a power loss
kills the node's process with SIGKILL *and* drops every write it had not
fsynced (and every directory entry whose directory it had not fsynced), then
the node boots again on what its disk kept.

  power-loss-node        the leader of partition 0 loses power under an
                         acks=all load and boots again after --hold seconds:
                         nothing acknowledged may be lost, and its lost
                         unsynced tail must be truncated and fetched again
                         (never served): the replica logs are compared after
  power-loss-controller  the active controller (the KRaft quorum leader)
                         loses power while topics are being created: no
                         topic whose creation was acknowledged may be
                         missing from any node's metadata afterwards, the
                         metadata logs agree where they overlap, and no
                         epoch names two quorum leaders
  power-loss-all         every node loses power at once and boots again:
                         what was acknowledged survives only where it was
                         fsynced before the acknowledgement; with
                         --set log.flush.interval.messages=1 (fsync before
                         ack) nothing acknowledged may be lost, with the
                         defaults (no fsync before ack, as Kafka) the
                         checker counts what was lost

The load, the checkers (lost, duplicate, reordered, unexpected values; the
group reads everything) and the replica-log comparison are those of
tools/chaos/scenarios.py.

    python3 -m tools.chaos.powerloss power-loss-node --repeat 20 --out /tmp/pl
    python3 -m tools.chaos.powerloss power-loss-controller --repeat 20 --tear
    KAFKA_HOME=... python3 -m tools.chaos.powerloss power-loss-all --kafka   (Kafka 3.9 nodes, same cut)

Needs root and /dev/fuse (and libfuse3). Exit status 0 only when the run
completed with no anomaly.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import threading
import time

from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from raft import convert

from .lazyfs import LazyMount, fuse_available
from .scenarios import TOPIC, Abort, Scenario, _wait, describe
from .workloads import QUIET

KINDS = ("power-loss-node", "power-loss-controller", "power-loss-all")
META_DIR = "__cluster_metadata-0"
META_PREFIX = "pl-meta-"
MAX_META_TOPICS = 2000  # (bounds the metadata writer)
KEEP_META_TOPICS = 4    # the writer deletes older topics: every node recovers a bounded number of partitions
BOOT_TIMEOUT = 180      # s: a node recovers every partition through the FUSE file system before it listens


class PowerLossScenario(Scenario):
    KINDS = KINDS

    def __init__(self, kind: str, workdir: str, *, tear: bool = False, seed: int = 0, **kw):
        super().__init__(kind, workdir, **kw)
        self.mounts = [LazyMount(os.path.join(os.path.dirname(n.data_dir), "disk"), n.data_dir,
                                 tear=tear, seed=seed * 100 + n.index * 10)
                       for n in self.cluster.nodes]
        self.losses: list[dict] = []
        self.unreadable: list[str] = []
        self.meta_acked: list[str] = []
        self.meta_deleted: list[str] = []
        self.meta_gone: list[str] = []    # deleted by an attempt that was not acknowledged
        self.meta_errors = 0
        self.meta_error_kinds: dict[str, int] = {}   # (the writer's errors, by message: for the report)
        self.meta_problems: list[str] = []
        self.stop_meta = threading.Event()
        self.meta_next = 0
        self.quorum_epochs = 0     # epochs whose LeaderChange record the metadata logs hold
        self.meta_thread: threading.Thread | None = None

    # ---------------------------------------------------------------- the cut
    def power_loss(self, node, hold: float) -> dict:
        mount = self.mounts[node.index]
        node.kill()
        loss = mount.power_loss()
        self.nemesis("power-loss", node, "lost " + json.dumps(loss, sort_keys=True), True)
        time.sleep(hold)
        mount.start()
        node.start(timeout=BOOT_TIMEOUT)
        self.nemesis("power-loss", node, "booted", False)
        self.losses.append(loss)
        return loss

    def active_controller(self) -> int:
        """The quorum leader as the newest quorum-state file names it (node id)."""
        best = (-1, -1)
        for n in self.cluster.nodes:
            try:
                with open(os.path.join(n.data_dir, META_DIR, "quorum-state")) as f:
                    st = json.load(f)
            except (OSError, ValueError):
                continue
            best = max(best, (st.get("leaderEpoch", -1), st.get("leaderId", -1)))
        if best[1] < 1:
            raise Abort("no quorum-state file names a leader")
        return best[1]

    def power_loss_all(self, hold: float) -> list[dict]:
        import signal
        nodes = self.cluster.nodes
        for n in nodes:                # the cut: every process at once, then every disk
            if n.alive():
                os.kill(n.proc.pid, signal.SIGKILL)
        for n in nodes:
            n.kill()
        losses = [m.power_loss() for m in self.mounts]
        for n, loss in zip(nodes, losses):
            self.nemesis("power-loss", n, "lost " + json.dumps(loss, sort_keys=True), True)
        time.sleep(hold)
        for m in self.mounts:
            m.start()
        errors = []

        def boot(n):
            try:
                n.start(timeout=BOOT_TIMEOUT)
            except Exception as e:   # noqa: BLE001
                errors.append(e)
        threads = [threading.Thread(target=boot, args=(n,)) for n in nodes]   # (a quorum needs a majority)
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise Abort(f"a node did not boot after the power loss: {errors[0]}")
        for n in nodes:
            self.nemesis("power-loss", n, "booted", False)
        self.losses += losses
        return losses

    def fault_leader(self, i: int) -> None:
        if self.kind == "power-loss-all":
            rec = {"node": 0, "partitions": list(range(self.partitions)), "start": time.time()}
            losses = self.power_loss_all(self.hold)
            rec["end"] = time.time()
            self.faults.append(rec)
            self.progress(200, 120, "after the power loss of every node")
            self.full_isr()
            self.log(f"power loss {i + 1} of every node: lost {sum(x.get('bytes_lost', 0) for x in losses)} bytes "
                     f"({sum(x.get('files_torn', 0) for x in losses)} files torn); {self.acks()} acked so far, "
                     f"ISR full again")
            return
        if self.kind == "power-loss-controller":
            self._start_meta_writer()
            n0 = len(self.meta_acked)
            _wait(lambda: len(self.meta_acked) >= n0 + 5, 60, "5 more topics created before the loss")
            victim = self.node_of(self.active_controller())
        else:
            victim = self.node_of(self.partitions_info()[0][0])
        led = [p for p, (ld, _isr) in self.partitions_info().items() if ld == victim.index + 1]
        rec = {"node": victim.index + 1, "partitions": led, "start": time.time()}
        loss = self.power_loss(victim, self.hold)
        rec["end"] = time.time()
        self.faults.append(rec)
        self.progress(200, 90, "after the power loss")
        if self.kind == "power-loss-controller":
            n1 = len(self.meta_acked)
            _wait(lambda: len(self.meta_acked) >= n1 + 5, 60, "5 more topics created after the loss")
            self._stop_meta_writer()   # (so that every node has caught up when the run checks them)
            self._check_topics_listed()
        self.full_isr()
        self.log(f"power loss {i + 1}: {victim.name} (led {led}) lost {loss.get('bytes_lost', 0)} bytes in "
                 f"{loss.get('files_dropped', 0) + loss.get('files_torn', 0)} files "
                 f"({loss.get('files_torn', 0)} torn), {loss.get('entries_undone', 0)} directory entries "
                 f"undone; {self.acks()} acked so far, ISR full again")

    # ---------------------------------------------------------------- metadata load
    def _start_meta_writer(self) -> None:
        self.stop_meta.clear()
        self.meta_thread = threading.Thread(target=self._meta_writer, daemon=True)
        self.meta_thread.start()

    def _stop_meta_writer(self) -> None:
        self.stop_meta.set()
        if self.meta_thread is not None:
            self.meta_thread.join(60)

    def _meta_writer(self) -> None:
        """Create topics one by one; a creation counts once its future says ok."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})
        while not self.stop_meta.is_set() and self.meta_next < MAX_META_TOPICS:
            live = [t for t in self.meta_acked if t not in self.meta_deleted and t not in self.meta_gone]
            if len(live) > KEEP_META_TOPICS:
                old = live[0]
                try:
                    admin.delete_topics([old], operation_timeout=10, request_timeout=15)[old].result(20)
                    self.meta_deleted.append(old)
                    self.h.write(f="note", type="info", proc="meta", msg=f"deleted {old}")
                except Exception as e:   # noqa: BLE001  (not acknowledged: tried again next round)
                    self._meta_error("delete", e)
                    if _code(e) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        # an earlier attempt whose answer was lost (a timeout) deleted it
                        self.meta_gone.append(old)
                    self.stop_meta.wait(0.05)
                continue
            name = f"{META_PREFIX}{self.meta_next:05d}"
            self.meta_next += 1
            try:
                admin.create_topics([NewTopic(name, 1, 3)], operation_timeout=10,
                                    request_timeout=15)[name].result(20)
                self.meta_acked.append(name)
                self.h.write(f="note", type="info", proc="meta", msg=f"created {name}")
            except Exception as e:   # noqa: BLE001  (not acknowledged: may or may not exist)
                self._meta_error("create", e)
            self.stop_meta.wait(0.05)

    def _meta_error(self, what: str, e: Exception) -> None:
        self.meta_errors += 1
        key = f"{what}: {str(e)[:100]}"
        if key not in self.meta_error_kinds:
            self.h.write(f="note", type="info", proc="meta", msg=f"{what} failed: {e}")
        self.meta_error_kinds[key] = self.meta_error_kinds.get(key, 0) + 1

    # ---------------------------------------------------------------- checks
    def _check_topics_listed(self) -> None:
        """After a loss: every acknowledged creation not deleted since is in
        Metadata, no acknowledged deletion is."""
        want = set(self.meta_acked) - set(self.meta_deleted) - set(self.meta_gone)
        gone = set(self.meta_deleted) | set(self.meta_gone)
        state = {}

        def agrees():
            listed = {t for t in self.admin.list_topics(timeout=10).topics if t.startswith(META_PREFIX)}
            state["missing"], state["back"] = sorted(want - listed), sorted(gone & listed)
            return not state["missing"] and not state["back"]
        try:
            _wait(agrees, 30, "Metadata to list the acknowledged topic creations and deletions")
        except Exception:   # noqa: BLE001  (reported as a problem below)
            self.meta_problems.append(f"after power loss {len(self.losses)}: acknowledged creations not listed "
                                      f"{state.get('missing', [])[:5]}, acknowledged deletions listed "
                                      f"{state.get('back', [])[:5]}")

    def node_logs(self, node) -> dict[int, list[tuple[int, bytes]]]:
        """Scenario's reading, where a log file that does not parse (a torn
        write kept inside the log) is a problem of its own, not a crash."""
        from tools.replication_cluster import _values
        out = {}
        for p in range(self.partitions):
            recs = []
            for seg in sorted(glob.glob(os.path.join(node.data_dir, f"{TOPIC}-{p}", "*.log"))):
                with open(seg, "rb") as f:
                    data = f.read()
                try:
                    recs += _values(data)
                except ValueError as e:   # (MalformedRecordError)
                    self.unreadable.append(f"{node.name}: {os.path.basename(os.path.dirname(seg))}/"
                                           f"{os.path.basename(seg)} does not parse: {e}")
            out[p] = recs
        return out

    def compare_replicas(self) -> list[str]:
        """The user partitions' replica logs (Scenario), then the metadata:
        called with every node stopped."""
        self.stop_meta.set()
        problems = super().compare_replicas()
        problems += sorted(set(self.unreadable))
        if self.kind == "power-loss-controller":
            self.meta_problems += self.check_metadata()
        return problems

    def metadata_entries(self, node) -> dict[int, tuple[int, bytes, bool]]:
        out = {}
        for seg in sorted(glob.glob(os.path.join(node.data_dir, META_DIR, "*.log"))):
            with open(seg, "rb") as f:
                for e in convert.records_to_entries(f.read()):
                    out[e.offset] = (e.epoch, e.data, e.control)
        return out

    def check_metadata(self) -> list[str]:
        problems = []
        logs = {n.name: self.metadata_entries(n) for n in self.cluster.nodes}
        leaders: dict[int, set] = {}
        for name, entries in logs.items():
            for off, (epoch, data, control) in entries.items():
                if control and b":" in data and not data.startswith(b"{"):
                    head = data.split(b":", 1)[0]
                    if head.isdigit():
                        leaders.setdefault(epoch, set()).add(int(head))
        problems += [f"epoch {e}: two quorum leaders {sorted(ids)}" for e, ids in leaders.items() if len(ids) > 1]
        self.quorum_epochs = len(leaders)
        names = list(logs)
        for a in names:
            for b in names:
                if a < b:
                    common = set(logs[a]) & set(logs[b])
                    diff = sorted(o for o in common if logs[a][o] != logs[b][o])
                    if diff:
                        problems.append(f"metadata logs of {a} and {b} differ at offsets {diff[:5]} "
                                        f"({len(diff)} of {len(common)} common)")
        for n in self.cluster.nodes:
            blob = b""
            for path in glob.glob(os.path.join(n.data_dir, META_DIR, "*")):
                if path.endswith((".log", ".checkpoint")):
                    with open(path, "rb") as f:
                        blob += f.read()
            missing = [t for t in self.meta_acked if t.encode() not in blob]
            if missing:
                problems.append(f"{n.name}: {len(missing)} acknowledged topic creations missing from its "
                                f"metadata, e.g. {missing[:3]}")
        return problems

    # ---------------------------------------------------------------- the run
    def run(self, repeat: int = 1, time_limit: float = 600) -> dict:
        ok, why = fuse_available()
        if not ok:
            raise Abort(f"power loss needs a FUSE file system: {why}")
        try:
            for m in self.mounts:
                m.start()
            # the nodes are formatted long before any power cut, and by then the page cache has
            # written the format back (Kafka's kafka-storage.sh does not fsync bootstrap.checkpoint,
            # which a cut seconds after formatting takes away): a clean unmount stands for that
            for n in self.cluster.nodes:
                n.prepare()
            for m in self.mounts:
                m.stop()
                m.start()
            return super().run(repeat, time_limit)
        finally:
            self.stop_meta.set()
            for m in self.mounts:
                try:
                    m.stop()
                except Exception as e:   # noqa: BLE001
                    self.log(f"unmounting {m.mountpoint}: {e}")

    def verdict(self) -> dict:
        v = super().verdict()
        v["lost_ages"] = lost_ages(v["ops"], v["anomalies"])
        v.update(losses=self.losses, meta_acked=len(self.meta_acked), meta_deleted=len(self.meta_deleted),
                 meta_errors=self.meta_errors, meta_error_kinds=self.meta_error_kinds,
                 meta_problems=self.meta_problems, quorum_epochs=self.quorum_epochs)
        v["valid"] = v["valid"] and not self.meta_problems
        return v


def _code(e: Exception):
    err = e.args[0] if e.args else None
    return err.code() if isinstance(err, KafkaError) else None


def lost_ages(ops: list[dict], anomalies: list[dict]) -> list[float]:
    """For each lost-write: seconds from its acknowledgement to the first
    power loss after it (the loss that took it): what the flush window let go."""
    cuts = sorted(o["ts"] for o in ops if o.get("f") == "nemesis" and o.get("type") == "start"
                  and o.get("kind") in ("power-loss", "power"))
    ages = []
    for a in anomalies:
        if a["kind"] != "lost-write" or not a["ops"]:
            continue
        acked = a["ops"][0]["ts"]
        after = [c for c in cuts if c >= acked]
        if after:
            ages.append(after[0] - acked)
    return sorted(ages)


def describe_power_loss(v: dict) -> str:
    lines = [describe(v)]
    if v.get("lost_ages"):
        a = v["lost_ages"]
        lines.append(f"lost acknowledged records: {len(a)}, acknowledged before the power loss that took them "
                     f"by p50 {a[len(a) // 2]:.2f}s, max {a[-1]:.2f}s")
    ls = v["losses"]
    lines.append(f"power losses: {len(ls)}; bytes of unsynced writes dropped: "
                 f"{sum(x.get('bytes_lost', 0) for x in ls)}; files rolled back: "
                 f"{sum(x.get('files_dropped', 0) for x in ls)}, torn: {sum(x.get('files_torn', 0) for x in ls)}; "
                 f"directory entries undone: {sum(x.get('entries_undone', 0) for x in ls)}")
    if v["meta_acked"] or v["meta_problems"]:
        lines.append(f"topics created (acknowledged): {v['meta_acked']}, deleted: {v['meta_deleted']}, "
                     f"failed/unknown: {v['meta_errors']}; "
                     f"quorum epochs in the metadata logs: {v['quorum_epochs']}; "
                     f"metadata after the losses: {'consistent' if not v['meta_problems'] else 'PROBLEMS'}")
        lines += [f"  {p}" for p in v["meta_problems"][:10]]
        top = sorted(v["meta_error_kinds"].items(), key=lambda kv: -kv[1])[:5]
        lines += [f"  metadata writer error x{n}: {k}" for k, n in top]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m tools.chaos.powerloss", description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", choices=KINDS)
    ap.add_argument("--repeat", type=int, default=1, help="power losses")
    ap.add_argument("--hold", type=float, default=1.0, help="seconds a node stays without power")
    ap.add_argument("--tear", action="store_true", help="tear the last unsynced write of some files")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=600, help="no new fault after this many seconds")
    ap.add_argument("--out", help="directory for history.jsonl and node logs (default: a temporary one)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--kafka", action="store_true", help="real Kafka 3.9 nodes from KAFKA_HOME, on the same LazyFS")
    args = ap.parse_args(argv)
    home = os.environ.get("KAFKA_HOME") if args.kafka else None
    if args.kafka and not home:
        print("--kafka needs KAFKA_HOME", file=sys.stderr)
        return 2
    out = args.out or tempfile.mkdtemp(prefix=f"kproto-{args.scenario}-")
    s = PowerLossScenario(args.scenario, out, kafka_home=home, tear=args.tear, seed=args.seed,
                          partitions=args.partitions,
                          hold=args.hold, settings=dict(kv.split("=", 1) for kv in args.set),
                          log=lambda m: print(m, flush=True))
    v = s.run(args.repeat, args.time_limit)
    print(describe_power_loss(v))
    print(f"history: {s.hist_path}")
    return 0 if v["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""Nemeses on a seeded timeline. The whole schedule is drawn from the seed
before the run starts (kind, node, duration, gap), so two runs with one seed
inject the same faults at the same moments; each fault is healed before the
next one starts, and its start and stop are operations in the history.

  kill       kill -9 the node; restart it when the fault ends
  pause      SIGSTOP, then SIGCONT
  partition  isolate the node (link down), or black-hole one direction of
             its link; with 3+ nodes also a minority split
  slow       rate-limited link (tbf; netem delay and jitter where present)
  lossy      netem packet loss (only where the kernel has sch_netem)
  disk       fill the node's log dir (a small tmpfs) until ENOSPC
  power      power loss: kill -9 and drop every write the node had not
             fsynced (its data dir on LazyFS, tools/chaos/lazyfs.py); it
             boots again when the fault ends
"""
from __future__ import annotations

import random
import threading
import time

from .cluster import Cluster
from .history import HistoryWriter

KINDS = ("kill", "pause", "partition", "slow", "lossy", "disk", "power")
NETWORK_KINDS = ("partition", "slow", "lossy")


def usable_kinds(cluster: Cluster, wanted: list[str], log=print) -> list[str]:
    kinds = []
    for k in wanted:
        if k not in KINDS:
            raise ValueError(f"unknown nemesis {k!r} (known: {', '.join(KINDS)})")
        if k in NETWORK_KINDS and cluster.net is None:
            log(f"nemesis {k}: skipped, no network namespaces (loopback fallback)")
        elif k == "lossy" and not cluster.net.netem:
            log("nemesis lossy: skipped, this kernel has no sch_netem (tc qdisc netem fails)")
        elif k == "disk" and not cluster.disk_mb:
            log("nemesis disk: skipped, log dirs are not on a small tmpfs")
        elif k == "power" and not cluster.disks:
            log("nemesis power: skipped, log dirs are not on LazyFS (needs root, /dev/fuse, libfuse3)")
        else:
            kinds.append(k)
    return kinds


def schedule(seed: int, kinds: list[str], nodes: int, total_s: float,
             duration=(1.0, 4.0), gap=(1.0, 3.0), start_after: float = 3.0) -> list[dict]:
    rng = random.Random(seed)
    events, t = [], start_after
    prev_end = 0.0
    while kinds:
        t += rng.uniform(*gap)
        d = rng.uniform(*duration)
        if t + d > total_s:
            break
        kind = rng.choice(kinds)
        ev = {"at": round(t, 3), "kind": kind, "node": rng.randrange(nodes), "duration": round(d, 3),
              "gap": round(t - prev_end, 3)}
        if kind == "partition":
            modes = ["isolate", "one-way-in", "one-way-out"] + (["minority"] if nodes >= 3 else [])
            ev["mode"] = rng.choice(modes)
        events.append(ev)
        t += d
        prev_end = t
    return events


class Nemesis:
    def __init__(self, cluster: Cluster, h: HistoryWriter, events: list[dict], total_s: float, log=print):
        self.cluster, self.h, self.events, self.total_s, self.log = cluster, h, events, total_s, log
        self.stop = threading.Event()
        self.done: list[dict] = []
        self.active: str = ""
        self.t0 = 0.0
        self.thread = threading.Thread(target=self.run, name="nemesis", daemon=True)

    def start(self, t0: float) -> None:
        self.t0 = t0
        self.thread.start()

    def run(self) -> None:
        # each fault starts its gap after the previous one is healed (a
        # restart can take longer than planned): the cluster always gets its
        # recovery time; faults that would start after the end are dropped
        # (one running at the end is cut short by heal_all)
        for ev in self.events:
            if self.stop.wait(ev["gap"]) or time.monotonic() >= self.t0 + self.total_s:
                return
            self.inject(ev)

    def inject(self, ev: dict) -> None:
        c, kind = self.cluster, ev["kind"]
        node = c.nodes[ev["node"]]
        nodes = [node]
        detail = ""
        try:
            if kind == "kill":
                node.kill()
                detail = "kill -9"
            elif kind == "pause":
                node.pause()
                detail = "SIGSTOP"
            elif kind == "partition":
                mode = ev.get("mode", "isolate")
                if mode == "minority":
                    nodes = [c.nodes[(ev["node"] + k) % len(c.nodes)] for k in range((len(c.nodes) - 1) // 2)]
                    detail = "; ".join(c.net.isolate(n.index) for n in nodes) + " (minority cut off)"
                elif mode == "isolate":
                    detail = c.net.isolate(node.index)
                else:
                    detail = c.net.one_way(node.index, towards_node=(mode == "one-way-in"))
                kind = "partition"
                detail = f"{mode}: {detail}"
            elif kind == "slow":
                detail = c.net.slow(node.index)
            elif kind == "lossy":
                detail = c.net.lossy(node.index)
            elif kind == "disk":
                detail = c.fill_disk(node)
            elif kind == "power":
                loss = c.power_off(node)
                detail = (f"lost {loss.get('bytes_lost', 0)} unsynced bytes in {loss.get('files_dropped', 0)} "
                          f"files, {loss.get('files_torn', 0)} torn, {loss.get('entries_undone', 0)} entries undone")
        except Exception as e:   # a fault that cannot be injected is reported, not fatal
            self.h.write(f="nemesis", type="fail", proc="nemesis", kind=kind, node=node.name, error=str(e))
            self.log(f"nemesis {kind} on {node.name} failed: {e}")
            return
        names = ",".join(n.name for n in nodes)
        self.active = f"{kind} {names}"
        self.h.write(f="nemesis", type="start", proc="nemesis", kind=kind, node=names, detail=detail)
        self.stop.wait(ev["duration"])
        self.heal(kind, nodes)
        self.active = ""
        self.h.write(f="nemesis", type="stop", proc="nemesis", kind=kind, node=names)
        self.done.append(ev)

    def heal(self, kind: str, nodes) -> None:
        c = self.cluster
        for node in nodes:
            if kind == "pause":
                node.resume()
            elif kind in NETWORK_KINDS:
                c.net.heal(node.index)
            elif kind == "disk":
                c.free_disk(node)
            elif kind == "power":
                c.power_on(node)
            if not node.alive():
                if kind not in ("kill", "power"):
                    self.h.write(f="note", type="info", proc="nemesis",
                                 msg=f"{node.name} exited during {kind} (exit {node.proc.returncode})")
                self._restart(node)

    def _restart(self, node) -> None:
        for attempt in range(3):
            try:
                node.start()
                return
            except RuntimeError as e:
                self.h.write(f="note", type="info", proc="nemesis", msg=f"restart of {node.name}: {e}")
                time.sleep(1)

    def heal_all(self) -> None:
        """End of the run: nothing stays faulted, every node is up."""
        self.stop.set()
        self.thread.join(60)
        c = self.cluster
        if c.net is not None:
            c.net.heal_all()
        for node in c.nodes:
            node.resume()
            c.free_disk(node)
            c.power_on(node)
            if not node.alive():
                self._restart(node)

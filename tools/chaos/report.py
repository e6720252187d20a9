"""The report of a run: a summary table, the anomalies with the operations
involved, and a PNG of throughput and latency over time with the fault
windows shaded."""
from __future__ import annotations

import json
from collections import Counter, defaultdict

from .checker import Index

COUNTED = {("send", "invoke"), ("poll", "ok"), ("poll", "fail"), ("commit", "invoke"), ("txn", "invoke")}


def operations(ops: list[dict]) -> int:
    return sum(1 for o in ops if (o.get("f"), o.get("type")) in COUNTED)


def fault_windows(ops: list[dict], t0: float, t_end: float) -> list[tuple[str, str, float, float]]:
    open_: dict[tuple, float] = {}
    out = []
    for o in ops:
        if o.get("f") != "nemesis":
            continue
        key = (o["kind"], o["node"])
        if o["type"] == "start":
            open_[key] = o["ts"] - t0
        elif o["type"] == "stop" and key in open_:
            out.append((o["kind"], o["node"], open_.pop(key), o["ts"] - t0))
    out += [(k, n, s, t_end - t0) for (k, n), s in open_.items()]
    return out


def summary(result: dict) -> str:
    ix: Index = result["index"]
    ops = ix.ops
    by = Counter((o.get("f"), o.get("type")) for o in ops)
    errors = Counter(o.get("error", "?") for o in ops
                     if o.get("type") in ("fail", "info") and o.get("f") in ("send", "poll", "commit", "txn"))
    faults = Counter(o["kind"] for o in ops if o.get("f") == "nemesis" and o.get("type") == "start")
    lats = sorted(o["lat"] for o in ops if o.get("f") == "send" and o.get("type") == "ok" and "lat" in o)
    txn_lat = sorted(o["lat"] for o in ops if o.get("f") == "txn" and "lat" in o and o.get("type") != "invoke")
    outcomes = Counter(f"{o.get('outcome', 'unknown')}/{o['type']}" for o in ops
                       if o.get("f") == "txn" and o.get("type") != "invoke")

    # the longest time a transactional copier went without finishing a transaction
    ends: dict[str, list] = defaultdict(list)
    for o in ops:
        if o.get("f") == "txn" and o.get("type") != "invoke":
            ends[o["proc"]].append(o["ts"])
    gaps = [(b - a, a - ix.t0) for ts in ends.values() for a, b in zip(ts, ts[1:])]
    gap = max(gaps, default=None)

    def pct(xs, q):
        return f"{xs[min(len(xs) - 1, int(q * len(xs)))]:.3f}s" if xs else "-"
    rows = [
        ("operations", f"{operations(ops)}  (sends {by[('send', 'invoke')]}, polls {by[('poll', 'ok')]}, "
                       f"commits {by[('commit', 'invoke')]}, transactions {by[('txn', 'invoke')]})"),
        ("acknowledged sends", f"{by[('send', 'ok')]}  (latency p50 {pct(lats, .5)}, p99 {pct(lats, .99)}, "
                               f"max {pct(lats, 1)})"),
        ("unacknowledged sends", f"{by[('send', 'info')] + by[('send', 'fail')]}"),
        ("transactions", ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())) or "-"),
        ("transaction latency", f"p50 {pct(txn_lat, .5)}, p99 {pct(txn_lat, .99)}, max {pct(txn_lat, 1)}"),
        ("longest copier stall", f"{gap[0]:.1f}s from t={gap[1]:.1f}s" if gap else "-"),
        ("values read", f"{len(ix.reads)} distinct"),
        ("errors by code", ", ".join(f"{k} {v}" for k, v in errors.most_common()) or "none"),
        ("faults", f"{sum(faults.values())}  (" + ", ".join(f"{k} {v}" for k, v in sorted(faults.items())) + ")"),
        ("anomalies", ", ".join(f"{k} {v}" for k, v in sorted(result["by_kind"].items())) or "none"),
        ("run completed", "yes" if result["completed"] else "NO"),
    ]
    w = max(len(r[0]) for r in rows)
    return "\n".join(f"  {k:<{w}}  {v}" for k, v in rows)


def describe_anomalies(result: dict, limit: int = 10) -> str:
    ix: Index = result["index"]
    lines = []
    shown: Counter = Counter()
    for a in result["anomalies"]:
        if shown[a["kind"]] >= limit:
            continue
        shown[a["kind"]] += 1
        lines.append(f"{a['kind']}: {a['msg']}")
        for o in a["ops"]:
            brief = {k: v for k, v in o.items() if k != "ts"}
            if "records" in brief and len(brief["records"]) > 6:
                brief["records"] = brief["records"][:6] + [f"... {len(o['records']) - 6} more"]
            lines.append(f"    t={ix.rel(o):8.3f}s {json.dumps(brief)}")
    for kind, n in result["by_kind"].items():
        if n > shown[kind]:
            lines.append(f"... and {n - shown[kind]} more {kind}")
    return "\n".join(lines)


def plot(result: dict, path: str, title: str = "") -> str | None:
    """throughput (acknowledged sends/s) and send latency over time, fault
    windows shaded by kind. None if matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    ix: Index = result["index"]
    ops = ix.ops
    if not ops:
        return None
    t0, t_end = ix.t0, ops[-1]["ts"]
    acks = defaultdict(int)
    lat_t, lat_v, err_t = [], [], []
    for o in ops:
        if o.get("f") != "send":
            continue
        if o["type"] == "ok":
            acks[int(o["ts"] - t0)] += 1
            lat_t.append(o["ts"] - t0)
            lat_v.append(o.get("lat", 0) * 1000)
        elif o["type"] in ("info", "fail"):
            err_t.append(o["ts"] - t0)
    secs = range(int(t_end - t0) + 1)
    fig, (a1, a2) = plt.subplots(2, 1, sharex=True, figsize=(12, 6))
    a1.plot(list(secs), [acks[s] for s in secs], lw=0.8, color="tab:blue")
    a1.set_ylabel("acknowledged sends / s")
    a2.scatter(lat_t, lat_v, s=1, alpha=0.3, color="tab:blue", label="send latency")
    if err_t:
        a2.scatter(err_t, [max(lat_v or [1])] * len(err_t), s=4, marker="x", color="tab:red",
                   label="send error")
    a2.set_yscale("log")
    a2.set_ylabel("latency (ms)")
    a2.set_xlabel("seconds since start")
    colors = {"kill": "tab:red", "pause": "tab:orange", "partition": "tab:purple", "slow": "tab:green",
              "lossy": "tab:olive", "disk": "tab:brown"}
    seen = set()
    for kind, _node, s, e in fault_windows(ops, t0, t_end):
        for ax in (a1, a2):
            ax.axvspan(s, e, color=colors.get(kind, "grey"), alpha=0.18,
                       label=kind if ax is a1 and kind not in seen else None)
        seen.add(kind)
    a1.legend(loc="upper right", fontsize=8, ncol=6)
    a2.legend(loc="upper right", fontsize=8)
    a1.set_title(title or "chaos run")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

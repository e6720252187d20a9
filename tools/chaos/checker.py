"""Checkers over a chaos history, named as Jepsen's Kafka checker names them.

Each checker returns a list of anomalies: dicts with ``kind``, a one-line
``msg`` and the operations involved (``ops``), so a report can show exactly
which records and which client calls disagree.

What they assume of the workloads (tools/chaos/workloads.py): every value is
written once by the application and is unique in the whole run; the final
phase reads every partition from the start to its end offset after all faults
are healed, and records those end offsets in a ``final`` operation.
"""
from __future__ import annotations

from collections import defaultdict

from .history import tp_key


def _anomaly(kind: str, msg: str, *ops) -> dict:
    return {"kind": kind, "msg": msg, "ops": [o for o in ops if o is not None]}


class Index:
    """What the history says, indexed once for all checkers."""

    def __init__(self, ops: list[dict]):
        self.ops = ops
        self.t0 = ops[0]["ts"] if ops else 0.0
        self.sent: dict[str, dict] = {}            # value -> send invoke
        self.acked: dict[str, dict] = {}           # value -> send ok
        self.timeouts: dict[str, list] = defaultdict(list)  # producer -> when its sends timed out
        self.reads: dict[str, list] = defaultdict(list)   # value -> [(key, offset, poll op)]
        self.at_offset: dict[tuple, dict] = {}     # (key, offset) -> (value, op)
        self.max_read: dict[str, int] = {}         # key -> highest offset read
        self.txns: dict[str, dict] = {}            # txn id -> its invoke
        self.txn_result: dict[str, dict] = {}      # txn id -> ok/fail/info
        self.txn_of_value: dict[str, list] = defaultdict(list)  # written value -> txn ids
        self.txn_at: dict[tuple, str] = {}         # (key, offset) a txn wrote -> txn id
        self.commit_at: dict[str, float] = {}      # txn id -> when its commit was asked for
        self.final: dict | None = None
        self.completed = False
        for op in ops:
            f, ty = op.get("f"), op.get("type")
            if f == "send":
                if ty == "invoke":
                    self.sent[op["value"]] = op
                elif ty == "ok":
                    self.acked[op["value"]] = op
                elif op.get("error") == "_MSG_TIMED_OUT":
                    self.timeouts[op.get("proc")].append(op["ts"])
            elif f == "poll" and ty == "ok":
                for topic, p, off, value in op["records"]:
                    key = tp_key(topic, p)
                    self.reads[value].append((key, off, op))
                    if off > self.max_read.get(key, -1):
                        self.max_read[key] = off
            elif f == "txn":
                if ty == "invoke":
                    self.txns[op["txn"]] = op
                    for _topic, value in op.get("writes", []):
                        self.txn_of_value[value].append(op["txn"])
                else:
                    self.txn_result[op["txn"]] = op
                    for topic, p, off, _value in op.get("offsets", []):
                        self.txn_at[(tp_key(topic, p), off)] = op["txn"]
            elif f == "txn-commit" and ty == "invoke":
                self.commit_at.setdefault(op["txn"], op["ts"])
            elif f == "final":
                # one per target cluster: merged
                if self.final is None:
                    self.final = {"end_offsets": {}, "committed": {}, "copiers": []}
                self.final["end_offsets"].update(op.get("end_offsets", {}))
                for g, offs in op.get("committed", {}).items():
                    self.final["committed"].setdefault(g, {}).update(offs)
                if op.get("copier"):
                    self.final["copiers"].append(op["copier"])
            elif f == "run" and ty == "stop":
                self.completed = bool(op.get("completed"))

    def rel(self, op: dict) -> float:
        return op.get("ts", self.t0) - self.t0


def _final_reads(ix: Index) -> tuple[set, dict]:
    values, top = set(), {}
    for value, places in ix.reads.items():
        for key, off, op in places:
            if op.get("proc") == "final":
                values.add(value)
                top[key] = max(top.get(key, -1), off)
    return values, top


def lost_writes(ix: Index) -> list[dict]:
    """lost-write: an acknowledged value that is not there: no consumer ever
    read it although reads of its partition went past its offset, or the
    final read (after the faults) went past its offset without it, or the
    partition ends below it."""
    out = []
    ends = (ix.final or {}).get("end_offsets", {})
    final_values, final_top = _final_reads(ix)
    for value, ack in ix.acked.items():
        key = tp_key(ack["topic"], ack["partition"])
        off = ack["offset"]
        end = ends.get(key)
        why = None
        if off is None:
            # acknowledged without an offset (librdkafka reports -1, e.g. for a
            # batch the broker answered as a duplicate): it must be read somewhere
            if ix.final is not None and value not in final_values and value not in ix.reads:
                why = "acknowledged without an offset and never read, not even by the final read"
        elif end is not None and end <= off:
            why = f"{key} ends at {end} after the run"
        elif end is not None and value not in final_values and final_top.get(key, -1) > off:
            why = f"the final read of {key} reached offset {final_top[key]} without it"
            if value in ix.reads:
                why += " (it had been read before: " + ", ".join(
                    f"{op['proc']} at t={ix.rel(op):.3f}s" for _k, _o, op in ix.reads[value][:2]) + ")"
        elif value not in ix.reads and ix.max_read.get(key, -1) > off:
            why = f"never read, though reads of {key} reached offset {ix.max_read[key]}"
        if why:
            out.append(_anomaly("lost-write", f"{value!r} acknowledged at {key}@{off}: {why}", ack))
    return out


def unseen_writes(ix: Index) -> list[dict]:
    """unseen: acknowledged, not found by the final read of its partition,
    which stopped before its offset although the partition goes beyond it."""
    if ix.final is None:
        return []
    out = []
    ends = ix.final.get("end_offsets", {})
    final_values, final_top = _final_reads(ix)
    for value, ack in ix.acked.items():
        key = tp_key(ack["topic"], ack["partition"])
        end = ends.get(key)
        if ack["offset"] is None:
            continue   # (lost_writes judges those)
        if end is not None and value not in final_values and final_top.get(key, -1) <= ack["offset"] < end:
            out.append(_anomaly("unseen", f"{value!r} acknowledged at {key}@{ack['offset']} "
                                "was not read by the final read of its partition", ack))
    return out


def inconsistent_offsets(ix: Index) -> list[dict]:
    """inconsistent-offsets: two different values at one offset of a partition
    (between two reads, or between an acknowledgement and a read)."""
    out = []
    seen: dict[tuple, tuple] = {}
    places = [(tp_key(a["topic"], a["partition"]), a["offset"], a, v) for v, a in ix.acked.items()
              if a["offset"] is not None]
    places += [(key, off, op, v) for v, pl in ix.reads.items() for key, off, op in pl]
    reported = set()
    for key, off, op, value in places:
        other = seen.get((key, off))
        if other is None:
            seen[(key, off)] = (value, op)
        elif other[0] != value and (key, off) not in reported:
            reported.add((key, off))
            out.append(_anomaly("inconsistent-offsets",
                                    f"{key}@{off} holds {other[0]!r} and {value!r}", other[1], op))
    return out


def duplicates(ix: Index) -> list[dict]:
    """duplicate: one value (written once) found at two offsets."""
    out = []
    for value, places in ix.reads.items():
        if value in ix.txn_of_value:
            # aborted copies may sit beside the committed one; only what a
            # read_committed consumer sees counts
            places = [pl for pl in places if pl[2].get("isolation") == "read_committed"]
        where = {(key, off) for key, off, _op in places}
        if len(where) > 1:
            ops = []
            for key, off, op in places:
                if op not in ops:
                    ops.append(op)
            out.append(_anomaly("duplicate", f"{value!r} read at " +
                                ", ".join(f"{k}@{o}" for k, o in sorted(where)) + _epoch_bump_hint(ix, value),
                                *ops[:4]))
    return out


def _epoch_bump_hint(ix: Index, value: str) -> str:
    """Why an idempotent producer's value may sit at two offsets without a
    broker bug: its producer timed messages out while this one was
    unacknowledged, and librdkafka then bumps the producer epoch and re-sends
    what is still unacknowledged from sequence 0 (KIP-360), which Kafka 3.9
    also writes again (docs/chaos.md, tools/chaos/epoch_bump.py). Only a
    hint: the history has no epochs, and the value still counts."""
    sent = ix.sent.get(value)
    if sent is None:
        return ""
    ack = ix.acked.get(value)
    end = ack["ts"] if ack is not None else float("inf")
    n = sum(1 for ts in ix.timeouts.get(sent.get("proc"), ()) if sent["ts"] <= ts <= end)
    if not n:
        return ""
    return (f" (sent at {ix.rel(sent):.1f} s, "
            + (f"acknowledged at {ix.rel(ack):.1f} s" if ack is not None else "never acknowledged")
            + f"; {sent.get('proc')} had {n} sends time out in between: librdkafka's epoch bump "
              "re-sends unacknowledged messages; Kafka 3.9 writes them twice too)")


def unexpected_values(ix: Index) -> list[dict]:
    """unexpected-value: a value read that no client ever sent (corruption,
    or a record from somewhere else)."""
    out = []
    for value, places in ix.reads.items():
        if value not in ix.sent and value not in ix.txn_of_value:
            key, off, op = places[0]
            out.append(_anomaly("unexpected-value", f"{value!r} read at {key}@{off} was never sent", op))
    return out


def nonmonotonic_polls(ix: Index) -> list[dict]:
    """nonmonotonic-poll: within one consumer, a partition's offsets go back or
    repeat between polls, with no (re)assignment in between."""
    out = []
    last: dict[tuple, tuple] = {}
    for op in ix.ops:
        f, proc = op.get("f"), op.get("proc")
        if f in ("assign", "revoke", "seek", "crash") and op.get("type") in ("ok", "info"):
            for k in [k for k in last if k[0] == proc]:
                del last[k]
        elif f == "poll" and op.get("type") == "ok":
            for topic, p, off, value in op["records"]:
                k = (proc, tp_key(topic, p))
                prev = last.get(k)
                if prev is not None and off <= prev[0]:
                    out.append(_anomaly("nonmonotonic-poll",
                                        f"{proc} read {k[1]}@{off} ({value!r}) after @{prev[0]}",
                                        prev[1], op))
                last[k] = (off, op)
    return out


def nonmonotonic_sends(ix: Index) -> list[dict]:
    """nonmonotonic-send: one producer's acknowledged writes to a partition,
    in the order it sent them, must get increasing offsets (idempotence keeps
    order with several requests in flight)."""
    out = []
    order = {v: i for i, v in enumerate(op["value"] for op in ix.ops
                                         if op.get("f") == "send" and op.get("type") == "invoke")}
    by_stream: dict[tuple, list] = defaultdict(list)
    for value, ack in ix.acked.items():
        if ack["offset"] is None:
            continue
        by_stream[(ack["proc"], tp_key(ack["topic"], ack["partition"]))].append(
            (order.get(value, -1), ack["offset"], ack))
    for (proc, key), acks in by_stream.items():
        acks.sort(key=lambda a: a[0])
        for a, b in zip(acks, acks[1:]):
            if b[1] <= a[1]:
                out.append(_anomaly("nonmonotonic-send",
                                    f"{proc} sent {a[2]['value']!r} before {b[2]['value']!r} to {key}, "
                                    f"acknowledged at @{a[1]} and @{b[1]}", a[2], b[2]))
    return out


def _aborted(ix: Index, txn: str) -> bool:
    res = ix.txn_result.get(txn)
    return res is not None and res.get("type") == "ok" and res.get("outcome") == "abort"


def aborted_reads(ix: Index) -> list[dict]:
    """aborted-read: a read_committed consumer saw a record of a transaction
    that was aborted (abort_transaction returned): its offset is one the
    aborted transaction wrote, or its value was only ever written by aborted
    transactions."""
    out = []
    for value, places in ix.reads.items():
        txns = ix.txn_of_value.get(value)
        if not txns:
            continue
        for key, off, op in places:
            if op.get("isolation") != "read_committed":
                continue
            txn = ix.txn_at.get((key, off))
            if (txn is not None and _aborted(ix, txn)) or (txn is None and all(_aborted(ix, t) for t in txns)):
                txn = txn or txns[-1]
                out.append(_anomaly("aborted-read", f"{op['proc']} (read_committed) read {value!r} "
                                    f"at {key}@{off} from aborted transaction {txn}",
                                    ix.txns.get(txn), ix.txn_result.get(txn), op))
                break
    return out


def uncommitted_reads(ix: Index) -> list[dict]:
    """uncommitted-read: a read_committed consumer saw a transactional value
    before any transaction writing it had even asked to commit."""
    out = []
    for value, places in ix.reads.items():
        txns = ix.txn_of_value.get(value)
        if not txns or all(_aborted(ix, t) for t in txns):
            continue
        first_commit = min((ix.commit_at[t] for t in txns if t in ix.commit_at), default=None)
        for key, off, op in places:
            if op.get("isolation") != "read_committed":
                continue
            if first_commit is None or op["ts"] < first_commit:
                out.append(_anomaly("uncommitted-read", f"{op['proc']} (read_committed) read {value!r} "
                                    f"at {key}@{off} before its transaction {txns[-1]} was committed",
                                    ix.txns.get(txns[-1]), op))
                break
    return out


def copier(ix: Index) -> list[dict]:
    """The transactional copier's output (read_committed, final read) must be
    exactly its input below the offsets it committed: each input value copied
    once (copier-duplicate), none missing (copier-lost), nothing copied from
    beyond its committed offsets (copier-uncommitted-output)."""
    out = []
    for spec in (ix.final or {}).get("copiers", []):
        out += _copier(ix, spec)
    return out


def _copier(ix: Index, spec: dict) -> list[dict]:
    src, dst, group = spec["input"], spec["output"], spec["group"]
    committed = ix.final.get("committed", {}).get(group, {})
    out = []
    copies: dict[str, list] = defaultdict(list)
    for value, places in ix.reads.items():
        for key, off, op in places:
            if key.rsplit("/", 1)[0] == dst and op.get("isolation") == "read_committed" \
                    and op.get("proc") == "final":
                copies[value].append((key, off, op))
    inputs = {}
    for value, places in ix.reads.items():
        for key, off, op in places:
            if key.rsplit("/", 1)[0] == src and op.get("proc") == "final":
                inputs[value] = (key, off, op)
    suffix = spec.get("suffix", ">c")
    for out_value, places in copies.items():
        source = out_value[:-len(suffix)] if out_value.endswith(suffix) else None
        if source not in inputs:
            out.append(_anomaly("copier-unexpected", f"output {out_value!r} has no input", places[0][2]))
            continue
        if len(places) > 1:
            out.append(_anomaly("copier-duplicate", f"input {source!r} copied {len(places)} times: " +
                                ", ".join(f"{k}@{o}" for k, o, _ in places), places[0][2]))
        key, off, op = inputs[source]
        if off >= committed.get(key, 0):
            out.append(_anomaly("copier-uncommitted-output",
                                f"{source!r} at {key}@{off} was copied but the copier's committed "
                                f"offset is {committed.get(key, 0)}", places[0][2]))
    for value, (key, off, op) in inputs.items():
        if off < committed.get(key, 0) and value + suffix not in copies:
            out.append(_anomaly("copier-lost", f"input {value!r} at {key}@{off} is below the committed "
                                f"offset {committed[key]} but was never copied", op))
    return out


def offset_regressions(ix: Index) -> list[dict]:
    """offset-regression: a group's committed offset for a partition goes
    back: a commit started after another commit was acknowledged stores a
    lower offset, or the final committed offset is below an acknowledged one."""
    out = []
    best: dict[tuple, tuple] = {}       # (group, key) -> (offset, ok op) acknowledged so far
    pending: dict[tuple, dict] = {}     # (proc, group) -> commit invoke, with the floor at its start
    for op in ix.ops:
        if op.get("f") != "commit":
            continue
        g, proc = op.get("group"), op.get("proc")
        if op["type"] == "invoke":
            floors = {tp_key(t, p): best.get((g, tp_key(t, p))) for t, p, _o in op["offsets"]}
            pending[(proc, g)] = (op, floors)
        elif op["type"] == "ok":
            inv, floors = pending.pop((proc, g), (None, {}))
            for t, p, off in op["offsets"]:
                key = tp_key(t, p)
                floor = floors.get(key)
                if floor is not None and off < floor[0]:
                    out.append(_anomaly("offset-regression",
                                        f"group {g} {key}: {proc} committed {off} after {floor[1]['proc']}'s "
                                        f"commit of {floor[0]} was acknowledged", floor[1], inv, op))
                if best.get((g, key)) is None or off >= best[(g, key)][0]:
                    best[(g, key)] = (off, op)
        else:
            pending.pop((proc, g), None)
    if ix.final is not None:
        for (g, key), (off, op) in best.items():
            final = ix.final.get("committed", {}).get(g, {}).get(key)
            if final is not None and final < off:
                out.append(_anomaly("offset-regression", f"group {g} {key}: committed offset is {final} "
                                    f"after the run, but {off} was acknowledged", op))
    return out


def double_ownership(ix: Index) -> list[dict]:
    """double-ownership: two live members of a group hold one partition at
    the same time (from their assign/revoke callbacks; a killed member holds
    nothing from its crash on)."""
    out = []
    holding: dict[tuple, dict] = {}     # (group, key) -> {proc: assign op}
    for op in ix.ops:
        f, proc, g = op.get("f"), op.get("proc"), op.get("group")
        if f == "assign" and op.get("type") == "ok" and g:
            for t, p in op["partitions"]:
                held = holding.setdefault((g, tp_key(t, p)), {})
                others = [(q, a) for q, a in held.items() if q != proc]
                for q, a in others:
                    out.append(_anomaly("double-ownership", f"group {g} {tp_key(t, p)} assigned to {proc} "
                                        f"while {q} still holds it", a, op))
                held[proc] = op
        elif f == "revoke" and op.get("type") == "ok" and g:
            for t, p in op["partitions"]:
                holding.get((g, tp_key(t, p)), {}).pop(proc, None)
        elif f == "crash":
            for held in holding.values():
                held.pop(proc, None)
    return out


CHECKERS = [lost_writes, unseen_writes, inconsistent_offsets, duplicates, unexpected_values,
            nonmonotonic_polls, nonmonotonic_sends, aborted_reads, uncommitted_reads, copier,
            offset_regressions, double_ownership]


def check(ops: list[dict]) -> dict:
    ix = Index(ops)
    anomalies = []
    for checker in CHECKERS:
        anomalies += checker(ix)
    by_kind: dict[str, int] = defaultdict(int)
    for a in anomalies:
        by_kind[a["kind"]] += 1
    return {"index": ix, "anomalies": anomalies, "by_kind": dict(by_kind),
            "completed": ix.completed, "valid": not anomalies}

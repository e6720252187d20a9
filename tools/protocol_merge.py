"""Merge Kafka 4.x message definitions with the 3.9 ones they replaced.

Kafka 4.0 dropped old versions of many APIs (KIP-896: Produce 0-2, Fetch 0-3,
OffsetCommit 0-1, ...) and with them the fields only those versions had. kproto
keeps answering the clients that still send them, so the generator reads one
definition per message made of:

- every version the 4.x file defines, exactly as it defines it;
- below the 4.x minimum, the stable versions the 3.9 file defined, with the
  fields as the 3.9 file lays them out (fields the 4.x file dropped are put back
  at their 3.9 position, for those versions only).

Versions a 3.9 file marked unstable (latestVersionUnstable) are not kept: 4.x
supersedes them (the share group APIs' early-access v0, for one). A 4.x file
with "validVersions": "none" (LeaderAndIsr and the other ZooKeeper-era APIs)
keeps its whole 3.9 range.

`layout(defn, version)` gives a message's wire layout at one version; the
tests compare it between the merged and the 3.9 definitions.
"""
from __future__ import annotations

import copy

MAX_VERSION = 32767


def parse_range(spec) -> tuple[int, int] | None:
    """A definition's version spec (\"0-3\", \"2+\", \"none\", None) as (first, last) or None."""
    if spec is None:
        return None
    spec = str(spec).strip()
    if spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), MAX_VERSION
    if "-" in spec:
        a, b = spec.split("-")
        return int(a), int(b)
    return int(spec), int(spec)


def _set(spec) -> set[int]:
    r = parse_range(spec)
    return set() if r is None else set(range(r[0], r[1] + 1))


def _spec(vs: set[int], top_hi: int) -> str:
    lo, hi = min(vs), max(vs)
    assert vs == set(range(lo, hi + 1)), f"versions not contiguous: {sorted(vs)}"
    if hi >= top_hi:
        return f"{lo}+"
    return str(lo) if lo == hi else f"{lo}-{hi}"


def kept_old_versions(old: dict, new: dict) -> set[int]:
    """The 3.9 versions below the 4.x range that kproto keeps serving."""
    old_vs = _set(old.get("validVersions"))
    if old.get("latestVersionUnstable") and old_vs:
        old_vs.discard(max(old_vs))
    new_vs = _set(new.get("validVersions"))
    if not new_vs:
        return old_vs
    return {v for v in old_vs if v < min(new_vs)}


def _merge_versions(key: str, of: dict | None, nf: dict | None, keep: set[int], new_vs: set[int],
                    top_hi: int) -> str | None:
    vs = set()
    if of is not None and key in of:
        vs |= _set(of[key]) & keep
    if nf is not None and key in nf:
        vs |= _set(nf[key]) & (new_vs | set(range(max(new_vs, default=-1) + 1, MAX_VERSION + 1)))
    return _spec(vs, top_hi) if vs else None


def _merge_fields(old_fields: list, new_fields: list, keep: set[int], new_vs: set[int], top_hi: int) -> list:
    old_by = {f["name"]: f for f in old_fields}
    new_names = {f["name"] for f in new_fields}
    out = []

    def merged(of, nf):
        f = copy.deepcopy(nf if nf is not None else of)
        if of is not None and nf is not None and of["type"] != nf["type"]:
            raise SystemExit(f"field {nf['name']}: type {of['type']} in 3.9, {nf['type']} in 4.x")
        for key in ("versions", "nullableVersions", "taggedVersions", "flexibleVersions"):
            spec = _merge_versions(key, of, nf, keep, new_vs, top_hi)
            if spec is None and key == "flexibleVersions" and key in f:
                f[key] = "none"  # a field never encoded the flexible way (RequestHeader.ClientId)
            elif spec is None:
                f.pop(key, None)
            else:
                f[key] = spec
        if of is not None and of.get("ignorable"):
            # absent from a kept 3.9 version but ignorable there (RequestHeader.ClientId at v0)
            f["ignorable"] = True
        if "fields" in f:
            f["fields"] = _merge_fields((of or {}).get("fields", []), (nf or {}).get("fields", []),
                                        keep, new_vs, top_hi)
        return f if "versions" in f else None

    # 3.9-only fields go back after the field that preceded them in 3.9
    pending = []
    placed_after: dict[str | None, list] = {}
    prev = None
    for of in old_fields:
        if of["name"] in new_names:
            prev = of["name"]
        else:
            placed_after.setdefault(prev, []).append(of)
    pending = placed_after.get(None, [])
    for of in pending:
        m = merged(of, None)
        if m is not None:
            out.append(m)
    for nf in new_fields:
        m = merged(old_by.get(nf["name"]), nf)
        if m is not None:
            out.append(m)
        for of in placed_after.get(nf["name"], []):
            m = merged(of, None)
            if m is not None:
                out.append(m)
    return out


def merge(old: dict | None, new: dict) -> dict:
    """One definition: the 4.x file `new`, extended down to the stable 3.9
    versions of `old` that 4.x dropped."""
    if old is None:
        return new
    keep = kept_old_versions(old, new)
    if not keep:
        return new
    new_vs = _set(new.get("validVersions"))
    top_hi = max(new_vs) if new_vs else max(keep)
    if not new_vs:
        # a removed API: the 4.x file has no fields left, the 3.9 file is the definition
        new = dict(new, fields=[], commonStructs=[], flexibleVersions=old.get("flexibleVersions", "none"))
    out = copy.deepcopy(new)
    out["validVersions"] = f"{min(keep)}-{top_hi}"
    flex = (_set(old.get("flexibleVersions")) & keep) | (_set(new.get("flexibleVersions")) if new_vs else set())
    out["flexibleVersions"] = _spec(flex, top_hi) if flex else "none"
    out["fields"] = _merge_fields(old.get("fields", []), new.get("fields", []), keep, new_vs, top_hi)
    olds = {c["name"]: c for c in old.get("commonStructs", [])}
    news = {c["name"]: c for c in new.get("commonStructs", [])}
    commons = []
    for name in list(news) + [n for n in olds if n not in news]:
        oc, nc = olds.get(name), news.get(name)
        c = copy.deepcopy(nc or oc)
        vs = _merge_versions("versions", oc, nc, keep, new_vs, top_hi) if "versions" in (nc or oc) else None
        if vs is not None:
            c["versions"] = vs
        c["fields"] = _merge_fields((oc or {}).get("fields", []), (nc or {}).get("fields", []), keep, new_vs, top_hi)
        commons.append(c)
    if commons:
        out["commonStructs"] = commons
    return out


def layout(defn, version: int) -> tuple:
    """The wire layout of a generated Definition (tools.gen_protocol) at one
    version: per field in order, (type, nullable, tag or None, nested layout),
    with flexible encoding noted at the top. Field names are left out: a
    rename (Vote v2's Candidate* -> Replica*) does not change the bytes."""
    flexible = version in defn.flexible

    def struct_layout(s) -> tuple:
        out = []
        for f in s.fields:
            if version not in f.versions:
                continue
            tag = int(f.tag) if version in f.tagged_versions else None  # some 3.9 files wrote "0"
            sub = struct_layout(defn.structs[f.elem]) if f.is_struct else ()
            out.append((f.type if not f.is_struct else ("[]" if f.is_array else "") + "struct",
                        version in f.nullable, tag, sub,
                        None if f.flexible_override is None else version in f.flexible_override))
        return tuple(sorted(out, key=lambda t: (t[2] is not None, t[2] or 0))) if flexible else tuple(out)

    return (flexible, struct_layout(defn.top))

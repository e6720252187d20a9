"""JSON Schema compatibility, by Confluent's rules (its JsonSchemaDiff): two
schemas are loaded into the same kinds of node Confluent's validator library
builds (string, number, object, array, enum, combined, not, ...), walked side
by side, and every difference found gets one of Confluent's difference types.
A reader can read a writer's data when every difference from the writer's
schema ("original") to the reader's ("update") is one of COMPATIBLE.

Local `$ref`s (`#`, `#/definitions/...`, `#/$defs/...`) are followed, with a
guard for recursive schemas, and so are `$ref`s to a referenced schema by
its reference name (`address.json`, `address.json#/definitions/zip`); any
other `$ref` is compared by its text. `const` is compared as a one-value enum.

`differences(original, update)` -> [(type, path)]; `reader_messages(reader,
writer)` -> the incompatible ones as Confluent words them, with `%s` where
the caller names the two schemas ("new"/"old")."""
from __future__ import annotations

import json
from fractions import Fraction

from broker.schema_registry.budget import spend

COMPATIBLE = frozenset("""
ID_CHANGED DESCRIPTION_CHANGED TITLE_CHANGED DEFAULT_CHANGED SCHEMA_REMOVED TYPE_EXTENDED
MAX_LENGTH_INCREASED MAX_LENGTH_REMOVED MIN_LENGTH_DECREASED MIN_LENGTH_REMOVED PATTERN_REMOVED
MAXIMUM_INCREASED MAXIMUM_REMOVED MINIMUM_DECREASED MINIMUM_REMOVED EXCLUSIVE_MAXIMUM_INCREASED
EXCLUSIVE_MAXIMUM_REMOVED EXCLUSIVE_MINIMUM_DECREASED EXCLUSIVE_MINIMUM_REMOVED MULTIPLE_OF_REDUCED
MULTIPLE_OF_REMOVED
REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED REQUIRED_ATTRIBUTE_REMOVED DEPENDENCY_ARRAY_NARROWED
DEPENDENCY_ARRAY_REMOVED DEPENDENCY_SCHEMA_REMOVED MAX_PROPERTIES_INCREASED MAX_PROPERTIES_REMOVED
MIN_PROPERTIES_DECREASED MIN_PROPERTIES_REMOVED ADDITIONAL_PROPERTIES_ADDED ADDITIONAL_PROPERTIES_EXTENDED
PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL
OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL
PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
MAX_ITEMS_INCREASED MAX_ITEMS_REMOVED MIN_ITEMS_DECREASED MIN_ITEMS_REMOVED UNIQUE_ITEMS_REMOVED
ADDITIONAL_ITEMS_ADDED ADDITIONAL_ITEMS_EXTENDED ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
ITEM_ADDED_TO_CLOSED_CONTENT_MODEL ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL
ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
MAX_CONTAINS_INCREASED MAX_CONTAINS_REMOVED MIN_CONTAINS_DECREASED MIN_CONTAINS_REMOVED
ENUM_ARRAY_EXTENDED COMBINED_TYPE_EXTENDED PRODUCT_TYPE_NARROWED SUM_TYPE_EXTENDED NOT_TYPE_NARROWED
""".split())

# -- the nodes -------------------------------------------------------------------------------

_STRING_KEYS = ("minLength", "maxLength", "pattern", "format")
_NUMBER_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_OBJECT_KEYS = ("properties", "required", "additionalProperties", "patternProperties", "dependencies",
                "dependentRequired", "dependentSchemas", "minProperties", "maxProperties", "propertyNames")
_ARRAY_KEYS = ("items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains")
_TYPE_KIND = {"string": "STRING", "integer": "NUMBER", "number": "NUMBER", "object": "OBJECT",
              "array": "ARRAY", "boolean": "BOOLEAN", "null": "NULL"}


class Node:
    """One schema, as the kind of node Confluent's diff compares."""
    __slots__ = ("kind", "raw", "a", "meta")

    def __init__(self, kind: str, raw, a: dict | None = None, meta: tuple = (None, None, None, None)):
        self.kind, self.raw, self.a, self.meta = kind, raw, a or {}, meta   # meta: id, title, description, default


def _num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def load(doc, externals: dict | None = None) -> Node:
    """`externals`: the documents of the schema's references, by reference name."""
    return _Loader(doc, externals or {}, {}).node(doc)


class _Loader:
    def __init__(self, root, externals: dict, memo: dict):
        self.root, self.externals = root, externals
        self.refs = memo   # (document, $ref) -> Node, shared by the documents of one schema
        self.modern = isinstance(root, dict) and any(d in str(root.get("$schema", "")) for d in ("2019-09", "2020-12"))

    def _pointer(self, ref: str):
        if ref in ("#", ""):
            return self.root
        if not ref.startswith("#/"):
            raise KeyError(ref)
        cur = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            cur = cur[int(part)] if isinstance(cur, list) else cur[part]
        return cur

    def node(self, doc) -> Node:
        if doc is True or (isinstance(doc, dict) and not doc):
            return Node("EMPTY", doc)
        if doc is False:
            return Node("FALSE", doc)
        if not isinstance(doc, dict):
            return Node("EMPTY", doc)
        ref = doc.get("$ref")
        if isinstance(ref, str):
            loader, local = self, ref
            base, _, fragment = ref.partition("#")
            if base:
                if base not in self.externals:
                    return Node("REF", ref)   # another document: compared by its name
                loader, local = _Loader(self.externals[base], self.externals, self.refs), "#" + fragment
            key = (id(loader.root), local)
            if key in self.refs:
                return self.refs[key]
            try:
                target = loader._pointer(local)
            except (KeyError, IndexError, ValueError, TypeError):
                return Node("REF", ref)   # a pointer to nothing: compared by its text
            # a placeholder first, so that a recursive schema refers back to it
            slot = self.refs[key] = Node("EMPTY", target)
            built = loader.node(target)
            slot.kind, slot.raw, slot.a, slot.meta = built.kind, built.raw, built.a, built.meta
            return slot
        # ("id" is draft-04's spelling of "$id"; 2019-09 and later know only "$id")
        meta = (doc.get("$id", None if self.modern else doc.get("id")), doc.get("title"), doc.get("description"),
                json.dumps(doc["default"], sort_keys=True) if "default" in doc else None)
        parts: list[Node] = []
        if "enum" in doc and isinstance(doc["enum"], list):
            parts.append(Node("ENUM", doc, {"values": doc["enum"], "key": "enum"}))
        elif "const" in doc:
            parts.append(Node("ENUM", doc, {"values": [doc["const"]], "key": "const"}))
        for crit in ("allOf", "anyOf", "oneOf"):
            if isinstance(doc.get(crit), list):
                parts.append(Node("COMBINED", doc, {"criterion": crit,
                                                    "subs": [self.node(s) for s in doc[crit]]}))
        if "not" in doc:
            parts.append(Node("NOT", doc, {"not": self.node(doc["not"])}))
        t = doc.get("type")
        if isinstance(t, str) and t in _TYPE_KIND:
            parts.append(self._typed(doc, t))
        elif isinstance(t, list) and t:
            typed = [self._typed(doc, x) for x in t if x in _TYPE_KIND]
            parts.append(typed[0] if len(typed) == 1 else Node("COMBINED", doc, {"criterion": "anyOf", "subs": typed}))
        elif t is None:
            # no type: the keywords say which kinds of value the schema constrains
            for kind, keys in (("object", _OBJECT_KEYS), ("array", _ARRAY_KEYS), ("string", _STRING_KEYS),
                               ("number", _NUMBER_KEYS)):
                if any(k in doc for k in keys):
                    parts.append(self._typed(doc, kind))
        if not parts:
            return Node("EMPTY", doc, meta=meta)
        if len(parts) == 1:
            parts[0].meta = meta
            return parts[0]
        return Node("COMBINED", doc, {"criterion": "allOf", "subs": parts}, meta)

    def _typed(self, doc: dict, t: str) -> Node:
        kind = _TYPE_KIND[t]
        a: dict = {}
        if kind == "STRING":
            a = {k: doc.get(k) for k in ("minLength", "maxLength")}
            a["pattern"] = doc.get("pattern") if isinstance(doc.get("pattern"), str) else None
        elif kind == "NUMBER":
            a = {k: _num(doc.get(k)) for k in _NUMBER_KEYS}
            a["integer"] = t == "integer"
        elif kind == "OBJECT":
            props = doc.get("properties") if isinstance(doc.get("properties"), dict) else {}
            a["properties"] = {k: self.node(v) for k, v in props.items()}
            a["has_default"] = {k: isinstance(v, dict) and "default" in v for k, v in props.items()}
            a["required"] = set(x for x in doc.get("required") or [] if isinstance(x, str)) \
                if isinstance(doc.get("required"), list) else set()
            # (2019-09's unevaluatedProperties closes or narrows the model the same way)
            ap = doc.get("additionalProperties", doc.get("unevaluatedProperties", True))
            a["permits_additional"] = ap is not False
            a["additional"] = self.node(ap) if isinstance(ap, dict) else None
            pp = doc.get("patternProperties") if isinstance(doc.get("patternProperties"), dict) else {}
            a["patterns"] = {k: self.node(v) for k, v in pp.items()}
            deps = dict(doc.get("dependencies") or {}) if isinstance(doc.get("dependencies"), dict) else {}
            for key in ("dependentRequired", "dependentSchemas"):
                if isinstance(doc.get(key), dict):
                    deps.update(doc[key])
            a["dep_arrays"] = {k: set(v) for k, v in deps.items() if isinstance(v, list)}
            a["dep_schemas"] = {k: self.node(v) for k, v in deps.items() if isinstance(v, (dict, bool))}
            a["maxProperties"], a["minProperties"] = _num(doc.get("maxProperties")), _num(doc.get("minProperties"))
        elif kind == "ARRAY":
            items, additional = doc.get("items"), doc.get("additionalItems", doc.get("unevaluatedItems", True))
            if isinstance(doc.get("prefixItems"), list):   # 2020-12: prefixItems is the tuple, items the rest
                a["tuple"] = [self.node(s) for s in doc["prefixItems"]]
                a["all"] = None
                additional = items if items is not None else doc.get("unevaluatedItems", True)
            elif isinstance(items, bool) and self.modern:   # 2020-12: items: false = nothing past the tuple
                a["tuple"], a["all"], additional = [], None, items
            elif isinstance(items, list):
                a["tuple"], a["all"] = [self.node(s) for s in items], None
            else:
                a["tuple"] = None
                a["all"] = self.node(items) if isinstance(items, (dict, bool)) else None
            a["permits_additional"] = additional is not False
            a["additional"] = self.node(additional) if isinstance(additional, dict) else None
            a["maxItems"], a["minItems"] = _num(doc.get("maxItems")), _num(doc.get("minItems"))
            a["unique"] = doc.get("uniqueItems") is True
            a["maxContains"], a["minContains"] = _num(doc.get("maxContains")), _num(doc.get("minContains"))
        return Node(kind, doc, a)


# -- the walk --------------------------------------------------------------------------------

class _Ctx:
    def __init__(self, path=(), active=()):
        self.path = list(path)
        self.active = set(active)   # originals being compared (a recursive schema stops here)
        self.diffs: list[tuple[str, str]] = []

    def sub(self) -> "_Ctx":
        return _Ctx(self.path, self.active)

    def add(self, kind: str, attribute: str | None = None) -> None:
        parts = self.path + ([attribute] if attribute else [])
        self.diffs.append((kind, "#/" + "/".join(parts)))

    def compatible(self) -> bool:
        return all(k in COMPATIBLE for k, _ in self.diffs)

    def enter(self, part: str) -> "_Path":
        return _Path(self, part)


class _Path:
    def __init__(self, ctx: _Ctx, part: str):
        self.ctx, self.part = ctx, part

    def __enter__(self):
        self.ctx.path.append(self.part)

    def __exit__(self, *exc):
        self.ctx.path.pop()


def differences(original, update, refs_o: dict | None = None, refs_u: dict | None = None) -> list[tuple[str, str]]:
    """(Confluent's difference type, JSON path) from a writer's schema to a reader's;
    refs_*: the documents each one references, by reference name."""
    ctx = _Ctx()
    _compare(ctx, load(original, refs_o), load(update, refs_u))
    return ctx.diffs


def _compare(ctx: _Ctx, o: Node | None, u: Node | None) -> None:
    spend()   # (the check's time budget: budget.py)
    if o is None and u is None:
        return
    if o is None:
        return ctx.add("SCHEMA_ADDED")
    if u is None:
        return ctx.add("SCHEMA_REMOVED")
    if o.kind != "COMBINED" and u.kind == "COMBINED":
        subs = u.a["subs"]
        if len(subs) == 1:
            sub = ctx.sub()
            _compare(sub, o, subs[0])
            if sub.compatible():
                ctx.diffs += sub.diffs
                return
        elif u.a["criterion"] in ("anyOf", "oneOf"):
            for s in subs:   # the old schema is one of the new alternatives
                sub = ctx.sub()
                _compare(sub, o, s)
                if sub.compatible():
                    ctx.diffs += sub.diffs
                    return ctx.add("SUM_TYPE_EXTENDED")
    elif o.kind == "COMBINED" and u.kind != "COMBINED":
        subs = o.a["subs"]
        if len(subs) == 1:
            sub = ctx.sub()
            _compare(sub, subs[0], u)
            if sub.compatible():
                ctx.diffs += sub.diffs
                return
        elif o.a["criterion"] == "allOf":
            for s in subs:   # the new schema is one of the old conjuncts
                sub = ctx.sub()
                _compare(sub, s, u)
                if sub.compatible():
                    ctx.diffs += sub.diffs
                    return ctx.add("PRODUCT_TYPE_NARROWED")
    if o.kind != u.kind:
        if not (o.kind == "FALSE" or u.kind == "EMPTY"):   # (false accepts nothing, {} everything)
            ctx.add("TYPE_CHANGED")
        return
    if id(o) in ctx.active:
        return
    ctx.active.add(id(o))
    try:
        for i, name in enumerate(("ID_CHANGED", "TITLE_CHANGED", "DESCRIPTION_CHANGED", "DEFAULT_CHANGED")):
            if o.meta[i] != u.meta[i]:
                ctx.add(name)
        compare = _BY_KIND.get(o.kind)
        if compare is not None:
            compare(ctx, o.a, u.a, o, u)
    finally:
        ctx.active.discard(id(o))


def _limit(ctx: _Ctx, key: str, name: str, o, u) -> None:
    """maxLength, minimum, ...: _ADDED, _REMOVED, _INCREASED, _DECREASED."""
    if o == u:
        return
    if o is None:
        ctx.add(f"{name}_ADDED", key)
    elif u is None:
        ctx.add(f"{name}_REMOVED", key)
    elif o < u:
        ctx.add(f"{name}_INCREASED", key)
    elif o > u:
        ctx.add(f"{name}_DECREASED", key)


def _string(ctx, o, u, *_):
    _limit(ctx, "maxLength", "MAX_LENGTH", o["maxLength"], u["maxLength"])
    _limit(ctx, "minLength", "MIN_LENGTH", o["minLength"], u["minLength"])
    if o["pattern"] is None and u["pattern"] is not None:
        ctx.add("PATTERN_ADDED", "pattern")
    elif o["pattern"] is not None and u["pattern"] is None:
        ctx.add("PATTERN_REMOVED", "pattern")
    elif o["pattern"] != u["pattern"]:
        ctx.add("PATTERN_CHANGED", "pattern")


def _number(ctx, o, u, *_):
    _limit(ctx, "maximum", "MAXIMUM", o["maximum"], u["maximum"])
    _limit(ctx, "minimum", "MINIMUM", o["minimum"], u["minimum"])
    _limit(ctx, "exclusiveMaximum", "EXCLUSIVE_MAXIMUM", o["exclusiveMaximum"], u["exclusiveMaximum"])
    _limit(ctx, "exclusiveMinimum", "EXCLUSIVE_MINIMUM", o["exclusiveMinimum"], u["exclusiveMinimum"])
    om, um = o["multipleOf"], u["multipleOf"]
    if om != um:
        if om is None:
            ctx.add("MULTIPLE_OF_ADDED", "multipleOf")
        elif um is None:
            ctx.add("MULTIPLE_OF_REMOVED", "multipleOf")
        else:
            fo, fu = Fraction(str(om)), Fraction(str(um))
            if fo and (fu / fo).denominator == 1:
                ctx.add("MULTIPLE_OF_EXPANDED", "multipleOf")   # fewer values are multiples of the new one
            elif fu and (fo / fu).denominator == 1:
                ctx.add("MULTIPLE_OF_REDUCED", "multipleOf")
            else:
                ctx.add("MULTIPLE_OF_CHANGED", "multipleOf")
    if o["integer"] != u["integer"]:
        ctx.add("TYPE_EXTENDED" if o["integer"] else "TYPE_NARROWED")


def _canon(v) -> str:
    return json.dumps(v, sort_keys=True)


def _enum(ctx, o, u, *_):
    ov, uv = {_canon(v) for v in o["values"]}, {_canon(v) for v in u["values"]}
    if ov != uv:
        ctx.add("ENUM_ARRAY_EXTENDED" if uv >= ov else "ENUM_ARRAY_NARROWED" if ov >= uv else "ENUM_ARRAY_CHANGED",
                u.get("key", "enum"))


def _not(ctx, o, u, *_):
    with ctx.enter("not"):
        sub = ctx.sub()
        _compare(sub, u["not"], o["not"])   # reversed: excluding less accepts more
        ctx.add("NOT_TYPE_NARROWED" if sub.compatible() else "NOT_TYPE_EXTENDED")


def _combined(ctx, o, u, *_):
    oc, uc = o["criterion"], u["criterion"]
    osubs, usubs = _dedupe(o["subs"]), _dedupe(u["subs"])
    if oc != uc:
        if (uc == "anyOf" or (len(o["subs"]) == 1 and len(u["subs"]) == 1)
                or (len(o["subs"]) == 1 and uc == "oneOf") or (len(u["subs"]) == 1 and oc == "allOf")):
            ctx.add("COMBINED_TYPE_EXTENDED")
        else:
            return ctx.add("COMBINED_TYPE_CHANGED")
    if len(osubs) < len(usubs):
        ctx.add("PRODUCT_TYPE_EXTENDED" if uc == "allOf" else "SUM_TYPE_EXTENDED")
    elif len(osubs) > len(usubs):
        ctx.add("SUM_TYPE_NARROWED" if oc in ("anyOf", "oneOf") else "PRODUCT_TYPE_NARROWED")
    edges: dict[int, dict[int, list]] = {}
    for i, os_ in enumerate(osubs):
        with ctx.enter(f"{oc}/{i}"):
            for j, us in enumerate(usubs):
                sub = ctx.sub()
                _compare(sub, os_, us)
                if sub.compatible():
                    edges.setdefault(i, {})[j] = sub.diffs
    matching = _max_matching(edges, len(osubs))
    for i, j in matching.items():
        ctx.diffs += edges[i][j]
    if len(matching) < min(len(osubs), len(usubs)):
        ctx.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED")


def _dedupe(subs: list[Node]) -> list[Node]:
    seen, out = set(), []
    for s in subs:
        key = _canon(s.raw) if s.kind != "REF" else "$ref:" + s.raw
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def _max_matching(edges: dict[int, dict[int, list]], n: int) -> dict[int, int]:
    """A maximum bipartite matching (augmenting paths): old subschema -> new one."""
    owner: dict[int, int] = {}

    def augment(i: int, seen: set) -> bool:
        for j in edges.get(i, {}):
            if j not in seen:
                seen.add(j)
                if j not in owner or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False
    for i in range(n):
        augment(i, set())
    return {i: j for j, i in owner.items()}


def _is_open(a: dict) -> bool:
    return not a["patterns"] and a["additional"] is None and a["permits_additional"]


def _partial(a: dict, name: str):
    import re
    for pattern, schema in a["patterns"].items():
        try:
            if re.search(pattern, name):
                return schema
        except re.error:
            continue
    return a["additional"]


def _object(ctx, o, u, *_):
    with ctx.enter("required"):
        for name in o["properties"]:
            if name in u["properties"]:
                was, now = name in o["required"], name in u["required"]
                if was and not now:
                    ctx.add("REQUIRED_ATTRIBUTE_REMOVED", name)
                elif now and not was:
                    ctx.add("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED" if u["has_default"][name]
                            else "REQUIRED_ATTRIBUTE_ADDED", name)
    with ctx.enter("properties"):
        for name in _union(o["properties"], u["properties"]):
            with ctx.enter(name):
                os_, us = o["properties"].get(name), u["properties"].get(name)
                if us is None:
                    # the reader lacks it: fine if the reader is open; else its partial model must cover it
                    if _is_open(u):
                        ctx.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL")
                    elif (partial := _partial(u, name)) is not None:
                        sub = ctx.sub()
                        _compare(sub, os_, partial)
                        ctx.diffs += sub.diffs
                        ctx.add("PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if sub.compatible()
                                else "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
                    else:
                        ctx.add("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL" if os_.kind == "FALSE"
                                else "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")
                elif os_ is None:
                    # the writer lacks it: an open writer may have written anything under that name
                    if _is_open(o):
                        if us.kind == "EMPTY":
                            ctx.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
                        elif name in u["required"]:
                            ctx.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL"
                                    if u["has_default"][name] else "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
                        else:
                            ctx.add("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
                    else:
                        if (partial := _partial(o, name)) is not None:
                            sub = ctx.sub()
                            _compare(sub, partial, us)
                            ctx.diffs += sub.diffs
                            ctx.add("PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if sub.compatible()
                                    else "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
                        if name in u["required"]:
                            ctx.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL"
                                    if u["has_default"][name] else "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
                        else:
                            ctx.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
                else:
                    _compare(ctx, os_, us)
    with ctx.enter("dependencies"):
        for name in _union(o["dep_arrays"], u["dep_arrays"]):
            od, ud = o["dep_arrays"].get(name), u["dep_arrays"].get(name)
            if ud is None:
                ctx.add("DEPENDENCY_ARRAY_REMOVED", name)
            elif od is None:
                ctx.add("DEPENDENCY_ARRAY_ADDED", name)
            elif od != ud:
                ctx.add("DEPENDENCY_ARRAY_EXTENDED" if ud >= od else "DEPENDENCY_ARRAY_NARROWED" if od >= ud
                        else "DEPENDENCY_ARRAY_CHANGED", name)
        for name in _union(o["dep_schemas"], u["dep_schemas"]):
            with ctx.enter(name):
                od, ud = o["dep_schemas"].get(name), u["dep_schemas"].get(name)
                if ud is None:
                    ctx.add("DEPENDENCY_SCHEMA_REMOVED")
                elif od is None:
                    ctx.add("DEPENDENCY_SCHEMA_ADDED")
                else:
                    _compare(ctx, od, ud)
    _additional(ctx, "additionalProperties", "ADDITIONAL_PROPERTIES", o, u)
    _limit(ctx, "maxProperties", "MAX_PROPERTIES", o["maxProperties"], u["maxProperties"])
    _limit(ctx, "minProperties", "MIN_PROPERTIES", o["minProperties"], u["minProperties"])


def _additional(ctx, keyword: str, kind: str, o, u) -> None:
    """additionalProperties / additionalItems: allowed or not, open (no schema) or a schema."""
    with ctx.enter(keyword):
        if o["permits_additional"] != u["permits_additional"]:
            ctx.add(f"{kind}_ADDED" if u["permits_additional"] else f"{kind}_REMOVED")
        elif o["additional"] is None and u["additional"] is not None:
            ctx.add(f"{kind}_NARROWED")
        elif u["additional"] is None and o["additional"] is not None:
            ctx.add(f"{kind}_EXTENDED")
        else:
            _compare(ctx, o["additional"], u["additional"])


def _union(a: dict, b: dict) -> list:
    return list(a) + [k for k in b if k not in a]


def _array(ctx, o, u, *_):
    with ctx.enter("items"):
        _compare(ctx, o["all"], u["all"])
    ot, ut = o["tuple"] or [], u["tuple"] or []
    o_open = o["additional"] is None and o["permits_additional"]
    u_open = u["additional"] is None and u["permits_additional"]
    for i in range(max(len(ot), len(ut))):
        with ctx.enter(f"items/{i}"):
            if i < len(ot) and i < len(ut):
                _compare(ctx, ot[i], ut[i])
            elif i < len(ot):   # the reader's tuple is shorter
                if u_open:
                    ctx.add("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL")
                elif u["additional"] is not None:
                    sub = ctx.sub()
                    _compare(sub, ot[i], u["additional"])
                    ctx.diffs += sub.diffs
                    ctx.add("ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if sub.compatible()
                            else "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
                else:
                    ctx.add("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL" if ot[i].kind == "FALSE"
                            else "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL")
            else:               # the reader's tuple is longer
                if o_open:
                    ctx.add("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL" if ut[i].kind == "EMPTY"
                            else "ITEM_ADDED_TO_OPEN_CONTENT_MODEL")
                elif o["additional"] is not None:
                    sub = ctx.sub()
                    _compare(sub, o["additional"], ut[i])
                    ctx.diffs += sub.diffs
                    ctx.add("ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if sub.compatible()
                            else "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
                else:
                    ctx.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")
    _additional(ctx, "additionalItems", "ADDITIONAL_ITEMS", o, u)
    _limit(ctx, "maxItems", "MAX_ITEMS", o["maxItems"], u["maxItems"])
    _limit(ctx, "minItems", "MIN_ITEMS", o["minItems"], u["minItems"])
    if o["unique"] != u["unique"]:
        ctx.add("UNIQUE_ITEMS_REMOVED" if o["unique"] else "UNIQUE_ITEMS_ADDED", "uniqueItems")
    _limit(ctx, "maxContains", "MAX_CONTAINS", o["maxContains"], u["maxContains"])
    _limit(ctx, "minContains", "MIN_CONTAINS", o["minContains"], u["minContains"])


def _ref(ctx, o, u, on, un):
    if on.raw != un.raw:
        ctx.add("TYPE_CHANGED")


_BY_KIND = {"REF": _ref, "STRING": _string, "NUMBER": _number, "ENUM": _enum, "NOT": _not, "COMBINED": _combined,
            "OBJECT": _object, "ARRAY": _array}


# -- messages, as Confluent words them -------------------------------------------------------

_KEYWORD_ADDED_OR_REMOVED = {"MAXIMUM_ADDED", "MINIMUM_ADDED", "EXCLUSIVE_MAXIMUM_ADDED", "EXCLUSIVE_MINIMUM_ADDED",
                             "MULTIPLE_OF_ADDED", "MAX_LENGTH_ADDED", "MIN_LENGTH_ADDED", "PATTERN_ADDED",
                             "REQUIRED_ATTRIBUTE_ADDED", "MAX_PROPERTIES_ADDED", "MIN_PROPERTIES_ADDED",
                             "DEPENDENCY_ARRAY_ADDED", "DEPENDENCY_SCHEMA_ADDED", "MAX_ITEMS_ADDED",
                             "MIN_ITEMS_ADDED", "UNIQUE_ITEMS_ADDED", "ADDITIONAL_ITEMS_REMOVED",
                             "ADDITIONAL_PROPERTIES_REMOVED"}
_VALUE_INCREASED = {"MIN_LENGTH_INCREASED", "MINIMUM_INCREASED", "EXCLUSIVE_MINIMUM_INCREASED",
                    "MIN_PROPERTIES_INCREASED", "MULTIPLE_OF_EXPANDED", "MIN_ITEMS_INCREASED"}
_VALUE_DECREASED = {"MAX_LENGTH_DECREASED", "MAXIMUM_DECREASED", "MAX_ITEMS_DECREASED",
                    "EXCLUSIVE_MAXIMUM_DECREASED", "MAX_PROPERTIES_DECREASED"}
_VALUE_CHANGED = {"PATTERN_CHANGED", "MULTIPLE_OF_CHANGED", "DEPENDENCY_ARRAY_CHANGED"}
_TYPE_NARROWED = {"ADDITIONAL_ITEMS_NARROWED", "ENUM_ARRAY_NARROWED", "SUM_TYPE_NARROWED",
                  "ADDITIONAL_PROPERTIES_NARROWED"}
_TYPE_CHANGED = {"TYPE_CHANGED", "TYPE_NARROWED", "COMBINED_TYPE_CHANGED", "COMBINED_TYPE_SUBSCHEMAS_CHANGED",
                 "ENUM_ARRAY_CHANGED"}
_TYPE_EXTENDED = {"DEPENDENCY_ARRAY_EXTENDED", "PRODUCT_TYPE_EXTENDED", "SUM_TYPE_EXTENDED", "NOT_TYPE_EXTENDED"}


def describe(kind: str, path: str) -> str:
    """Confluent's description of a difference; `%s`: the reader's name, then the writer's."""
    if kind in _KEYWORD_ADDED_OR_REMOVED:
        return f"The keyword at path '{path}' in the %s schema is not present in the %s schema"
    if kind in _VALUE_INCREASED:
        return f"The value at path '{path}' in the %s schema is more than its value in the %s schema"
    if kind in _VALUE_DECREASED:
        return f"The value at path '{path}' in the %s schema is less than its value in the %s schema"
    if kind in _VALUE_CHANGED:
        return f"The value at path '{path}' is different between the %s and %s schema"
    if kind in _TYPE_NARROWED:
        return f"An array or combined type at path '{path}' has fewer elements in the %s schema than the %s schema"
    if kind in _TYPE_EXTENDED:
        return f"An array or combined type at path '{path}' has more elements in the %s schema than the %s schema"
    if kind in _TYPE_CHANGED:
        return f"A type at path '{path}' is different between the %s schema and the %s schema"
    if kind in ("REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL",
                "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", "ITEM_ADDED_TO_OPEN_CONTENT_MODEL"):
        return (f"The %s schema has an open content model and has a property or item at path '{path}' "
                f"which is missing in the %s schema")
    if kind == "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL":
        return (f"The %s schema has an unopen content model and has a required property at path '{path}' "
                f"which is missing in the %s schema")
    if kind in ("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"):
        return (f"The %s has a closed content model and is missing a property or item present at path '{path}' "
                f"in the %s schema")
    if kind in ("PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"):
        return (f"A property or item is missing in the %s schema but present at path '{path}' in the %s schema "
                f"and is not covered by its partially open content model")
    if kind in ("PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"):
        return (f"The %s schema has a property or item at path '{path}' which is missing in the %s schema "
                f"and is not covered by its partially open content model")
    return ""


def reader_messages(reader, writer, reader_refs: dict | None = None, writer_refs: dict | None = None) -> list[str]:
    """The incompatible differences when `reader` reads what `writer` wrote (Confluent's
    JsonSchema.isBackwardCompatible: the writer is the original, the reader the update)."""
    return [f'{{errorType:"{kind}", description:"{describe(kind, path)}\'}}'   # (Confluent's closing quote)
            for kind, path in differences(writer, reader, writer_refs, reader_refs) if kind not in COMPATIBLE]

"""Protobuf compatibility, by Confluent's rules (its ProtobufSchema diff): the
writer's file ("original") and the reader's ("update") are walked message by
message, field number by field number, and every difference gets one of
Confluent's difference types; a reader can read the writer's data when all
of them are in COMPATIBLE.

What decides it: a message type removed; a field's kind changed (scalar,
message, map; an enum counts as a scalar); a scalar changed outside its
wire-compatible group (int32/int64/uint32/uint64/bool/enum, sint32/sint64,
string/bytes, fixed32/sfixed32, fixed64/sfixed64, float, double); a numeric
field's label changed (proto2 optional/required <-> repeated); a message
field's type renamed, or the named type changed incompatibly when it lives in
another (referenced) file; a required field added or removed; a field moved
into a oneof that already held other fields, or several fields into one
oneof; a field taken out of a surviving oneof. Renames, new or removed
fields, enums and their values, a changed package or syntax are compatible.

Both forms a schema comes in are compared as FileDescriptorProtos (.proto
text is converted by protobuf_text); map fields are read as map<key, value>,
proto3 fields without a label have none (as Confluent's parser sees them)."""
from __future__ import annotations

from broker.schema_registry.budget import spend
from broker.schema_registry.protobuf_text import LABEL_REPEATED, LABEL_REQUIRED, SCALAR_NAMES

COMPATIBLE = frozenset("""
MESSAGE_ADDED MESSAGE_MOVED ENUM_ADDED ENUM_REMOVED ENUM_CONST_ADDED ENUM_CONST_CHANGED
ENUM_CONST_REMOVED FIELD_ADDED FIELD_REMOVED FIELD_NAME_CHANGED FIELD_STRING_OR_BYTES_LABEL_CHANGED
ONEOF_ADDED ONEOF_REMOVED ONEOF_FIELD_ADDED ONEOF_FIELD_MOVED_TO_TOP_LEVEL
""".split())

_SCALAR_KIND = {"int32": "GENERAL_NUMBER", "int64": "GENERAL_NUMBER", "uint32": "GENERAL_NUMBER",
                "uint64": "GENERAL_NUMBER", "bool": "GENERAL_NUMBER", "sint32": "SIGNED_NUMBER",
                "sint64": "SIGNED_NUMBER", "string": "STRING_OR_BYTES", "bytes": "STRING_OR_BYTES",
                "fixed32": "FIXED32", "sfixed32": "FIXED32", "fixed64": "FIXED64", "sfixed64": "FIXED64",
                "float": "FLOAT", "double": "DOUBLE"}


class TypeInfo:
    __slots__ = ("package", "origin", "desc", "is_enum", "is_map", "key", "value")

    def __init__(self, package, origin, desc, is_enum, is_map=False, key=None, value=None):
        self.package, self.origin, self.desc, self.is_enum = package, origin, desc, is_enum
        self.is_map, self.key, self.value = is_map, key, value


def _type_of(field) -> str:
    if field.type_name:
        return field.type_name
    return SCALAR_NAMES.get(field.type, "bytes")


def _label(field, proto3: bool) -> str | None:
    if field.label == LABEL_REPEATED:
        return "repeated"
    if field.label == LABEL_REQUIRED:
        return "required"
    if proto3 and not field.proto3_optional:
        return None   # no label written
    return "optional"


def _collect(types: dict, fd, origin: str) -> None:
    package = fd.package or ""

    def walk(prefix: str, messages, enums) -> None:
        for m in messages:
            name = f"{prefix}.{m.name}" if prefix else m.name
            is_map = bool(m.options.map_entry)
            key = value = None
            if is_map:
                by_name = {f.name: f for f in m.field}
                key = _type_of(by_name["key"]) if "key" in by_name else "string"
                value = _type_of(by_name["value"]) if "value" in by_name else "bytes"
            types[name] = TypeInfo(package, origin, m, False, is_map, key, value)
            walk(name, m.nested_type, m.enum_type)
        for e in enums:
            types[f"{prefix}.{e.name}" if prefix else e.name] = TypeInfo(package, origin, e, True)
    walk(package, fd.message_type, fd.enum_type)


class _Ctx:
    def __init__(self, types_o: dict, types_u: dict, package_o: str, package_u: str, proto3_o: bool, proto3_u: bool):
        self.types = {True: types_o, False: types_u}
        self.package = {True: package_o, False: package_u}
        self.proto3 = {True: proto3_o, False: proto3_u}
        self.path: list[str] = []
        self.name: list[str] = []
        self.active: set[int] = set()
        self.diffs: list[tuple[str, str]] = []

    def sub(self) -> "_Ctx":
        c = _Ctx(self.types[True], self.types[False], self.package[True], self.package[False],
                 self.proto3[True], self.proto3[False])
        c.path, c.name, c.active = list(self.path), list(self.name), set(self.active)
        return c

    def add(self, kind: str) -> None:
        self.diffs.append((kind, "#/" + "/".join(self.path)))

    def compatible(self) -> bool:
        return all(k in COMPATIBLE for k, _ in self.diffs)

    def resolve(self, name: str, original: bool) -> str | None:
        """A type name as protobuf scopes it: absolute with a leading dot, else looked up
        from the innermost enclosing scope outwards."""
        types = self.types[original]
        if name.startswith("."):
            return name[1:] if name[1:] in types else None
        prefix = (self.package[original].split(".") if self.package[original] else []) + self.name
        while prefix:
            candidate = ".".join(prefix) + "." + name
            if candidate in types:
                return candidate
            prefix.pop()
        return name if name in types else None

    def type(self, name: str, original: bool) -> TypeInfo | None:
        full = self.resolve(name, original)
        return self.types[original].get(full) if full else None


class _Scope:
    def __init__(self, ctx: _Ctx, part: str, named: bool = False):
        self.ctx, self.part, self.named = ctx, part, named

    def __enter__(self):
        self.ctx.path.append(self.part)
        if self.named:
            self.ctx.name.append(self.part)

    def __exit__(self, *exc):
        self.ctx.path.pop()
        if self.named:
            self.ctx.name.pop()


def differences(original, update, deps_o=(), deps_u=()) -> list[tuple[str, str]]:
    """(Confluent's difference type, path) from the writer's file to the reader's;
    deps_*: (identity, FileDescriptorProto) of the files each one imports."""
    types_o, types_u = {}, {}
    for origin, fd in deps_o:
        _collect(types_o, fd, origin)
    for origin, fd in deps_u:
        _collect(types_u, fd, origin)
    _collect(types_o, original, "")
    _collect(types_u, update, "")
    ctx = _Ctx(types_o, types_u, original.package or "", update.package or "",
               original.syntax == "proto3", update.syntax == "proto3")
    if (original.package or "") != (update.package or ""):
        ctx.add("PACKAGE_CHANGED")
    _types(ctx, list(original.message_type), list(original.enum_type), list(update.message_type),
           list(update.enum_type))
    return ctx.diffs


def _types(ctx: _Ctx, om, oe, um, ue) -> None:
    # map entries are not types of their own to Confluent (they are read as map<k, v> fields)
    omsg = {m.name: (i, m) for i, m in enumerate(x for x in om if not x.options.map_entry)}
    umsg = {m.name: (i, m) for i, m in enumerate(x for x in um if not x.options.map_entry)}
    for name in list(omsg) + [n for n in umsg if n not in omsg]:
        with _Scope(ctx, name, named=True):
            if name not in umsg:
                ctx.add("MESSAGE_REMOVED")
            elif name not in omsg:
                ctx.add("MESSAGE_ADDED")
            else:
                _message(ctx, omsg[name][1], umsg[name][1])
                if omsg[name][0] != umsg[name][0]:
                    ctx.add("MESSAGE_MOVED")   # compatible: message indexes are per schema id
    oenum, uenum = {e.name: e for e in oe}, {e.name: e for e in ue}
    for name in list(oenum) + [n for n in uenum if n not in oenum]:
        with _Scope(ctx, name, named=True):
            if name not in uenum:
                ctx.add("ENUM_REMOVED")
            elif name not in oenum:
                ctx.add("ENUM_ADDED")
            else:
                ovals = {v.number: v.name for v in oenum[name].value}
                uvals = {v.number: v.name for v in uenum[name].value}
                for number in list(ovals) + [n for n in uvals if n not in ovals]:
                    with _Scope(ctx, str(number)):
                        if number not in uvals:
                            ctx.add("ENUM_CONST_REMOVED")
                        elif number not in ovals:
                            ctx.add("ENUM_CONST_ADDED")
                        elif ovals[number] != uvals[number]:
                            ctx.add("ENUM_CONST_CHANGED")


def _oneofs(m) -> dict[str, list]:
    """Real oneofs (not proto3 optional's synthetic ones): name -> fields."""
    out: dict[str, list] = {}
    for f in m.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            out.setdefault(m.oneof_decl[f.oneof_index].name, []).append(f)
    return out


def _message(ctx: _Ctx, o, u) -> None:
    spend()   # (the check's time budget: budget.py)
    if id(o) not in ctx.active:
        ctx.active.add(id(o))
        try:
            _message_fields(ctx, o, u)
        finally:
            ctx.active.discard(id(o))
    _types(ctx, list(o.nested_type), list(o.enum_type), list(u.nested_type), list(u.enum_type))


def _message_fields(ctx: _Ctx, o, u) -> None:
    """Fields are matched by number across the whole message, whatever oneof holds them, so
    that a oneof renamed, merged or dissolved cannot hide a field's type change or removal."""
    o_oneofs, u_oneofs = _oneofs(o), _oneofs(u)
    o_fields, u_fields = {f.number: f for f in o.field}, {f.number: f for f in u.field}
    o_group = {f.number: name for name, fs in o_oneofs.items() for f in fs}
    u_group = {f.number: name for name, fs in u_oneofs.items() for f in fs}
    # a oneof gone with all of its members is a plain deletion
    deleted = {name for name, fs in o_oneofs.items()
               if name not in u_oneofs and not any(f.number in u_fields for f in fs)}
    # a new oneof may only hold fields that were already exclusive (one old oneof, or one old field)
    for name, fields in u_oneofs.items():
        with _Scope(ctx, name):
            groups, moved_in = set(), 0
            for f in fields:
                if f.number in o_group:
                    groups.add("oneof:" + o_group[f.number])
                elif f.number in o_fields:
                    groups.add(f"field:{f.number}")
                    moved_in += 1
            if len(groups) > 1:
                ctx.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF" if moved_in > 1 else "FIELD_MOVED_TO_EXISTING_ONEOF")
    for name in sorted(set(o_oneofs) | set(u_oneofs)):
        with _Scope(ctx, name):
            if name not in u_oneofs:
                ctx.add("ONEOF_REMOVED")
            elif name not in o_oneofs:
                ctx.add("ONEOF_ADDED")
    for number in sorted(set(o_fields) | set(u_fields)):
        of, uf = o_fields.get(number), u_fields.get(number)
        og, ug = o_group.get(number), u_group.get(number)
        if uf is None:
            if og is not None:
                if og not in deleted:
                    with _Scope(ctx, og), _Scope(ctx, str(number)):
                        ctx.add("ONEOF_FIELD_REMOVED")
            else:
                with _Scope(ctx, str(number)):
                    ctx.add("REQUIRED_FIELD_REMOVED" if of.label == LABEL_REQUIRED else "FIELD_REMOVED")
        elif of is None:
            if ug is not None:
                with _Scope(ctx, ug), _Scope(ctx, str(number)):
                    ctx.add("ONEOF_FIELD_ADDED")
            else:
                with _Scope(ctx, str(number)):
                    ctx.add("REQUIRED_FIELD_ADDED" if uf.label == LABEL_REQUIRED else "FIELD_ADDED")
        else:
            if og is not None and ug is None:
                with _Scope(ctx, str(number)):
                    ctx.add("ONEOF_FIELD_MOVED_TO_TOP_LEVEL")   # only relaxes exclusivity
            if ug is not None:
                with _Scope(ctx, ug), _Scope(ctx, str(number)):
                    _field(ctx, of, uf)
            else:
                with _Scope(ctx, str(number)):
                    _field(ctx, of, uf)


def _field(ctx: _Ctx, o, u) -> None:
    if o.name != u.name:
        ctx.add("FIELD_NAME_CHANGED")
    _labels_and_types(ctx, _label(o, ctx.proto3[True]), _label(u, ctx.proto3[False]), _type_of(o), _type_of(u))


def _kind(ctx: _Ctx, t: str, original: bool) -> str:
    if t in _SCALAR_KIND:
        return "SCALAR"
    if t.startswith("map<"):
        return "MAP"
    info = ctx.type(t, original)
    return "SCALAR" if info is not None and info.is_enum else "MESSAGE"


def _as_map(ctx: _Ctx, t: str, original: bool):
    info = ctx.type(t, original) if t not in _SCALAR_KIND else None
    if info is not None and info.is_map:
        return f"map<{info.key}, {info.value}>", (info.key, info.value)
    return t, None


def _labels_and_types(ctx: _Ctx, ol, ul, ot: str, ut: str) -> None:
    ot, omap = _as_map(ctx, ot, True)
    ut, umap = _as_map(ctx, ut, False)
    ok, uk = _kind(ctx, ot, True), _kind(ctx, ut, False)
    if ok != uk:
        return ctx.add("FIELD_KIND_CHANGED")
    if ok == "SCALAR":
        os_, us = _scalar_kind(ctx, ot, True), _scalar_kind(ctx, ut, False)
        if os_ != us:
            ctx.add("FIELD_SCALAR_KIND_CHANGED")
        elif ol is not None and ul is not None and ol != ul:
            ctx.add("FIELD_STRING_OR_BYTES_LABEL_CHANGED" if os_ == "STRING_OR_BYTES"
                    else "FIELD_NUMERIC_LABEL_CHANGED")
    elif ok == "MESSAGE":
        _message_types(ctx, ot, ut)
    elif ok == "MAP" and omap and umap:
        _labels_and_types(ctx, None, None, omap[0], umap[0])
        _labels_and_types(ctx, None, None, omap[1], umap[1])


def _scalar_kind(ctx: _Ctx, t: str, original: bool) -> str:
    if t in _SCALAR_KIND:
        return _SCALAR_KIND[t]
    return "GENERAL_NUMBER"   # an enum (varint on the wire)


def _message_types(ctx: _Ctx, ot: str, ut: str) -> None:
    of, uf = ctx.resolve(ot, True), ctx.resolve(ut, False)
    if of is None or uf is None:
        if ot.lstrip(".") != ut.lstrip("."):
            ctx.add("FIELD_NAMED_TYPE_CHANGED")
        return
    oi, ui = ctx.types[True][of], ctx.types[False][uf]
    olocal = of[len(oi.package) + 1:] if oi.package and of.startswith(oi.package + ".") else of
    ulocal = uf[len(ui.package) + 1:] if ui.package and uf.startswith(ui.package + ".") else uf
    if olocal != ulocal:
        return ctx.add("FIELD_NAMED_TYPE_CHANGED")
    if oi.origin == ui.origin:
        return   # the same file (this one, or one same import): compared where it is declared
    sub = ctx.sub()
    sub.package = {True: oi.package, False: ui.package}
    sub.path = olocal.split(".")
    sub.name = olocal.split(".")
    _message(sub, oi.desc, ui.desc)
    ctx.diffs += sub.diffs
    if not sub.compatible():
        ctx.add("FIELD_NAMED_TYPE_CHANGED")


_DESCRIPTIONS = {
    "PACKAGE_CHANGED": "The package at '{p}' in the %s schema does not match the package in the %s schema",
    "MESSAGE_REMOVED": "The %s schema is missing a MESSAGE type at path '{p}' in the %s schema",
    "FIELD_KIND_CHANGED": "The type of a field at path '{p}' in the %s schema does not match the %s schema",
    "FIELD_SCALAR_KIND_CHANGED": "The kind of a SCALAR field at path '{p}' in the %s schema does not match its "
                                 "kind in the %s schema",
    "FIELD_NAMED_TYPE_CHANGED": "The type of a MESSAGE field at path '{p}' in the %s schema does not match its "
                                "type in the %s schema",
    "FIELD_NUMERIC_LABEL_CHANGED": "The label for a NUMERIC field at path '{p}' in the %s schema does not match "
                                   "its label in the %s schema",
    "REQUIRED_FIELD_ADDED": "A required field  at path '{p}' in the %s schema is missing in the %s schema",
    "REQUIRED_FIELD_REMOVED": "The %s schema is missing a required field at path: '{p}' in the %s schema",
    "ONEOF_FIELD_REMOVED": "The %s schema is missing a oneof field at path '{p}' in the %s schema",
    "MULTIPLE_FIELDS_MOVED_TO_ONEOF": "Multiple fields in the oneof at path '{p}' in the %s schema are outside a "
                                      "oneof in the %s schema",
    "FIELD_MOVED_TO_EXISTING_ONEOF": "A field in the oneof at path '{p}' in the %s schema is outside an existing "
                                     "oneof in the %s schema",
}


def reader_messages(reader, writer, reader_deps=(), writer_deps=()) -> list[str]:
    """The incompatible differences when `reader` reads what `writer` wrote, in Confluent's
    words, `%s` where the caller names the reader, then the writer."""
    return [f'{{errorType:"{kind}", description:"{_DESCRIPTIONS.get(kind, "").replace("{p}", path)}"}}'
            for kind, path in differences(writer, reader, writer_deps, reader_deps) if kind not in COMPATIBLE]

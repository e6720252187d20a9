"""Compatibility levels and checks. Avro's reader/writer rules are the
`avro` library's (avro.compatibility, a port of Java's SchemaCompatibility);
JSON Schema and Protobuf have no library for it, so their rules are written
here, each after the rule Confluent documents (schema-evolution docs:
"JSON Schema compatibility rules", "Protobuf compatibility rules").

A check answers a list of messages: empty when compatible."""
from __future__ import annotations

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
DEFAULT_LEVEL = "BACKWARD"


def check(level: str, new, previous: list) -> list[str]:
    """`previous`: the subject's live versions' ParsedSchemas, oldest first.
    BACKWARD: the new schema reads data written with the latest; FORWARD: the
    latest reads the new one's data; FULL both; *_TRANSITIVE: every version."""
    if level == "NONE" or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    base = level.replace("_TRANSITIVE", "")
    out: list[str] = []
    for old in reversed(against):
        if old.schema_type != new.schema_type:
            out.append(f"{{errorType:'TYPE_MISMATCH', description:'Incompatible schema type {new.schema_type} "
                       f"with {old.schema_type}'}}")
            continue
        found = []
        if base in ("BACKWARD", "FULL"):
            found += reader_writer(new, old)
        if base in ("FORWARD", "FULL"):
            found += reader_writer(old, new)
        if found:
            out += found
            out.append(f"{{oldSchemaVersion: {getattr(old, 'version', '?')}}}")
            out.append(f"{{oldSchema: '{old.text}'}}")
    if out:
        out.append(f"{{compatibility: '{level}'}}")
    return out


def reader_writer(reader, writer) -> list[str]:
    if reader.schema_type == "AVRO":
        return avro_messages(reader.parsed, writer.parsed)
    if reader.schema_type == "JSON":
        return json_messages(reader.parsed, writer.parsed)
    return protobuf_messages(reader.parsed, writer.parsed)


# -- Avro ------------------------------------------------------------------------------------

def avro_messages(reader, writer) -> list[str]:
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType
    result = ReaderWriterCompatibilityChecker().get_compatibility(reader, writer)
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    kinds = [k.name.upper() for k in result.incompatibilities] or ["INCOMPATIBLE"]
    detail = ", ".join(sorted(str(m) for m in result.messages))
    where = ", ".join(sorted(str(p) for p in result.locations))
    return [f"{{errorType:'{k}', description:'The new schema is incompatible: {detail} at {where}'}}"
            for k in kinds]


# -- JSON Schema -----------------------------------------------------------------------------
# Confluent's rule: a reader is compatible with a writer when every document
# the writer's schema accepts, the reader's accepts too (JsonSchemaDiff).

_NUMERIC = {"integer", "number"}


def _types(schema) -> set | None:
    if schema is True or schema == {}:
        return None   # anything
    if schema is False:
        return set()
    t = schema.get("type")
    if t is None:
        return None
    return set(t) if isinstance(t, list) else {t}


def json_messages(reader, writer, path: str = "#/") -> list[str]:
    out: list[str] = []
    if reader is True or reader == {}:
        return out
    if writer is True or writer == {}:
        if reader is not True and reader != {}:
            out.append(f"{{errorType:'TYPE_NARROWED', description:'A schema at path {path} accepts less than "
                       f"the open schema it replaces'}}")
        return out
    if reader is False or writer is False:
        return out if writer is False else [f"{{errorType:'TYPE_NARROWED', description:'{path} accepts nothing'}}"]
    rt, wt = _types(reader), _types(writer)
    if rt is not None:
        missing = (wt or {"any"}) - rt
        if "integer" in missing and "number" in rt:
            missing.discard("integer")   # every integer is a number (TYPE_EXTENDED is compatible)
        if missing:
            kind = "TYPE_CHANGED" if not (wt or set()) & rt else "TYPE_NARROWED"
            out.append(f"{{errorType:'{kind}', description:'The type at path {path} changed from "
                       f"{sorted(wt or ['any'])} to {sorted(rt)}'}}")
            return out
    # value ranges: a reader may widen them, never narrow them
    for key, narrowed in (("maxLength", "MAX_LENGTH"), ("maximum", "MAXIMUM"), ("maxItems", "MAX_ITEMS"),
                          ("maxProperties", "MAX_PROPERTIES"), ("exclusiveMaximum", "EXCLUSIVE_MAXIMUM")):
        r, w = reader.get(key), writer.get(key)
        if isinstance(r, (int, float)) and not isinstance(r, bool) and (w is None or r < w):
            out.append(f"{{errorType:'{narrowed}_{'ADDED' if w is None else 'DECREASED'}', description:"
                       f"'{key} at path {path} is {r}, was {w}'}}")
    for key, narrowed in (("minLength", "MIN_LENGTH"), ("minimum", "MINIMUM"), ("minItems", "MIN_ITEMS"),
                          ("minProperties", "MIN_PROPERTIES"), ("exclusiveMinimum", "EXCLUSIVE_MINIMUM")):
        r, w = reader.get(key), writer.get(key)
        if isinstance(r, (int, float)) and not isinstance(r, bool) and (w is None or r > w):
            out.append(f"{{errorType:'{narrowed}_{'ADDED' if w is None else 'INCREASED'}', description:"
                       f"'{key} at path {path} is {r}, was {w}'}}")
    if "enum" in reader:
        extra = [v for v in writer.get("enum", [None]) if v not in reader["enum"]] if "enum" in writer else ["*"]
        if extra:
            out.append(f"{{errorType:'ENUM_ARRAY_NARROWED', description:'The enum at path {path} lost values'}}")
    if reader.get("pattern") is not None and reader.get("pattern") != writer.get("pattern"):
        out.append(f"{{errorType:'PATTERN_{'ADDED' if 'pattern' not in writer else 'CHANGED'}', description:"
                   f"'The pattern at path {path} changed'}}")
    out += _json_objects(reader, writer, path)
    if isinstance(reader.get("items"), (dict, bool)) and isinstance(writer.get("items"), (dict, bool)):
        out += json_messages(reader["items"], writer["items"], f"{path}items/")
    return out


def _open(schema) -> bool:
    return schema.get("additionalProperties", True) is not False


def _json_objects(reader, writer, path: str) -> list[str]:
    out: list[str] = []
    rp, wp = reader.get("properties") or {}, writer.get("properties") or {}
    wreq = set(writer.get("required") or [])
    for name in sorted(set(reader.get("required") or []) - wreq):
        out.append(f"{{errorType:'REQUIRED_ATTRIBUTE_ADDED', description:'The new schema requires property "
                   f"{path}properties/{name}, which the old one does not'}}")
    if _open(writer) and not _open(reader):
        out.append(f"{{errorType:'ADDITIONAL_PROPERTIES_REMOVED', description:'The schema at path {path} "
                   f"no longer accepts additional properties'}}")
    for name, w in wp.items():
        if name in rp:
            out += json_messages(rp[name], w, f"{path}properties/{name}/")
        elif not _open(reader):
            out.append(f"{{errorType:'PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL', description:'The property "
                       f"{path}properties/{name} was removed from a closed content model'}}")
    for name, r in rp.items():
        if name not in wp and _open(writer) and not (r is True or r == {}):
            # an open writer may have written anything under that name
            out.append(f"{{errorType:'PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL', description:'The property "
                       f"{path}properties/{name} was added to an open content model'}}")
    return out


# -- Protobuf --------------------------------------------------------------------------------
# Confluent's rules: a message type the old schema has must stay; a field
# number keeps a compatible type (same type, or within one wire-compatible
# group); a field does not move into or out of a oneof; the package stays.

_WIRE_GROUPS = [{"int32", "uint32", "int64", "uint64", "bool"}, {"sint32", "sint64"},
                {"fixed32", "sfixed32"}, {"fixed64", "sfixed64"}, {"string", "bytes"}]


def _wire_compatible(a: str, b: str) -> bool:
    if a == b:
        return True
    if a.split(".")[-1] == b.split(".")[-1]:
        return True   # a message/enum named relative in text, fully in a descriptor
    return any(a in g and b in g for g in _WIRE_GROUPS)


def protobuf_messages(reader, writer) -> list[str]:
    out: list[str] = []
    if reader.package != writer.package:
        out.append(f"{{errorType:'PACKAGE_CHANGED', description:'The package changed from {writer.package!r} "
                   f"to {reader.package!r}'}}")
    for name, wfields in writer.messages.items():
        rfields = reader.messages.get(name)
        if rfields is None:
            out.append(f"{{errorType:'MESSAGE_REMOVED', description:'The message {name} was removed'}}")
            continue
        for number, (fname, wtype, wlabel, woneof) in wfields.items():
            if number not in rfields:
                continue   # a removed field is read as unknown (FIELD_REMOVED is compatible)
            _rname, rtype, rlabel, roneof = rfields[number]
            if not _wire_compatible(rtype, wtype):
                out.append(f"{{errorType:'FIELD_SCALAR_KIND_CHANGED', description:'The type of field {number} "
                           f"({fname}) of {name} changed from {wtype} to {rtype}'}}")
            elif (rlabel == "repeated") != (wlabel == "repeated"):
                out.append(f"{{errorType:'FIELD_LABEL_CHANGED', description:'Field {number} ({fname}) of {name} "
                           f"changed from {wlabel} to {rlabel}'}}")
            if woneof is None and roneof is not None and number in wfields:
                out.append(f"{{errorType:'FIELD_MOVED_TO_EXISTING_ONEOF', description:'Field {number} ({fname}) "
                           f"of {name} moved into oneof {roneof}'}}")
    return out

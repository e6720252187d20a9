"""Compatibility levels and checks. Avro's reader/writer rules are the
`avro` library's (avro.compatibility, a port of Java's SchemaCompatibility);
JSON Schema and Protobuf have no library for it, so their rules are written
after Confluent's own diff of two schemas, in json_compat and
protobuf_compat.

A check answers a list of messages, as Confluent's registry words them (the
`messages` of POST /compatibility/...?verbose=true and the details of a 409):
empty when compatible."""
from __future__ import annotations

from broker.schema_registry import budget, errors, json_compat, protobuf_compat

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
DEFAULT_LEVEL = "BACKWARD"
MAX_SCHEMA_IN_MESSAGE = 10 * 1024   # Confluent truncates the old schema it quotes at 10 KiB


def check(level: str, new, previous: list, budget_s: float | None = None) -> list[str]:
    """`previous`: the subject's live versions' ParsedSchemas, oldest first.
    BACKWARD: the new schema reads data written with the latest; FORWARD: the
    latest reads the new one's data; FULL both; *_TRANSITIVE: every version,
    newest first, stopping at the first one that fails (as Confluent's).
    `budget_s`: the whole check's time budget; past it, 50002 (budget.py)."""
    try:
        with budget.deadline(budget_s):
            return _check(level, new, previous)
    except budget.Exhausted:
        raise errors.operation_timeout(
            f"the compatibility check took longer than {round((budget_s or 0) * 1000)} ms "
            "(schema.registry.compatibility.check.timeout.ms)") from None


def _check(level: str, new, previous: list) -> list[str]:
    if level == "NONE" or not previous:
        return []
    against = list(reversed(previous)) if level.endswith("_TRANSITIVE") else previous[-1:]
    base = level.replace("_TRANSITIVE", "")
    for old in against:
        if old.schema_type != new.schema_type:
            out = ["Incompatible because of different schema type"]
        elif base == "BACKWARD":
            out = _named(reader_writer(new, old), old, "new", "old", True)
        elif base == "FORWARD":
            out = _named(reader_writer(old, new), old, "old", "new", True)
        else:
            out = (_named(reader_writer(old, new), old, "old", "new", False)
                   + _named(reader_writer(new, old), old, "new", "old", True))
        if out:
            return out + [f"{{compatibility: '{level}'}}"]
    return []


def _named(messages: list[str], old, reader: str, writer: str, quote_old: bool) -> list[str]:
    """Confluent's messages say which schema is which ("%s" -> new/old), then quote the old one."""
    if not messages:
        return []
    out = [m.replace("%s", reader, 1).replace("%s", writer, 1) for m in messages]
    if quote_old:
        if getattr(old, "version", None) is not None:
            out.append(f"{{oldSchemaVersion: {old.version}}}")
        text = _quoted(old)
        out.append(f"{{oldSchema: '{text}'}}" if len(text) <= MAX_SCHEMA_IN_MESSAGE
                   else f"{{oldSchema: <truncated> '{text[:MAX_SCHEMA_IN_MESSAGE]}...'}}")
    return out


def _quoted(old) -> str:
    """The old schema as Confluent quotes it: Protobuf as .proto text even when it was registered
    as a base64 descriptor."""
    descriptor = getattr(old.parsed, "descriptor", None) if old.schema_type == "PROTOBUF" else None
    if descriptor is not None:
        from broker.schema_registry import protobuf_text
        return protobuf_text.text_from_descriptor(descriptor)
    return old.text


def reader_writer(reader, writer) -> list[str]:
    try:
        return _reader_writer(reader, writer)
    except RecursionError:   # (a schema nested deeper than the checker's stack: refused, not a crash)
        raise errors.invalid_schema("The schema nests too deeply to check its compatibility") from None


def _reader_writer(reader, writer) -> list[str]:
    if reader.schema_type == "AVRO":
        return avro_messages(reader.parsed, writer.parsed)
    if reader.schema_type == "JSON":
        return json_compat.reader_messages(reader.parsed, writer.parsed, reader.json_refs, writer.json_refs)
    r, w = reader.parsed, writer.parsed
    if r.file is None or w.file is None:
        return []
    return protobuf_compat.reader_messages(r.file, w.file, r.deps, w.deps)


# -- Avro ------------------------------------------------------------------------------------

_AVRO_DESCRIPTIONS = {   # Confluent's words for each of Avro's incompatibility types (%s: reader, writer)
    "FIXED_SIZE_MISMATCH": "The size of FIXED type field at path '{path}' in the %s schema does not match with "
                           "the %s schema",
    "TYPE_MISMATCH": "The type (path '{path}') of a field in the %s schema does not match with the %s schema",
    "NAME_MISMATCH": "The name of the schema has changed (path '{path}')",
    "MISSING_ENUM_SYMBOLS": "The %s schema is missing enum symbols '{info}' at path '{path}' in the %s schema",
    "MISSING_UNION_BRANCH": "The %s schema is missing a type inside a union field at path '{path}' in the %s schema",
    "READER_FIELD_MISSING_DEFAULT_VALUE": "The field '{info}' at path '{path}' in the %s schema has no default "
                                          "value and is missing in the %s schema",
}


def avro_messages(reader, writer) -> list[str]:
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

    class Checker(ReaderWriterCompatibilityChecker):
        def get_compatibility(self, *args, **kwargs):
            budget.spend()   # (every pair of types it compares counts against the check's budget)
            return super().get_compatibility(*args, **kwargs)
    result = Checker().get_compatibility(reader, writer)
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    kinds = [k.name.upper() for k in result.incompatibilities] or ["INCOMPATIBLE"]
    # (the avro library keeps the messages and paths of several incompatibilities as sets:
    # paired one to one when it found one, joined otherwise)
    infos, paths = sorted(str(m) for m in result.messages), sorted(str(p) for p in result.locations)
    out = []
    for i, kind in enumerate(kinds):
        info = infos[i] if len(infos) == len(kinds) else ", ".join(infos)
        path = paths[i] if len(paths) == len(kinds) else ", ".join(paths)
        description = _AVRO_DESCRIPTIONS.get(kind, "").format(path=path, info=info)
        out.append(f"{{errorType:'{kind}', description:'{description}', additionalInfo:'{info}'}}")
    return out

"""Compatibility levels and checks. Avro's reader/writer rules are the
`avro` library's (avro.compatibility, a port of Java's SchemaCompatibility);
JSON Schema and Protobuf have no library for it, so their rules are written
after Confluent's own diff of two schemas, in json_compat and
protobuf_compat.

A check answers a list of messages, as Confluent's registry words them (the
`messages` of POST /compatibility/...?verbose=true and the details of a 409):
empty when compatible."""
from __future__ import annotations

from broker.schema_registry import errors, json_compat, protobuf_compat

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
DEFAULT_LEVEL = "BACKWARD"
MAX_SCHEMA_IN_MESSAGE = 10 * 1024   # Confluent truncates the old schema it quotes at 10 KiB


def check(level: str, new, previous: list) -> list[str]:
    """`previous`: the subject's live versions' ParsedSchemas, oldest first.
    BACKWARD: the new schema reads data written with the latest; FORWARD: the
    latest reads the new one's data; FULL both; *_TRANSITIVE: every version,
    newest first, stopping at the first one that fails (as Confluent's)."""
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
        text = old.text
        out.append(f"{{oldSchema: '{text}'}}" if len(text) <= MAX_SCHEMA_IN_MESSAGE
                   else f"{{oldSchema: <truncated> '{text[:MAX_SCHEMA_IN_MESSAGE]}...'}}")
    return out


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

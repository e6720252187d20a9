"""Parsing the three schema types a registry accepts, with their libraries:
Avro with `avro` (Apache's own), JSON Schema with `jsonschema` (its
meta-schema check), Protobuf with `protobuf` descriptors (the base64
FileDescriptorProto that confluent-kafka's Python serializer registers) or
`proto-schema-parser` (.proto text, as the Java serializer registers it).

A ParsedSchema carries what the registry stores (`text`), the key that
decides whether two registrations are the same schema (`identity`) and the
parsed form the compatibility rules read (`parsed`)."""
from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field

from broker.schema_registry import errors

TYPES = ("AVRO", "JSON", "PROTOBUF")


@dataclass
class ParsedSchema:
    schema_type: str
    text: str
    identity: str
    parsed: object
    references: list = field(default_factory=list)
    json_refs: dict = field(default_factory=dict)   # JSON: the referenced schemas' documents by reference name


def check_type(schema_type) -> str:
    schema_type = (schema_type or "AVRO")
    if not isinstance(schema_type, str) or schema_type.upper() not in TYPES:
        raise errors.invalid_schema(f"Invalid schema type {schema_type}")   # 42201, as Confluent's
    return schema_type.upper()


def parse(schema_type: str, text: str, resolved: dict[str, "ParsedSchema"], normalize: bool = False) -> ParsedSchema:
    """`resolved`: the referenced schemas by reference name, in dependency order."""
    if not isinstance(text, str) or not text.strip():
        raise errors.invalid_schema("Empty schema")
    if schema_type == "AVRO":
        return _avro(text, resolved)
    if schema_type == "JSON":
        parsed = _json(text, normalize)
        parsed.json_refs = {name: ref.parsed for name, ref in resolved.items() if ref.schema_type == "JSON"}
        return parsed
    return _protobuf(text, resolved, normalize)


# -- Avro ---------------------------------------------------------------------------------

def _avro(text: str, resolved: dict) -> ParsedSchema:
    import avro.errors
    import avro.schema
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise errors.invalid_schema(f"{text}, details: {exc}") from None
    names = avro.schema.Names()
    try:
        # referenced named types first, into the same namespace table (as Confluent's AvroSchema)
        for ref in resolved.values():
            if ref.schema_type == "AVRO":
                avro.schema.make_avsc_object(json.loads(ref.text), names)
        schema = avro.schema.make_avsc_object(doc, names)
    except (avro.errors.AvroException, TypeError, ValueError, AttributeError, KeyError) as exc:
        raise errors.invalid_schema(f"{text}, details: {exc}") from None
    stored = json.dumps(doc, separators=(",", ":"))   # compact, in the user's key order (as Java's toString)
    # same schema whatever the key order or white space (Confluent compares canonical strings)
    identity = json.dumps(schema.to_json(), sort_keys=True, separators=(",", ":"))
    return ParsedSchema("AVRO", stored, identity, schema)


# -- JSON Schema ----------------------------------------------------------------------------

# Jackson's default maxNestingDepth, which Confluent's registry parses schemas with. Checked
# explicitly: whether Python's recursion limit stops a deep document first depends on what else
# raised that limit in the process (Hypothesis does, for instance)
MAX_JSON_NESTING = 1000


def _nesting(doc) -> int:
    """How deep a parsed JSON document nests, counted without recursion."""
    deepest, stack = 0, [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((c, depth + 1) for c in children)
    return deepest


def _json(text: str, normalize: bool) -> ParsedSchema:
    import jsonschema
    import jsonschema.validators
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise errors.invalid_schema(f"{text}, details: {exc}") from None
    if not isinstance(doc, (dict, bool)):
        raise errors.invalid_schema(f"{text}, details: a JSON schema is an object or a boolean")
    if _nesting(doc) > MAX_JSON_NESTING:
        raise errors.invalid_schema(f"{text}, details: the schema nests deeper than {MAX_JSON_NESTING} levels")
    try:
        jsonschema.validators.validator_for(doc, default=jsonschema.Draft7Validator).check_schema(doc)
    except jsonschema.SchemaError as exc:
        raise errors.invalid_schema(f"{text}, details: {exc.message}") from None
    except RecursionError:
        raise errors.invalid_schema(f"{text}, details: the schema nests too deeply") from None
    identity = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    stored = identity if normalize else text
    return ParsedSchema("JSON", stored, identity, doc)


# -- Protobuf -------------------------------------------------------------------------------

@dataclass
class ProtoModel:
    """What the compatibility rules compare: package, messages by full name,
    each a map field number -> (name, type, label, oneof)."""
    package: str
    messages: dict
    descriptor: object = None   # FileDescriptorProto when given as one
    file: object = None         # FileDescriptorProto either way (what the compatibility rules compare)
    deps: list = field(default_factory=list)   # (identity, FileDescriptorProto) of the referenced files


def _descriptor_from_base64(text: str):
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError
    stripped = text.strip()
    if "{" in stripped or ";" in stripped:
        return None   # .proto text
    try:
        raw = base64.b64decode(stripped, validate=True)
    except (binascii.Error, ValueError):
        return None
    fd = descriptor_pb2.FileDescriptorProto()
    try:
        fd.ParseFromString(raw)
    except DecodeError:
        return None
    return fd


def _model_from_descriptor(fd) -> ProtoModel:
    from google.protobuf import descriptor_pb2
    types = {v: k for k, v in descriptor_pb2.FieldDescriptorProto.Type.items()}
    labels = {v: k for k, v in descriptor_pb2.FieldDescriptorProto.Label.items()}
    messages = {}

    def walk(prefix: str, msgs) -> None:
        for m in msgs:
            name = f"{prefix}{m.name}"
            fields = {}
            for f in m.field:
                kind = f.type_name.lstrip(".") if f.type_name else types[f.type].replace("TYPE_", "").lower()
                oneof = m.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else None
                fields[f.number] = (f.name, kind, labels[f.label].replace("LABEL_", "").lower(), oneof)
            messages[name] = fields
            walk(name + ".", m.nested_type)
    walk(f"{fd.package}." if fd.package else "", fd.message_type)
    return ProtoModel(fd.package, messages, fd)


def _model_from_text(tree) -> ProtoModel:
    from proto_schema_parser import ast
    package = next((e.name for e in tree.file_elements if isinstance(e, ast.Package)), "")
    messages = {}

    def walk(prefix: str, elements) -> None:
        for m in elements:
            if not isinstance(m, ast.Message):
                continue
            name = f"{prefix}{m.name}"
            fields = {}

            def add(elems, oneof=None):
                for f in elems:
                    if isinstance(f, ast.Field):
                        label = (f.cardinality.name.lower() if f.cardinality else "optional")
                        fields[f.number] = (f.name, f.type, label, oneof)
                    elif isinstance(f, ast.MapField):
                        fields[f.number] = (f.name, f"map<{f.key_type},{f.value_type}>", "repeated", None)
                    elif isinstance(f, ast.OneOf):
                        add(f.elements, f.name)
            add(m.elements)
            messages[name] = fields
            walk(name + ".", m.elements)
    walk(f"{package}." if package else "", tree.file_elements)
    return ProtoModel(package, messages)


def _parse_proto_text(text: str):
    from proto_schema_parser.parser import Parser
    from antlr4.error.ErrorListener import ErrorListener

    class Raise(ErrorListener):
        def syntaxError(self, recognizer, offending, line, column, msg, e):
            raise ValueError(f"line {line}:{column} {msg}")

    def quiet(recognizer):
        recognizer.removeErrorListeners()   # (antlr's default one prints to stderr)
        recognizer.addErrorListener(Raise())
    tree = Parser(setup_lexer=quiet, setup_parser=quiet).parse(text)
    if not tree.file_elements:
        raise ValueError("no declarations")
    return tree


def _protobuf(text: str, resolved: dict, normalize: bool) -> ParsedSchema:
    fd = _descriptor_from_base64(text)
    if fd is not None:
        _check_descriptor(fd, resolved, text)
        model = _model_from_descriptor(fd)
        model.file, model.deps = fd, _proto_deps(resolved)
        canonical = base64.b64encode(fd.SerializeToString(deterministic=True)).decode()
        return ParsedSchema("PROTOBUF", text.strip(), canonical, model)
    try:
        tree = _parse_proto_text(text)
    except (ValueError, RecursionError) as exc:
        raise errors.invalid_schema(f"{text}, details: {exc}") from None
    model = _model_from_text(tree)
    model.deps = _proto_deps(resolved)
    try:
        from broker.schema_registry import protobuf_text
        model.file = protobuf_text.descriptor_from_text(tree)
    except (ValueError, TypeError, AttributeError):
        model.file = None   # (a form the converter does not know: no field-level compatibility rules)
    if normalize:
        from proto_schema_parser.generator import Generator
        stored = Generator().generate(tree)
    else:
        stored = text
    return ParsedSchema("PROTOBUF", stored, " ".join(stored.split()), model)


def _proto_deps(resolved: dict) -> list:
    return [(ref.identity, ref.parsed.file) for ref in resolved.values()
            if ref.schema_type == "PROTOBUF" and getattr(ref.parsed, "file", None) is not None]


def _check_descriptor(fd, resolved: dict, text: str) -> None:
    """A descriptor must build in a pool with its imports: the well-known
    types and the referenced schemas that are descriptors too."""
    from google.protobuf import descriptor_pool
    from google.protobuf import (any_pb2, api_pb2, descriptor_pb2, duration_pb2, empty_pb2,  # noqa: F401
                                 field_mask_pb2, source_context_pb2, struct_pb2, timestamp_pb2,
                                 type_pb2, wrappers_pb2)
    pool = descriptor_pool.DescriptorPool()
    for mod in (any_pb2, source_context_pb2, type_pb2, api_pb2, descriptor_pb2, duration_pb2, empty_pb2,
                field_mask_pb2, struct_pb2, timestamp_pb2, wrappers_pb2):
        pool.AddSerializedFile(mod.DESCRIPTOR.serialized_pb)
    for name, ref in resolved.items():
        desc = getattr(ref.parsed, "descriptor", None)
        if desc is None:
            return   # a .proto text import: the structure was checked when it was registered
        try:
            pool.Add(desc)
        except (TypeError, ValueError):
            pass   # (already there)
    try:
        pool.Add(fd)
        pool.FindFileByName(fd.name)
    except (TypeError, ValueError, KeyError) as exc:
        raise errors.invalid_schema(f"{text}, details: {exc}") from None

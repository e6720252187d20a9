"""Protobuf schemas in both of the forms clients exchange: `.proto` text
(what Java clients register and read) and a base64 FileDescriptorProto
(`format=serialized`, what confluent-kafka's Python serializer registers and
reads). Confluent's registry converts between them; so does this module:
text -> descriptor from proto-schema-parser's syntax tree, descriptor ->
text from the descriptor's fields. Message and enum names stay as written
(relative names are resolved by the descriptor pool that loads the file, with
protobuf's scoping rules); services, extensions and custom options are not
carried (a serializer needs none of them)."""
from __future__ import annotations

import base64

SCALARS = {"double": 1, "float": 2, "int64": 3, "uint64": 4, "int32": 5, "fixed64": 6, "fixed32": 7,
           "bool": 8, "string": 9, "bytes": 12, "uint32": 13, "sfixed32": 15, "sfixed64": 16,
           "sint32": 17, "sint64": 18}
SCALAR_NAMES = {v: k for k, v in SCALARS.items()}
TYPE_MESSAGE, TYPE_ENUM = 11, 14
LABEL_OPTIONAL, LABEL_REQUIRED, LABEL_REPEATED = 1, 2, 3


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


# -- text -> descriptor ----------------------------------------------------------------------

def descriptor_from_text(tree, name: str = "schema.proto"):
    """A FileDescriptorProto from proto-schema-parser's File."""
    from google.protobuf import descriptor_pb2
    from proto_schema_parser import ast
    fd = descriptor_pb2.FileDescriptorProto(name=name, syntax=tree.syntax or "proto2")
    proto3 = fd.syntax == "proto3"
    for e in tree.file_elements:
        if isinstance(e, ast.Package):
            fd.package = e.name
        elif isinstance(e, ast.Import):
            fd.dependency.append(e.name)
        elif isinstance(e, ast.Message):
            _message(fd.message_type.add(), e, proto3)
        elif isinstance(e, ast.Enum):
            _enum(fd.enum_type.add(), e)
    return fd


def _field_type(field, type_name: str) -> None:
    if type_name in SCALARS:
        field.type = SCALARS[type_name]
    else:
        field.type_name = type_name   # message or enum: the pool resolves the name and its kind


def _message(msg, node, proto3: bool) -> None:
    from proto_schema_parser import ast
    msg.name = node.name

    def add_field(f, oneof_index=None):
        field = msg.field.add(name=f.name, number=int(f.number), json_name=_json_name(f.name))
        card = f.cardinality.name if f.cardinality else None
        field.label = {"REPEATED": LABEL_REPEATED, "REQUIRED": LABEL_REQUIRED}.get(card, LABEL_OPTIONAL)
        _field_type(field, f.type)
        if oneof_index is not None:
            field.oneof_index = oneof_index
        elif proto3 and card == "OPTIONAL":
            field.proto3_optional = True   # (a synthetic oneof follows the real ones, as protoc writes it)
            synthetic.append(field)
    synthetic = []
    for e in node.elements:
        if isinstance(e, ast.Field):
            add_field(e)
        elif isinstance(e, ast.MapField):
            entry = msg.nested_type.add(name=_camel(e.name) + "Entry")
            entry.options.map_entry = True
            key = entry.field.add(name="key", number=1, label=LABEL_OPTIONAL, json_name="key")
            _field_type(key, e.key_type)
            value = entry.field.add(name="value", number=2, label=LABEL_OPTIONAL, json_name="value")
            _field_type(value, e.value_type)
            msg.field.add(name=e.name, number=int(e.number), label=LABEL_REPEATED, type=TYPE_MESSAGE,
                          type_name=entry.name, json_name=_json_name(e.name))
        elif isinstance(e, ast.OneOf):
            msg.oneof_decl.add(name=e.name)
            for f in e.elements:
                if isinstance(f, ast.Field):
                    add_field(f, len(msg.oneof_decl) - 1)
        elif isinstance(e, ast.Message):
            _message(msg.nested_type.add(), e, proto3)
        elif isinstance(e, ast.Enum):
            _enum(msg.enum_type.add(), e)
        elif isinstance(e, ast.Reserved):
            for r in e.ranges:
                low, _, high = str(r).partition(" to ")
                end = 536870912 if high.strip() == "max" else int(high or low) + 1
                msg.reserved_range.add(start=int(low), end=end)
            msg.reserved_name.extend(str(n).strip("\"'") for n in e.names)
    for field in synthetic:
        msg.oneof_decl.add(name="_" + field.name)
        field.oneof_index = len(msg.oneof_decl) - 1


def _enum(enum, node) -> None:
    from proto_schema_parser import ast
    enum.name = node.name
    for e in node.elements:
        if isinstance(e, ast.EnumValue):
            enum.value.add(name=e.name, number=int(e.number))


def _json_name(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(p[:1].upper() + p[1:] for p in rest)


def serialized(tree, name: str = "schema.proto") -> str:
    return base64.b64encode(descriptor_from_text(tree, name).SerializeToString()).decode()


# -- descriptor -> text ----------------------------------------------------------------------

def text_from_descriptor(fd) -> str:
    out = [f'syntax = "{fd.syntax or "proto2"}";']
    if fd.package:
        out.append(f"package {fd.package};")
    out += [f'import "{d}";' for d in fd.dependency]
    out.append("")
    proto3 = fd.syntax == "proto3"
    for m in fd.message_type:
        out += _message_text(m, proto3, "")
    for e in fd.enum_type:
        out += _enum_text(e, "")
    return "\n".join(out) + "\n"


def _type_text(f) -> str:
    if f.type in SCALAR_NAMES and not f.type_name:
        return SCALAR_NAMES[f.type]
    return f.type_name


def _message_text(m, proto3: bool, indent: str) -> list[str]:
    inner = indent + "  "
    lines = [f"{indent}message {m.name} {{"]
    entries = {n.name: n for n in m.nested_type if n.options.map_entry}
    oneofs: dict[int, list] = {}
    for f in m.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            oneofs.setdefault(f.oneof_index, []).append(f)
    done = set()
    for f in m.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            if f.oneof_index in done:
                continue
            done.add(f.oneof_index)
            lines.append(f"{inner}oneof {m.oneof_decl[f.oneof_index].name} {{")
            lines += [f"{inner}  {_type_text(o)} {o.name} = {o.number};" for o in oneofs[f.oneof_index]]
            lines.append(f"{inner}}}")
            continue
        entry = entries.get(f.type_name.rsplit(".", 1)[-1]) if f.type_name else None
        if entry is not None and f.label == LABEL_REPEATED:
            key, value = entry.field[0], entry.field[1]
            lines.append(f"{inner}map<{_type_text(key)}, {_type_text(value)}> {f.name} = {f.number};")
            continue
        label = {LABEL_REPEATED: "repeated ", LABEL_REQUIRED: "required "}.get(f.label, "")
        if not label and (f.proto3_optional or not proto3):
            label = "optional "
        lines.append(f"{inner}{label}{_type_text(f)} {f.name} = {f.number};")
    for n in m.nested_type:
        if not n.options.map_entry:
            lines += _message_text(n, proto3, inner)
    for e in m.enum_type:
        lines += _enum_text(e, inner)
    for r in m.reserved_range:
        lines.append(f"{inner}reserved {r.start}" + (f" to {r.end - 1};" if r.end - 1 != r.start else ";"))
    if m.reserved_name:
        lines.append(f"{inner}reserved {', '.join(repr(n).replace(chr(39), chr(34)) for n in m.reserved_name)};")
    lines.append(f"{indent}}}")
    return lines


def _enum_text(e, indent: str) -> list[str]:
    return ([f"{indent}enum {e.name} {{"] + [f"{indent}  {v.name} = {v.number};" for v in e.value]
            + [f"{indent}}}"])

"""Confluent's JSON Schema and Protobuf compatibility rules, one table row per
rule: the old (writer's) schema, the new (reader's) one, the difference types
Confluent's diff reports for the pair, and whether BACKWARD accepts it. The
pairs follow the kinds of case Confluent's own diff test resources list
(json-schema-provider and protobuf-provider diff-schema-examples), written
afresh here. Pure functions: no broker."""
from __future__ import annotations

import base64
import json

import pytest

from broker.schema_registry import compatibility, json_compat, protobuf_compat, schemas


def js(doc):
    return schemas.parse("JSON", json.dumps(doc), {})


def obj(props: dict, **extra) -> dict:
    return {"type": "object", "properties": props, **extra}


S, N, I = {"type": "string"}, {"type": "number"}, {"type": "integer"}
CLOSED = {"additionalProperties": False}

# (what changes, old, new, difference types reported, BACKWARD-compatible)
JSON_CASES = [
    # types: changed, narrowed, widened (integer -> number), anything -> empty schema
    ("type changed", S, N, {"TYPE_CHANGED"}, False),
    ("integer widened to number", I, N, {"TYPE_EXTENDED"}, True),
    ("number narrowed to integer", N, I, {"TYPE_NARROWED"}, False),
    ("type list extended", {"type": ["string"]}, {"type": ["string", "null"]}, {"SUM_TYPE_EXTENDED"}, True),
    ("type list narrowed", {"type": ["string", "null"]}, {"type": "string"}, {"TYPE_CHANGED"}, False),
    ("anything becomes the empty schema", obj({"a": S}), {}, set(), True),
    ("the empty schema becomes a string", {}, S, {"TYPE_CHANGED"}, False),
    # string, number, array and object limits
    ("maxLength decreased", {**S, "maxLength": 9}, {**S, "maxLength": 3}, {"MAX_LENGTH_DECREASED"}, False),
    ("maxLength increased", {**S, "maxLength": 3}, {**S, "maxLength": 9}, {"MAX_LENGTH_INCREASED"}, True),
    ("maxLength added", S, {**S, "maxLength": 3}, {"MAX_LENGTH_ADDED"}, False),
    ("minLength removed", {**S, "minLength": 2}, S, {"MIN_LENGTH_REMOVED"}, True),
    ("minLength increased", {**S, "minLength": 2}, {**S, "minLength": 4}, {"MIN_LENGTH_INCREASED"}, False),
    ("pattern added", S, {**S, "pattern": "^x"}, {"PATTERN_ADDED"}, False),
    ("pattern changed", {**S, "pattern": "^x"}, {**S, "pattern": "^y"}, {"PATTERN_CHANGED"}, False),
    ("pattern removed", {**S, "pattern": "^x"}, S, {"PATTERN_REMOVED"}, True),
    ("maximum decreased", {**N, "maximum": 50}, {**N, "maximum": 5}, {"MAXIMUM_DECREASED"}, False),
    ("minimum decreased", {**N, "minimum": 5}, {**N, "minimum": 1}, {"MINIMUM_DECREASED"}, True),
    ("exclusiveMinimum added", N, {**N, "exclusiveMinimum": 0}, {"EXCLUSIVE_MINIMUM_ADDED"}, False),
    ("multipleOf reduced", {**I, "multipleOf": 6}, {**I, "multipleOf": 3}, {"MULTIPLE_OF_REDUCED"}, True),
    ("multipleOf expanded", {**I, "multipleOf": 3}, {**I, "multipleOf": 6}, {"MULTIPLE_OF_EXPANDED"}, False),
    ("multipleOf changed", {**I, "multipleOf": 4}, {**I, "multipleOf": 6}, {"MULTIPLE_OF_CHANGED"}, False),
    ("maxItems decreased", {"type": "array", "maxItems": 8}, {"type": "array", "maxItems": 2},
     {"MAX_ITEMS_DECREASED"}, False),
    ("minItems removed", {"type": "array", "minItems": 1}, {"type": "array"}, {"MIN_ITEMS_REMOVED"}, True),
    ("uniqueItems added", {"type": "array"}, {"type": "array", "uniqueItems": True}, {"UNIQUE_ITEMS_ADDED"}, False),
    ("items narrowed", {"type": "array", "items": N}, {"type": "array", "items": I}, {"TYPE_NARROWED"}, False),
    ("maxProperties added", obj({}), obj({}, maxProperties=3), {"MAX_PROPERTIES_ADDED"}, False),
    # enums
    ("enum extended", {"enum": ["a", "b"]}, {"enum": ["a", "b", "c"]}, {"ENUM_ARRAY_EXTENDED"}, True),
    ("enum narrowed", {"enum": ["a", "b"]}, {"enum": ["a"]}, {"ENUM_ARRAY_NARROWED"}, False),
    ("enum changed", {"enum": ["a", "b"]}, {"enum": ["a", "c"]}, {"ENUM_ARRAY_CHANGED"}, False),
    ("enum dropped from a typed enum", {**S, "enum": ["a"]}, S, {"PRODUCT_TYPE_NARROWED"}, True),
    ("const changed", obj({"k": {"const": 1}}), obj({"k": {"const": 2}}), {"ENUM_ARRAY_CHANGED"}, False),
    # required properties
    ("required added", obj({"a": S}), obj({"a": S}, required=["a"]), {"REQUIRED_ATTRIBUTE_ADDED"}, False),
    ("required with a default added", obj({"a": S}), obj({"a": {**S, "default": "x"}}, required=["a"]),
     {"REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED"}, True),
    ("required removed", obj({"a": S}, required=["a"]), obj({"a": S}), {"REQUIRED_ATTRIBUTE_REMOVED"}, True),
    # open content model (additionalProperties absent/true)
    ("property added to an open model", obj({"a": S}), obj({"a": S, "b": N}),
     {"OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"}, False),
    ("required property added to an open model", obj({"a": S}), obj({"a": S, "b": N}, required=["b"]),
     {"REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"}, False),
    ("property with an empty schema added to an open model", obj({"a": S}), obj({"a": S, "b": {}}),
     {"PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL"}, True),
    ("property removed from an open model", obj({"a": S, "b": N}), obj({"a": S}),
     {"PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL"}, True),
    # closed content model (additionalProperties: false)
    ("optional property added to a closed model", obj({"a": S}, **CLOSED), obj({"a": S, "b": N}, **CLOSED),
     {"OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"}, True),
    ("required property added to a closed model", obj({"a": S}, **CLOSED),
     obj({"a": S, "b": N}, required=["b"], **CLOSED), {"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"}, False),
    ("required property with a default added to a closed model", obj({"a": S}, **CLOSED),
     obj({"a": S, "b": {**N, "default": 0}}, required=["b"], **CLOSED),
     {"REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL"}, True),
    ("property removed from a closed model", obj({"a": S, "b": N}, **CLOSED), obj({"a": S}, **CLOSED),
     {"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"}, False),
    ("false property removed from a closed model", obj({"a": S, "b": False}, **CLOSED), obj({"a": S}, **CLOSED),
     {"PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL"}, True),
    ("model closed", obj({"a": S}), obj({"a": S}, **CLOSED), {"ADDITIONAL_PROPERTIES_REMOVED"}, False),
    ("model opened", obj({"a": S}, **CLOSED), obj({"a": S}), {"ADDITIONAL_PROPERTIES_ADDED"}, True),
    # partially open content model (additionalProperties or patternProperties a schema)
    ("property added, covered by additionalProperties", obj({"a": S}, additionalProperties=S),
     obj({"a": S, "b": S}, additionalProperties=S),
     {"PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"}, True),
    ("property added, not covered by additionalProperties", obj({"a": S}, additionalProperties=S),
     obj({"a": S, "b": N}, additionalProperties=S),
     {"PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", "TYPE_CHANGED"}, False),
    ("property added, covered by a patternProperty", obj({"a": S}, patternProperties={"^n_": I}, **CLOSED),
     obj({"a": S, "n_1": N}, patternProperties={"^n_": I}, **CLOSED),
     {"PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", "TYPE_EXTENDED"}, True),
    ("property removed, covered by a patternProperty", obj({"a": S, "n_1": I}, **CLOSED),
     obj({"a": S}, patternProperties={"^n_": N}, **CLOSED),
     {"PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"}, True),
    ("property removed, not covered", obj({"a": S, "b": N}, **CLOSED), obj({"a": S}, additionalProperties=S),
     {"PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"}, False),
    ("additionalProperties narrowed", obj({}, additionalProperties=N), obj({}, additionalProperties=I),
     {"TYPE_NARROWED"}, False),
    # tuples (items as a list) and their additionalItems
    ("item added to a closed tuple", {"type": "array", "items": [S], "additionalItems": False},
     {"type": "array", "items": [S, N], "additionalItems": False}, {"ITEM_ADDED_TO_CLOSED_CONTENT_MODEL"}, True),
    ("item removed from a closed tuple", {"type": "array", "items": [S, N], "additionalItems": False},
     {"type": "array", "items": [S], "additionalItems": False}, {"ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"}, False),
    ("item added to an open tuple", {"type": "array", "items": [S]}, {"type": "array", "items": [S, N]},
     {"ITEM_ADDED_TO_OPEN_CONTENT_MODEL"}, False),
    # combined schemas
    ("oneOf gains an alternative", {"oneOf": [S, N]}, {"oneOf": [S, N, {"type": "boolean"}]},
     {"SUM_TYPE_EXTENDED"}, True),
    ("anyOf loses an alternative", {"anyOf": [S, N]}, {"anyOf": [S]}, {"SUM_TYPE_NARROWED"}, False),
    ("allOf gains a conjunct", {"allOf": [obj({"a": S})]}, {"allOf": [obj({"a": S}), {"required": ["a"]}]},
     {"PRODUCT_TYPE_EXTENDED"}, False),
    ("allOf loses a conjunct", {"allOf": [obj({"a": S}), {"required": ["a"]}]}, {"allOf": [obj({"a": S})]},
     {"PRODUCT_TYPE_NARROWED"}, True),
    ("oneOf becomes anyOf", {"oneOf": [S, N]}, {"anyOf": [S, N]}, {"COMBINED_TYPE_EXTENDED"}, True),
    ("anyOf becomes allOf", {"anyOf": [S, N]}, {"allOf": [S, N]}, {"COMBINED_TYPE_CHANGED"}, False),
    ("an alternative changes", {"oneOf": [S, N]}, {"oneOf": [S, {"type": "boolean"}]},
     {"COMBINED_TYPE_SUBSCHEMAS_CHANGED"}, False),
    ("a schema becomes one of a union", S, {"oneOf": [S, N]}, {"SUM_TYPE_EXTENDED"}, True),
    ("not: excludes less", {"not": N}, {"not": I}, {"NOT_TYPE_NARROWED"}, True),
    ("not: excludes more", {"not": I}, {"not": N}, {"NOT_TYPE_EXTENDED"}, False),
    # $ref within the schema, and a recursive one
    ("referenced definition narrowed", {"definitions": {"q": N}, **obj({"a": {"$ref": "#/definitions/q"}})},
     {"definitions": {"q": I}, **obj({"a": {"$ref": "#/definitions/q"}})}, {"TYPE_NARROWED"}, False),
    ("inline schema moved behind a $ref", obj({"a": I}), {"$defs": {"q": N}, **obj({"a": {"$ref": "#/$defs/q"}})},
     {"TYPE_EXTENDED"}, True),
    ("recursive schema, unchanged", obj({"next": {"$ref": "#"}}), obj({"next": {"$ref": "#"}}), set(), True),
    # descriptive keywords never matter
    ("title, description, default changed", {**S, "title": "x", "description": "y", "default": "a"},
     {**S, "title": "z", "description": "w", "default": "b"},
     {"TITLE_CHANGED", "DESCRIPTION_CHANGED", "DEFAULT_CHANGED"}, True),
]


@pytest.mark.parametrize("what,old,new,kinds,backward", JSON_CASES, ids=[c[0] for c in JSON_CASES])
def test_json_schema_rule(what, old, new, kinds, backward):
    found = {kind for kind, _ in json_compat.differences(old, new)}
    assert kinds <= found, (what, found)
    assert (compatibility.check("BACKWARD", js(new), [js(old)]) == []) is backward
    # FORWARD is the same rule with the two schemas swapped
    assert (compatibility.check("FORWARD", js(old), [js(new)]) == []) is backward


def test_json_schema_levels_and_confluent_messages():
    v1 = js(obj({"a": S}))
    v2 = js(obj({"a": S, "b": N}, required=["b"]))             # FORWARD-compatible only
    assert compatibility.check("FORWARD", v2, [v1]) == []
    assert compatibility.check("FULL", v2, [v1]) != []
    v1.version = 1
    messages = compatibility.check("BACKWARD", v2, [v1])
    assert messages == [
        "{errorType:\"REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL\", description:\"The new schema has an open "
        "content model and has a property or item at path '#/properties/b' which is missing in the old schema'}",
        "{oldSchemaVersion: 1}",
        f"{{oldSchema: '{v1.text}'}}",
        "{compatibility: 'BACKWARD'}",
    ]
    # transitive: the newest failing version is quoted, and only that one
    v0 = js(obj({"a": S, "b": N}, required=["b"]))
    v0.version, v1.version = 1, 2
    assert compatibility.check("BACKWARD", v2, [v0, v1])[1] == "{oldSchemaVersion: 2}"
    assert compatibility.check("BACKWARD", js(obj({"a": S, "b": N}, required=["b"])), [v1, v0]) == []
    assert compatibility.check("BACKWARD_TRANSITIVE", v2, [v0, v1])[1] == "{oldSchemaVersion: 2}"
    assert compatibility.check("BACKWARD", v2, [schemas.parse("AVRO", '"string"', {})]) == [
        "Incompatible because of different schema type", "{compatibility: 'BACKWARD'}"]


# -- Protobuf -------------------------------------------------------------------------------

def proto(body: str, package: str = "shop", syntax: str = "proto3", refs: dict | None = None):
    head = f'syntax = "{syntax}";\n' + (f"package {package};\n" if package else "")
    return schemas.parse("PROTOBUF", head + body, refs or {})


ORDER = "message Order { string id = 1; int64 qty = 2; }"

# (what changes, old body, new body, difference types reported, BACKWARD-compatible)
PROTO_CASES = [
    ("field added", ORDER, "message Order { string id = 1; int64 qty = 2; bool gift = 3; }", {"FIELD_ADDED"}, True),
    ("field removed", ORDER, "message Order { string id = 1; }", {"FIELD_REMOVED"}, True),
    ("field renamed", ORDER, "message Order { string id = 1; int64 count = 2; }", {"FIELD_NAME_CHANGED"}, True),
    ("field number changed", ORDER, "message Order { string id = 1; int64 qty = 7; }",
     {"FIELD_REMOVED", "FIELD_ADDED"}, True),
    ("message removed", ORDER + " message Item { string sku = 1; }", ORDER, {"MESSAGE_REMOVED"}, False),
    ("message added", ORDER, ORDER + " message Item { string sku = 1; }", {"MESSAGE_ADDED"}, True),
    ("nested message removed", "message Order { string id = 1; message Line { int32 n = 1; } }",
     "message Order { string id = 1; }", {"MESSAGE_REMOVED"}, False),
    ("messages reordered", ORDER + " message Item { string sku = 1; }",
     "message Item { string sku = 1; } " + ORDER, {"MESSAGE_MOVED"}, True),
    # scalar wire groups
    ("int32 -> int64 (same varint group)", "message M { int32 n = 1; }", "message M { int64 n = 1; }", set(), True),
    ("uint64 -> bool (same varint group)", "message M { uint64 n = 1; }", "message M { bool n = 1; }", set(), True),
    ("string -> bytes", "message M { string s = 1; }", "message M { bytes s = 1; }", set(), True),
    ("fixed32 -> sfixed32", "message M { fixed32 n = 1; }", "message M { sfixed32 n = 1; }", set(), True),
    ("int32 -> sint32 (zigzag)", "message M { int32 n = 1; }", "message M { sint32 n = 1; }",
     {"FIELD_SCALAR_KIND_CHANGED"}, False),
    ("fixed32 -> fixed64", "message M { fixed32 n = 1; }", "message M { fixed64 n = 1; }",
     {"FIELD_SCALAR_KIND_CHANGED"}, False),
    ("float -> double", "message M { float n = 1; }", "message M { double n = 1; }",
     {"FIELD_SCALAR_KIND_CHANGED"}, False),
    ("string -> int32", "message M { string n = 1; }", "message M { int32 n = 1; }",
     {"FIELD_SCALAR_KIND_CHANGED"}, False),
    ("enum -> int32 (both varints)", "message M { E e = 1; } enum E { A = 0; }", "message M { int32 e = 1; }",
     set(), True),
    # field kinds: scalar, message, map
    ("scalar -> message", "message M { string a = 1; } message N { string x = 1; }",
     "message M { N a = 1; } message N { string x = 1; }", {"FIELD_KIND_CHANGED"}, False),
    ("scalar -> map", "message M { string a = 1; }", "message M { map<string, string> a = 1; }",
     {"FIELD_KIND_CHANGED"}, False),
    ("map value type changed", "message M { map<string, int32> a = 1; }", "message M { map<string, string> a = 1; }",
     {"FIELD_SCALAR_KIND_CHANGED"}, False),
    ("message type renamed", "message M { N a = 1; } message N { string x = 1; }",
     "message M { P a = 1; } message N { string x = 1; } message P { string x = 1; }",
     {"FIELD_NAMED_TYPE_CHANGED"}, False),
    # labels
    ("int32 -> repeated int32 (proto2)", "message M { optional int32 n = 1; }", "message M { repeated int32 n = 1; }",
     {"FIELD_NUMERIC_LABEL_CHANGED"}, False),
    ("string -> repeated string (proto2)", "message M { optional string s = 1; }",
     "message M { repeated string s = 1; }", {"FIELD_STRING_OR_BYTES_LABEL_CHANGED"}, True),
    ("required field added (proto2)", "message M { optional int32 n = 1; }",
     "message M { optional int32 n = 1; required string s = 2; }", {"REQUIRED_FIELD_ADDED"}, False),
    ("required field removed (proto2)", "message M { required int32 n = 1; optional string s = 2; }",
     "message M { optional string s = 2; }", {"REQUIRED_FIELD_REMOVED"}, False),
    # oneofs
    ("one field moved into a new oneof", "message M { string a = 1; }", "message M { oneof pick { string a = 1; } }",
     {"ONEOF_ADDED"}, True),
    ("two fields moved into one oneof", "message M { string a = 1; string b = 2; }",
     "message M { oneof pick { string a = 1; string b = 2; } }", {"MULTIPLE_FIELDS_MOVED_TO_ONEOF"}, False),
    ("field moved into an existing oneof", "message M { string a = 1; oneof pick { string b = 2; } }",
     "message M { oneof pick { string a = 1; string b = 2; } }", {"FIELD_MOVED_TO_EXISTING_ONEOF"}, False),
    ("oneof field added", "message M { oneof pick { string a = 1; } }",
     "message M { oneof pick { string a = 1; int32 b = 2; } }", {"ONEOF_FIELD_ADDED"}, True),
    ("oneof field removed", "message M { oneof pick { string a = 1; int32 b = 2; } }",
     "message M { oneof pick { string a = 1; } }", {"ONEOF_FIELD_REMOVED"}, False),
    ("oneof field moved to the top level", "message M { oneof pick { string a = 1; int32 b = 2; } }",
     "message M { string a = 1; oneof pick { int32 b = 2; } }", {"ONEOF_FIELD_MOVED_TO_TOP_LEVEL"}, True),
    ("type change hidden by a oneof rename", "message M { oneof pick { string a = 1; } }",
     "message M { oneof choose { int32 a = 1; } }", {"FIELD_SCALAR_KIND_CHANGED"}, False),
    # enums: all changes compatible
    ("enum value added, renamed, removed", "message M { E e = 1; } enum E { A = 0; B = 1; C = 2; }",
     "message M { E e = 1; } enum E { A = 0; BEE = 1; D = 3; }",
     {"ENUM_CONST_ADDED", "ENUM_CONST_CHANGED", "ENUM_CONST_REMOVED"}, True),
]


@pytest.mark.parametrize("what,old,new,kinds,backward", PROTO_CASES, ids=[c[0] for c in PROTO_CASES])
def test_protobuf_rule(what, old, new, kinds, backward):
    syntax = "proto2" if "(proto2)" in what else "proto3"
    o, n = proto(old, syntax=syntax), proto(new, syntax=syntax)
    found = {kind for kind, _ in protobuf_compat.differences(o.parsed.file, n.parsed.file)}
    assert kinds <= found, (what, found)
    assert (compatibility.check("BACKWARD", n, [o]) == []) is backward


def test_protobuf_package_syntax_and_descriptor_form():
    old = proto(ORDER)
    assert protobuf_compat.differences(old.parsed.file, proto(ORDER, package="store").parsed.file) == [
        ("PACKAGE_CHANGED", "#/")]
    assert compatibility.check("BACKWARD", proto(ORDER, package="store"), [old]) != []
    assert compatibility.check("BACKWARD", proto(ORDER.replace("string id", "optional string id"),
                                                 syntax="proto2"), [old]) == []   # syntax: not a rule
    # the base64 descriptor a Python serializer registers compares like its .proto text
    encoded = schemas.parse("PROTOBUF", base64.b64encode(old.parsed.file.SerializeToString()).decode(), {})
    narrowed = proto("message Order { Item id = 1; int64 qty = 2; } message Item { string sku = 1; }")
    assert compatibility.check("BACKWARD", encoded, [old]) == []
    messages = compatibility.check("BACKWARD", narrowed, [encoded])
    assert messages[0] == ("{errorType:\"FIELD_KIND_CHANGED\", description:\"The type of a field at path "
                           "'#/Order/1' in the new schema does not match the old schema\"}")
    assert "message Order {" in messages[1]   # the old schema quoted as .proto text, as Confluent does


def test_protobuf_field_of_an_imported_type_is_compared_through_the_import():
    dep_v1 = proto("message Money { int64 cents = 1; }", package="common")
    dep_v2 = proto("message Money { string cents = 1; }", package="common")
    body = 'import "money.proto";\nmessage Order { common.Money total = 1; }'
    old = proto(body, refs={"money.proto": dep_v1})
    same = proto(body, refs={"money.proto": dep_v1})
    changed = proto(body, refs={"money.proto": dep_v2})
    assert compatibility.check("BACKWARD", same, [old]) == []
    kinds = [k for k, _ in protobuf_compat.differences(old.parsed.file, changed.parsed.file, old.parsed.deps,
                                                       changed.parsed.deps)]
    assert kinds == ["FIELD_SCALAR_KIND_CHANGED", "FIELD_NAMED_TYPE_CHANGED"]


def test_json_schema_ref_to_a_referenced_schema_is_compared_through_it():
    address_v1 = js({"type": "object", "properties": {"zip": S}, "definitions": {"code": I}})
    address_v2 = js({"type": "object", "properties": {"zip": N}, "definitions": {"code": N}})
    body = obj({"home": {"$ref": "address.json"}, "code": {"$ref": "address.json#/definitions/code"}})

    def order(address):
        return schemas.parse("JSON", json.dumps(body), {"address.json": address})
    assert compatibility.check("BACKWARD", order(address_v1), [order(address_v1)]) == []
    found = json_compat.differences(body, body, {"address.json": address_v1.parsed},
                                    {"address.json": address_v2.parsed})
    assert sorted(found) == [("TYPE_CHANGED", "#/properties/home/properties/zip"),
                             ("TYPE_EXTENDED", "#/properties/code")]
    assert compatibility.check("BACKWARD", order(address_v2), [order(address_v1)]) != []

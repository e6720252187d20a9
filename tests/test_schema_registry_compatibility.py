"""The compatibility rules, on the cases Confluent's schema-evolution docs
give for each level and format (Avro's through the avro library, JSON Schema
and Protobuf through the rules in broker/schema_registry/compatibility.py)."""
from __future__ import annotations

import json

import pytest

from broker.schema_registry import compatibility, schemas
from broker.schema_registry.errors import RegistryError


def avro(*fields):
    return schemas.parse("AVRO", json.dumps({"type": "record", "name": "R", "fields": list(fields)}), {})


def js(doc):
    return schemas.parse("JSON", json.dumps(doc), {})


def proto(body, package="ex"):
    return schemas.parse("PROTOBUF", f'syntax = "proto3";\npackage {package};\n{body}\n', {})


A = {"name": "a", "type": "string"}
B_REQ = {"name": "b", "type": "int"}
B_OPT = {"name": "b", "type": "int", "default": 0}


def ok(level, new, *old):
    return compatibility.check(level, new, list(old)) == []


# Confluent's summary table: BACKWARD lets you delete fields and add optional ones;
# FORWARD add fields and delete optional ones; FULL add or delete optional fields only.
@pytest.mark.parametrize("level,new,old,expected", [
    ("BACKWARD", [A], [A, B_REQ], True),          # delete a field
    ("BACKWARD", [A, B_OPT], [A], True),          # add an optional field
    ("BACKWARD", [A, B_REQ], [A], False),         # add a field without a default
    ("FORWARD", [A, B_REQ], [A], True),           # add a field
    ("FORWARD", [A], [A, B_OPT], True),           # delete an optional field
    ("FORWARD", [A], [B_REQ, A], False),          # delete a field without a default
    ("FULL", [A, B_OPT], [A], True),
    ("FULL", [A], [A, B_OPT], True),
    ("FULL", [A, B_REQ], [A], False),
    ("NONE", [B_REQ], [A], True),
])
def test_avro_levels(level, new, old, expected):
    assert ok(level, avro(*new), avro(*old)) is expected


def test_avro_transitive_checks_every_version():
    v1, v2 = avro(A), avro(A, B_OPT)
    v3 = avro(A, B_OPT, {"name": "c", "type": "long"})   # no default: v2's and v1's data lack c
    assert not ok("BACKWARD", v3, v1, v2)
    v3b = avro({"name": "a", "type": "string"}, B_REQ)   # b required: fine against v2 (has b), not v1
    assert ok("BACKWARD", v3b, v1, v2) and not ok("BACKWARD_TRANSITIVE", v3b, v1, v2)


def test_avro_type_promotion_int_to_long_is_backward_compatible():
    assert ok("BACKWARD", avro({"name": "n", "type": "long"}), avro({"name": "n", "type": "int"}))
    assert not ok("BACKWARD", avro({"name": "n", "type": "int"}), avro({"name": "n", "type": "long"}))


OBJ = {"type": "object", "properties": {"a": {"type": "string"}}}


@pytest.mark.parametrize("new,old,expected", [
    (OBJ, OBJ, True),
    (dict(OBJ, required=["a"]), OBJ, False),                                          # required added
    ({"type": "object", "properties": {"a": {"type": "integer"}}}, OBJ, False),       # type changed
    ({"type": "number"}, {"type": "integer"}, True),                                  # widened
    ({"type": "integer"}, {"type": "number"}, False),                                 # narrowed
    ({"type": "string", "maxLength": 5}, {"type": "string", "maxLength": 10}, False),
    ({"type": "string", "maxLength": 10}, {"type": "string", "maxLength": 5}, True),
    ({"enum": ["x"]}, {"enum": ["x", "y"]}, False),
    ({"enum": ["x", "y"]}, {"enum": ["x"]}, True),
    # an open content model: the old writer may have put anything under a new name
    ({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}, OBJ, False),
    (OBJ, dict(OBJ, additionalProperties=False), True),
    (dict(OBJ, additionalProperties=False), OBJ, False),
])
def test_json_schema_backward(new, old, expected):
    assert ok("BACKWARD", js(new), js(old)) is expected


@pytest.mark.parametrize("new,old,expected", [
    ("message M { string a = 1; int32 b = 2; }", "message M { string a = 1; }", True),    # field added
    ("message M { string a = 1; }", "message M { string a = 1; int32 b = 2; }", True),    # field removed
    ("message M { int64 a = 1; }", "message M { int32 a = 1; }", True),                   # wire compatible
    ("message M { string a = 1; }", "message M { int32 a = 1; }", False),                 # kind changed
    ("message M { repeated string a = 1; }", "message M { string a = 1; }", True),        # string label: wire-same
    ("message M { string a = 1; }", "message M { string a = 1; } message N { int32 x = 1; }", False),  # removed
])
def test_protobuf_backward(new, old, expected):
    assert ok("BACKWARD", proto(new), proto(old)) is expected


def test_protobuf_package_change_is_incompatible():   # (Confluent's rule since 7.4: DGS-10184)
    assert not ok("BACKWARD", proto("message M { string a = 1; }", "other"), proto("message M { string a = 1; }"))


@pytest.mark.parametrize("kind,text", [
    ("AVRO", '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}'),
    ("AVRO", "{"),
    ("JSON", '{"type": "object", "properties": 5}'),
    # 1,003 levels: past Jackson's 1,000 (Confluent's limit) whatever Python's recursion limit is
    pytest.param("JSON", '{"type": "object", "properties": {"a": ' * 501 + '{}' + '}}' * 501, id="JSON-too-deep"),
    ("PROTOBUF", "message M { string a = ; }"),
    ("PROTOBUF", "hello"),
])
def test_unparsable_schemas_are_42201(kind, text):
    with pytest.raises(RegistryError) as exc:
        schemas.parse(kind, text, {})
    assert exc.value.code == 42201


def test_protobuf_text_and_descriptor_convert_both_ways():
    """.proto text -> descriptor (loads in a pool, encodes and decodes a message with nested types,
    a map, a oneof, an enum and a proto3 optional) -> text -> descriptor again."""
    from google.protobuf import descriptor_pool, message_factory
    from broker.schema_registry import protobuf_text
    text = '''syntax = "proto3";
package ex.v1;
message Order {
  string id = 1;
  repeated Item items = 3;
  map<string, int32> tags = 4;
  oneof pay { string card = 5; string iban = 6; }
  Status status = 7;
  optional string note = 8;
  message Item { string sku = 1; }
  enum Status { NEW = 0; DONE = 1; }
  reserved 20 to 25;
}
'''
    for _ in range(2):
        fd = protobuf_text.descriptor_from_text(schemas._parse_proto_text(text), "order.proto")
        pool = descriptor_pool.DescriptorPool()
        pool.Add(fd)
        order = message_factory.GetMessageClass(pool.FindMessageTypeByName("ex.v1.Order"))
        m = order(id="a", tags={"x": 1}, iban="i", status=1, note="n")
        m.items.add(sku="s")
        back = order.FromString(m.SerializeToString())
        assert (back.id, dict(back.tags), back.WhichOneof("pay"), back.status, back.HasField("note"),
                back.items[0].sku) == ("a", {"x": 1}, "iban", 1, True, "s")
        text = protobuf_text.text_from_descriptor(fd)
    assert "map<string, int32> tags = 4;" in text and "optional string note = 8;" in text


def test_avro_messages_in_confluents_words():
    """Which schema is the reader decides the words: BACKWARD names the new one, FORWARD the old one."""
    old, new = avro(A), avro(A, B_REQ)
    old.version = 3
    assert compatibility.check("BACKWARD", new, [old]) == [
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'b' at path '/fields/1' in the new "
        "schema has no default value and is missing in the old schema', additionalInfo:'b'}",
        "{oldSchemaVersion: 3}", f"{{oldSchema: '{old.text}'}}", "{compatibility: 'BACKWARD'}"]
    assert compatibility.check("FORWARD", old, [new])[0].startswith(
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'b' at path '/fields/1' in the old "
        "schema has no default value and is missing in the new schema'")


def test_an_avro_check_over_its_budget_is_50002():
    """The time budget (budget.py) reaches into the avro library's checker too: unions of 300
    records, each field changed, take the checker about half a minute; with a 0.2 s budget the
    check stops with Confluent's timeout error instead."""
    def union(kind):
        return schemas.parse("AVRO", json.dumps([{"type": "record", "name": f"R{i}", "fields": [
            {"name": f"f{j}", "type": kind} for j in range(10)]} for i in range(300)]), {})
    with pytest.raises(RegistryError) as caught:
        compatibility.check("BACKWARD", union("string"), [union("int")], 0.2)
    assert (caught.value.status, caught.value.code) == (500, 50002)

"""confluent-kafka's own schema-registry client and its Avro, JSON Schema
and Protobuf serializers against a real `kproto serve` with its registry on:
records produced and consumed through kproto with auto-registration and with
use.latest.version, an incompatible schema refused with 409, and the
registry's state surviving kill -9 (it lives in `_schemas`)."""
from __future__ import annotations

import json
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer  # noqa: E402
from confluent_kafka.schema_registry.error import SchemaRegistryError  # noqa: E402
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer  # noqa: E402
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from broker.launch.process import BrokerProcess, free_port  # noqa: E402
from tests.test_schema_registry_api import registry_node

AVRO_V1 = json.dumps({"type": "record", "name": "Order", "namespace": "kproto.test",
                      "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "long"}]})
AVRO_V2 = json.dumps({"type": "record", "name": "Order", "namespace": "kproto.test",
                      "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "long"},
                                 {"name": "note", "type": "string", "default": ""}]})
AVRO_BAD = json.dumps({"type": "record", "name": "Order", "namespace": "kproto.test",
                       "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}]})
JSON_SCHEMA = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
                          "properties": {"id": {"type": "string"}, "amount": {"type": "integer"}},
                          "required": ["id"]})


def order_message_class():
    """A Protobuf message type built from a descriptor (what protoc would generate)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    fd = descriptor_pb2.FileDescriptorProto(name=f"order_{uuid.uuid4().hex[:8]}.proto", package="kproto.test",
                                            syntax="proto3")
    m = fd.message_type.add(name="Order")
    m.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    m.field.add(name="amount", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("kproto.test.Order"))


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with registry_node(str(tmp_path_factory.mktemp("sr-clients"))) as started:
        yield started


def round_trip(bootstrap: str, topic: str, serialize, deserialize, values: list) -> list:
    producer = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        producer.produce(topic, value=serialize(v, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    out = []
    try:
        for _ in range(200):   # bounded: 200 polls of at most 0.5 s
            if len(out) == len(values):
                break
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append(deserialize(msg.value(), SerializationContext(topic, MessageField.VALUE)))
    finally:
        consumer.close()
    return out


def test_avro_auto_register_use_latest_and_409(node):
    proc, url = node
    client = SchemaRegistryClient({"url": url})
    topic = "sr-avro"
    ser = AvroSerializer(client, AVRO_V1)
    values = [{"id": f"o{i}", "amount": i * 10} for i in range(5)]
    got = round_trip(proc.bootstrap, topic, ser, AvroDeserializer(client), values)
    assert got == values
    latest = client.get_latest_version(f"{topic}-value")
    assert latest.version == 1 and json.loads(latest.schema.schema_str)["name"] == "Order"
    # a compatible v2 registered by hand; a serializer with use.latest.version writes with it
    v2 = client.register_schema(f"{topic}-value", Schema(AVRO_V2, "AVRO"))
    assert v2 != latest.schema_id
    # (a new client: the first one caches the latest version it was told)
    latest_ser = AvroSerializer(SchemaRegistryClient({"url": url}), AVRO_V2,
                                conf={"auto.register.schemas": False, "use.latest.version": True})
    raw = latest_ser({"id": "x", "amount": 1, "note": "n"}, SerializationContext(topic, MessageField.VALUE))
    assert int.from_bytes(raw[1:5], "big") == v2   # Confluent's framing: magic 0, then the schema id
    assert AvroDeserializer(client)(raw, SerializationContext(topic, MessageField.VALUE)) == {
        "id": "x", "amount": 1, "note": "n"}
    # an incompatible schema is refused with 409
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(f"{topic}-value", Schema(AVRO_BAD, "AVRO"))
    assert refused.value.http_status_code == 409 and refused.value.error_code == 409
    # and through the serializer's auto-registration too
    bad_ser = AvroSerializer(SchemaRegistryClient({"url": url}), AVRO_BAD)
    with pytest.raises(Exception) as by_serializer:
        bad_ser({"id": "y", "qty": 2}, SerializationContext(topic, MessageField.VALUE))
    assert "409" in str(by_serializer.value) or "incompatible" in str(by_serializer.value)


def test_json_schema_serializer_round_trip(node):
    proc, url = node
    client = SchemaRegistryClient({"url": url})
    topic = "sr-json"
    values = [{"id": f"j{i}", "amount": i} for i in range(5)]
    got = round_trip(proc.bootstrap, topic, JSONSerializer(JSON_SCHEMA, client),
                     JSONDeserializer(JSON_SCHEMA, schema_registry_client=client), values)
    assert got == values
    registered = client.get_latest_version(f"{topic}-value")
    assert registered.schema.schema_type == "JSON"
    # a required property added: a reader that requires it cannot read the old data (BACKWARD)
    narrowed = json.loads(JSON_SCHEMA)
    narrowed["required"] = ["id", "amount"]
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(f"{topic}-value", Schema(json.dumps(narrowed), "JSON"))
    assert refused.value.http_status_code == 409
    # use.latest.version
    latest = JSONSerializer(JSON_SCHEMA, client, conf={"auto.register.schemas": False, "use.latest.version": True})
    raw = latest({"id": "z", "amount": 3}, SerializationContext(topic, MessageField.VALUE))
    assert int.from_bytes(raw[1:5], "big") == registered.schema_id


def test_protobuf_serializer_round_trip(node):
    proc, url = node
    client = SchemaRegistryClient({"url": url})
    topic = "sr-proto"
    Order = order_message_class()
    values = [Order(id=f"p{i}", amount=i) for i in range(5)]
    got = round_trip(proc.bootstrap, topic, ProtobufSerializer(Order, client, {"use.deprecated.format": False}),
                     ProtobufDeserializer(Order, {"use.deprecated.format": False}, schema_registry_client=client),
                     values)
    assert [(m.id, m.amount) for m in got] == [(m.id, m.amount) for m in values]
    registered = client.get_latest_version(f"{topic}-value")
    assert registered.schema.schema_type == "PROTOBUF"
    # (a new client: the first one caches the latest version it read, in the default text form)
    latest = ProtobufSerializer(Order, SchemaRegistryClient({"url": url}), {
        "use.deprecated.format": False, "auto.register.schemas": False, "use.latest.version": True})
    raw = latest(Order(id="q", amount=1), SerializationContext(topic, MessageField.VALUE))
    assert int.from_bytes(raw[1:5], "big") == registered.schema_id


def test_state_survives_kill_9_and_ids_are_not_reused(tmp_path):
    port = free_port()
    proc = BrokerProcess(str(tmp_path / "data"), settings={"schema.registry.listeners": f"http://127.0.0.1:{port}"})
    proc.start()
    url = f"http://127.0.0.1:{port}"
    try:
        client = SchemaRegistryClient({"url": url})
        first = client.register_schema("kill-value", Schema(AVRO_V1, "AVRO"))
        second = client.register_schema("kill-value", Schema(AVRO_V2, "AVRO"))
        other = client.register_schema("kill-json", Schema(JSON_SCHEMA, "JSON"))
        proc.kill()
        proc.start()
        fresh = SchemaRegistryClient({"url": url})   # no client-side cache
        assert fresh.get_versions("kill-value") == [1, 2]
        assert json.loads(fresh.get_schema(first).schema_str) == json.loads(AVRO_V1)
        assert json.loads(fresh.get_schema(second).schema_str) == json.loads(AVRO_V2)
        assert fresh.get_schema(other).schema_type == "JSON"
        new = fresh.register_schema("kill-after", Schema(AVRO_BAD, "AVRO"))
        assert new not in (first, second, other) and new > max(first, second, other)
    finally:
        proc.stop()


def test_protobuf_forms_convert_both_ways(node):
    """A .proto text registered as Java clients do is read by the Python serializer and
    deserializer (format=serialized: a descriptor built from the text); a descriptor registered by
    the Python serializer is answered as .proto text by default (what Java deserializers parse)."""
    import requests
    from proto_schema_parser.parser import Parser
    proc, url = node
    text = 'syntax = "proto3";\npackage kproto.test;\n\nmessage Order {\n  string id = 1;\n  int64 amount = 2;\n}\n'
    client = SchemaRegistryClient({"url": url})
    sid = client.register_schema("sr-proto-text-value", Schema(text, "PROTOBUF"))
    Order = order_message_class()
    # (clients of their own: the registering one caches the text it sent under the id)
    ser = ProtobufSerializer(Order, SchemaRegistryClient({"url": url}), {
        "use.deprecated.format": False, "auto.register.schemas": False, "use.latest.version": True})
    de = ProtobufDeserializer(Order, {"use.deprecated.format": False},
                              schema_registry_client=SchemaRegistryClient({"url": url}))
    values = [Order(id=f"t{i}", amount=i) for i in range(3)]
    got = round_trip(proc.bootstrap, "sr-proto-text", ser, de, values)
    assert [(m.id, m.amount) for m in got] == [(m.id, m.amount) for m in values]
    raw = requests.get(f"{url}/schemas/ids/{sid}", params={"format": "serialized"}, timeout=10).json()["schema"]
    from google.protobuf import descriptor_pb2
    import base64
    fd = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(raw))
    assert [m.name for m in fd.message_type] == ["Order"] and fd.package == "kproto.test"
    # the other way: the Python serializer's descriptor, read back as text
    reg = ProtobufSerializer(Order, SchemaRegistryClient({"url": url}), {"use.deprecated.format": False})
    framed = reg(Order(id="d", amount=1), SerializationContext("sr-proto-desc", MessageField.VALUE))
    did = int.from_bytes(framed[1:5], "big")
    as_text = requests.get(f"{url}/schemas/ids/{did}", timeout=10).json()["schema"]
    assert "message Order {" in as_text and "int64 amount = 2;" in as_text
    assert Parser().parse(as_text).file_elements

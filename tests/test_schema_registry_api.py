"""The schema registry's REST API over HTTP, against a real `kproto serve`
with schema.registry.listeners set: Confluent's routes, answers and error
bodies (error_code and message), decided from Confluent's API reference and
Karapace's API tests. Bad input is refused with Confluent's code and leaves
nothing behind."""
from __future__ import annotations

import contextlib
import json
import time

import pytest
import requests

from broker.launch.process import BrokerProcess, free_port

CT = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def avro_record(*fields) -> str:
    return json.dumps({"type": "record", "name": "Rec", "fields": list(fields)})


F = {"name": "f", "type": "string"}
G_NO_DEFAULT = {"name": "g", "type": "int"}
G_DEFAULT = {"name": "g", "type": "int", "default": 0}


@contextlib.contextmanager
def registry_node(data_dir: str):
    """A kproto process serving the schema registry on a free port: (process, registry URL)."""
    port = free_port()
    proc = BrokerProcess(data_dir, settings={"schema.registry.listeners": f"http://127.0.0.1:{port}"})
    proc.start()
    try:
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with registry_node(str(tmp_path_factory.mktemp("sr-api"))) as node:
        yield node


def post(url, path, body, **params):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return requests.post(url + path, data=data, headers=CT, params=params, timeout=30)


def error(resp) -> tuple[int, int]:
    return resp.status_code, resp.json()["error_code"]


def test_ready_line_names_the_registry_url(registry):
    proc, url = registry
    assert f"schema registry {url}" in proc.ready_line


def test_register_look_up_and_read_back(registry):
    _, url = registry
    s = "api-basic-value"
    first = post(url, f"/subjects/{s}/versions", {"schema": avro_record(F)})
    assert first.status_code == 200, first.text
    sid = first.json()["id"]
    # the same schema again, with other white space and key order: same id, no new version
    again = post(url, f"/subjects/{s}/versions", {"schema": json.dumps(
        {"fields": [{"type": "string", "name": "f"}], "name": "Rec", "type": "record"}, indent=2)})
    assert again.json() == {"id": sid}
    assert requests.get(f"{url}/subjects/{s}/versions", timeout=10).json() == [1]
    got = requests.get(f"{url}/subjects/{s}/versions/latest", timeout=10).json()
    assert got["subject"] == s and got["version"] == 1 and got["id"] == sid
    assert json.loads(got["schema"]) == json.loads(avro_record(F))
    assert "schemaType" not in got   # AVRO is implied, as Confluent answers
    assert requests.get(f"{url}/schemas/ids/{sid}", timeout=10).json()["schema"] == got["schema"]
    assert json.loads(requests.get(f"{url}/subjects/{s}/versions/1/schema", timeout=10).text) == json.loads(
        got["schema"])
    assert requests.get(f"{url}/schemas/ids/{sid}/subjects", timeout=10).json() == [s]
    assert requests.get(f"{url}/schemas/ids/{sid}/versions", timeout=10).json() == [{"subject": s, "version": 1}]
    assert s in requests.get(f"{url}/subjects", timeout=10).json()
    found = post(url, f"/subjects/{s}", {"schema": avro_record(F)})
    assert found.status_code == 200 and found.json()["version"] == 1 and found.json()["id"] == sid
    assert sorted(requests.get(f"{url}/schemas/types", timeout=10).json()) == ["AVRO", "JSON", "PROTOBUF"]
    listed = requests.get(f"{url}/schemas", params={"subjectPrefix": "api-basic"}, timeout=10).json()
    assert [(x["subject"], x["version"], x["id"]) for x in listed] == [(s, 1, sid)]


def test_the_same_schema_under_two_subjects_shares_its_id(registry):
    _, url = registry
    a = post(url, "/subjects/api-share-a/versions", {"schema": avro_record(F, G_DEFAULT)}).json()["id"]
    b = post(url, "/subjects/api-share-b/versions", {"schema": avro_record(F, G_DEFAULT)}).json()["id"]
    assert a == b
    assert requests.get(f"{url}/schemas/ids/{a}/subjects", timeout=10).json() == ["api-share-a", "api-share-b"]


def test_incompatible_schema_is_409_and_compatibility_endpoint_says_why(registry):
    _, url = registry
    s = "api-compat-value"
    assert post(url, f"/subjects/{s}/versions", {"schema": avro_record(F)}).status_code == 200
    bad = post(url, f"/subjects/{s}/versions", {"schema": avro_record(F, G_NO_DEFAULT)})
    assert error(bad) == (409, 409)
    assert "incompatible" in bad.json()["message"]
    check = post(url, f"/compatibility/subjects/{s}/versions/latest", {"schema": avro_record(F, G_NO_DEFAULT)},
                 verbose="true").json()
    assert check["is_compatible"] is False and any("READER_FIELD_MISSING_DEFAULT_VALUE" in m
                                                   for m in check["messages"])
    assert post(url, f"/compatibility/subjects/{s}/versions/latest",
                {"schema": avro_record(F, G_DEFAULT)}).json() == {"is_compatible": True}
    # against a version a subject does not have: 40402 (also when the subject has none); "latest" of
    # a subject with no versions: compatible
    assert error(post(url, f"/compatibility/subjects/{s}/versions/9", {"schema": avro_record(F)})) == (404, 40402)
    assert error(post(url, "/compatibility/subjects/api-compat-none/versions/1", {"schema": avro_record(F)})) == (
        404, 40402)
    assert post(url, "/compatibility/subjects/api-compat-none/versions/latest",
                {"schema": avro_record(F)}).json() == {"is_compatible": True}
    # NONE on the subject lets it through; the versions go on from 1
    assert requests.put(f"{url}/config/{s}", json={"compatibility": "NONE"}, timeout=10).json() == {
        "compatibility": "NONE"}
    assert requests.get(f"{url}/config/{s}", timeout=10).json() == {"compatibilityLevel": "NONE"}
    assert post(url, f"/subjects/{s}/versions", {"schema": avro_record(F, G_NO_DEFAULT)}).status_code == 200
    assert requests.get(f"{url}/subjects/{s}/versions", timeout=10).json() == [1, 2]


def test_json_schema_and_protobuf_rules_through_the_api(registry):
    """Confluent's JSON Schema and Protobuf rules decide /compatibility and registration;
    verbose=true answers Confluent's messages (the rules themselves: test_schema_registry_compat_rules)."""
    _, url = registry
    s = "api-json-rules-value"
    v1 = {"type": "object", "properties": {"qty": {"type": "integer"}}}
    assert post(url, f"/subjects/{s}/versions", {"schemaType": "JSON", "schema": json.dumps(v1)}).status_code == 200
    # a property added to an open content model: the old writer may have put anything under that name
    added = {"type": "object", "properties": {"qty": {"type": "integer"}, "note": {"type": "string"}}}
    check = post(url, f"/compatibility/subjects/{s}/versions/latest",
                 {"schemaType": "JSON", "schema": json.dumps(added)}, verbose="true").json()
    assert check["is_compatible"] is False
    assert check["messages"][0].startswith(
        "{errorType:\"OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL\", description:\"The new schema has an open "
        "content model and has a property or item at path '#/properties/note' which is missing in the old schema")
    assert check["messages"][-2:] == ["{oldSchema: '%s'}" % json.dumps(v1), "{compatibility: 'BACKWARD'}"]
    assert error(post(url, f"/subjects/{s}/versions", {"schemaType": "JSON", "schema": json.dumps(added)})) == (
        409, 409)
    widened = {"type": "object", "properties": {"qty": {"type": "number"}}}   # integer -> number
    assert post(url, f"/subjects/{s}/versions", {"schemaType": "JSON", "schema": json.dumps(widened)}).json() \
        .get("id") is not None
    p = "api-proto-rules-value"
    proto_v1 = 'syntax = "proto3";\npackage shop;\nmessage Order { int32 qty = 1; }\n'
    assert post(url, f"/subjects/{p}/versions", {"schemaType": "PROTOBUF", "schema": proto_v1}).status_code == 200
    zigzag = proto_v1.replace("int32 qty", "sint32 qty")   # another wire encoding: unreadable
    check = post(url, f"/compatibility/subjects/{p}/versions/latest",
                 {"schemaType": "PROTOBUF", "schema": zigzag}, verbose="true").json()
    assert check["is_compatible"] is False and check["messages"][0].startswith(
        "{errorType:\"FIELD_SCALAR_KIND_CHANGED\", description:\"The kind of a SCALAR field at path '#/Order/1'")
    assert post(url, f"/compatibility/subjects/{p}/versions/latest",
                {"schemaType": "PROTOBUF", "schema": proto_v1.replace("int32 qty", "int64 qty")}).json() == {
        "is_compatible": True}


def test_forward_and_transitive_levels(registry):
    _, url = registry
    s = "api-forward-value"
    assert requests.put(f"{url}/config/{s}", json={"compatibility": "FORWARD"}, timeout=10).status_code == 200
    assert post(url, f"/subjects/{s}/versions", {"schema": avro_record(F)}).status_code == 200
    # FORWARD: the old schema must read the new one's data: adding a field is fine, removing f is not
    assert post(url, f"/subjects/{s}/versions", {"schema": avro_record(F, G_NO_DEFAULT)}).status_code == 200
    assert error(post(url, f"/subjects/{s}/versions", {"schema": avro_record(G_NO_DEFAULT)})) == (409, 409)
    t = "api-transitive-value"
    assert requests.put(f"{url}/config/{t}", json={"compatibility": "BACKWARD_TRANSITIVE"},
                        timeout=10).status_code == 200
    assert post(url, f"/subjects/{t}/versions", {"schema": avro_record(F)}).status_code == 200
    assert post(url, f"/subjects/{t}/versions", {"schema": avro_record(F, G_DEFAULT)}).status_code == 200
    # compatible with the latest (g has a default there) but not with version 1 (which lacks g)
    h = {"name": "h", "type": "long"}
    assert error(post(url, f"/subjects/{t}/versions", {"schema": avro_record(F, G_DEFAULT, h)})) == (409, 409)


def test_unknown_subject_version_and_id(registry):
    _, url = registry
    assert error(requests.get(f"{url}/subjects/api-none/versions", timeout=10)) == (404, 40401)
    assert requests.get(f"{url}/subjects/api-none/versions", timeout=10).json()["message"] == \
        "Subject 'api-none' not found."
    assert error(requests.get(f"{url}/subjects/api-none/versions/1", timeout=10)) == (404, 40401)
    post(url, "/subjects/api-known/versions", {"schema": avro_record(F)})
    assert error(requests.get(f"{url}/subjects/api-known/versions/7", timeout=10)) == (404, 40402)
    assert error(requests.get(f"{url}/subjects/api-known/versions/abc", timeout=10)) == (422, 42202)
    assert error(requests.get(f"{url}/subjects/api-known/versions/0", timeout=10)) == (422, 42202)
    assert error(requests.get(f"{url}/schemas/ids/999999", timeout=10)) == (404, 40403)
    assert error(post(url, "/subjects/api-known", {"schema": avro_record(G_NO_DEFAULT)})) == (404, 40403)
    assert error(post(url, "/subjects/api-none", {"schema": avro_record(F)})) == (404, 40401)
    assert error(requests.get(f"{url}/no/such/endpoint", timeout=10)) == (404, 404)
    assert error(requests.get(f"{url}/config/api-known", timeout=10)) == (404, 40408)
    assert requests.get(f"{url}/config/api-known", params={"defaultToGlobal": "true"},
                        timeout=10).json() == {"compatibilityLevel": "BACKWARD"}


def test_bad_input_gets_confluents_codes_and_writes_nothing(registry):
    _, url = registry
    s = "api-bad-value"
    before = requests.get(f"{url}/subjects", params={"deleted": "true"}, timeout=10).json()
    assert error(post(url, f"/subjects/{s}/versions", b"{not json")) == (400, 400)
    assert error(post(url, f"/subjects/{s}/versions", {"schema": "{\"type\": \"nope\"}"})) == (422, 42201)
    assert error(post(url, f"/subjects/{s}/versions", {"schema": "not json at all"})) == (422, 42201)
    assert error(post(url, f"/subjects/{s}/versions", {"schema": avro_record(F), "schemaType": "XML"})) == (422, 42201)
    assert error(post(url, f"/subjects/{s}/versions", {"schema": "{\"type\": 12}", "schemaType": "JSON"})) == (
        422, 42201)
    assert error(post(url, f"/subjects/{s}/versions", {"schema": "message { broken", "schemaType": "PROTOBUF"})) \
        == (422, 42201)
    missing_ref = {"schema": avro_record({"name": "o", "type": "Other"}),
                   "references": [{"name": "Other", "subject": "api-no-such-subject", "version": 1}]}
    assert error(post(url, f"/subjects/{s}/versions", missing_ref)) == (422, 42201)
    assert error(requests.put(f"{url}/config", json={"compatibility": "SIDEWAYS"}, timeout=10)) == (422, 42203)
    assert error(requests.put(f"{url}/mode", json={"mode": "WRITEONLY"}, timeout=10)) == (422, 42204)
    big = b'{"schema": "' + b"x" * (17 << 20) + b'"}'
    assert requests.post(f"{url}/subjects/{s}/versions", data=big, headers=CT, timeout=60).status_code == 413
    assert requests.get(f"{url}/subjects", params={"deleted": "true"}, timeout=10).json() == before
    # and the registry still serves
    assert post(url, f"/subjects/{s}/versions", {"schema": avro_record(F)}).status_code == 200


def test_soft_and_hard_delete(registry):
    _, url = registry
    s = "api-delete-value"
    post(url, f"/subjects/{s}/versions", {"schema": avro_record(F)})
    sid = post(url, f"/subjects/{s}/versions", {"schema": avro_record(F, G_DEFAULT)}).json()["id"]
    assert error(requests.delete(f"{url}/subjects/{s}/versions/2?permanent=true", timeout=10)) == (404, 40407)
    assert requests.delete(f"{url}/subjects/{s}/versions/2", timeout=10).json() == 2
    assert error(requests.delete(f"{url}/subjects/{s}/versions/2", timeout=10)) == (404, 40406)
    assert requests.get(f"{url}/subjects/{s}/versions", timeout=10).json() == [1]
    assert requests.get(f"{url}/subjects/{s}/versions", params={"deleted": "true"}, timeout=10).json() == [1, 2]
    assert error(requests.get(f"{url}/subjects/{s}/versions/2", timeout=10)) == (404, 40402)
    assert requests.get(f"{url}/subjects/{s}/versions/2", params={"deleted": "true"}, timeout=10).json()["id"] == sid
    assert requests.get(f"{url}/schemas/ids/{sid}", timeout=10).status_code == 200   # ids outlive soft deletes
    assert error(requests.delete(f"{url}/subjects/{s}?permanent=true", timeout=10)) == (404, 40405)
    # a soft delete answers the versions it deleted (2 was already), a permanent one every version
    assert requests.delete(f"{url}/subjects/{s}", timeout=10).json() == [1]
    assert error(requests.delete(f"{url}/subjects/{s}", timeout=10)) == (404, 40404)
    assert s not in requests.get(f"{url}/subjects", timeout=10).json()
    assert s in requests.get(f"{url}/subjects", params={"deleted": "true"}, timeout=10).json()
    assert requests.delete(f"{url}/subjects/{s}?permanent=true", timeout=10).json() == [1, 2]
    assert s not in requests.get(f"{url}/subjects", params={"deleted": "true"}, timeout=10).json()
    # a new registration after a hard delete starts again at version 1 and gets a new id
    again = post(url, f"/subjects/{s}/versions", {"schema": avro_record(F, {"name": "z", "type": "int"})}).json()
    assert again["id"] > sid
    assert requests.get(f"{url}/subjects/{s}/versions", timeout=10).json() == [1]


def test_references_and_referencedby(registry):
    _, url = registry
    other = json.dumps({"type": "record", "name": "Other", "namespace": "ex", "fields": [F]})
    oid = post(url, "/subjects/api-ref-other/versions", {"schema": other}).json()["id"]
    main = {"schema": avro_record({"name": "o", "type": "ex.Other"}),
            "references": [{"name": "ex.Other", "subject": "api-ref-other", "version": 1}]}
    mid = post(url, "/subjects/api-ref-main/versions", main).json()["id"]
    got = requests.get(f"{url}/schemas/ids/{mid}", timeout=10).json()
    assert got["references"] == main["references"]
    assert requests.get(f"{url}/subjects/api-ref-other/versions/1/referencedby", timeout=10).json() == [mid]
    # a referenced version cannot go
    assert error(requests.delete(f"{url}/subjects/api-ref-other/versions/1", timeout=10)) == (422, 42206)
    assert oid != mid


def test_json_and_protobuf_text_schemas(registry):
    _, url = registry
    js = {"type": "object", "properties": {"a": {"type": "string"}}}
    jid = post(url, "/subjects/api-json-value/versions", {"schema": json.dumps(js), "schemaType": "JSON"})
    assert jid.status_code == 200, jid.text
    got = requests.get(f"{url}/schemas/ids/{jid.json()['id']}", timeout=10).json()
    assert got["schemaType"] == "JSON"
    narrowed = dict(js, required=["a"])
    assert error(post(url, "/subjects/api-json-value/versions",
                      {"schema": json.dumps(narrowed), "schemaType": "JSON"})) == (409, 409)
    proto = 'syntax = "proto3";\npackage ex;\nmessage M {\n  string a = 1;\n}\n'
    pid = post(url, "/subjects/api-proto-value/versions", {"schema": proto, "schemaType": "PROTOBUF"})
    assert pid.status_code == 200, pid.text
    changed = proto.replace("string a = 1;", "int32 a = 1;")
    assert error(post(url, "/subjects/api-proto-value/versions",
                      {"schema": changed, "schemaType": "PROTOBUF"})) == (409, 409)
    added = proto.replace("string a = 1;", "string a = 1;\n  int64 b = 2;")
    assert post(url, "/subjects/api-proto-value/versions",
                {"schema": added, "schemaType": "PROTOBUF"}).status_code == 200


def test_modes_readonly_and_import(registry):
    _, url = registry
    s = "api-mode-value"
    post(url, f"/subjects/{s}/versions", {"schema": avro_record(F)})
    assert requests.put(f"{url}/mode/{s}", json={"mode": "READONLY"}, timeout=10).json() == {"mode": "READONLY"}
    assert error(post(url, f"/subjects/{s}/versions", {"schema": avro_record(F, G_DEFAULT)})) == (422, 42205)
    assert requests.get(f"{url}/mode/{s}", timeout=10).json() == {"mode": "READONLY"}
    assert requests.delete(f"{url}/mode/{s}", timeout=10).json() == {"mode": "READONLY"}
    assert post(url, f"/subjects/{s}/versions", {"schema": avro_record(F, G_DEFAULT)}).status_code == 200
    # an id is given only in IMPORT mode; IMPORT on a subject with versions needs force
    imp = "api-import-value"
    assert error(post(url, f"/subjects/{imp}/versions", {"schema": avro_record(F), "id": 5000})) == (422, 42205)
    assert error(requests.put(f"{url}/mode/{s}", json={"mode": "IMPORT"}, timeout=10)) == (422, 42205)
    assert requests.put(f"{url}/mode/{imp}", json={"mode": "IMPORT"}, timeout=10).status_code == 200
    assert post(url, f"/subjects/{imp}/versions", {"schema": avro_record(F, {"name": "i", "type": "int"}),
                                                   "id": 5000, "version": 3}).json() == {"id": 5000}
    assert requests.get(f"{url}/subjects/{imp}/versions/3", timeout=10).json()["id"] == 5000
    requests.delete(f"{url}/mode/{imp}", timeout=10)
    # later ids go on above the imported one: ids are never reused
    nxt = post(url, "/subjects/api-after-import/versions", {"schema": avro_record({"name": "q", "type": "int"})})
    assert nxt.json()["id"] > 5000


def test_a_hard_deleted_id_is_not_handed_out_again_after_compaction(tmp_path):
    """Hard delete leaves tombstones; once the cleaner has removed the schema's records (and the
    tombstones), a restarted registry still hands out ids above it (the maxId kept in the NOOP
    record that compaction keeps)."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = BrokerProcess(str(tmp_path / "data"), settings={"schema.registry.listeners": url,
                                                           "log.cleaner.backoff.ms": "100"})
    proc.start()
    try:
        s = "compact-value"
        assert requests.put(f"{url}/config", json={"compatibility": "NONE"}, timeout=10).status_code == 200
        first = post(url, f"/subjects/{s}/versions", {"schema": avro_record(F)}).json()["id"]
        second = post(url, f"/subjects/{s}/versions", {"schema": avro_record(G_NO_DEFAULT)}).json()["id"]
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        resource = ConfigResource("TOPIC", "_schemas", incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in (
                ("segment.bytes", "100"), ("delete.retention.ms", "0"), ("min.cleanable.dirty.ratio", "0.01"),
                ("min.compaction.lag.ms", "0"))])
        for f in admin.incremental_alter_configs([resource]).values():
            f.result(30)
        assert requests.delete(f"{url}/subjects/{s}", timeout=10).status_code == 200
        assert requests.delete(f"{url}/subjects/{s}?permanent=true", timeout=10).json() == [1, 2]

        def records() -> list:
            """Every (key, value) left in _schemas, read from offset 0 to the high watermark."""
            c = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "peek", "enable.auto.commit": False})
            try:
                _low, high = c.get_watermark_offsets(TopicPartition("_schemas", 0), timeout=10)
                c.assign([TopicPartition("_schemas", 0, 0)])
                out, last = [], -1
                for _ in range(200):   # bounded: 200 polls of at most 0.2 s
                    if last >= high - 1:
                        break
                    m = c.poll(0.2)
                    if m is None or m.error():
                        continue
                    last = m.offset()
                    out.append((json.loads(m.key()), m.value()))
                assert last >= high - 1, "could not read _schemas to its end"
                return out
            finally:
                c.close()

        def subject_records() -> int:
            return sum(1 for key, _v in records() if key.get("subject") == s)
        assert subject_records() >= 2
        deadline = time.monotonic() + 60
        while subject_records() and time.monotonic() < deadline:
            # CONFIG writes roll the tiny segments so the cleaner can reach the subject's records
            requests.put(f"{url}/config/other", json={"compatibility": "FULL"}, timeout=10)
            requests.put(f"{url}/config/other", json={"compatibility": "NONE"}, timeout=10)
            time.sleep(1)
        assert subject_records() == 0, "the cleaner did not remove the deleted subject's records"
        proc.stop()
        proc.start()
        again = post(url, f"/subjects/{s}/versions", {"schema": avro_record(F, {"name": "n", "type": "int"})})
        assert again.json()["id"] > max(first, second)
    finally:
        proc.stop()


def test_records_that_are_not_the_registrys_in_schemas_are_skipped(registry):
    """Anything else a client writes to _schemas (not JSON, an unknown key type, a SCHEMA value
    without its fields) is skipped by the reader: the registry goes on serving and writing."""
    from confluent_kafka import Producer
    proc, url = registry
    p = Producer({"bootstrap.servers": proc.bootstrap})
    p.produce("_schemas", key=b"\xff not json", value=b"junk")
    p.produce("_schemas", key=b'{"keytype":"SOMETHING","magic":0}', value=b"{}")
    p.produce("_schemas", key=b'{"keytype":"SCHEMA","subject":"junk","version":1,"magic":1}', value=b'{"id":5}')
    p.produce("_schemas", key=b'{"keytype":"CONFIG","subject":"junk","magic":0}', value=b'[1]')
    assert p.flush(30) == 0
    after = post(url, "/subjects/api-after-junk/versions", {"schema": avro_record({"name": "j", "type": "int"})})
    assert after.status_code == 200, after.text
    assert requests.get(f"{url}/schemas/ids/{after.json()['id']}", timeout=10).status_code == 200
    assert "junk" not in requests.get(f"{url}/subjects", timeout=10).json()


def test_the_broker_keeps_answering_during_a_large_compatibility_check(registry):
    """Parsing and the compatibility check run off the event loop (schema_registry/offload.py):
    while a check of two large JSON Schemas is in flight, the same process goes on answering
    Metadata and Produce. (Were the check on the event loop, nothing would be answered until it
    ended: only rounds before the request reached the registry, or the one in flight at the end.)"""
    import threading

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    proc, url = registry

    def alternatives(kind):   # 150 alternatives of 10 properties: every pair is compared
        return json.dumps({"oneOf": [{"type": "object", "properties": {f"p{i}_{j}": {"type": kind} for j in range(10)},
                                      "required": [f"p{i}_0"]} for i in range(150)]})
    s = "api-large-check-value"
    assert post(url, f"/subjects/{s}/versions", {"schemaType": "JSON", "schema": alternatives("string")}) \
        .status_code == 200
    answer = {}
    check = threading.Thread(target=lambda: answer.setdefault("r", post(
        url, f"/compatibility/subjects/{s}/versions/latest", {"schemaType": "JSON", "schema": alternatives("number")})))
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 0})
    assert admin.list_topics(timeout=10).brokers   # (connections made before the check starts)
    producer.produce("api-large-check", b"warm-up")
    assert producer.flush(10) == 0
    started = time.monotonic()
    check.start()
    answered = []   # when each Metadata + Produce round was answered while the check was in flight
    for _ in range(2000):   # bounded: the check takes seconds; each round milliseconds
        if not check.is_alive():
            break
        admin.list_topics(timeout=10)
        producer.produce("api-large-check", b"x")
        assert producer.flush(10) == 0
        if check.is_alive():
            answered.append(time.monotonic())
    check.join(60)
    ended = time.monotonic()
    assert answer["r"].json() == {"is_compatible": False}
    # rounds answered in the second half of the check, when the registry is surely busy with it
    late = [t for t in answered if t > started + (ended - started) / 2]
    assert len(late) >= 10, (len(answered), len(late))

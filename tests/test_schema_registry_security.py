"""The registry's HTTP security: basic authentication against the cluster's
SCRAM users (schema.registry.authentication=basic), and an https listener
with the broker's ssl.* settings, with confluent-kafka's registry client."""
from __future__ import annotations

import pytest
import requests

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,  # noqa: E402
                                   UserScramCredentialUpsertion)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.error import SchemaRegistryError  # noqa: E402

from broker.launch.process import BrokerProcess, free_port  # noqa: E402
from tools.certs import Pki  # noqa: E402

SCHEMA = '{"type": "record", "name": "S", "fields": [{"name": "a", "type": "string"}]}'


def test_basic_auth_uses_the_clusters_scram_users(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = BrokerProcess(str(tmp_path / "data"), settings={"schema.registry.listeners": url,
                                                           "schema.registry.authentication": "basic"})
    proc.start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"alice-secret")])
        for f in futures.values():
            f.result(30)
        assert requests.get(f"{url}/subjects", timeout=10).status_code == 401
        wrong = requests.get(f"{url}/subjects", auth=("alice", "nope"), timeout=10)
        assert wrong.status_code == 401 and wrong.json() == {"error_code": 401, "message": "Unauthorized"}
        assert requests.get(f"{url}/subjects", auth=("bob", "alice-secret"), timeout=10).status_code == 401
        assert requests.get(f"{url}/subjects", auth=("alice", "alice-secret"), timeout=10).status_code == 200
        client = SchemaRegistryClient({"url": url, "basic.auth.user.info": "alice:alice-secret"})
        sid = client.register_schema("auth-value", Schema(SCHEMA, "AVRO"))
        assert client.get_schema(sid).schema_str
        with pytest.raises(SchemaRegistryError) as refused:
            SchemaRegistryClient({"url": url, "basic.auth.user.info": "alice:wrong"}).get_subjects()
        assert refused.value.http_status_code == 401
    finally:
        proc.stop()


def test_https_listener_with_the_brokers_ssl_settings(tmp_path):
    pki = Pki(str(tmp_path / "pki"))
    p12 = pki.pkcs12_file("server", "localhost", "storepass", server=True)
    port = free_port()
    url = f"https://localhost:{port}"
    proc = BrokerProcess(str(tmp_path / "data"), settings={
        "schema.registry.listeners": f"https://127.0.0.1:{port}", "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": p12, "ssl.keystore.password": "storepass"})
    proc.start()
    try:
        assert f"schema registry https://127.0.0.1:{port}" in proc.ready_line
        client = SchemaRegistryClient({"url": url, "ssl.ca.location": pki.ca_path})
        sid = client.register_schema("tls-value", Schema(SCHEMA, "AVRO"))
        assert client.get_schema(sid).schema_str
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(f"{url}/subjects", timeout=10)   # not trusted without the CA
        assert requests.get(f"{url}/subjects", verify=pki.ca_path, timeout=10).json() == ["tls-value"]
    finally:
        proc.stop()


def test_a_busy_registry_port_is_one_line_at_start_up(tmp_path):
    import socket
    import subprocess
    import sys
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker_port = free_port()
        out = subprocess.run([sys.executable, "-m", "broker.launch.cli", "serve", "--set", f"log.dirs={tmp_path}/d",
                              "--set", f"listeners=PLAINTEXT://127.0.0.1:{broker_port}",
                              "--set", "kproto.metrics.listener=off",
                              "--set", f"schema.registry.listeners=http://127.0.0.1:{port}"],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "schema.registry.listeners" in lines[0] and "address already in use" in lines[0], \
        out.stderr


def test_a_bad_listener_value_is_one_line_at_start_up(tmp_path):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "broker.launch.cli", "serve", "--set", f"log.dirs={tmp_path}/d",
                          "--set", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
                          "--set", "kproto.metrics.listener=off", "--set", "schema.registry.listeners=ftp://x"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "kproto: Invalid value ftp://x for configuration schema.registry.listeners: expected http://HOST:PORT, "
        "https://HOST:PORT or off"]


def test_subject_acls_follow_the_topic_acls(tmp_path):
    """With an authorizer, a subject is governed by its topic's Kafka ACLs (docs/schema-registry.md):
    WRITE registers, READ reads, ALTER_CONFIGS sets its compatibility, DELETE deletes; the subject
    list shows only what the user may read; a schema by id stays readable."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = BrokerProcess(str(tmp_path / "data"), settings={
        "schema.registry.listeners": url, "schema.registry.authentication": "basic",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin"})   # the PLAINTEXT listener administers
    proc.start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                u, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), f"{u}-secret".encode())
                for u in ("admin", "alice", "bob")]).values():
            f.result(30)

        def allow(user, op):
            return AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, f"User:{user}", "*", op,
                              AclPermissionType.ALLOW)
        for f in admin.create_acls([allow("alice", AclOperation.READ), allow("alice", AclOperation.WRITE),
                                    allow("bob", AclOperation.READ)]).values():
            f.result(30)

        def call(user, method, path, **kw):
            return requests.request(method, f"{url}{path}", auth=(user, f"{user}-secret"), timeout=10, **kw)
        body = {"schema": SCHEMA}
        assert call("alice", "POST", "/subjects/orders-value/versions", json=body).status_code == 200
        denied = call("bob", "POST", "/subjects/orders-value/versions", json=body)
        assert (denied.status_code, denied.json()) == (403, {
            "error_code": 40301, "message": "User is denied operation Write on Subject: orders-value"})
        assert call("bob", "GET", "/subjects/orders-value/versions").json() == [1]
        assert call("alice", "POST", "/subjects/secret-value/versions", json=body).status_code == 403
        secret = call("admin", "POST", "/subjects/secret-value/versions",
                      json={"schema": SCHEMA.replace('"S"', '"T"')}).json()["id"]
        assert call("bob", "GET", "/subjects").json() == ["orders-value"]
        assert sorted(call("admin", "GET", "/subjects").json()) == ["orders-value", "secret-value"]
        assert call("bob", "GET", "/subjects/secret-value/versions").status_code == 403
        assert call("bob", "GET", f"/schemas/ids/{secret}").status_code == 200   # by id: any user
        assert call("bob", "PUT", "/config/orders-value", json={"compatibility": "NONE"}).json()["error_code"] == 40301
        assert call("alice", "PUT", "/config", json={"compatibility": "NONE"}).json() == {
            "error_code": 40301, "message": "User is denied operation AlterConfigs on Cluster: kafka-cluster"}
        assert call("alice", "DELETE", "/subjects/orders-value").status_code == 403
        assert call("admin", "DELETE", "/subjects/orders-value").json() == [1]
        # the real client sees the refusal as a 403 too
        with pytest.raises(SchemaRegistryError) as refused:
            SchemaRegistryClient({"url": url, "basic.auth.user.info": "bob:bob-secret"}).register_schema(
                "orders-value", Schema(SCHEMA, "AVRO"))
        assert refused.value.http_status_code == 403 and refused.value.error_code == 40301
    finally:
        proc.stop()

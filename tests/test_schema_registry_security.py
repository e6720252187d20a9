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

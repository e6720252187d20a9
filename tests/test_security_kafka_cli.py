"""Kafka's own tools (Java clients) against kproto's SASL_SSL listener with
--command-config: kafka-configs.sh manages SCRAM credentials and client
quotas, kafka-acls.sh manages ACLs, and the console producer and consumer
log in with the SCRAM credential created that way. Needs KAFKA_HOME."""
from __future__ import annotations

import os
import subprocess

import pytest

from tests.security_certs import Pki
from tests.security_helpers import SecureBroker

KAFKA_HOME = os.environ.get("KAFKA_HOME")
pytestmark = [
    pytest.mark.skipif(not KAFKA_HOME, reason="KAFKA_HOME is not set: these tests run Kafka's bin/*.sh tools"),
    pytest.mark.timeout(600),
]


def tool(name: str, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run([os.path.join(KAFKA_HOME, "bin", name), *args], input=stdin, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout


def client_properties(path, pki, mechanism, user, password) -> str:
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    path.write_text("\n".join([
        "security.protocol=SASL_SSL", f"sasl.mechanism={mechanism}",
        f'sasl.jaas.config={module} required username="{user}" password="{password}";',
        "ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca_path}", ""]))
    return str(path)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    pki = Pki(str(d / "pki"))
    b = SecureBroker(str(d / "data"), pki, listeners=("SASL_SSL",), settings={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin"})
    b.start()
    yield b, pki, d
    b.stop()


def test_kafka_configs_acls_and_console_clients_over_sasl_ssl(setup):
    b, pki, d = setup
    bs = b.address("SASL_SSL")
    admin = client_properties(d / "admin.properties", pki, "PLAIN", "admin", "admin-secret")
    tool("kafka-configs.sh", "--bootstrap-server", bs, "--command-config", admin, "--alter",
         "--add-config", "SCRAM-SHA-256=[iterations=8192,password=carol-pw]", "--entity-type", "users",
         "--entity-name", "carol")
    out = tool("kafka-configs.sh", "--bootstrap-server", bs, "--command-config", admin, "--describe",
               "--entity-type", "users", "--entity-name", "carol")
    assert "SCRAM-SHA-256=iterations=8192" in out
    tool("kafka-configs.sh", "--bootstrap-server", bs, "--command-config", admin, "--alter",
         "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152", "--entity-type", "users",
         "--entity-name", "carol")
    out = tool("kafka-configs.sh", "--bootstrap-server", bs, "--command-config", admin, "--describe",
               "--entity-type", "users", "--entity-name", "carol")
    assert "producer_byte_rate=1048576" in out and "consumer_byte_rate=2097152" in out
    tool("kafka-topics.sh", "--bootstrap-server", bs, "--command-config", admin, "--create", "--topic", "cli-t",
         "--partitions", "1")
    carol = client_properties(d / "carol.properties", pki, "SCRAM-SHA-256", "carol", "carol-pw")
    # no ACL yet: carol cannot write
    proc = subprocess.run([os.path.join(KAFKA_HOME, "bin", "kafka-console-producer.sh"), "--bootstrap-server", bs,
                           "--producer.config", carol, "--topic", "cli-t"], input="denied\n", capture_output=True,
                          text=True, timeout=180)
    assert "TopicAuthorizationException" in proc.stdout + proc.stderr or "Not authorized" in proc.stdout + proc.stderr
    tool("kafka-acls.sh", "--bootstrap-server", bs, "--command-config", admin, "--add", "--allow-principal",
         "User:carol", "--operation", "Write", "--operation", "Read", "--topic", "cli-t")
    tool("kafka-acls.sh", "--bootstrap-server", bs, "--command-config", admin, "--add", "--allow-principal",
         "User:carol", "--operation", "Read", "--group", "cli-g")
    out = tool("kafka-acls.sh", "--bootstrap-server", bs, "--command-config", admin, "--list", "--topic", "cli-t")
    assert "User:carol" in out and "WRITE" in out
    tool("kafka-console-producer.sh", "--bootstrap-server", bs, "--producer.config", carol, "--topic", "cli-t",
         stdin="hello-from-java\n")
    out = tool("kafka-console-consumer.sh", "--bootstrap-server", bs, "--consumer.config", carol, "--topic",
               "cli-t", "--group", "cli-g", "--from-beginning", "--max-messages", "1", "--timeout-ms", "30000")
    assert "hello-from-java" in out
    tool("kafka-acls.sh", "--bootstrap-server", bs, "--command-config", admin, "--remove", "--force",
         "--allow-principal", "User:carol", "--operation", "Write", "--topic", "cli-t")
    out = tool("kafka-acls.sh", "--bootstrap-server", bs, "--command-config", admin, "--list", "--topic", "cli-t")
    assert "WRITE" not in out and "READ" in out


@pytest.fixture(scope="module")
def open_broker(tmp_path_factory):
    """No authorizer; SSL with client certificates required, SASL_SSL with every mechanism."""
    d = tmp_path_factory.mktemp("cli-open")
    pki = Pki(str(d / "pki"))
    b = SecureBroker(str(d / "data"), pki, listeners=("SSL", "SASL_SSL"), settings={
        "listener.name.ssl.ssl.client.auth": "required"})
    b.start()
    yield b, pki, d
    b.stop()


def test_java_client_over_ssl_with_a_client_certificate(open_broker):
    b, pki, d = open_broker
    cert = pki.pem_files("java-client", "java-client")
    props = d / "ssl.properties"
    props.write_text("\n".join(["security.protocol=SSL", "ssl.keystore.type=PEM",
                                f"ssl.keystore.location={cert['combined']}",
                                "ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca_path}", ""]))
    tool("kafka-topics.sh", "--bootstrap-server", b.address("SSL"), "--command-config", str(props), "--create",
         "--topic", "java-ssl", "--partitions", "1")
    assert "java-ssl" in tool("kafka-topics.sh", "--bootstrap-server", b.address("SSL"), "--command-config",
                              str(props), "--list")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "OAUTHBEARER"])
def test_java_client_over_sasl_ssl(open_broker, mechanism):
    b, pki, d = open_broker
    bs = b.address("SASL_SSL")
    if mechanism == "OAUTHBEARER":
        jaas = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                'unsecuredLoginStringClaim_sub="java-oauth";')
    else:
        admin = client_properties(d / "admin.properties", pki, "PLAIN", "admin", "admin-secret")
        tool("kafka-configs.sh", "--bootstrap-server", bs, "--command-config", admin, "--alter",
             "--add-config", "SCRAM-SHA-512=[password=java-pw]", "--entity-type", "users", "--entity-name", "java")
        jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="java" password="java-pw";'
    props = d / f"{mechanism}.properties"
    props.write_text("\n".join(["security.protocol=SASL_SSL", f"sasl.mechanism={mechanism}",
                                f"sasl.jaas.config={jaas}", "ssl.truststore.type=PEM",
                                f"ssl.truststore.location={pki.ca_path}", ""]))
    topic = "java-" + mechanism.lower()
    tool("kafka-console-producer.sh", "--bootstrap-server", bs, "--producer.config", str(props), "--topic", topic,
         stdin="one\ntwo\n")
    out = tool("kafka-console-consumer.sh", "--bootstrap-server", bs, "--consumer.config", str(props), "--topic",
               topic, "--from-beginning", "--max-messages", "2", "--timeout-ms", "30000")
    assert out.split() == ["one", "two"]

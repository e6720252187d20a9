"""Brokers with SSL / SASL listeners for the security tests, and client
settings for them."""
from __future__ import annotations

import socket
import time
import ssl

from tests.wire_client import WireClient
from broker.launch.process import BrokerProcess, free_port

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" '
              'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')


class SecureBroker(BrokerProcess):
    """A broker whose listeners are PLAINTEXT plus the given secured ones;
    `address(name)` is host:port of a listener."""

    def __init__(self, data_dir: str, pki=None, listeners=("SSL", "SASL_PLAINTEXT", "SASL_SSL"),
                 settings: dict[str, str] | None = None, log_level: str = "WARNING"):
        port = free_port()
        self.ports = {"PLAINTEXT": port}
        for name in listeners:
            # the kernel may hand out a just-released port again: keep them distinct
            candidate = free_port()
            while candidate in self.ports.values():
                candidate = free_port()
            self.ports[name] = candidate
        all_settings = {"listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in self.ports.items())}
        if pki is not None:
            server = pki.pem_files("server", "localhost", server=True)
            all_settings.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": server["combined"],
                                 "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.ca_path})
        if any(n.startswith("SASL") for n in listeners):
            all_settings["sasl.enabled.mechanisms"] = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
            for n in listeners:
                if n.startswith("SASL"):
                    all_settings[f"listener.name.{n.lower()}.plain.sasl.jaas.config"] = PLAIN_JAAS
        all_settings.update(settings or {})
        super().__init__(data_dir, port=port, settings=all_settings, log_level=log_level)

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"


def client_config(broker: SecureBroker, protocol: str, pki=None, mechanism: str | None = None,
                  user: str | None = None, password: str | None = None, **extra) -> dict:
    """confluent-kafka (librdkafka) settings for a listener."""
    conf = {"bootstrap.servers": broker.address(protocol), "security.protocol": protocol}
    if protocol.endswith("SSL") and pki is not None:
        conf["ssl.ca.location"] = pki.ca_path
    if mechanism:
        conf["sasl.mechanism"] = mechanism
    if user is not None:
        conf.update({"sasl.username": user, "sasl.password": password})
    conf.update(extra)
    return conf


class TlsWireClient(WireClient):
    """The raw-frame test client over TLS."""

    def __init__(self, bootstrap: str, context: ssl.SSLContext, timeout: float = 10.0):
        super().__init__(bootstrap, timeout)
        self.sock = context.wrap_socket(self.sock, server_hostname="localhost")


def tls_context(pki, cert: dict | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki.ca_path)
    if cert is not None:
        ctx.load_cert_chain(cert["cert"], cert["key"])
    return ctx


def closed_quickly(address: str, payload: bytes, timeout: float = 5.0) -> bool:
    """Send bytes on a fresh connection: True when the broker closes it."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        try:
            s.sendall(payload)
            while True:
                data = s.recv(4096)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


def roundtrip(conf: dict, topic: str, n: int = 5, value: bytes = b"v%d") -> list[bytes]:
    """Produce ``n`` values (``value % i``) with librdkafka over ``conf`` and
    read them back from partition 0 with an assigned consumer."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    p = Producer(conf)
    for i in range(n):
        p.produce(topic, value=value % i)
    assert p.flush(20) == 0
    c = Consumer({**conf, "group.id": "roundtrip-" + topic, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got, deadline = [], time.monotonic() + 20
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    return got

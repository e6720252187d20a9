"""The admin CLI over TLS against a real kproto with SSL and SASL_SSL listeners: the CA from
`ssl.ca.location` (the broker's certificate is checked, host name included), a client certificate
for a listener that requires one, a SASL PLAIN login inside TLS; an untrusted certificate or a
missing client certificate ends the command with exit status 3 and one line saying why."""
from __future__ import annotations

import pytest

from tests.security_helpers import SecureBroker
from tests.test_admin_cli import fails, kp, ok
from tools.certs import Pki

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    root = tmp_path_factory.mktemp("admin-cli-tls")
    pki = Pki(str(root / "pki"))
    b = SecureBroker(str(root / "data"), pki, listeners=("SSL", "SASL_SSL"), settings={
        "listener.name.ssl.ssl.client.auth": "required"})
    b.start()
    yield b, pki
    b.stop()


def test_ssl_with_a_client_certificate_produce_and_consume(tls):
    b, pki = tls
    client = pki.pem_files("cli-client", "cli-client")
    ssl_opts = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.ca_path}",
                "-X", f"ssl.certificate.location={client['cert']}", "-X", f"ssl.key.location={client['key']}"]
    ssl_addr = b.address("SSL")
    ok(kp(b, "topic", "create", "cli-tls", *ssl_opts, bootstrap=ssl_addr))
    ok(kp(b, "produce", "cli-tls", *ssl_opts, stdin=b"over tls\n", bootstrap=ssl_addr))
    assert ok(kp(b, "consume", "cli-tls", "--from-beginning", "-e", *ssl_opts, bootstrap=ssl_addr)).out == "over tls\n"

    line = fails(kp(b, "topic", "list", "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.ca_path}",
                    bootstrap=ssl_addr), 3, "")     # the listener requires a client certificate
    assert ssl_addr in line
    line = fails(kp(b, "topic", "list", "-X", "security.protocol=SSL", bootstrap=ssl_addr), 3, "CERTIFICATE_VERIFY_FAILED")
    assert line.startswith(f"kproto: TLS handshake with {ssl_addr} failed")


def test_sasl_ssl_plain_login(tls):
    b, pki = tls
    addr = b.address("SASL_SSL")
    opts = ["-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={pki.ca_path}", "-X", "sasl.mechanism=PLAIN",
            "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"]
    ok(kp(b, "topic", "create", "cli-sasl-ssl", *opts, bootstrap=addr))
    assert "cli-sasl-ssl" in {t["name"] for t in ok(kp(b, "topic", "list", "--format", "json", *opts,
                                                       bootstrap=addr)).json}
    info = ok(kp(b, "cluster", "info", "--format", "json", *opts, bootstrap=addr)).json
    assert [x["id"] for x in info["brokers"]] == [1]
    bad = [o if o != "sasl.password=alice-secret" else "sasl.password=nope" for o in opts]
    fails(kp(b, "topic", "list", *bad, bootstrap=addr), 3, "SASL_AUTHENTICATION_FAILED")

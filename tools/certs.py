"""Throw-away certificates for tests and benchmarks, made with `cryptography`
at test time (no private key is ever committed): a CA, a server certificate
for 127.0.0.1/localhost and client certificates, as PEM and PKCS12 files."""
from __future__ import annotations

import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID


def _name(cn: str, ou: str | None = None) -> x509.Name:
    # the usual order, most general first: its RFC 2253 string reads CN=...,OU=...,O=...
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kproto-tests")]
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key, password: str | None = None) -> bytes:
    enc = (serialization.BestAvailableEncryption(password.encode()) if password
           else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


def _pem_cert(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class Pki:
    """A CA and the certificates it signs, written under `directory`."""

    def __init__(self, directory: str, ca_cn: str = "kproto-test-ca"):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.ca_key = _key()
        now = datetime.datetime.now(datetime.timezone.utc)
        self.ca_cert = (x509.CertificateBuilder().subject_name(_name(ca_cn)).issuer_name(_name(ca_cn))
                        .public_key(self.ca_key.public_key()).serial_number(x509.random_serial_number())
                        .not_valid_before(now - datetime.timedelta(minutes=5))
                        .not_valid_after(now + datetime.timedelta(days=2))
                        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                        .sign(self.ca_key, hashes.SHA256()))
        self.ca_path = self._write("ca.pem", _pem_cert(self.ca_cert))

    def _write(self, name: str, data: bytes) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def issue(self, cn: str, ou: str | None = None, server: bool = False):
        key = _key()
        now = datetime.datetime.now(datetime.timezone.utc)
        b = (x509.CertificateBuilder().subject_name(_name(cn, ou)).issuer_name(self.ca_cert.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(minutes=5))
             .not_valid_after(now + datetime.timedelta(days=1)))
        if server:
            b = b.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return key, b.sign(self.ca_key, hashes.SHA256())

    def pem_files(self, name: str, cn: str, ou: str | None = None, server: bool = False,
                  password: str | None = None) -> dict[str, str]:
        """{key, cert, combined}: key and certificate files, and one file with both
        (what ssl.keystore.type=PEM reads)."""
        key, cert = self.issue(cn, ou, server)
        return {"key": self._write(f"{name}.key", _pem_key(key, password)),
                "cert": self._write(f"{name}.crt", _pem_cert(cert) + _pem_cert(self.ca_cert)),
                "combined": self._write(f"{name}.pem", _pem_key(key, password) + _pem_cert(cert)),
                "key_pem": _pem_key(key, password).decode(), "cert_pem": _pem_cert(cert).decode()}

    def pkcs12_file(self, name: str, cn: str, password: str, server: bool = False) -> str:
        key, cert = self.issue(cn, server=server)
        data = pkcs12.serialize_key_and_certificates(
            name.encode(), key, cert, [self.ca_cert], serialization.BestAvailableEncryption(password.encode()))
        return self._write(f"{name}.p12", data)

"""TLS for SSL and SASL_SSL listeners, configured with Kafka's ssl.* keys.

Key stores: PEM (a file with the private key and certificate chain, or the
key and chain inline in ssl.keystore.key / ssl.keystore.certificate.chain),
PKCS12 (read with `cryptography`) and JKS (Java's own format, read with the
optional `pyjks`; a JKS-typed store that is really PEM or PKCS12 is accepted,
as Java also reads PKCS12 under JKS).

The context is rebuilt when the store files change on disk (checked at most
once a second, on new connections), so certificates are renewed without a
restart; connections already open keep their session.
"""
from __future__ import annotations

import logging
import os
import ssl
import tempfile
import time

from broker.config.types import ConfigError
from broker.security.settings import listener_value

log = logging.getLogger("kproto.tls")

_PROTOCOLS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
              "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_KEYS = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
         "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.type",
         "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
         "ssl.enabled.protocols", "ssl.cipher.suites")


def _pem_blocks(text: str, kind: str) -> list[str]:
    out, lines, inside = [], [], False
    for line in text.splitlines():
        if line.startswith("-----BEGIN ") and kind in line:
            inside, lines = True, [line]
        elif inside:
            lines.append(line)
            if line.startswith("-----END "):
                out.append("\n".join(lines) + "\n")
                inside = False
    return out


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"Failed to load SSL keystore {path}: {exc.strerror}") from None


def _store_type(declared: str | None, data: bytes | None) -> str:
    declared = (declared or "JKS").upper()
    if declared == "JKS" and data is not None:
        if data.lstrip().startswith(b"-----BEGIN"):
            return "PEM"
        if data[:4] in (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce"):
            return "JKS"
        return "PKCS12"
    return declared


def _pkcs12(data: bytes, password: str | None):
    from cryptography.hazmat.primitives.serialization import pkcs12
    try:
        return pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as exc:
        raise ConfigError(f"Failed to load PKCS12 store: {exc}") from None


def _jks(data: bytes, password: str | None):
    """A Java KeyStore read with pyjks (optional: `pip install pyjks`)."""
    try:
        import jks
    except ImportError:
        raise ConfigError("JKS key stores need the pyjks package (pip install pyjks); or convert the store "
                          "with `keytool -importkeystore -deststoretype PKCS12`, or use ssl.keystore.type=PEM") from None
    try:
        return jks.KeyStore.loads(data, password or "")
    except Exception as exc:   # pyjks raises its own error types for bad passwords and formats
        raise ConfigError(f"Failed to load JKS store: {exc}") from None


def _der_cert_pem(der: bytes) -> str:
    from cryptography import x509
    return _pem(x509.load_der_x509_certificate(der))


def _pem(obj) -> str:
    from cryptography.hazmat.primitives import serialization
    if hasattr(obj, "public_bytes") and hasattr(obj, "subject"):
        return obj.public_bytes(serialization.Encoding.PEM).decode()
    return obj.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _key_and_chain(get) -> tuple[str, str, str | None] | None:
    """(key PEM, chain PEM, key password) of the listener's key store, or None when unset."""
    inline_key, inline_chain = get("ssl.keystore.key"), get("ssl.keystore.certificate.chain")
    if inline_key:
        if not inline_chain:
            raise ConfigError("ssl.keystore.certificate.chain must be set with ssl.keystore.key")
        return inline_key, inline_chain, get("ssl.key.password")
    location = get("ssl.keystore.location")
    if not location:
        return None
    data = _read(location)
    kind = _store_type(get("ssl.keystore.type"), data)
    if kind == "PEM":
        text = data.decode()
        keys = _pem_blocks(text, "PRIVATE KEY")
        chain = _pem_blocks(text, "CERTIFICATE")
        if not keys or not chain:
            raise ConfigError(f"Invalid PEM keystore {location}: a private key and a certificate chain are needed")
        return keys[0], "".join(chain), get("ssl.key.password")
    if kind == "PKCS12":
        key, cert, extra = _pkcs12(data, get("ssl.keystore.password"))
        if key is None or cert is None:
            raise ConfigError(f"PKCS12 keystore {location} holds no private key entry")
        return _pem(key), _pem(cert) + "".join(_pem(c) for c in extra or ()), None
    if kind == "JKS":
        from cryptography.hazmat.primitives.serialization import load_der_private_key
        store = _jks(data, get("ssl.keystore.password"))
        for entry in store.private_keys.values():
            if not entry.is_decrypted():
                entry.decrypt(get("ssl.key.password") or get("ssl.keystore.password") or "")
            key = load_der_private_key(entry.pkey_pkcs8, None)
            return _pem(key), "".join(_der_cert_pem(der) for _type, der in entry.cert_chain), None
        raise ConfigError(f"JKS keystore {location} holds no private key entry")
    raise ConfigError(f"Invalid value {kind} for configuration ssl.keystore.type")


def _trusted(get) -> str | None:
    inline = get("ssl.truststore.certificates")
    if inline:
        return inline
    location = get("ssl.truststore.location")
    if not location:
        return None
    data = _read(location)
    kind = _store_type(get("ssl.truststore.type"), data)
    if kind == "PEM":
        return data.decode()
    if kind == "PKCS12":
        from cryptography.hazmat.primitives.serialization import pkcs12
        try:
            store = pkcs12.load_pkcs12(data, (get("ssl.truststore.password") or "").encode() or None)
        except ValueError as exc:
            raise ConfigError(f"Failed to load PKCS12 truststore {location}: {exc}") from None
        certs = ([store.cert.certificate] if store.cert else []) + [c.certificate for c in store.additional_certs]
        return "".join(_pem(c) for c in certs)
    if kind == "JKS":
        store = _jks(data, get("ssl.truststore.password"))
        return "".join(_der_cert_pem(entry.cert) for entry in store.certs.values())
    raise ConfigError(f"Invalid value {kind} for configuration ssl.truststore.type")


def openssl_cipher(name: str) -> str | None:
    """A Java/IANA TLS 1.2 suite name as OpenSSL spells it (TLS 1.3 suites: None, always on)."""
    if "_WITH_" not in name:
        return None if name.startswith("TLS_") else name
    kx, cipher = name[4:].split("_WITH_", 1) if name.startswith("TLS_") else name.split("_WITH_", 1)
    kx = "" if kx == "RSA" else kx.replace("_", "-") + "-"
    cipher = cipher.replace("AES_128", "AES128").replace("AES_256", "AES256")
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305").replace("_CBC", "")
    return kx + cipher.replace("_", "-")


def build_context(get, client_auth: str) -> ssl.SSLContext:
    material = _key_and_chain(get)
    if material is None:
        raise ConfigError("A TLS listener needs ssl.keystore.location (or ssl.keystore.key and "
                          "ssl.keystore.certificate.chain)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    load_key_and_chain(ctx, material)
    trusted = _trusted(get)
    if trusted:
        ctx.load_verify_locations(cadata=trusted)
    mode = _CLIENT_AUTH.get((client_auth or "none").lower())
    if mode is None:
        raise ConfigError(f"Invalid value {client_auth} for configuration ssl.client.auth")
    ctx.verify_mode = mode
    restrict_protocols_and_ciphers(ctx, get)
    return ctx


def load_key_and_chain(ctx: ssl.SSLContext, material: tuple) -> None:
    """The (key, chain, password) of _key_and_chain into ctx (a listener's or an outbound
    connection's)."""
    key, chain, password = material
    # ssl loads keys from files only: a private, short-lived file in memory-backed storage
    tmpdir = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.NamedTemporaryFile("w", dir=tmpdir, suffix=".pem") as f:
        os.chmod(f.name, 0o600)
        f.write(key if key.endswith("\n") else key + "\n")
        f.write(chain)
        f.flush()
        try:
            ctx.load_cert_chain(f.name, password=password or None)
        except ssl.SSLError as exc:
            raise ConfigError(f"Invalid SSL key store: {exc}") from None


def restrict_protocols_and_ciphers(ctx: ssl.SSLContext, get) -> None:
    """ssl.enabled.protocols (TLSv1.2,TLSv1.3 by default) and ssl.cipher.suites (Kafka's IANA
    names; those OpenSSL knows) on ctx."""
    protocols = [p for p in (get("ssl.enabled.protocols") or ["TLSv1.2", "TLSv1.3"]) if p in _PROTOCOLS]
    if protocols:
        versions = sorted(_PROTOCOLS[p] for p in protocols)
        ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    suites = [c for c in (get("ssl.cipher.suites") or []) if c]
    if suites:
        names = [n for n in (openssl_cipher(c) for c in suites) if n]
        if names:
            try:
                ctx.set_ciphers(":".join(names))
            except ssl.SSLError:
                raise ConfigError(f"None of the cipher suites {suites} is available") from None


class ListenerTls:
    """The SSLContext of one listener, rebuilt when its settings or files change."""

    CHECK_INTERVAL_S = 1.0

    def __init__(self, config, listener: str, protocol: str):
        self.config = config
        self.listener = listener
        self.protocol = protocol
        self._ctx = None
        self._stamp = None
        self._checked = 0.0

    def _get(self, key: str):
        return listener_value(self.config, self.listener, key)

    def _client_auth(self) -> str:
        if self.protocol == "SASL_SSL":
            # KIP-684: on SASL_SSL listeners only a listener-prefixed ssl.client.auth counts
            prefixed = f"listener.name.{self.listener.lower()}.ssl.client.auth"
            return self.config.static_configs.get(prefixed) or "none"
        return self._get("ssl.client.auth") or "none"

    def _current_stamp(self):
        values = tuple(str(self._get(k)) for k in _KEYS) + (self._client_auth(),)
        files = []
        for key in ("ssl.keystore.location", "ssl.truststore.location"):
            path = self._get(key)
            if path:
                try:
                    st = os.stat(path)
                    files.append((st.st_mtime_ns, st.st_size, st.st_ino))
                except OSError:
                    files.append(None)
        return values, tuple(files)

    def context(self) -> ssl.SSLContext:
        now = time.monotonic()
        if self._ctx is not None and now - self._checked < self.CHECK_INTERVAL_S:
            return self._ctx
        self._checked = now
        stamp = self._current_stamp()
        if stamp != self._stamp:
            try:
                ctx = build_context(self._get, self._client_auth())
            except (ConfigError, OSError, ValueError) as exc:
                if self._ctx is None:
                    raise
                log.error("keeping the previous TLS settings of listener %s: %s", self.listener, exc)
                self._stamp = stamp
                return self._ctx
            if self._ctx is not None:
                log.info("TLS key or trust store of listener %s reloaded", self.listener)
            self._ctx, self._stamp = ctx, stamp
        return self._ctx

"""One blocking connection to a broker: TCP, optionally TLS, optionally a SASL login (PLAIN,
SCRAM-SHA-256/512), then request/response calls with kproto's codecs. Versions are chosen once per
connection from the broker's ApiVersions answer (the CLI's preferred version, or lower when the
broker's range ends lower), so the same code talks to kproto, Kafka and Redpanda."""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import ssl
import struct

from kproto import api
from kproto.messages.api_versions_request import ApiVersionsRequest
from kproto.messages.sasl_authenticate_request import SaslAuthenticateRequest
from kproto.messages.sasl_handshake_request import SaslHandshakeRequest

from broker.admin.errors import CONNECTION, AdminError, KafkaError, error_name

_SIZE = struct.Struct(">i")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class ConnectionFailed(AdminError):
    def __init__(self, message: str):
        super().__init__(message, CONNECTION)


def tls_context(settings: dict) -> ssl.SSLContext:
    """A client TLS context from librdkafka's key names (PEM files)."""
    ctx = ssl.create_default_context(cafile=settings.get("ssl.ca.location") or None)
    if settings.get("ssl.endpoint.identification.algorithm", "https").lower() in ("", "none"):
        ctx.check_hostname = False
    cert = settings.get("ssl.certificate.location")
    if cert:
        ctx.load_cert_chain(cert, settings.get("ssl.key.location") or None,
                            settings.get("ssl.key.password") or None)
    return ctx


def _scram_escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class Connection:
    """A connection to host:port with the settings' security; `call()` sends one request at the
    negotiated version and returns the decoded response."""

    def __init__(self, host: str, port: int, settings: dict, timeout: float = 30.0):
        self.address = f"{host}:{port}"
        self.settings = settings
        self.timeout = timeout
        self._cid = 0
        protocol = settings.get("security.protocol", "PLAINTEXT").upper()
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ConnectionFailed(f"cannot connect to {self.address}: {exc.strerror or exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if protocol in TLS_PROTOCOLS:
            try:
                sock = tls_context(settings).wrap_socket(sock, server_hostname=host)
            except (ssl.SSLError, OSError) as exc:
                sock.close()
                raise ConnectionFailed(f"TLS handshake with {self.address} failed: {exc}") from None
        self.sock = sock
        self.versions: dict[int, tuple[int, int]] = {}
        try:
            resp = self._call(ApiVersionsRequest(client_software_name="kproto-cli",
                                                 client_software_version="1"), 3)
            if resp.error_code == 35:   # an older broker: its range is in the answer, at v0
                resp = self._call(ApiVersionsRequest(), 0)
            self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            if protocol in SASL_PROTOCOLS:
                self._login()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- requests ----------------------------------------------------------------------------

    def version(self, request_cls, preferred: int) -> int:
        """The version to send: `preferred`, or the broker's highest when that is lower."""
        lo, hi = self.versions.get(request_cls.API_KEY, (None, None))
        if hi is None:
            raise AdminError(f"UNSUPPORTED_VERSION: the broker at {self.address} does not support "
                             f"{request_cls.NAME}")
        v = min(preferred, hi, api.version_range(request_cls.API_KEY)[1])
        if v < lo:
            raise AdminError(f"UNSUPPORTED_VERSION: {request_cls.NAME} versions {lo}-{hi} of the broker "
                             f"at {self.address} are newer than this tool knows")
        return v

    def call(self, request, preferred: int, expect_response: bool = True):
        return self._call(request, self.version(type(request), preferred), expect_response)

    def _call(self, request, version: int, expect_response: bool = True):
        self._cid += 1
        cid = self._cid
        try:
            self.sock.sendall(api.encode_request(request, version, cid, "kproto-cli"))
            if not expect_response:
                return None
            frame = self._recv(_SIZE.unpack(self._recv(4))[0])
        except socket.timeout:
            raise ConnectionFailed(f"no answer from {self.address} to {request.NAME} within "
                                   f"{self.timeout:g} s") from None
        except OSError as exc:
            raise ConnectionFailed(f"connection to {self.address} lost: {exc.strerror or exc}") from None
        got, response = api.decode_response(frame, request.API_KEY, version)
        if got != cid:
            raise ConnectionFailed(f"{self.address} answered correlation id {got}, expected {cid}")
        return response

    def _recv(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionFailed(f"{self.address} closed the connection")
            out += chunk
        return bytes(out)

    # -- SASL --------------------------------------------------------------------------------

    def _login(self) -> None:
        mech = (self.settings.get("sasl.mechanism") or "PLAIN").upper()
        user, password = self.settings.get("sasl.username"), self.settings.get("sasl.password")
        if mech not in MECHANISMS:
            raise ConnectionFailed(f"sasl.mechanism {mech}: use one of {', '.join(MECHANISMS)}")
        if user is None or password is None:
            raise ConnectionFailed(f"security.protocol {self.settings.get('security.protocol')} needs "
                                   "sasl.username and sasl.password")
        hs = self._call(SaslHandshakeRequest(mechanism=mech), 1)
        if hs.error_code:
            raise ConnectionFailed(f"{error_name(hs.error_code)}: {self.address} offers "
                                   f"{', '.join(hs.mechanisms)}, not {mech}")
        if mech == "PLAIN":
            self._auth(f"\0{user}\0{password}".encode())
            return
        hash_name = "sha256" if mech.endswith("256") else "sha512"
        nonce = base64.b64encode(os.urandom(24)).decode()
        first_bare = f"n={_scram_escape(user)},r={nonce}"
        server_first = self._auth(f"n,,{first_bare}".encode()).decode()
        fields = dict(item.split("=", 1) for item in server_first.split(","))
        if not fields.get("r", "").startswith(nonce):
            raise ConnectionFailed(f"SASL_AUTHENTICATION_FAILED: {self.address} sent a bad SCRAM nonce")
        salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), base64.b64decode(fields["s"]),
                                     int(fields["i"]))
        final_bare = f"c=biws,r={fields['r']}"
        auth_message = f"{first_bare},{server_first},{final_bare}".encode()
        client_key = hmac.new(salted, b"Client Key", hash_name).digest()
        signature = hmac.new(hashlib.new(hash_name, client_key).digest(), auth_message, hash_name).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_final = self._auth(f"{final_bare},p={base64.b64encode(proof).decode()}".encode()).decode()
        server_key = hmac.new(salted, b"Server Key", hash_name).digest()
        expected = base64.b64encode(hmac.new(server_key, auth_message, hash_name).digest()).decode()
        if server_final != f"v={expected}":
            raise ConnectionFailed(f"SASL_AUTHENTICATION_FAILED: {self.address} did not prove it "
                                   "knows the SCRAM credential")

    def _auth(self, data: bytes) -> bytes:
        resp = self._call(SaslAuthenticateRequest(auth_bytes=data), 2)
        if resp.error_code:
            err = KafkaError(resp.error_code, message=resp.error_message)
            raise ConnectionFailed(str(err))
        return bytes(resp.auth_bytes or b"")

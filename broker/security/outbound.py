"""This node's own connections to other nodes' listeners, secured as Kafka's broker secures them:
replica fetchers and AlterPartition go to the inter-broker listener (`inter.broker.listener.name`,
or the listener named by `security.inter.broker.protocol`), raft (Vote, BeginQuorumEpoch, Fetch),
broker registration, heartbeats and Envelope forwarding to the first of
`controller.listener.names`. The listener's protocol comes from `listener.security.protocol.map`.

- TLS: a client context from the listener's `ssl.*` keys (listener-prefixed first, as Kafka's
  ChannelBuilders use `valuesWithPrefixOverride`): the trust store, the key store when the other
  side wants a client certificate (mTLS), `ssl.endpoint.identification.algorithm` (https: the
  host name is checked), protocols and cipher suites.
- SASL: `sasl.mechanism.inter.broker.protocol` / `sasl.mechanism.controller.protocol`, with the
  `username` / `password` of the listener's JAAS config (`listener.name.<l>.<mech>.sasl.jaas.config`
  first), as Kafka's broker logs in to its peers; SaslHandshake v1 then SaslAuthenticate v2
  (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER with an unsecured token from
  `unsecuredLoginStringClaim_sub`).

A refused login raises AuthenticationFailed with the server's message; callers log it, so a wrong
inter-broker password is visible in the log instead of replication silently stopping."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import ssl
import time

import trio

from kproto import api

from broker.config.types import ConfigError
from broker.net.framing import take_frame
from broker.security.settings import controller_listener, inter_broker_listener, listener_value

# (the TLS context builder, the JAAS parser and the SASL request codecs are imported where first
# needed: a node whose peer listeners are PLAINTEXT, a single node among them, never runs them)

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class AuthenticationFailed(ConnectionError):
    """The other node refused this node's login (SASL) or its TLS handshake failed (a
    ConnectionError, so every caller that survives a lost connection survives this too)."""


class LoggedIn(trio.abc.Stream):
    """A stream whose SASL session ends (KIP-368: the server gave a session lifetime): its users
    open a new connection, which logs in again, once `expiring()` says so (Kafka's clients
    re-authenticate at 85-95% of the lifetime; the server closes a connection whose session
    expired at its next request)."""

    def __init__(self, stream, lifetime_ms: int):
        self.stream = stream
        self.renew_at = time.monotonic() + 0.85 * lifetime_ms / 1000

    def expiring(self) -> bool:
        return time.monotonic() >= self.renew_at

    async def send_all(self, data) -> None:
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes=None):
        return await self.stream.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.stream.aclose()


def expiring(stream) -> bool:
    """Whether a connection from Outbound.connect should be replaced before its next request."""
    return isinstance(stream, LoggedIn) and stream.expiring()


def _read_exact_frame_factory():
    buf = bytearray()

    async def read(stream) -> bytes:
        while (frame := take_frame(buf)) is None:
            data = await stream.receive_some(65536)
            if not data:
                raise EOFError("connection closed during authentication")
            buf.extend(data)
        return frame
    return read


class Outbound:
    """How this node connects to one kind of peer listener (inter-broker or controller)."""

    def __init__(self, config, listener: str, protocol: str, mechanism: str | None, purpose: str,
                 strict: bool = True):
        self.config = config
        self.error = None   # why connect() cannot log in (a lone node is not refused at start-up)
        self.listener = listener
        self.protocol = protocol
        self.purpose = purpose
        self.mechanism = mechanism if protocol in SASL_PROTOCOLS else None
        self._ctx = None
        self._ctx_stamp = None
        self.username = self.password = None
        self._jaas = {}
        if protocol in TLS_PROTOCOLS:
            self._context()   # bad trust / key stores stop start-up
        if self.mechanism is not None:
            if self.mechanism not in CLIENT_MECHANISMS:
                raise ConfigError(f"SASL mechanism {self.mechanism} for {purpose} communication is not "
                                  f"supported by kproto (one of {', '.join(CLIENT_MECHANISMS)})")
            text = listener_value(config, listener, "sasl.jaas.config", self.mechanism)
            if not text:
                raise ConfigError(f"Could not find a 'KafkaServer' or '{listener.lower()}.KafkaServer' entry "
                                  "in the JAAS configuration. System property "
                                  "'java.security.auth.login.config' is not set")
            from broker.security.jaas import parse_jaas   # imported at first use: a SASL peer listener
            options = {}
            for _module, _flag, opts in parse_jaas(text):
                options.update(opts)
            self._jaas = options
            if self.mechanism != "OAUTHBEARER":
                self.username, self.password = options.get("username"), options.get("password")
                if not self.username or self.password is None:
                    self.error = (f"The JAAS configuration of listener {listener} for mechanism "
                                  f"{self.mechanism} has no username and password for this broker's "
                                  f"{purpose} connections")
            elif not options.get("unsecuredLoginStringClaim_sub"):
                self.error = (f"The JAAS configuration of listener {listener} for OAUTHBEARER has no "
                              f"unsecuredLoginStringClaim_sub for this broker's {purpose} connections")
            if self.error and strict:
                raise ConfigError(self.error)

    @property
    def secured(self) -> bool:
        return self.protocol != "PLAINTEXT"

    def __repr__(self) -> str:
        mech = f" {self.mechanism}" if self.mechanism else ""
        return f"<{self.purpose} {self.listener} {self.protocol}{mech}>"

    # -- TLS ------------------------------------------------------------------------------------

    def _get(self, key):
        return listener_value(self.config, self.listener, key)

    def _context(self) -> ssl.SSLContext:
        from broker.security import tls   # imported at first use: a TLS peer listener
        stamp = tuple(str(self._get(k)) for k in tls._KEYS + ("ssl.endpoint.identification.algorithm",))
        if self._ctx is not None and stamp == self._ctx_stamp:
            return self._ctx
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        trusted = tls._trusted(self._get)
        if trusted:
            ctx.load_verify_locations(cadata=trusted)
        else:
            ctx.load_default_certs()
        material = tls._key_and_chain(self._get)
        if material is not None:
            tls.load_key_and_chain(ctx, material)
        algorithm = self._get("ssl.endpoint.identification.algorithm")
        ctx.check_hostname = bool(algorithm)
        tls.restrict_protocols_and_ciphers(ctx, self._get)
        self._ctx, self._ctx_stamp = ctx, stamp
        return ctx

    # -- connecting -----------------------------------------------------------------------------

    async def connect(self, host: str, port: int, client_id: str = "kproto"):
        """A trio stream to host:port, TLS handshake and SASL login done. Raises OSError / EOFError
        when the connection fails and AuthenticationFailed when the login is refused."""
        stream = await trio.open_tcp_stream(host, port)
        try:
            if self.protocol in TLS_PROTOCOLS:
                stream = trio.SSLStream(stream, self._context(), server_hostname=host)
                try:
                    await stream.do_handshake()
                except (trio.BrokenResourceError, ssl.SSLError) as exc:
                    cause = exc.__cause__ or exc
                    raise AuthenticationFailed(f"SSL handshake with {host}:{port} failed: {cause}") from None
            if self.mechanism is not None:
                if self.error:
                    raise AuthenticationFailed(self.error)
                lifetime_ms = await self._login(stream, host, port, client_id)
                if lifetime_ms > 0:
                    stream = LoggedIn(stream, lifetime_ms)
        except BaseException:
            with trio.CancelScope(shield=True):
                try:
                    await stream.aclose()
                except Exception:
                    pass
            raise
        return stream

    async def _login(self, stream, host, port, client_id) -> None:
        # imported at the first login: a SASL peer listener
        from kproto.messages.sasl_authenticate_request import SaslAuthenticateRequest
        from kproto.messages.sasl_handshake_request import SaslHandshakeRequest
        read = _read_exact_frame_factory()
        corr = 0

        async def call(req, version):
            nonlocal corr
            corr += 1
            await stream.send_all(api.encode_request(req, version, corr, client_id))
            got, resp = api.decode_response(await read(stream), req.API_KEY, version)
            return resp

        resp = await call(SaslHandshakeRequest(mechanism=self.mechanism), 1)
        if resp.error_code:
            raise AuthenticationFailed(f"{host}:{port} refused SASL mechanism {self.mechanism} "
                                       f"(error {resp.error_code}; enabled: {', '.join(resp.mechanisms or [])})")
        exchange = self._exchange()
        token = next(exchange)
        while True:
            resp = await call(SaslAuthenticateRequest(auth_bytes=token), 2)
            if resp.error_code:
                raise AuthenticationFailed(f"Authentication with {host}:{port} as {self.username or 'token'} "
                                           f"({self.mechanism}) failed: {resp.error_message}")
            try:
                token = exchange.send(bytes(resp.auth_bytes or b""))
            except StopIteration:
                return int(getattr(resp, "session_lifetime_ms", 0) or 0)

    def _exchange(self):
        """Generator of client tokens: each yield gets the server's answer."""
        mech = self.mechanism
        if mech == "PLAIN":
            yield b"\x00" + self.username.encode() + b"\x00" + self.password.encode()
            return
        if mech == "OAUTHBEARER":
            yield _unsecured_token_message(self._jaas)
            return
        hash_name = "sha256" if mech == "SCRAM-SHA-256" else "sha512"
        nonce = base64.b64encode(os.urandom(18)).decode()
        user = self.username.replace("=", "=3D").replace(",", "=2C")
        first_bare = f"n={user},r={nonce}"
        server_first = (yield f"n,,{first_bare}".encode()).decode()
        fields = dict(p.split("=", 1) for p in server_first.split(",") if "=" in p)
        if not fields.get("r", "").startswith(nonce):
            raise AuthenticationFailed("Invalid SCRAM server first message: nonce mismatch")
        salted = hashlib.pbkdf2_hmac(hash_name, self.password.encode(), base64.b64decode(fields["s"]),
                                     int(fields["i"]))
        client_key = hmac.new(salted, b"Client Key", hash_name).digest()
        stored = hashlib.new(hash_name, client_key).digest()
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={fields['r']}"
        auth_message = f"{first_bare},{server_first},{without_proof}".encode()
        signature = hmac.new(stored, auth_message, hash_name).digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
        server_final = (yield f"{without_proof},p={proof}".encode()).decode()
        server_key = hmac.new(salted, b"Server Key", hash_name).digest()
        expected = base64.b64encode(hmac.new(server_key, auth_message, hash_name).digest()).decode()
        if server_final != f"v={expected}":
            raise AuthenticationFailed("Invalid SCRAM server signature")


def _unsecured_token_message(options: dict) -> bytes:
    """Kafka's OAuthBearerUnsecuredLoginCallbackHandler: an unsigned JWS for the configured subject."""
    def b64(obj) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).decode().rstrip("=")
    now = time.time()
    lifetime = int(options.get("unsecuredLoginLifetimeSeconds", "3600") or 3600)
    claims = {"sub": options["unsecuredLoginStringClaim_sub"], "iat": int(now), "exp": int(now) + lifetime}
    token = f"{b64({'alg': 'none'})}.{b64(claims)}."
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


# -- from the broker's configuration ---------------------------------------------------------------

def _mechanism(config, key: str) -> str:
    try:
        value = config.get(key)
    except KeyError:
        value = None
    return str(value or "GSSAPI").strip().upper()


def _enabled(config, listener: str) -> list[str]:
    value = listener_value(config, listener, "sasl.enabled.mechanisms") or []
    if isinstance(value, str):
        value = value.split(",")
    return [m.strip().upper() for m in value if m.strip()]


def _multi_node(config) -> bool:
    k = config.kraft
    return k is not None and (len(k.voters) > 1 or not k.is_controller or bool(k.bootstrap_servers))


def inter_broker(config) -> Outbound | None:
    """The inter-broker listener's client settings; None on a controller-only node."""
    peer = inter_broker_listener(config)
    if peer is None:
        return None
    name, protocol = peer
    mechanism = None
    if protocol in SASL_PROTOCOLS:
        mechanism = _mechanism(config, "sasl.mechanism.inter.broker.protocol")
        if mechanism not in _enabled(config, name):
            # KafkaConfig.validateValues
            raise ConfigError("requirement failed: sasl.mechanism.inter.broker.protocol must be included in "
                              "sasl.enabled.mechanisms when SASL is used for inter-broker communication")
    return Outbound(config, name, protocol, mechanism, "inter-broker", strict=_multi_node(config))


def controller(config) -> Outbound | None:
    """The controller listener's client settings (raft between voters, broker to controller RPCs)."""
    peer = controller_listener(config)
    if peer is None:
        return None
    name, protocol = peer
    k = config.kraft
    mechanism = None
    if protocol in SASL_PROTOCOLS:
        mechanism = _mechanism(config, "sasl.mechanism.controller.protocol")
        if k.is_controller and mechanism not in _enabled(config, name):
            raise ConfigError(f"requirement failed: sasl.mechanism.controller.protocol must be included in "
                              f"sasl.enabled.mechanisms of controller listener {name} when SASL is used for "
                              f"controller communication")
    return Outbound(config, name, protocol, mechanism, "controller", strict=_multi_node(config))

"""Security of the controller listener, as Kafka's controller applies it: the listener's protocol
from `listener.security.protocol.map` (TLS with the listener's `ssl.*` keys, SASL with its
`sasl.enabled.mechanisms` and JAAS config, the same code as the client listeners), and
CLUSTER_ACTION on the cluster for what only brokers and controllers send there (Vote,
BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot, BrokerRegistration, BrokerHeartbeat,
AllocateProducerIds, Envelope), checked when an authorizer is configured.

Outgoing connections (raft to the other voters, a broker's RPCs and forwarded requests to the
active controller) log in with broker/security/outbound.py.

The principal inside an Envelope is serialized as Kafka's DefaultKafkaPrincipalBuilder does
(DefaultPrincipalData, prefixed with its version as an int16), the client's address as its raw
IPv4/IPv6 bytes."""
from __future__ import annotations

import ipaddress
import logging
import ssl
import struct

import trio

from kproto import api
from kproto.api import ApiKey
from kproto.messages.default_principal_data import DefaultPrincipalData

from broker.security.principal import ANONYMOUS

log = logging.getLogger("kproto.quorum")

HANDSHAKE_TIMEOUT_S = 30.0
_VERSION = struct.Struct(">h")
# what a SASL connection may send before its login completes
_SASL_APIS = (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
RAFT_APIS = (52, 53, 54, 1, 59, 82)   # Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot,
#                                        UpdateRaftVoter: CLUSTER_ACTION
VOTER_CHANGES = (80, 81)                 # AddRaftVoter, RemoveRaftVoter: ALTER on the cluster (an operator's)


class ControllerConn:
    """An incoming connection on the controller listener (what the dispatcher's SASL handlers
    and the authorizer read from a client connection)."""
    __slots__ = ("transport", "peer", "listener", "client_software", "session", "forwarded")

    def __init__(self, peer, listener, session):
        self.transport = None
        self.peer = peer
        self.listener = listener
        self.client_software = None
        self.session = session
        self.forwarded = False


def serialize_principal(principal: str, token_authenticated: bool = False) -> bytes:
    ptype, _, name = principal.partition(":")
    data = DefaultPrincipalData(type=ptype, name=name, token_authenticated=bool(token_authenticated))
    return _VERSION.pack(DefaultPrincipalData.MAX_VERSION) + data.encode(DefaultPrincipalData.MAX_VERSION)


def deserialize_principal(data: bytes) -> tuple[str, bool] | None:
    """(principal, token authenticated) of an Envelope's request_principal; None when empty."""
    if not data:
        return None
    version = _VERSION.unpack_from(data, 0)[0]
    p = DefaultPrincipalData.decode(bytes(data), version, 2)
    return f"{p.type}:{p.name}", p.token_authenticated


def address_bytes(host: str) -> bytes:
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return b"\x7f\x00\x00\x01"


def address_text(data: bytes) -> str:
    try:
        return str(ipaddress.ip_address(bytes(data)))
    except ValueError:
        return ""


class ControllerListenerSecurity:
    def __init__(self, broker, listener: str):
        self.broker = broker
        self.security = broker.security
        self.listener = listener
        self.protocol = self.security.protocols.get(listener) or \
            broker.config.listener_security_protocol_map.get(listener, "PLAINTEXT")
        self.dispatcher = None
        self.controller_apis = None   # broker/quorum/controller_apis.py: the controller's ApiVersions

    @property
    def authorizer(self):
        return getattr(self.broker, "authorizer", None)

    async def accept(self, stream):
        from broker.security.session import Session
        try:
            peer = stream.socket.getpeername()
        except (OSError, AttributeError):
            peer = None
        host = peer[0] if peer else ""
        session = Session(self.security, self.listener, self.protocol, host)
        tls = self.security.tls.get(self.listener)
        if tls is not None:
            stream = trio.SSLStream(stream, tls.context(), server_side=True)
            with trio.move_on_after(HANDSHAKE_TIMEOUT_S) as scope:
                try:
                    await stream.do_handshake()
                except (trio.BrokenResourceError, ssl.SSLError) as exc:
                    log.warning("Failed authentication with %s (SSL handshake failed: %s)", host,
                                exc.__cause__ or exc)
                    return None
            if scope.cancelled_caught:
                log.warning("Failed authentication with %s (SSL handshake timed out)", host)
                return None
            der = stream.getpeercert(binary_form=True)
            if der:
                from broker.security.principal import NoMatchingRule, certificate_dn
                try:
                    name = self.security.mapper.principal_name(certificate_dn(der))
                except (NoMatchingRule, ValueError) as exc:
                    log.warning("Failed authentication with %s (%s)", host, exc)
                    return None
                session.cert_principal = "User:" + name
                if self.protocol == "SSL":
                    session.principal = session.cert_principal
        return stream, ControllerConn(peer, self.listener, session)

    async def screen(self, conn, frame):
        """The SASL exchange and ApiVersions are answered here; raft requests need CLUSTER_ACTION."""
        from broker.net.transport import CloseConnection
        session = conn.session
        if session.raw_tokens:
            return await self._answer(frame, conn)
        try:
            key = api.peek_header(frame)[0]
        except Exception as exc:
            raise CloseConnection(f"malformed request: {exc}") from None
        if key == ApiKey.API_VERSIONS and self.controller_apis is not None:
            # the controller's API set, before a login too (as Kafka's ControllerApis)
            answer = await self._api_versions(frame)
            if answer is not None:
                return answer
        if session.sasl and (not session.authenticated or key in _SASL_APIS):
            return await self._answer(frame, conn)
        if session.sasl and session.expired():
            raise CloseConnection("the SASL session expired and was not re-authenticated")
        if key == ApiKey.API_VERSIONS:
            return await self._answer(frame, conn)
        if (key in RAFT_APIS and not self.may_cluster_action(conn)) or \
                (key in VOTER_CHANGES and not self.may_cluster_action(conn, "ALTER")):
            # as Kafka's ControllerApis: the raft request is answered CLUSTER_AUTHORIZATION_FAILED
            from kproto.error_response import error_response
            from kproto.errors import ErrorCode
            try:
                header, request = api.decode_request(frame)
            except Exception as exc:
                raise CloseConnection(f"malformed request: {exc}") from None
            version = header.request_api_version
            response = error_response(key, version, request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            return b"".join(bytes(c) for c in self.dispatcher._frame(key, version, header.correlation_id,
                                                                       response))
        return None

    async def _api_versions(self, frame):
        try:
            header, request = api.decode_request(frame)
        except Exception:
            return None   # (a version above the range: the shared handler's UNSUPPORTED_VERSION answer)
        version = header.request_api_version
        response = await self.controller_apis.api_versions(version, request)
        return b"".join(bytes(c) for c in self.dispatcher._frame(ApiKey.API_VERSIONS, version,
                                                                   header.correlation_id, response))

    async def _answer(self, frame, conn) -> bytes:
        chunks = await self.dispatcher.handle(frame, conn)
        return b"".join(bytes(c) for c in chunks or [])

    def may_cluster_action(self, conn, operation: str = "CLUSTER_ACTION") -> bool:
        authorizer = self.authorizer
        if authorizer is None:
            return True
        from broker.security.acls import CLUSTER, CLUSTER_NAME, OPS
        session = getattr(conn, "session", None)
        principal = session.principal if session is not None else ANONYMOUS
        host = session.peer_host if session is not None else ""
        ok = authorizer.authorize(principal, host, OPS[operation], CLUSTER, CLUSTER_NAME)
        if not ok:
            log.info("Principal = %s is Denied operation = %s from host = %s on resource = "
                     "Cluster:LITERAL:kafka-cluster", principal, operation, host)
        return ok


def install(quorum, broker) -> None:
    """Secure the quorum shell's connections as the configuration says (broker.security set)."""
    security = getattr(broker, "security", None)
    if security is None:
        return
    shell = quorum.shell
    out = getattr(security, "controller_client", None)
    if out is not None and out.secured:
        shell.connect = out.connect
    k = broker.config.kraft
    if k.is_controller and k.controller_listener_names:
        guard = ControllerListenerSecurity(broker, k.controller_listener_names[0])
        if guard.protocol != "PLAINTEXT" or guard.authorizer is not None:
            guard.dispatcher = quorum.dispatcher
            guard.controller_apis = getattr(quorum, "controller_apis", None)
            shell.accept = guard.accept
            shell.screen = guard.screen
            quorum.listener_security = guard

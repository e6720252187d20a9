"""The broker's security services: TLS contexts per listener, new
connections' sessions, SASL mechanisms and their credentials."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from broker.config.types import ConfigError
from broker.security.principal import NoMatchingRule, SslPrincipalMapper, certificate_dn
from broker.security.session import Session
from broker.security.settings import controller_listener, inter_broker_listener, listener_value
from broker.net.transport import Transport

if TYPE_CHECKING:
    from broker.security.tls import ListenerTls

# (the SASL mechanisms, JAAS parser, TLS contexts, ACLs and delegation-token credentials are
# imported where first needed: a PLAINTEXT listener without an authorizer runs none of them)

log = logging.getLogger("kproto.security")

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
JWKS_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"


class SecurityManager:
    def __init__(self, broker):
        self.broker = broker
        self.config = broker.config
        self.protocols = {e.name: e.security_protocol for e in self.config.listeners}
        self.tls: dict[str, ListenerTls] = {}
        self.mapper = SslPrincipalMapper(self.config.get("ssl.principal.mapping.rules"))
        self._jaas: dict[tuple[str, str], list] = {}
        self._validators = {}
        self.authorizer = None
        if (self.config.get("authorizer.class.name") or "").strip():
            from broker.security.acls import authorizer_for   # imported at first use: an authorizer is set
            self.authorizer = authorizer_for(self.config, broker.image)
        from broker.security.quotas import QuotaManager
        self.quotas = QuotaManager(self.config, broker.image)
        self._token_credentials = None   # built at the first SCRAM login with a token (token_credentials)
        from broker.security.connections import ConnectionLimits
        self.limits = ConnectionLimits(self.config)
        self.limits.image = broker.image
        for name, protocol in self.protocols.items():
            if protocol in ("SSL", "SASL_SSL"):
                from broker.security.tls import ListenerTls   # imported at first use: a TLS listener
                self.tls[name] = ListenerTls(self.config, name, protocol)
                self.tls[name].context()   # refuse to start with unusable TLS settings
            if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
                unsupported = [m for m in self.enabled_mechanisms(name) if m not in SUPPORTED_MECHANISMS]
                if unsupported:
                    # GSSAPI is Kafka's default: a SASL listener needs sasl.enabled.mechanisms set
                    raise ConfigError(f"SASL mechanism(s) {', '.join(unsupported)} of listener {name} are not "
                                      f"supported by kproto (set sasl.enabled.mechanisms to some of "
                                      f"{', '.join(SUPPORTED_MECHANISMS)})")
                for mech in self.enabled_mechanisms(name):
                    if mech == "PLAIN":
                        if self._plain_callback(name) is None:
                            self._plain_users(name)
                    elif mech == "OAUTHBEARER":
                        self._oauth_validator(name)
        # this node's own connections to its peers' inter-broker and controller listeners: built
        # now when TLS or SASL is to be checked (bad settings stop the start), else at first use
        self._outbound = None
        peers = (inter_broker_listener(self.config), controller_listener(self.config))
        if any(peer is not None and peer[1] != "PLAINTEXT" for peer in peers):
            self._peer_clients()

    def _peer_clients(self):
        """(inter-broker, controller) Outbound settings, built once."""
        if self._outbound is None:
            # imported at first use: a node whose peer listeners are PLAINTEXT (a single node among
            # them) needs them only once it connects to a peer (start-up CPU, issue #26)
            from broker.security import outbound
            self._outbound = (outbound.inter_broker(self.config), outbound.controller(self.config))
        return self._outbound

    @property
    def inter_broker(self):
        return self._peer_clients()[0]

    @property
    def controller_client(self):
        return self._peer_clients()[1]

    # -- connections ---------------------------------------------------------------------------

    async def accept(self, sock, max_frame: int, listener: str, peer):
        """(transport, session) for a new connection; (None, None) when its TLS handshake failed."""
        protocol = self.protocols.get(listener, "PLAINTEXT")
        session = Session(self, listener, protocol, peer[0] if peer else "")
        # counted by the accept loop (limits.opened); every way out of here uncounts it
        try:
            return await self._secure(sock, max_frame, listener, peer, protocol, session)
        except BaseException:
            self.limits.closed(session.peer_host)
            raise

    @property
    def token_credentials(self):
        if self._token_credentials is None:
            from broker.security.tokens import TokenCredentials   # imported at the first token login
            self._token_credentials = TokenCredentials(self.config, self.broker.image)
        return self._token_credentials

    def closed(self, session) -> None:
        self.limits.closed(session.peer_host)

    async def _secure(self, sock, max_frame, listener, peer, protocol, session):
        from broker.security.tls_transport import TlsHandshakeFailed, TlsTransport
        if listener not in self.tls:
            return Transport(sock, max_frame), session
        transport = TlsTransport(sock, max_frame, self.tls[listener].context())
        try:
            await transport.handshake()
        except TlsHandshakeFailed as exc:
            log.warning("Failed authentication with %s (SSL handshake failed: %s)",
                        peer[0] if peer else peer, exc)
            transport.close()
            self.limits.closed(session.peer_host)
            return None, None
        der = transport.peer_certificate()
        if der:
            try:
                name = self.mapper.principal_name(certificate_dn(der))
            except (NoMatchingRule, ValueError) as exc:
                log.warning("Failed authentication with %s (%s)", session.peer_host, exc)
                transport.close()
                self.limits.closed(session.peer_host)
                return None, None
            session.cert_principal = "User:" + name
            if protocol == "SSL":
                session.principal = session.cert_principal
        return transport, session

    # -- SASL ----------------------------------------------------------------------------------

    def enabled_mechanisms(self, listener: str) -> list[str]:
        value = listener_value(self.config, listener, "sasl.enabled.mechanisms") or []
        return [m.strip().upper() for m in value if m.strip()]

    def reauth_ms(self, listener: str, mechanism: str) -> int:
        value = listener_value(self.config, listener, "connections.max.reauth.ms", mechanism)
        return int(value or 0)

    def _jaas_options(self, listener: str, mechanism: str) -> list:
        key = (listener, mechanism)
        if key not in self._jaas:
            text = listener_value(self.config, listener, "sasl.jaas.config", mechanism)
            if not text:
                raise ConfigError(f"Could not find a 'KafkaServer' or '{listener.lower()}.KafkaServer' "
                                  "entry in the JAAS configuration. System property "
                                  "'java.security.auth.login.config' is not set")
            from broker.security.jaas import parse_jaas   # imported at first use: a SASL listener
            self._jaas[key] = parse_jaas(text)
        return self._jaas[key]

    def _plain_users(self, listener: str) -> dict[str, str]:
        users = {}
        for _module, _flag, options in self._jaas_options(listener, "PLAIN"):
            users.update({k[5:]: v for k, v in options.items() if k.startswith("user_")})
        return users

    def _plain_callback(self, listener: str):
        """listener.name.<l>.plain.sasl.server.callback.handler.class naming a Python callable
        `package.module.function(username, password) -> bool`: external verification of PLAIN
        logins (Kafka's custom AuthenticateCallbackHandler, in kproto's language)."""
        path = listener_value(self.config, listener, "sasl.server.callback.handler.class", "PLAIN")
        if not path:
            return None
        module, _, attr = path.rpartition(".")
        try:
            import importlib
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError(f"Invalid value {path} for configuration sasl.server.callback.handler.class: "
                              f"no Python callable by that name ({exc})") from None
        if not callable(fn):
            raise ConfigError(f"sasl.server.callback.handler.class {path} is not callable")

        def verify(user: str, password: str) -> bool:
            try:
                return bool(fn(user, password))
            except Exception:
                log.exception("PLAIN callback %s failed for user %s", path, user)
                return False
        return verify

    def _oauth_validator(self, listener: str):
        if listener in self._validators:
            return self._validators[listener]
        handler = listener_value(self.config, listener, "sasl.server.callback.handler.class", "OAUTHBEARER")
        try:
            options = self._jaas_options(listener, "OAUTHBEARER")[0][2]
        except ConfigError:
            options = {}
        from broker.security import sasl   # imported at first use: a SASL listener
        if handler == JWKS_HANDLER:
            from broker.security.jwks import jwks_validator
            validator = jwks_validator(self.config, listener)
        else:
            validator = sasl.unsecured_validator(options)
        self._validators[listener] = validator
        return validator

    def _scram_credential(self, mechanism: str):
        from broker.security import sasl   # imported at first use: a SASL listener
        mech_id = sasl.SCRAM_MECHANISMS[mechanism][0]

        def lookup(user: str):
            return getattr(self.broker.image, "scram", {}).get((user, mech_id))
        return lookup

    def _token_credential(self, mechanism: str):
        def lookup(token_id: str):
            import time
            now = int(time.time() * 1000)
            cred = self.token_credentials.lookup(token_id, mechanism, now)
            if cred is None:
                return None
            token = self.broker.image.delegation_tokens[token_id]
            return cred, token.owner, token.expiration_timestamp
        return lookup

    def new_mechanism(self, listener: str, name: str):
        from broker.security import sasl   # imported at first use: a SaslHandshake on a SASL listener
        if name == "PLAIN":
            verify = self._plain_callback(listener)
            if verify is None:
                users = self._plain_users(listener)
                verify = lambda u, p: u in users and _equal(users[u], p)  # noqa: E731
            return sasl.Plain(verify)
        if name in sasl.SCRAM_MECHANISMS:
            return sasl.Scram(name, self._scram_credential(name), self._token_credential(name))
        if name == "OAUTHBEARER":
            return sasl.OAuthBearer(self._oauth_validator(listener))
        return None


def _equal(a: str, b: str) -> bool:
    import hmac
    return hmac.compare_digest(a.encode(), b.encode())

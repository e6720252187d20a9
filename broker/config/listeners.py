"""`listeners` / `advertised.listeners` and `listener.security.protocol.map`, parsed as Kafka does.

An endpoint is NAME://host:port; an empty host means the wildcard address (bind on every
interface, and advertise this machine's canonical host name, as Kafka does).
"""
from __future__ import annotations

import re
import socket
from dataclasses import dataclass

from broker.config.types import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_ENDPOINT = re.compile(r"(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)\Z", re.S)
_CSV = re.compile(r"\s*,\s*")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener of `listeners` / `advertised.listeners`: NAME://host:port and its protocol."""
    name: str                # listener name, upper-cased like Kafka's ListenerName.normalised
    host: str                # "" for the wildcard address
    port: int
    security_protocol: str

    @property
    def bind_host(self) -> str:
        return self.host or "0.0.0.0"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def _csv(value: str) -> list[str]:
    value = value.strip()
    return [] if not value else _CSV.split(value)


def parse_security_protocol_map(value: str) -> dict[str, str]:
    """`NAME:PROTOCOL,...` -> {NAME: PROTOCOL}, names and protocols upper-cased."""
    result = {}
    for entry in _csv(value):
        parts = re.split(r"\s*:\s*", entry)
        if len(parts) != 2:
            raise ConfigError("Error parsing configuration property 'listener.security.protocol.map': "
                              "Malformed key-value pair at " + entry)
        name, protocol = parts[0].upper(), parts[1].upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"Invalid security protocol `{parts[1]}` defined in "
                              "listener.security.protocol.map")
        result[name] = protocol
    return result


def parse_listeners(value: str, protocol_map: dict[str, str], *,
                    require_distinct_ports: bool = True) -> list[Endpoint]:
    """A listeners string -> endpoints (Kafka's CoreUtils.listenerListToEndPoints, IPv4/IPv6 port
    sharing left out: two listeners on one non-zero port are refused)."""
    def fail(reason: str) -> ConfigError:
        return ConfigError(f"Error creating broker listeners from '{value}': {reason}")

    endpoints = []
    for entry in _csv(value):
        m = _ENDPOINT.match(entry)
        if not m:
            raise fail(f"Unable to parse {entry} to a broker endpoint")
        name = m.group(1).upper()
        port = int(m.group(3))
        if not -(1 << 31) <= port < (1 << 31):
            raise fail(f"Unable to parse {entry} to a broker endpoint")
        protocol = protocol_map.get(name)
        if protocol is None:
            raise fail(f"No security protocol defined for listener {name}")
        endpoints.append(Endpoint(name, m.group(2), port, protocol))
    names = [e.name for e in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(f"requirement failed: Each listener must have a different name, listeners: {value}")
    if require_distinct_ports:
        ports = [e.port for e in endpoints if e.port != 0]
        for port in ports:
            if ports.count(port) > 1:
                raise ConfigError("requirement failed: Each listener must have a different port, "
                                  f"listeners: {value}")
    return endpoints


def canonical_local_host() -> str:
    """What Kafka advertises for a wildcard host: InetAddress.getLocalHost().getCanonicalHostName()."""
    return socket.getfqdn()

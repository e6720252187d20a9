"""Per-listener lookup of security configs, as Kafka resolves them:
`listener.name.<listener>.<key>` first, then `<key>` (and for SASL
mechanism configs `listener.name.<listener>.<mechanism>.<key>` before both),
and which listeners this node connects to on its peers."""
from __future__ import annotations

from broker.config.types import Password


def _plain(value):
    return value.value if isinstance(value, Password) else value


def listener_value(config, listener: str, key: str, mechanism: str | None = None):
    prefix = f"listener.name.{listener.lower()}."
    names = []
    if mechanism:
        names.append(f"{prefix}{mechanism.lower()}.{key}")
    names += [prefix + key, key]
    for name in names:
        try:
            value = config.get(name)
        except KeyError:
            continue
        if value is not None and (name == key or name in config.static_configs
                                  or name in config.dynamic_broker_configs
                                  or name in config.dynamic_default_configs):
            return _plain(value)
    return None


def inter_broker_listener(config) -> tuple[str, str] | None:
    """(name, security protocol) of the listener this node connects to on its peer brokers
    (`inter.broker.listener.name`, else `security.inter.broker.protocol`); None on a
    controller-only node."""
    k = config.kraft
    if k is not None and not k.is_broker:
        return None
    try:
        name = config.get("inter.broker.listener.name")
    except KeyError:
        name = None
    if name:
        name = name.upper()
    else:
        name = str(config.get("security.inter.broker.protocol") or "PLAINTEXT").upper()
    protocol = config.listener_security_protocol_map.get(
        name, name if name in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL") else "PLAINTEXT")
    return name, protocol


def controller_listener(config) -> tuple[str, str] | None:
    """(name, security protocol) of the controller listener this node connects to (the first of
    `controller.listener.names`); None without one."""
    k = config.kraft
    if k is None or not k.controller_listener_names:
        return None
    name = k.controller_listener_names[0]
    return name, config.listener_security_protocol_map.get(name, "PLAINTEXT")

"""Per-listener lookup of security configs, as Kafka resolves them:
`listener.name.<listener>.<key>` first, then `<key>` (and for SASL
mechanism configs `listener.name.<listener>.<mechanism>.<key>` before both)."""
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

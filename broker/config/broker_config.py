"""The broker's configuration: Kafka's property names, defaults, precedence and messages.

Layers, most specific first (DescribeConfigs reports which one a value came from):
  dynamic per-broker (DYNAMIC_BROKER_CONFIG) > dynamic cluster default (DYNAMIC_DEFAULT_BROKER_CONFIG)
  > static (STATIC_BROKER_CONFIG: kproto's embedded single-node file + server.properties + --set)
  > Kafka's built-in defaults (DEFAULT_CONFIG).

The embedded single-node settings are those of Kafka's sample config/kraft/server.properties
(the file the observed Kafka broker ran with), adapted to kproto's ports and data directory, so an
unconfigured kproto describes itself like that broker. Embedded settings tied to ones the user
changes give way to them: setting `listeners` drops the embedded `advertised.listeners` (Kafka then
advertises `listeners`) and re-derives the single-node `controller.quorum.voters`; setting `log.dir`
drops the embedded `log.dirs`; setting `broker.id` drops the embedded `node.id`.
"""
from __future__ import annotations

import logging
import os
import re
from typing import Iterable, Mapping

from broker.config import kraft
from broker.config.catalog import (
    BROKER_CONFIGS, DYNAMIC_ONLY_BROKER_CONFIGS, INTERNAL_BROKER_CONFIGS, TOPIC_CONFIGS, broker_config_type,
    broker_synonyms)
from broker.config.listeners import (
    Endpoint, canonical_local_host, parse_listeners, parse_security_protocol_map)
from broker.config.properties import load_properties
from broker.config.types import ConfigError, ConfigSource, ConfigType, parse_value
from kproto.errors import ErrorCode

log = logging.getLogger(__name__)

KPROTO_DEFAULT_PORT = 9092
KPROTO_CONTROLLER_PORT = 9093

# kproto's single-node settings: Kafka's sample config/kraft/server.properties, with kproto's
# addresses and data directory.
EMBEDDED_CONFIG: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    # no CONTROLLER listener nor quorum voters: nothing would listen there
    # (a user's `listeners` with a controller listener derives the voters)
    "listeners": f"PLAINTEXT://127.0.0.1:{KPROTO_DEFAULT_PORT}",
    "inter.broker.listener.name": "PLAINTEXT",
    "advertised.listeners": f"PLAINTEXT://127.0.0.1:{KPROTO_DEFAULT_PORT}",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map":
        "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    "num.network.threads": "3",
    "num.io.threads": "8",
    "socket.send.buffer.bytes": "102400",
    "socket.receive.buffer.bytes": "102400",
    "socket.request.max.bytes": "104857600",
    "log.dirs": "./kproto-data",
    "num.partitions": "1",
    "num.recovery.threads.per.data.dir": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "log.retention.hours": "168",
    "log.segment.bytes": "1073741824",
    "log.retention.check.interval.ms": "300000",
}

# embedded key -> user-set keys that make it give way (unless the user also sets the key itself)
_EMBEDDED_YIELDS_TO = {
    "advertised.listeners": ("listeners",),
    "controller.quorum.voters": ("listeners", "node.id", "broker.id", "controller.listener.names"),
    "log.dirs": ("log.dir",),
    "node.id": ("broker.id",),
}

_INTEGER_TYPES = (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG)


def parse_override(arg: str) -> tuple[str, str]:
    """A `--set key=value` argument -> (key, value)."""
    key, sep, value = arg.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"Invalid --set argument '{arg}': expected key=value")
    return key.strip(), value


def _known_type(name: str) -> ConfigType | None:
    """Type of a config name the broker understands (listener overrides take their base's type)."""
    type_ = broker_config_type(name)
    return None if type_ is ConfigType.UNKNOWN else type_


def _check(name: str, raw: str | None):
    """Parse and validate one broker config value."""
    type_ = _known_type(name)
    if type_ is None:
        return raw
    value = parse_value(name, type_, raw)
    key = BROKER_CONFIGS.get(name) or DYNAMIC_ONLY_BROKER_CONFIGS.get(name) or INTERNAL_BROKER_CONFIGS.get(name)
    if key is not None and key.validator is not None:
        key.validator(name, value)
    return value


_DEFAULT_VALUES = {name: _check(name, key.default) for name, key in BROKER_CONFIGS.items()}


class BrokerConfig:
    """Effective broker configuration. Build with `BrokerConfig.load(...)` (embedded defaults +
    properties file + overrides) or `BrokerConfig(static)` with the complete static map."""

    def __init__(self, static: Mapping[str, str] | None = None, *,
                 dynamic_broker: Mapping[str, str] | None = None,
                 dynamic_default: Mapping[str, str] | None = None, embedded_quorum: bool = False):
        static = dict(static or {})
        # kproto's embedded single-node quorum: the user configured nothing about the quorum and
        # there is no controller listener (nothing would listen on one: a one-voter quorum has no peers)
        self._embedded_quorum = embedded_quorum
        # broker.id and node.id are one setting in KRaft (KafkaConfig.populateSynonyms)
        if "broker.id" in static and "node.id" not in static:
            static["node.id"] = static["broker.id"]
        elif "node.id" in static and "broker.id" not in static:
            static["broker.id"] = static["node.id"]
        self._static = static
        self._dynamic_default: dict[str, str] = {}
        self._dynamic_broker: dict[str, str] = {}
        # kproto.* keys are kproto's own settings (kproto.metrics.listener), not unknown ones
        # (a dynamic-only config such as leader.replication.throttled.rate is unknown to Kafka's
        # static KafkaConfig too: warned about, and not a rate)
        # and keys under the storage plugin's prefix (rsm.config.*) are the tiered store's settings
        # (broker/tiered/object_store.py checks them), handed over as Kafka hands them to its plugin
        # as are the metadata manager's (rlmm.config.*: broker/tiered/settings.py reads them)
        # (and Kafka 4's remote.list.offsets.request.timeout.ms, which broker/tiered/settings.py reads)
        own = ("kproto.", "schema.registry.", static.get("remote.log.storage.manager.impl.prefix") or "rsm.config.",
               static.get("remote.log.metadata.manager.impl.prefix") or "rlmm.config.",
               "remote.list.offsets.request.timeout.ms")
        self.unknown_keys: list[str] = [k for k in static if (_known_type(k) is None
                                        or k in DYNAMIC_ONLY_BROKER_CONFIGS) and not k.startswith(own)]
        self.warnings: list[str] = [
            f"The configuration '{k}' was supplied but isn't a known config." for k in self.unknown_keys]
        for w in self.warnings:
            log.warning(w)
        self._values: dict[str, object] = {}
        self._rebuild(self._static, {}, {})
        if dynamic_broker or dynamic_default:
            self.set_dynamic(per_broker=dynamic_broker or {}, cluster_default=dynamic_default or {})

    @classmethod
    def load(cls, path: str | os.PathLike | None = None,
             overrides: Iterable[str] | Mapping[str, str] = (), *,
             embedded_defaults: bool = True) -> "BrokerConfig":
        """kproto's embedded single-node settings, then a server.properties file, then overrides
        (`key=value` strings as given to `--set`, or a mapping)."""
        user: dict[str, str] = {}
        if path is not None:
            user.update(load_properties(path))
        pairs = overrides.items() if isinstance(overrides, Mapping) else map(parse_override, overrides)
        for k, v in pairs:
            user.pop(k, None)
            user[k] = v
        if not embedded_defaults:
            return cls(user)
        static = {k: v for k, v in EMBEDDED_CONFIG.items()
                  if k in user or not any(t in user for t in _EMBEDDED_YIELDS_TO.get(k, ()))}
        static.update(user)
        embedded_quorum = _embedded_single_node_quorum(static, user)
        # (a dynamic quorum, controller.quorum.bootstrap.servers, has no voters to derive: Kafka's
        # config/kraft/reconfig-server.properties)
        if "controller.quorum.voters" not in static and not embedded_quorum \
                and not static.get("controller.quorum.bootstrap.servers", "").strip():
            voters = _single_node_voters(static)
            if voters:
                static["controller.quorum.voters"] = voters
        return cls(static, embedded_quorum=embedded_quorum)

    # -- layers --------------------------------------------------------------------------------

    def _rebuild(self, static, dynamic_default, dynamic_broker) -> None:
        values = dict(_DEFAULT_VALUES)
        layered = {**static, **dynamic_default, **dynamic_broker}
        for name, raw in layered.items():
            if name in DYNAMIC_ONLY_BROKER_CONFIGS and name not in dynamic_default and name not in dynamic_broker:
                values[name] = raw   # given statically: not validated (Kafka does not know it there)
                continue
            values[name] = _check(name, raw)
        self._derived_checks(values)
        self._values = values

    def _derived_checks(self, values) -> None:
        protocol_map = parse_security_protocol_map(values["listener.security.protocol.map"])
        names = values["controller.listener.names"]
        controller_names = [n.strip().upper() for n in names.split(",")] if names else []
        if "listener.security.protocol.map" not in self._static:
            # KRaft maps controller listeners to PLAINTEXT when the map was left at its default
            for n in controller_names:
                protocol_map.setdefault(n, "PLAINTEXT")
        listeners = parse_listeners(values["listeners"], protocol_map)
        advertised_text = values["advertised.listeners"]
        advertised = (listeners if advertised_text is None else
                      parse_listeners(advertised_text, protocol_map, require_distinct_ports=False))
        for e in advertised:
            if e.host == "0.0.0.0":
                raise ConfigError("requirement failed: advertised.listeners cannot use the nonroutable "
                                  "meta-address 0.0.0.0. Use a routable IP address.")
        if not _log_dirs(values):
            raise ConfigError("requirement failed: At least one log directory must be defined via "
                              "log.dirs or log.dir.")
        # Kafka's KRaft start-up refusals (broker/config/kraft.py); None without process.roles
        self._kraft = kraft.validate(values, self._static, listeners, advertised, controller_names,
                                     protocol_map, _log_dirs(values), embedded_quorum=self._embedded_quorum)
        # group.consumer.* bounds (KIP-848 consumer groups), checked at start-up as Kafka does
        from broker.config.groups import check_consumer_bounds
        check_consumer_bounds(lambda key, default: default if values.get(key) is None else int(values[key]))
        self._protocol_map = protocol_map
        self._controller_names = controller_names
        self._listeners = listeners
        self._advertised = advertised

    @property
    def static_configs(self) -> Mapping[str, str]:
        """The static layer as given (after broker.id/node.id mirroring)."""
        return self._static

    @property
    def dynamic_broker_configs(self) -> Mapping[str, str]:
        return self._dynamic_broker

    @property
    def dynamic_default_configs(self) -> Mapping[str, str]:
        return self._dynamic_default

    def set_dynamic(self, *, per_broker: Mapping[str, str] | None = None,
                    cluster_default: Mapping[str, str] | None = None) -> None:
        """Replace the dynamic layer(s) (what IncrementalAlterConfigs/AlterConfigs on a BROKER
        resource produced). Only dynamically updatable configs are accepted; errors are
        INVALID_REQUEST, as Kafka reports broker config validation failures."""
        new_broker = dict(self._dynamic_broker if per_broker is None else per_broker)
        new_default = dict(self._dynamic_default if cluster_default is None else cluster_default)
        for layer in (new_broker, new_default):
            static_only = sorted(k for k in layer if not _dynamic(k))
            if static_only:
                raise ConfigError("Cannot update these configs dynamically: Set("
                                  + ", ".join(static_only) + ")", ErrorCode.INVALID_REQUEST)
        try:
            self._rebuild(self._static, new_default, new_broker)   # leaves self unchanged on error
        except ConfigError as e:
            raise ConfigError(e.message, ErrorCode.INVALID_REQUEST) from None
        self._dynamic_broker, self._dynamic_default = new_broker, new_default

    def source_of(self, name: str) -> ConfigSource:
        """Where the effective value of `name` comes from."""
        if name in self._dynamic_broker:
            return ConfigSource.DYNAMIC_BROKER_CONFIG
        if name in self._dynamic_default:
            return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        if name in self._static:
            return ConfigSource.STATIC_BROKER_CONFIG
        return ConfigSource.DEFAULT_CONFIG

    def layers(self):
        """(source, raw string map) from most to least specific; defaults as Kafka's strings."""
        return ((ConfigSource.DYNAMIC_BROKER_CONFIG, self._dynamic_broker),
                (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self._dynamic_default),
                (ConfigSource.STATIC_BROKER_CONFIG, self._static),
                (ConfigSource.DEFAULT_CONFIG, _DEFAULT_STRINGS))

    def names(self) -> list[str]:
        """Every config DescribeConfigs lists: Kafka's known ones plus any other supplied key."""
        extra = [k for layer in (self._static, self._dynamic_default, self._dynamic_broker)
                 for k in layer if k not in BROKER_CONFIGS]
        return list(BROKER_CONFIGS) + list(dict.fromkeys(extra))

    # -- typed access --------------------------------------------------------------------------

    def get(self, name: str):
        """Effective typed value (bool, int, float, str, list[str], Password or None)."""
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(f"Unknown broker config: {name}") from None

    def _typed(self, name: str, types: tuple[ConfigType, ...]):
        key = BROKER_CONFIGS.get(name)
        if key is None:
            raise KeyError(f"Unknown broker config: {name}")
        if key.type not in types:
            raise TypeError(f"{name} is a {key.type.name} config")
        return self._values[name]

    def get_int(self, name: str) -> int | None:
        return self._typed(name, _INTEGER_TYPES)

    get_long = get_int
    get_short = get_int

    def get_bool(self, name: str) -> bool:
        return self._typed(name, (ConfigType.BOOLEAN,))

    def get_double(self, name: str) -> float:
        return self._typed(name, (ConfigType.DOUBLE,))

    def get_str(self, name: str) -> str | None:
        return self._typed(name, (ConfigType.STRING, ConfigType.CLASS))

    def get_list(self, name: str) -> list[str]:
        return self._typed(name, (ConfigType.LIST,))

    def __getitem__(self, name: str):
        return self.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._values

    # -- derived settings (KafkaConfig's computed getters) ---------------------------------------

    @property
    def node_id(self) -> int:
        return self._values["node.id"]

    @property
    def kraft(self) -> "kraft.KRaftSettings | None":
        """Roles, quorum and metadata log settings; None when process.roles is empty."""
        return self._kraft

    @property
    def log_dirs(self) -> list[str]:
        """log.dirs if set, else log.dir (comma-separated either way)."""
        return _log_dirs(self._values)

    @property
    def log_retention_ms(self) -> int:
        """log.retention.ms > log.retention.minutes > log.retention.hours; negative means -1."""
        ms = self._values["log.retention.ms"]
        if ms is None:
            minutes = self._values["log.retention.minutes"]
            ms = minutes * 60_000 if minutes is not None else self._values["log.retention.hours"] * 3_600_000
        return -1 if ms < 0 else ms

    @property
    def log_roll_ms(self) -> int:
        ms = self._values["log.roll.ms"]
        return ms if ms is not None else self._values["log.roll.hours"] * 3_600_000

    @property
    def log_roll_jitter_ms(self) -> int:
        ms = self._values["log.roll.jitter.ms"]
        return ms if ms is not None else self._values["log.roll.jitter.hours"] * 3_600_000

    @property
    def log_flush_interval_ms(self) -> int:
        ms = self._values["log.flush.interval.ms"]
        return ms if ms is not None else self._values["log.flush.scheduler.interval.ms"]

    @property
    def listener_security_protocol_map(self) -> dict[str, str]:
        return dict(self._protocol_map)

    @property
    def controller_listener_names(self) -> list[str]:
        return list(self._controller_names)

    @property
    def listeners(self) -> list[Endpoint]:
        """Every endpoint to bind, controller listeners included."""
        return list(self._listeners)

    @property
    def broker_listeners(self) -> list[Endpoint]:
        """The endpoints clients connect to (controller listeners excluded)."""
        return [e for e in self._listeners if e.name not in self._controller_names]

    def advertised_listeners(self, resolve_wildcard: bool = True) -> list[Endpoint]:
        """advertised.listeners (or listeners when unset) without controller listeners; a wildcard
        host becomes this machine's canonical host name, as Kafka registers it."""
        out = [e for e in self._advertised if e.name not in self._controller_names]
        if resolve_wildcard and any(not e.host for e in out):
            host = canonical_local_host()
            out = [e if e.host else Endpoint(e.name, host, e.port, e.security_protocol) for e in out]
        return out

    def log_config_defaults(self) -> dict[str, object]:
        """Topic config key -> typed value the broker gives topics without overrides
        (KafkaConfig.extractLogConfigMap)."""
        values = {}
        for key in TOPIC_CONFIGS.values():
            if not key.synonyms:
                values[key.name] = _TOPIC_DEFAULTS[key.name]
                continue
            for broker_name, factor in key.synonyms:
                v = self._values[broker_name]
                if v is not None:
                    values[key.name] = v * factor if factor != 1 else v
                    break
        values["retention.ms"] = self.log_retention_ms
        return values


def _dynamic(name: str) -> bool:
    """Dynamically updatable: a dynamic config, or a listener override of one
    (listener.name.<l>.ssl.keystore.location, as Kafka's reconfigurable listeners)."""
    key = BROKER_CONFIGS.get(name) or DYNAMIC_ONLY_BROKER_CONFIGS.get(name)
    if key is not None:
        return key.dynamic
    base = broker_synonyms(name)[-1]
    return base != name and base in BROKER_CONFIGS and BROKER_CONFIGS[base].dynamic


def _log_dirs(values) -> list[str]:
    dirs = values["log.dirs"] if values["log.dirs"] is not None else values["log.dir"]
    return [d for d in re.split(r"\s*,\s*", dirs.strip()) if d] if dirs else []


_DEFAULT_STRINGS = {name: key.default for name, key in BROKER_CONFIGS.items() if key.default is not None}
_TOPIC_DEFAULTS = {key.name: parse_value(key.name, key.type, key.default) for key in TOPIC_CONFIGS.values()}


# the keys that say a user configures the quorum themselves (then no embedded quorum is completed)
_QUORUM_KEYS = ("process.roles", "controller.listener.names", "controller.quorum.voters",
                "controller.quorum.bootstrap.servers")


def _embedded_single_node_quorum(static: Mapping[str, str], user: Mapping[str, str]) -> bool:
    """True when the node is kproto's embedded single-node quorum: the user configured nothing
    about the quorum and no listener is a controller listener. Such a node is its own one voter and
    binds no controller listener (no peer would connect to it); Kafka has no such mode, so a
    server.properties that names the quorum gets all of Kafka's refusals."""
    if any(k in user for k in _QUORUM_KEYS):
        return False
    names = {n.strip().upper() for n in static.get("controller.listener.names", "").split(",") if n.strip()}
    entries = [e.strip() for e in static.get("listeners", "").split(",") if e.strip()]
    return bool(names) and not any(e.split("://", 1)[0].strip().upper() in names for e in entries)


def _single_node_voters(static: Mapping[str, str]) -> str | None:
    """`{node.id}@host:port` of the first controller listener, for a single-node quorum."""
    node_id = static.get("node.id", static.get("broker.id"))
    names = static.get("controller.listener.names", "")
    if node_id is None or not names:
        return None
    try:
        protocol_map = parse_security_protocol_map(
            static.get("listener.security.protocol.map", EMBEDDED_CONFIG["listener.security.protocol.map"]))
        for n in names.split(","):
            protocol_map.setdefault(n.strip().upper(), "PLAINTEXT")
        endpoints = parse_listeners(static.get("listeners", ""), protocol_map)
    except ConfigError:
        return None     # BrokerConfig reports the listener error itself
    for name in names.split(","):
        for e in endpoints:
            if e.name == name.strip().upper():
                host = e.host if e.host not in ("", "0.0.0.0") else "localhost"
                return f"{node_id.strip()}@{host}:{e.port}"
    return None

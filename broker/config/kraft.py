"""KRaft settings: process roles, node id, the controller quorum and the metadata log directory,
checked with the refusals (and the exact wording) of Kafka 3.9's KafkaConfig.validateValues.

Kafka runs in ZooKeeper mode when `process.roles` is empty; kproto has no ZooKeeper mode, so a
config without roles is only good for describing Kafka's built-in defaults, and a broker refuses to
start with it (Kafka's message for the missing `zookeeper.connect`).
"""
from __future__ import annotations

from dataclasses import dataclass

from broker.config.listeners import Endpoint
from broker.config.types import ConfigError
from broker.config.validators import parse_quorum_voters

BROKER_ROLE, CONTROLLER_ROLE = "broker", "controller"
ZOOKEEPER_REFUSAL = "Missing required configuration `zookeeper.connect` which has no default value."


@dataclass(frozen=True)
class KRaftSettings:
    """What the quorum layer needs from the configuration (KafkaConfig's and QuorumConfig's getters)."""
    roles: frozenset
    node_id: int
    voters: dict               # {id: (host, port)} from controller.quorum.voters (static quorum)
    bootstrap_servers: list    # controller.quorum.bootstrap.servers entries (dynamic quorum)
    controller_listener_names: list
    controller_endpoints: list  # the controller listeners this node binds (controller role)
    advertised_controller_endpoints: list  # KafkaConfig.effectiveAdvertisedControllerListeners
    metadata_log_dir: str
    election_timeout_ms: int
    fetch_timeout_ms: int
    election_backoff_max_ms: int
    request_timeout_ms: int
    retry_backoff_ms: int
    append_linger_ms: int
    max_record_bytes_between_snapshots: int
    max_snapshot_interval_ms: int
    max_idle_interval_ms: int

    @property
    def is_broker(self) -> bool:
        return BROKER_ROLE in self.roles

    @property
    def is_controller(self) -> bool:
        return CONTROLLER_ROLE in self.roles

    @property
    def single_node_quorum(self) -> bool:
        """This node is the one and only voter: it can format itself and lead alone."""
        return self.is_controller and list(self.voters) == [self.node_id] and not self.bootstrap_servers


def is_multi_voter(config) -> bool:
    """A node of a replicated quorum: a static one of more than one voter (controller.quorum.voters),
    or a dynamic one (KIP-853: controller.quorum.bootstrap.servers; the voter set is the bootstrap
    checkpoint's, then the log's, so even a lone `--standalone` voter runs raft to admit others).
    (Here, not in broker/quorum/replicated.py: a single node asks this at start and never loads
    the replicated quorum.)"""
    k = config.kraft
    return k is not None and (len(k.voters) > 1 or is_dynamic(k))


def is_dynamic(k) -> bool:
    return not k.voters and bool(k.bootstrap_servers)


def _scala_set(ids) -> str:
    # Scala's immutable Set of up to 4 elements prints in insertion order; voter ids come from a
    # Java HashMap's key set, which iterates small integers in ascending order
    return "Set(" + ", ".join(str(i) for i in sorted(ids)) + ")"


def parse_roles(roles: list[str]) -> frozenset:
    if len(set(roles)) != len(roles):
        raise ConfigError("Duplicate role names found in `process.roles`: ArrayBuffer("
                          + ", ".join(roles) + ")")
    return frozenset(roles)


def validate(values, static, listeners: list[Endpoint], advertised: list[Endpoint],
             controller_names: list[str], protocol_map: dict, log_dirs: list[str], *,
             embedded_quorum: bool = False) -> KRaftSettings | None:
    """Kafka's KRaft start-up refusals, in Kafka's order. None when process.roles is empty."""
    if "node.id" in static and "broker.id" in static and values["node.id"] != values["broker.id"]:
        raise ConfigError("You must set `node.id` to the same value as `broker.id`.")
    roles = parse_roles(values["process.roles"])
    if not roles:
        return None
    node_id = values["node.id"]
    if node_id < 0:
        raise ConfigError("Missing configuration `node.id` which is required when `process.roles` "
                          "is defined (i.e. when running in KRaft mode).")
    voters = parse_quorum_voters(values["controller.quorum.voters"])
    bootstrap = list(values["controller.quorum.bootstrap.servers"])
    controller_listeners = [e for e in listeners if e.name in controller_names]
    embedded = embedded_quorum and roles == {BROKER_ROLE, CONTROLLER_ROLE} and not voters \
        and not bootstrap and not controller_listeners
    if embedded:
        # kproto's embedded single-node quorum (no controller listener): this node is the one voter
        voters = {node_id: ("127.0.0.1", 0)}
    advertised_controller = []
    for name in controller_names:
        e = next((a for a in advertised if a.name == name), None) or \
            next((c for c in controller_listeners if c.name == name), None)
        if e is not None:
            advertised_controller.append(e)
    advertised_broker_names = {e.name for e in advertised if e.name not in controller_names}

    def need(ok: bool, message: str) -> None:
        if not ok:
            raise ConfigError(f"requirement failed: {message}")

    def quorum_defined() -> None:
        if not voters and not bootstrap:
            raise ConfigError("If using process.roles, either controller.quorum.bootstrap.servers must "
                              "contain the set of bootstrap controllers or controller.quorum.voters must "
                              "contain a parseable set of controllers.")

    def no_control_plane_listener() -> None:
        need(values["control.plane.listener.name"] is None,
             "control.plane.listener.name is not supported in KRaft mode.")

    def controller_is_voter() -> None:
        need(not voters or node_id in voters,
             f"If process.roles contains the 'controller' role, the node id {node_id} must be included "
             f"in the set of voters controller.quorum.voters={_scala_set(voters)}")

    def controller_listener_present() -> None:
        need(bool(advertised_controller),
             "controller.listener.names must contain at least one value appearing in the 'listeners' "
             "configuration when running the KRaft controller role")

    def controller_names_in_listeners() -> None:
        names = {e.name for e in listeners}
        need(all(n in names for n in controller_names),
             "controller.listener.names must only contain values appearing in the 'listeners' "
             "configuration when running the KRaft controller role")

    if roles == {BROKER_ROLE}:
        quorum_defined()
        no_control_plane_listener()
        need(node_id not in voters,
             f"If process.roles contains just the 'broker' role, the node id {node_id} must not be "
             f"included in the set of voters controller.quorum.voters={_scala_set(voters)}")
        need(bool(controller_names), "controller.listener.names must contain at least one value when "
                                     "running KRaft with just the broker role")
        need(not controller_listeners,
             "controller.listener.names must not contain a value appearing in the 'listeners' "
             "configuration when running KRaft with just the broker role")
        for name in controller_names:
            if name not in protocol_map:
                raise ConfigError(
                    f"Controller listener with name {name} defined in controller.listener.names not found "
                    "in listener.security.protocol.map  (an explicit security mapping for each controller "
                    "listener is required if listener.security.protocol.map is non-empty, or if there are "
                    "security protocols other than PLAINTEXT in use)")
    elif roles == {CONTROLLER_ROLE}:
        quorum_defined()
        no_control_plane_listener()
        need(len(advertised_controller) == len(listeners),
             "The listeners config must only contain KRaft controller listeners from "
             "controller.listener.names when process.roles=controller")
        controller_is_voter()
        controller_listener_present()
        controller_names_in_listeners()
    else:
        quorum_defined()
        no_control_plane_listener()
        controller_is_voter()
        if not embedded:
            controller_listener_present()
            controller_names_in_listeners()

    if BROKER_ROLE in roles:
        need(bool(advertised_broker_names),
             "There must be at least one broker advertised listener. "
             "Perhaps all listeners appear in controller.listener.names?")
        inter = _inter_broker_listener(values, static, protocol_map)
        ordered = list(dict.fromkeys(e.name for e in advertised if e.name not in controller_names))
        need(inter in advertised_broker_names,
             "inter.broker.listener.name must be a listener name defined in advertised.listeners. "
             f"The valid options based on currently configured listeners are {','.join(ordered)}")
        _inter_broker_sasl(values, static, inter, protocol_map.get(inter, inter), need)
        listener_names = [e.name for e in listeners]
        need(advertised_broker_names <= set(listener_names),
             "advertised.listeners listener names must be equal to or a subset of the ones defined in "
             f"listeners. Found {','.join(ordered)}. The valid options based on the current "
             f"configuration are {','.join(listener_names)}")

    # KafkaMetadataLog's check; its minimum is an internal setting (not described), lowered by tests
    min_segment = int(static.get("metadata.log.segment.min.bytes") or 8 * 1024 * 1024)
    if values["metadata.log.segment.bytes"] < min_segment:
        raise ConfigError(f"Cannot set metadata.log.segment.bytes below {min_segment}: "
                          f"{values['metadata.log.segment.bytes']}")
    return KRaftSettings(
        roles=roles, node_id=node_id, voters=voters, bootstrap_servers=bootstrap,
        controller_listener_names=list(controller_names),
        controller_endpoints=controller_listeners if CONTROLLER_ROLE in roles else [],
        advertised_controller_endpoints=advertised_controller,
        metadata_log_dir=values["metadata.log.dir"] or log_dirs[0],
        election_timeout_ms=values["controller.quorum.election.timeout.ms"],
        fetch_timeout_ms=values["controller.quorum.fetch.timeout.ms"],
        election_backoff_max_ms=values["controller.quorum.election.backoff.max.ms"],
        request_timeout_ms=values["controller.quorum.request.timeout.ms"],
        retry_backoff_ms=values["controller.quorum.retry.backoff.ms"],
        append_linger_ms=values["controller.quorum.append.linger.ms"],
        max_record_bytes_between_snapshots=values["metadata.log.max.record.bytes.between.snapshots"],
        max_snapshot_interval_ms=values["metadata.log.max.snapshot.interval.ms"],
        max_idle_interval_ms=values["metadata.max.idle.interval.ms"],
    )


def _enabled_mechanisms(values, static, listener: str) -> list[str]:
    """sasl.enabled.mechanisms of a listener (its listener.name.<l>. override first)."""
    value = static.get(f"listener.name.{listener.lower()}.sasl.enabled.mechanisms")
    if value is None:
        value = values.get("sasl.enabled.mechanisms") or []
    if isinstance(value, str):
        value = value.split(",")
    return [m.strip().upper() for m in value if m and m.strip()]


def _inter_broker_sasl(values, static, listener: str, protocol: str, need) -> None:
    """KafkaConfig.validateValues: the inter-broker SASL mechanism must be enabled on its listener."""
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return
    mechanism = str(values.get("sasl.mechanism.inter.broker.protocol") or "GSSAPI").strip().upper()
    need(mechanism in _enabled_mechanisms(values, static, listener),
         "sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when SASL is used "
         "for inter-broker communication")


def _inter_broker_listener(values, static, protocol_map) -> str:
    """KafkaConfig.getInterBrokerListenerNameAndSecurityProtocol: the listener name."""
    name = values["inter.broker.listener.name"]
    if name is not None:
        if "security.inter.broker.protocol" in static:
            raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol "
                              "should be set.")
        name = name.upper()
        if name not in protocol_map:
            raise ConfigError(f"Listener with name {name} defined in inter.broker.listener.name not found "
                              "in listener.security.protocol.map.")
        return name
    return values["security.inter.broker.protocol"].upper()

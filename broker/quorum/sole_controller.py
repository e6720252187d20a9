"""The controller listener of a node that is the one voter of a static quorum
(controller.quorum.voters naming only itself: Kafka's quickstart config/kraft/server.properties).

Such a node keeps the single-node metadata path (broker/broker.py: it leads alone, no raft
traffic), but Kafka binds every listener of `listeners`, the controller ones too, and answers
there as its ControllerApis: `kafka-metadata-quorum.sh --bootstrap-controller` and
`kafka-cluster.sh cluster-id --bootstrap-controller` (KIP-919) talk to that port. So the node binds
its controller listeners with a dispatcher restricted to the controller's API set:

- ApiVersions lists the APIs a Kafka 3.9 combined node advertises on its controller listener
  (observed: tests/fixtures/kafka-controller-api-versions.json) that kproto serves here; the
  finalized features are the broker's.
- DescribeCluster answers endpoint_type 2 (CONTROLLER) with this node's controller endpoint on the
  listener the request came in on; endpoint_type 1 gets MISMATCHED_ENDPOINT_TYPE, as Kafka's.
  With an authorizer it needs ALTER on CLUSTER (Kafka's ControllerApis).
- DescribeQuorum and the admin APIs a controller serves (CreateTopics, configs, ACLs, quotas,
  SCRAM, delegation tokens, features, reassignments, voter changes...) are the broker's handlers:
  on a single node the broker and the controller share the one metadata log.
- Any other API (Metadata, Produce, Fetch, ...) is not enabled on a controller listener: Kafka's
  SocketServer closes the connection ("Received request api key ... which is not enabled"), and so
  does this dispatcher.

The raft RPCs (Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot, raft Fetch) and the node-to-
controller RPCs (BrokerRegistration, BrokerHeartbeat, ControllerRegistration, Envelope,
AllocateProducerIds) have no other node to come from in a one-voter static quorum: they are not
served here (a multi-node quorum runs broker/quorum/replicated.py, whose controller listener does).
"""
from __future__ import annotations

import logging

from kproto import api
from kproto._codec import DecodeError
from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.api_versions_response import ApiVersionsResponse
from kproto.messages.describe_cluster_response import DescribeClusterBroker, DescribeClusterResponse

from broker.config.listeners import canonical_local_host
from broker.net.transport import CloseConnection
from broker.server.dispatch import Dispatcher
from broker.handlers import HANDLERS
from broker.server.listener import run_listener

log = logging.getLogger("kproto.quorum")

CONTROLLER_ENDPOINT = 2
# the API keys of a Kafka 3.9 combined node's controller listener (its ApiVersions, observed)
KAFKA_CONTROLLER_API_KEYS = (
    1, 7, 17, 18, 19, 20, 29, 30, 31, 32, 33, 36, 37, 38, 39, 40, 41, 43, 44, 45, 46, 49, 50, 51,
    52, 53, 54, 55, 56, 57, 58, 59, 60, 62, 63, 64, 67, 70, 73, 80, 81, 82)
# raft's Fetch of __cluster_metadata, not a client's Fetch: the broker's handler is not that
_NOT_HERE = {int(ApiKey.FETCH)}
# Kafka's controller: CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
# IDEMPOTENT_WRITE on the cluster (observed 8096)
CONTROLLER_CLUSTER_OPERATIONS = 8096


def controller_endpoints(config) -> list:
    """The controller listeners a sole voter binds (none for the embedded default, whose config
    names no controller listener)."""
    k = config.kraft
    return list(k.controller_endpoints) if k is not None and k.single_node_quorum else []


async def bind(broker, nursery, max_frame: int) -> list:
    """Bind this node's controller listeners (broker.bound gets them, so DescribeQuorum and
    DescribeConfigs name the real ports); returns their NAME://host:port."""
    out = []
    for e in controller_endpoints(broker.config):
        dispatcher = ControllerDispatcher(broker)
        host, port = await nursery.start(run_listener, e.bind_host, e.port, dispatcher, max_frame, e.name)
        broker.bound.append((e.name, host, port))
        out.append(f"{e.name}://{e.host or host}:{port}")
        log.info("controller listener %s://%s:%d", e.name, e.host or host, port)
    return out


class ControllerDispatcher(Dispatcher):
    """The broker's dispatcher with the controller's handler table."""

    def __init__(self, broker):
        super().__init__(broker)
        table = {key: HANDLERS[key] for key in KAFKA_CONTROLLER_API_KEYS
                 if key in HANDLERS and key not in _NOT_HERE}
        lo, hi, _fn = table[ApiKey.API_VERSIONS]
        table[ApiKey.API_VERSIONS] = (lo, hi, self._api_versions)
        lo, hi, _fn = table[ApiKey.DESCRIBE_CLUSTER]
        table[ApiKey.DESCRIBE_CLUSTER] = (lo, hi, _describe_cluster)
        self.handlers = table

    def api_keys(self) -> list:
        return [(key, lo, hi) for key, (lo, hi, _fn) in sorted(self.handlers.items())]

    async def handle(self, frame, conn):
        session = getattr(conn, "session", None)
        if session is None or not session.raw_tokens:   # (bare SASL tokens have no header)
            try:
                key, version, _cid = api.peek_header(frame)
            except DecodeError:
                key = None   # the base class closes with the decoder's message
            if key is not None and key not in self.handlers:
                # Kafka's SocketServer, for an API the listener's ApiVersionManager does not enable
                name = ApiKey(key).name if key in ApiKey._value2member_map_ else str(key)
                raise CloseConnection(f"Received request api key {name} with version {version} which is "
                                      f"not enabled")
        return await super().handle(frame, conn)

    async def _api_versions(self, ctx, req):
        resp = await HANDLERS[ApiKey.API_VERSIONS][2](ctx, req)   # the broker's (features, checks)
        resp.api_keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                         for k, lo, hi in self.api_keys()]
        return resp


def advertised_endpoint(broker, listener: str) -> tuple[str, int]:
    """(host, port) this node advertises for a controller listener (the bound port for port 0, this
    machine's name for a wildcard host, as Kafka registers it)."""
    k = broker.config.kraft
    bound = {name: (host, port) for name, host, port in broker.bound}
    for e in list(k.advertised_controller_endpoints) + list(k.controller_endpoints):
        if e.name == listener:
            return e.host or canonical_local_host(), e.port or bound.get(e.name, ("", 0))[1]
    host, port = bound.get(listener, ("", 0))
    return host, port


async def _describe_cluster(ctx, req):
    from broker.handlers.cluster import AUTHORIZED_OPERATIONS_OMITTED, endpoint_type_error
    refused = endpoint_type_error(ctx.api_version, req, CONTROLLER_ENDPOINT)
    if refused is not None:
        return refused
    broker = ctx.broker
    authorizer = getattr(broker, "authorizer", None)
    if authorizer is not None:
        # "unlike on the broker, DESCRIBE_CLUSTER on the controller requires a high level of
        # permissions" (Kafka's ControllerApis): ALTER on CLUSTER
        from broker.security.authz import ALTER, Check
        if not Check(authorizer, ctx).cluster(ALTER):
            return DescribeClusterResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, brokers=[])
    listener = getattr(ctx.conn, "listener", None) or (broker.config.kraft.controller_listener_names or [None])[0]
    host, port = advertised_endpoint(broker, listener)
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=CONTROLLER_ENDPOINT,
        cluster_id=broker.cluster_id, controller_id=broker.node_id,
        brokers=[DescribeClusterBroker(broker_id=broker.node_id, host=host, port=port, rack=None)],
        cluster_authorized_operations=(CONTROLLER_CLUSTER_OPERATIONS if req.include_cluster_authorized_operations
                                       else AUTHORIZED_OPERATIONS_OMITTED))

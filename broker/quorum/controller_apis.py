"""What the controller listener answers besides raft's RPCs and the brokers' controller RPCs, as
Kafka 3.9's ControllerApis (KIP-919, direct-to-controller admin clients):

- ControllerRegistration (API 70): every controller registers with the active controller (its
  incarnation id, zk_migration_ready=false, its controller listeners' advertised endpoints and its
  supported features); the active controller commits a RegisterControllerRecord, which every node
  applies to its image (MetadataImage.controllers) and snapshots keep. A controller registers
  again with each new active controller whose image does not hold its current incarnation (as
  Kafka's ControllerRegistrationManager).
- ApiVersions: the controller's API set (the APIs the controller listener serves).
- DescribeCluster with endpoint_type=2: the registered controllers' endpoints on the listener the
  request came in on, controller id = the raft leader. ALTER on CLUSTER with an authorizer (Kafka:
  "unlike on the broker, DESCRIBE_CLUSTER on the controller requires a high level of permissions").
- DescribeQuorum: answered by the raft leader (NOT_LEADER_OR_FOLLOWER on the partition elsewhere,
  and the admin client retries at the controller DescribeCluster names); DESCRIBE on CLUSTER.

With these, `kafka-metadata-quorum.sh --bootstrap-controller` and `kafka-cluster.sh
--bootstrap-controller` work against kproto's controllers.
"""
from __future__ import annotations

import logging
import types
import uuid

import trio

from kproto import api
from kproto.errors import ErrorCode, KafkaError

log = logging.getLogger("kproto.quorum")

API_VERSIONS, DESCRIBE_QUORUM, DESCRIBE_CLUSTER, CONTROLLER_REGISTRATION = 18, 55, 60, 70
CONTROLLER_ENDPOINT = 2
# what the controller listener serves (raft, the brokers' RPCs, voter changes, these), as Kafka's
# controller API set; SASL's two only where the listener logs in
_RAFT = (1, 52, 53, 54, 59)
_ALWAYS = _RAFT + (API_VERSIONS, DESCRIBE_QUORUM, 58, DESCRIBE_CLUSTER, 62, 63, 67, CONTROLLER_REGISTRATION,
                   73, 80, 81)
_SASL = (17, 36)
_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
# the cluster operations a Kafka 3.9 controller reports (observed: 8096, the cluster resource's
# operations CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE)
CONTROLLER_CLUSTER_OPERATIONS = 8096
# metadata.version 3.7-IV0: the first with controller registrations (MetadataVersion.isControllerRegistrationSupported)
CONTROLLER_REGISTRATION_MV = 15


class ControllerApis:
    def __init__(self, quorum):
        self.q = quorum
        self.incarnation = uuid.uuid4()   # one per process run, as Kafka's
        self._registered_epoch = None
        self._said_too_old = False

    def supported(self) -> bool:
        """Whether the cluster's metadata.version has controller registrations (3.7-IV0 and later)."""
        return self.q.image.features.get("metadata.version", 0) >= CONTROLLER_REGISTRATION_MV

    # ------------------------------------------------------ registration

    async def registration_loop(self):
        """Register this controller with each new active controller (until its image holds this
        incarnation's record)."""
        q = self.q
        changed = q.leader_changed
        while True:
            if self._registered_epoch == q.shell.leader.epoch:
                await q.next_leadership(1.0, changed)   # registered with this leader: wait for the next
            else:
                await trio.sleep(0.2)
            changed = q.leader_changed   # (before the look below: a change after it wakes the wait)
            leader, epoch = q.active_controller_id, q.shell.leader.epoch
            if leader < 0 or self._registered_epoch == epoch:
                continue
            if not self.supported():
                if not self._said_too_old and "metadata.version" in self.q.image.features:
                    self._said_too_old = True
                    log.info("not sending ControllerRegistrationRequest: the metadata.version is older "
                             "than 3.7-IV0")
                continue
            if self.registered():
                self._registered_epoch = epoch
                continue
            try:
                await q.to_controller(self.registration_request())
            except Exception as exc:
                log.debug("controller registration: %s", exc)

    def registered(self) -> bool:
        r = self.q.image.controllers.get(self.q.node_id)
        return r is not None and r.incarnation_id == self.incarnation

    def endpoints(self) -> list:
        """[(name, host, port, security protocol id)] of this controller's advertised controller
        listeners (the bound port where the configuration says 0)."""
        q = self.q
        k = q.k
        protocols = q.config.listener_security_protocol_map
        bound = {name: port for name, _h, port in getattr(q.broker, "bound", [])}
        out = []
        for e in (k.advertised_controller_endpoints or k.controller_endpoints):
            port = e.port or bound.get(e.name, 0)
            protocol = str(protocols.get(e.name, e.name)).upper()
            out.append((e.name, e.host or "localhost", port, _PROTOCOLS.get(protocol, 0)))
        return out

    def registration_request(self):
        from broker.controller import features
        from kproto.messages.controller_registration_request import (
            ControllerRegistrationRequest, Feature, Listener)
        return ControllerRegistrationRequest(
            controller_id=self.q.node_id, incarnation_id=self.incarnation, zk_migration_ready=False,
            listeners=[Listener(name=n, host=h, port=p, security_protocol=s) for n, h, p, s in self.endpoints()],
            features=[Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                      for n, (lo, hi) in sorted(features.SUPPORTED.items())])

    async def handle_registration(self, req):
        """On the active controller: commit the controller's RegisterControllerRecord."""
        from kproto.messages.controller_registration_response import ControllerRegistrationResponse
        from kproto.metadata.register_controller_record import (
            ControllerEndpoint, ControllerFeature, RegisterControllerRecord)
        q = self.q
        if not q.is_active_controller:
            return ControllerRegistrationResponse(error_code=ErrorCode.NOT_CONTROLLER,
                                                  error_message="This node is not the active controller.")
        if not self.supported():
            return ControllerRegistrationResponse(
                error_code=ErrorCode.UNSUPPORTED_VERSION,
                error_message="The current MetadataVersion is too old to support controller registrations.")
        record = RegisterControllerRecord(
            controller_id=req.controller_id, incarnation_id=req.incarnation_id,
            zk_migration_ready=req.zk_migration_ready,
            end_points=[ControllerEndpoint(name=x.name, host=x.host, port=x.port,
                                           security_protocol=x.security_protocol) for x in req.listeners],
            features=[ControllerFeature(name=f.name, min_supported_version=f.min_supported_version,
                                        max_supported_version=f.max_supported_version) for f in req.features])
        try:
            await q.propose([record], timeout_ms=5000)
        except KafkaError as exc:
            return ControllerRegistrationResponse(error_code=exc.code, error_message=exc.message or None)
        return ControllerRegistrationResponse(error_code=0, error_message=None)

    # ----------------------------------------------------------- admin

    async def serve(self, header, request, conn):
        """The answer to ApiVersions, DescribeCluster or DescribeQuorum on the controller listener,
        or None for another API."""
        key, version = header.request_api_key, header.request_api_version
        if key == API_VERSIONS:
            return await self.api_versions(version, request)
        if key not in (DESCRIBE_CLUSTER, DESCRIBE_QUORUM):
            return None
        if key == DESCRIBE_CLUSTER and not self.supported():
            # checked before the authorization, as Kafka's ControllerApis
            from kproto.messages.describe_cluster_response import DescribeClusterResponse
            return DescribeClusterResponse(
                error_code=ErrorCode.UNSUPPORTED_VERSION, brokers=[],
                error_message="Direct-to-controller communication is not supported with the current "
                              "MetadataVersion.")
        guard = self.q.listener_security
        operation = "ALTER" if key == DESCRIBE_CLUSTER else "DESCRIBE"
        if guard is not None and not guard.may_cluster_action(conn, operation):
            from kproto.error_response import error_response
            return error_response(key, version, request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        if key == DESCRIBE_CLUSTER:
            return self.describe_cluster(version, request, conn)
        return await self.describe_quorum(version, request)

    def api_keys(self) -> list:
        from broker.handlers import HANDLERS
        keys = set(_ALWAYS) | set(self.q.controller_rpcs)
        guard = self.q.listener_security
        if guard is not None and "SASL" in str(guard.protocol).upper():
            keys |= set(_SASL)
        out = []
        for key in sorted(keys):
            lo, hi = api.version_range(key)
            if key in HANDLERS and key not in _RAFT:   # the versions the shared handler serves
                lo, hi = HANDLERS[key][0], HANDLERS[key][1]
            out.append((key, lo, hi))
        return out

    async def api_versions(self, version: int, request):
        from broker.handlers import api_versions as av
        from kproto.messages.api_versions_response import ApiVersionsResponse
        ctx = types.SimpleNamespace(api_version=version, broker=self.q.broker, conn=None)
        resp = await av.api_versions(ctx, request)   # the broker's answer (features), with the controller's APIs
        resp.api_keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                         for k, lo, hi in self.api_keys()]
        return resp

    def describe_cluster(self, version: int, request, conn):
        from broker.handlers.cluster import endpoint_type_error
        from kproto.messages.describe_cluster_response import DescribeClusterBroker, DescribeClusterResponse
        refused = endpoint_type_error(version, request, CONTROLLER_ENDPOINT)
        if refused is not None:
            return refused
        listener = getattr(conn, "listener", None) or (self.q.k.controller_listener_names or [None])[0]
        nodes = []
        for cid, r in sorted(self.q.image.controllers.items()):
            for e in r.end_points:
                if e.name == listener:
                    nodes.append(DescribeClusterBroker(broker_id=cid, host=e.host, port=e.port, rack=None))
                    break
        from broker.handlers.cluster import AUTHORIZED_OPERATIONS_OMITTED
        return DescribeClusterResponse(
            throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=CONTROLLER_ENDPOINT,
            cluster_id=self.q.broker.cluster_id, controller_id=self.q.active_controller_id, brokers=nodes,
            cluster_authorized_operations=(CONTROLLER_CLUSTER_OPERATIONS if request.include_cluster_authorized_operations
                                           else AUTHORIZED_OPERATIONS_OMITTED))

    async def describe_quorum(self, version: int, request):
        from broker.handlers import quorum as shared
        from raft.node import LEADER
        if not shared._valid(request):   # UNKNOWN_TOPIC_OR_PARTITION per partition: the shared handler's answer
            return await shared.describe_quorum(types.SimpleNamespace(broker=self.q.broker, api_version=version),
                                                request)
        if self.q.node.role == LEADER:
            return self.q.describe(version)
        # Kafka's raft client on a non-leader: DescribeQuorumResponse.singletonErrorResponse
        from kproto.messages.describe_quorum_response import DescribeQuorumResponse, PartitionData, TopicData
        return DescribeQuorumResponse(error_code=0, error_message=None, topics=[
            TopicData(topic_name="__cluster_metadata", partitions=[
                PartitionData(partition_index=0, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                              error_message=None, leader_id=0, leader_epoch=0, high_watermark=0,
                              current_voters=[], observers=[])])], nodes=[])


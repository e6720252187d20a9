"""Broker registration and fencing rules of the active controller, as Kafka 3.9's
ClusterControlManager.registerBroker and BrokerHeartbeatManager.calculateNextBrokerState:

- a registration with a new incarnation id while the current registration of that broker id still
  has a valid heartbeat session (registered, unfenced, heard from within broker.session.timeout.ms)
  is refused with DUPLICATE_BROKER_REGISTRATION: two processes started with the same node.id do not
  take the id from each other, and a broker killed -9 and restarted at once waits until its old
  session expires (it is fenced, its leaderships move) before it registers again;
- a new incarnation registers fenced, with a new broker epoch; the same incarnation registering
  again amends its registration and keeps its fenced / in-controlled-shutdown state and its epoch;
- a fenced broker is unfenced by a heartbeat with want_fence=false once its metadata offset has
  reached the offset of its RegisterBrokerRecord (the heartbeat answer's is_caught_up says the same);
  an unfenced broker asking to be fenced is fenced.

Pure functions over the image's registrations; broker/quorum/replicated.py (_register) and
broker/quorum/liveness.py (handle_heartbeat) write the records.
"""
from __future__ import annotations

from kproto.errors import ErrorCode, KafkaError
from kproto.metadata.register_broker_record import BrokerEndpoint, RegisterBrokerRecord

FENCED, UNFENCED = "FENCED", "UNFENCED"


def registration_record(req, existing, valid_session: bool, new_epoch: int,
                        cluster_id: str | None = None) -> RegisterBrokerRecord:
    """The RegisterBrokerRecord for BrokerRegistration `req`, given the broker id's current
    registration (`existing`, or None) and whether that one has a valid session. Raises KafkaError
    (INCONSISTENT_CLUSTER_ID, DUPLICATE_BROKER_REGISTRATION) as Kafka does."""
    if cluster_id and req.cluster_id and req.cluster_id != cluster_id:
        raise KafkaError(ErrorCode.INCONSISTENT_CLUSTER_ID,
                         f"Expected cluster ID {cluster_id}, but got cluster ID {req.cluster_id}")
    same = existing is not None and existing.incarnation_id == req.incarnation_id
    if existing is not None and valid_session and not same:
        raise KafkaError(ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                         "Another broker is registered with that broker id.")
    record = RegisterBrokerRecord(
        broker_id=req.broker_id, incarnation_id=req.incarnation_id, broker_epoch=new_epoch,
        end_points=[BrokerEndpoint(name=lst.name, host=lst.host, port=lst.port,
                                   security_protocol=lst.security_protocol) for lst in req.listeners],
        rack=req.rack, fenced=True, log_dirs=sorted(req.log_dirs or []))   # sorted, as Kafka keeps them
    if same:
        # "Amending registration of broker N": state and epoch kept
        record.fenced = bool(existing.fenced)
        record.in_controlled_shutdown = bool(getattr(existing, "in_controlled_shutdown", False))
        record.broker_epoch = existing.broker_epoch
    return record


def is_caught_up(current_metadata_offset: int, register_offset: int) -> bool:
    """The heartbeat answer's IsCaughtUp (ReplicationControlManager.processBrokerHeartbeat)."""
    return current_metadata_offset >= register_offset


def next_state(fenced: bool, want_fence: bool, current_metadata_offset: int, register_offset: int) -> str:
    """FENCED or UNFENCED after a heartbeat (shutdown requests are broker/quorum/shutdown.py's)."""
    if fenced:
        if not want_fence and is_caught_up(current_metadata_offset, register_offset):
            return UNFENCED
        return FENCED
    return FENCED if want_fence else UNFENCED

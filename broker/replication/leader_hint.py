"""KIP-951: a NOT_LEADER_OR_FOLLOWER answer (Produce v10+, Fetch v12+)
carries the partition's current leader and epoch, and the response lists
that leader's endpoint, so clients move on without a metadata round trip."""
from __future__ import annotations

from broker.metadata.directory_id import replica_in_offline_dir


def current_leader(broker, topic: str, index: int) -> tuple[int, int]:
    t = broker.image.topics.get(topic)
    p = t.partitions.get(index) if t else None
    return (p.leader, p.leader_epoch) if p is not None else (-1, -1)


def node_endpoint(broker, node_id: int, listener: str | None, cls):
    """cls(node_id, host, port, rack) for a registered broker, or None."""
    reg = getattr(broker.image, "brokers", {}).get(node_id)
    if reg is None:
        return None
    eps = list(getattr(reg, "end_points", []) or [])
    ep = next((e for e in eps if e.name == listener), eps[0] if eps else None)
    if ep is None:
        return None
    return cls(node_id=node_id, host=ep.host, port=ep.port, rack=getattr(reg, "rack", None))


LEADER_NOT_AVAILABLE = 5


def offline_replicas(broker, p) -> list[int]:
    """Replicas on brokers that are not registered or are fenced, or in a log dir of their
    broker that failed (KIP-858), as Kafka's metadata cache reports them; none while the
    image has no registrations."""
    regs = getattr(broker.image, "brokers", None)
    if not regs:
        return []
    return [r for r in p.replicas if r not in regs or getattr(regs[r], "fenced", False)
            or replica_in_offline_dir(regs[r], p, r)]


def partition_error(p) -> int:
    """Metadata's partition error: LEADER_NOT_AVAILABLE while it has no leader."""
    return LEADER_NOT_AVAILABLE if p.leader < 0 else 0


def coordinator_node(broker, topic: str, index: int, listener: str | None):
    """FindCoordinator in a multi-node cluster: the leader of the coordinator's partition
    (node id, host, port), or None while it has no leader. None on a single node too
    (the node is the coordinator)."""
    regs = getattr(broker.image, "brokers", None)
    if not regs or getattr(broker, "quorum", None) is None:
        return broker.node_id, None, None
    t = broker.image.topics.get(topic)
    p = t.partitions.get(index) if t else None
    if p is None or p.leader < 0:
        return None
    reg = regs.get(p.leader)
    eps = list(getattr(reg, "end_points", []) or []) if reg is not None else []
    ep = next((e for e in eps if e.name == listener), eps[0] if eps else None)
    if ep is None:
        return None
    return p.leader, ep.host, ep.port

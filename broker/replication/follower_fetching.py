"""Follower fetching for consumers (KIP-392), as Kafka 3.9's ReplicaManager:

- A consumer's Fetch v11+ (it carries client metadata: the rack id) may be
  served by a follower, up to the follower's high watermark (the leader's,
  as its last fetch answer gave it). Older consumers must fetch from the leader.
- With `replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector`
  the leader answers a consumer whose `client.rack` (the request's rack_id)
  names another rack than its own with preferred_read_replica: the most
  caught-up in-sync replica in that rack whose log holds the fetch offset, and
  no records (findPreferredReadReplica). The consumer then fetches there.
  Without a selector (Kafka's default), the leader serves everyone.
"""
from __future__ import annotations

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"


def follower_may_serve(version: int, replica_id: int) -> bool:
    """Kafka's fetchOnlyFromLeader is false for a consumer with client metadata (Fetch v11+)."""
    return version >= 11 and replica_id < 0


def _selector(broker) -> str:
    try:
        return (broker.config.get("replica.selector.class") or "").strip()
    except KeyError:
        return ""


def preferred_read_replica(broker, topic: str, index: int, partition, rack_id: str | None,
                           fetch_offset: int, replica_id: int) -> int:
    """The replica this consumer should read from, or -1 (read here, from the leader)."""
    if replica_id >= 0 or not rack_id or _selector(broker) != RACK_AWARE:
        return -1
    manager = getattr(broker, "replication", None)
    state = manager.leaders.get((topic, index)) if manager is not None else None
    if state is None:
        return -1   # not replicated (or not led here): the leader serves
    racks = {b: info.rack for b, info in broker.controller.brokers().items()}
    own_rack = broker.config.get("broker.rack") or racks.get(broker.node_id)
    if own_rack == rack_id:
        return -1   # the leader is in the client's rack
    endpoints = getattr(broker.image, "brokers", {})
    best, best_key = -1, None
    for b, f in state.followers.items():
        if b not in state.isr or racks.get(b) != rack_id or b not in endpoints:
            continue
        if f.leo < fetch_offset or partition.log_start_offset > fetch_offset:
            continue
        key = (f.leo, f.caught_up_ms)   # most caught up first, then the most recently caught up
        if best_key is None or key > best_key:
            best, best_key = b, key
    return best

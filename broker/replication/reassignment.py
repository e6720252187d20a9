"""Partition reassignment on the controller (KIP-455), as Kafka 3.9's KRaft
controller does it (ReplicationControlManager.alterPartitionReassignment,
PartitionReassignmentReplicas / PartitionReassignmentRevert and the
reassignment steps of PartitionChangeBuilder). Pure: everything returns
PartitionChangeRecords, which reach the image through the metadata log.

- A new target: the partition's replicas become target + (current not in
  target), with adding_replicas = target - current and removing_replicas =
  current - target. The brokers of the adding replicas create the partition
  and catch up with the leader by Fetch; the leader adds them to the ISR
  (AlterPartition) once they have caught up.
- Completion: as soon as the ISR holds every adding replica, the replicas
  become the target, the removing replicas leave the ISR and the replica set
  (their brokers delete the partition), and a new leader is elected from the
  target if the leader was removed. Removing a replica bumps the leader
  epoch (Kafka does, so that the removed replicas' fetches are fenced).
- Cancellation (replicas null): back to the replicas without the adding ones
  (NO_REASSIGNMENT_IN_PROGRESS without a reassignment).
"""
from __future__ import annotations

from kproto.errors import ErrorCode, KafkaError
from kproto.metadata.partition_change_record import PartitionChangeRecord

from broker.replication.brokers import BrokerInfo

NO_LEADER = -1


def in_progress(p) -> bool:
    return bool(getattr(p, "adding_replicas", None) or getattr(p, "removing_replicas", None))


def _acceptable(brokers: dict[int, BrokerInfo], b: int) -> bool:
    info = brokers.get(b)
    return info is not None and info.acceptable_leader


def _complete(replicas, isr, adding, removing):
    """Kafka's PartitionReassignmentReplicas.maybeCompleteReassignment: (replicas, isr) once the ISR
    holds every adding replica (without the removing ones), else None."""
    if not adding and not removing:
        return None
    new_isr = [b for b in isr if b not in removing]
    new_replicas = [b for b in replicas if b not in removing]
    if any(b not in new_isr for b in adding) or not new_isr:
        return None
    return new_replicas, new_isr


def build(topic_id, p, brokers: dict[int, BrokerInfo], replicas, isr, adding, removing):
    """The PartitionChangeRecord taking partition image `p` to this replica set / ISR / reassignment
    state, completing the reassignment when it can, electing a leader from the ISR if the current one
    is no longer a valid one. None if nothing changes."""
    done = _complete(replicas, isr, adding, removing)
    if done is not None:
        replicas, isr = done
        adding, removing = [], []
    leader = p.leader
    if leader not in isr or leader not in replicas or not _acceptable(brokers, leader):
        leader = next((r for r in replicas if r in isr and _acceptable(brokers, r)), NO_LEADER)
    rec = PartitionChangeRecord(partition_id=p.partition, topic_id=topic_id)
    changed = False
    if leader != p.leader or not set(p.replicas) <= set(replicas):
        # a new leader, or replicas removed: the leader epoch moves (the record names the leader)
        rec.leader = leader
        changed = True
    if list(isr) != list(p.isr):
        rec.isr = list(isr)
        changed = True
    if list(replicas) != list(p.replicas):
        rec.replicas = list(replicas)
        changed = True
    if list(adding) != list(getattr(p, "adding_replicas", [])):
        rec.adding_replicas = list(adding)
        changed = True
    if list(removing) != list(getattr(p, "removing_replicas", [])):
        rec.removing_replicas = list(removing)
        changed = True
    return rec if changed else None


def find_partition(image, topic: str, index: int):
    """(topic image, partition image), with Kafka's UNKNOWN_TOPIC_OR_PARTITION messages."""
    t = image.topics.get(topic)
    if t is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic}.")
    p = t.partitions.get(index)
    if p is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic}:{index}.")
    return t, p


def check_target(target: list[int], brokers: dict[int, BrokerInfo] | set[int]) -> None:
    """Kafka's validateManualPartitionAssignment, with its messages (brokers: the registered ones,
    by id); for a reassignment's target and a created topic's manual assignment alike."""
    if not target:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "The manual partition assignment includes an empty replica list.")
    previous = None
    for b in sorted(target):
        if b not in brokers:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment "
                             f"includes broker {b}, but no such broker is registered.")
        if b == previous:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment "
                             f"includes the broker {b} more than once.")
        previous = b


def alter(image, brokers: dict[int, BrokerInfo], topic: str, index: int, target: list[int] | None,
          unclean_default: bool = False):
    """AlterPartitionReassignments for one partition: the record to write (None if nothing changes).
    Raises KafkaError with Kafka's code and message."""
    t, p = find_partition(image, topic, index)
    if target is None:
        return cancel(t, p, brokers, unclean_default)
    target = list(target)
    check_target(target, brokers)
    current = list(p.replicas)
    removing = [b for b in current if b not in target]
    adding = [b for b in target if b not in current]
    replicas = target + removing
    return build(t.topic_id, p, brokers, replicas, list(p.isr), adding, removing)


def cancel(t, p, brokers: dict[int, BrokerInfo], unclean_default: bool = False):
    """Kafka's cancelPartitionReassignment / PartitionReassignmentRevert: back to the replicas
    without the ones being added."""
    if not in_progress(p):
        raise KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)   # Kafka sends no message here
    adding = set(p.adding_replicas)
    replicas = [b for b in p.replicas if b not in adding]
    isr = [b for b in p.isr if b not in adding]
    if not isr:
        v = t.configs.get("unclean.leader.election.enable")
        unclean = unclean_default if v is None else str(v).lower() == "true"
        if not unclean:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Unable to revert partition assignment for {t.name}:{p.partition} because "
                             "it would require an unclean leader election.")
        first = next((r for r in replicas if _acceptable(brokers, r)), None)
        isr = [first] if first is not None else replicas[:1]
    return build(t.topic_id, p, brokers, replicas, isr, [], [])


def in_progress_partitions(image) -> list:
    """(topic image, partition image) of every partition with a reassignment under way."""
    return [(t, p) for t in image.topics.values() for p in t.partitions.values() if in_progress(p)]


def completions(image, brokers: dict[int, BrokerInfo], candidates=None) -> list:
    """The records that finish every reassignment whose adding replicas have all joined the ISR
    (the active controller writes them after each ISR change, as Kafka completes a reassignment in
    the AlterPartition that makes it possible). ``candidates``: in_progress_partitions(image),
    when the caller has it already."""
    out = []
    if candidates is None:
        candidates = in_progress_partitions(image)
    for t, p in candidates:
        if _complete(p.replicas, p.isr, p.adding_replicas, p.removing_replicas) is None:
            continue
        r = build(t.topic_id, p, brokers, list(p.replicas), list(p.isr), list(p.adding_replicas),
                  list(p.removing_replicas))
        if r is not None:
            out.append(r)
    return out


def ongoing(image, topics=None) -> list[tuple[str, object]]:
    """ListPartitionReassignments: (topic name, partition image) of the ongoing reassignments, of
    every topic (topics None) or of the named {topic: [partition indexes]}; unknown names are skipped,
    as Kafka does."""
    out = []
    if topics is None:
        for t in sorted(image.topics.values(), key=lambda t: t.name):
            for p in sorted(t.partitions.values(), key=lambda p: p.partition):
                if in_progress(p):
                    out.append((t.name, p))
        return out
    for name, indexes in topics:
        t = image.topics.get(name)
        if t is None:
            continue
        for i in indexes:
            p = t.partitions.get(i)
            if p is not None and in_progress(p):
                out.append((name, p))
    return out

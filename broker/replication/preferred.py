"""Leader elections asked for by an operator (ElectLeaders, API 43) and the automatic return of
leadership to preferred replicas (auto.leader.rebalance.enable), as Kafka 3.9's controller
(ReplicationControlManager.electLeader and PartitionChangeBuilder) decides them. Pure: the image
and the brokers' states in, per-partition errors and PartitionChangeRecords out.

- PREFERRED (0): ELECTION_NOT_NEEDED when the first replica leads; the first replica becomes
  leader when it is in the ISR and may lead (unfenced, not shutting down); otherwise the current
  leader stays and the answer is PREFERRED_LEADER_NOT_AVAILABLE.
- UNCLEAN (1): ELECTION_NOT_NEEDED when the partition has a leader; otherwise an ISR member that
  may lead, else (whatever unclean.leader.election.enable says, the operator asked for it) the
  first replica that may lead, alone in the ISR and RECOVERING; ELIGIBLE_LEADERS_NOT_AVAILABLE
  when no replica may lead.
- Unknown topics and partitions: UNKNOWN_TOPIC_OR_PARTITION with Kafka's messages.
"""
from __future__ import annotations

from kproto.errors import ErrorCode
from kproto.metadata.partition_change_record import PartitionChangeRecord

from broker.replication.brokers import BrokerInfo
from broker.replication.election import NO_LEADER, RECOVERING

PREFERRED = 0
UNCLEAN = 1


def _ok(brokers: dict[int, BrokerInfo], b: int) -> bool:
    info = brokers.get(b)
    return info is not None and info.acceptable_leader


def _record(topic_id, p, leader: int, isr: list[int] | None = None, recovering: bool = False):
    r = PartitionChangeRecord(partition_id=p.partition, topic_id=topic_id, leader=leader)
    if isr is not None and isr != list(p.isr):
        r.isr = isr
    if recovering:
        r.leader_recovery_state = RECOVERING
    return r


def elect_one(image, brokers, topic: str, index: int, election_type: int):
    """(error code, message, record or None) for one partition."""
    t = image.topics.get(topic)
    if t is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic}", None
    p = t.partitions.get(index)
    if p is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-{index}", None
    preferred = p.replicas[0] if p.replicas else NO_LEADER
    if election_type == UNCLEAN:
        if p.leader != NO_LEADER:
            return ErrorCode.ELECTION_NOT_NEEDED, None, None
        leader = next((r for r in p.replicas if r in p.isr and _ok(brokers, r)), NO_LEADER)
        if leader != NO_LEADER:
            return ErrorCode.NONE, None, _record(t.topic_id, p, leader)
        leader = next((r for r in p.replicas if _ok(brokers, r)), NO_LEADER)
        if leader == NO_LEADER:
            return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None, None
        return ErrorCode.NONE, None, _record(t.topic_id, p, leader, [leader], recovering=True)
    if p.leader == preferred:
        return ErrorCode.ELECTION_NOT_NEEDED, None, None
    if preferred in p.isr and _ok(brokers, preferred):
        return ErrorCode.NONE, None, _record(t.topic_id, p, preferred)
    if p.leader != NO_LEADER and p.leader in p.isr and _ok(brokers, p.leader):
        return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None, None
    # neither the preferred replica nor the current leader can lead: another ISR member may
    other = next((r for r in p.replicas[1:] if r in p.isr and _ok(brokers, r)), NO_LEADER)
    if other != NO_LEADER and other != p.leader:
        return ErrorCode.NONE, None, _record(t.topic_id, p, other)
    return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None, None


def elect(image, brokers, election_type: int, partitions=None):
    """ElectLeaders: ([(topic, [(index, code, message)])], records). `partitions` None means
    every partition, and then (as Kafka) partitions that needed no election are left out."""
    results, records = [], []
    if partitions is None:
        asked = [(name, sorted(t.partitions)) for name, t in sorted(image.topics.items())]
    else:
        asked = partitions
    for topic, indexes in asked:
        out = []
        for index in indexes:
            code, message, record = elect_one(image, brokers, topic, index, election_type)
            if record is not None:
                records.append(record)
            if partitions is None and code == ErrorCode.ELECTION_NOT_NEEDED:
                continue
            out.append((index, code, message))
        results.append((topic, out))
    return results, records


def imbalanced_brokers(image, brokers, percentage: int) -> set[int]:
    """Brokers whose share of partitions they are preferred for but do not lead is above
    leader.imbalance.per.broker.percentage (the ratio Kafka's controller checks)."""
    preferred_count: dict[int, int] = {}
    not_leading: dict[int, int] = {}
    for t in image.topics.values():
        for p in t.partitions.values():
            if len(p.replicas) < 2:
                continue
            b = p.replicas[0]
            preferred_count[b] = preferred_count.get(b, 0) + 1
            if p.leader != b:
                not_leading[b] = not_leading.get(b, 0) + 1
    return {b for b, n in preferred_count.items()
            if _ok(brokers, b) and not_leading.get(b, 0) * 100 > percentage * n}


def rebalance(image, brokers, percentage: int) -> list:
    """auto.leader.rebalance.enable: preferred elections for the partitions of the imbalanced
    brokers whose preferred replica is in the ISR and may lead."""
    targets = imbalanced_brokers(image, brokers, percentage)
    records = []
    for t in image.topics.values():
        for p in t.partitions.values():
            if getattr(p, "adding_replicas", None) or getattr(p, "removing_replicas", None):
                continue   # being reassigned: the reassignment decides its leader (as Kafka's controller)
            if p.replicas and p.replicas[0] in targets and p.leader != p.replicas[0]:
                code, _msg, record = elect_one(image, brokers, t.name, p.partition, PREFERRED)
                if code == ErrorCode.NONE and record is not None:
                    records.append(record)
    return records


async def rebalance_loop(broker) -> None:
    """On the active controller of a multi-broker cluster, every
    leader.imbalance.check.interval.seconds while auto.leader.rebalance.enable: give leadership
    back to the preferred replicas of the brokers above leader.imbalance.per.broker.percentage
    (a broker that returned after a failure or a controlled shutdown leads its partitions again)."""
    import trio

    from kproto.errors import KafkaError

    def setting(key, default):
        try:
            v = broker.config.get(key)
            return default if v is None else v
        except KeyError:
            return default

    while True:
        await trio.sleep(max(1, int(setting("leader.imbalance.check.interval.seconds", 300))))
        if str(setting("auto.leader.rebalance.enable", "true")).lower() != "true":
            continue
        q = getattr(broker, "quorum", None)
        if q is not None and not q.is_active_controller:
            continue
        if not getattr(broker.image, "brokers", None):
            continue   # a single node: nothing to balance
        records = rebalance(broker.image, broker.controller.brokers(),
                            int(setting("leader.imbalance.per.broker.percentage", 10)))
        if records:
            try:
                broker.controller.log.append(records)
                import logging
                logging.getLogger("kproto.replication").info(
                    "preferred leaders restored: %s", ", ".join(f"{r.partition_id}:leader={r.leader}" for r in records))
            except KafkaError:
                pass

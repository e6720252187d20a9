"""Leader election and ISR changes, as Kafka's controller makes them
(PartitionChangeBuilder, without eligible leader replicas): the new leader is
the first replica in replica order that is in the ISR and may lead (registered,
unfenced, not in controlled shutdown); an out-of-sync replica is elected only
with unclean.leader.election.enable, and then alone in the ISR. The ISR never
becomes empty: fencing its last member leaves the partition leaderless with
that member in the ISR, so it is the one elected when it comes back.

Everything returns PartitionChangeRecords (None when nothing changes); the
records reach the image through the metadata log like any other."""
from __future__ import annotations

from kproto.metadata.partition_change_record import PartitionChangeRecord

from broker.metadata.directory_id import is_online, replica_dir
from broker.replication.brokers import BrokerInfo

NO_LEADER = -1
NO_LEADER_CHANGE = -2
RECOVERED = 0
RECOVERING = 1


def _acceptable(brokers: dict[int, BrokerInfo], b: int, p=None) -> bool:
    """Kafka's LeaderAcceptor: the broker may lead and (for partition `p`) its replica is not
    in one of its failed log dirs."""
    info = brokers.get(b)
    return (info is not None and info.acceptable_leader
            and (p is None or is_online(replica_dir(p, b), info.log_dirs)))


def change(topic_id, p, brokers: dict[int, BrokerInfo], *, target_isr: list[int] | None = None,
           remove: int | None = None, unclean: bool = False, preferred: bool = False,
           recovery_state: int | None = None):
    """The PartitionChangeRecord that takes partition image `p` to its new
    ISR (target_isr, or the current one without `remove`) and elects a
    leader if the current one can no longer lead (or, with `preferred`, the
    first replica when it can). None if nothing changes."""
    isr = list(p.isr if target_isr is None else target_isr)
    if remove is not None:
        isr = [b for b in isr if b != remove]
    if not isr:
        # Kafka keeps the last ISR member rather than an empty ISR
        isr = [b for b in p.isr if b == remove][:1] or list(p.isr)
    leader = p.leader
    new_recovery = recovery_state
    if preferred:
        first = p.replicas[0] if p.replicas else NO_LEADER
        if first != leader and first in isr and _acceptable(brokers, first, p):
            leader = first
    elif leader == NO_LEADER or leader not in isr or not _acceptable(brokers, leader, p):
        leader = next((r for r in p.replicas if r in isr and _acceptable(brokers, r, p)), NO_LEADER)
        if leader == NO_LEADER and unclean:
            leader = next((r for r in p.replicas if _acceptable(brokers, r, p)), NO_LEADER)
            if leader != NO_LEADER:
                isr = [leader]
                new_recovery = RECOVERING   # the leader may lack acknowledged records
    rec = PartitionChangeRecord(partition_id=p.partition, topic_id=topic_id)
    changed = False
    if leader != p.leader:
        rec.leader = leader
        changed = True
    if isr != list(p.isr):
        rec.isr = isr
        changed = True
    if new_recovery is not None and new_recovery != getattr(p, "leader_recovery_state", RECOVERED):
        rec.leader_recovery_state = new_recovery
        changed = True
    return rec if changed else None


def unclean_default(config) -> bool:
    """The broker's `unclean.leader.election.enable` (a topic's own setting overrides it)."""
    try:
        return str(config.get("unclean.leader.election.enable")).lower() == "true"
    except KeyError:
        return False


def _unclean_enabled(topic, default: bool) -> bool:
    v = topic.configs.get("unclean.leader.election.enable")
    return default if v is None else str(v).lower() == "true"


def on_broker_gone(image, broker_id: int, brokers: dict[int, BrokerInfo],
                   unclean_default: bool = False) -> list:
    """A broker was fenced or started a controlled shutdown (`brokers` already
    says so): it leaves every ISR and the partitions it led get new leaders."""
    out = []
    for t in image.topics.values():
        unclean = _unclean_enabled(t, unclean_default)
        for p in t.partitions.values():
            if broker_id in p.isr or p.leader == broker_id:
                r = change(t.topic_id, p, brokers, remove=broker_id, unclean=unclean)
                if r is not None:
                    out.append(r)
    return out


def without_leader(brokers: dict[int, BrokerInfo], broker_id: int) -> dict[int, BrokerInfo]:
    """`brokers` with `broker_id` not an acceptable leader."""
    if broker_id not in brokers:
        return brokers
    return {**brokers, broker_id: brokers[broker_id]._replace(fenced=True)}


def on_dirs_offline(image, broker_id: int, dirs: set, brokers: dict[int, BrokerInfo],
                    unclean_default: bool = False) -> list:
    """Log dirs of a broker failed (KIP-858): its replicas in those dirs (a partition's
    Directories) leave the ISR and the partitions it led there get new leaders; its other
    partitions are left alone. For those partitions the broker may not lead (Kafka's
    isAcceptableLeader in generateLeaderAndIsrUpdates), so one whose ISR was that broker
    alone keeps it there, leaderless, as with fencing."""
    brokers = without_leader(brokers, broker_id)
    out = []
    for t in image.topics.values():
        unclean = _unclean_enabled(t, unclean_default)
        for p in t.partitions.values():
            placed = list(getattr(p, "directories", None) or [])
            if broker_id not in p.replicas or len(placed) != len(p.replicas):
                continue
            if placed[p.replicas.index(broker_id)] in dirs and (broker_id in p.isr or p.leader == broker_id):
                r = change(t.topic_id, p, brokers, remove=broker_id, unclean=unclean)
                if r is not None:
                    out.append(r)
    return out


def on_broker_unfenced(image, broker_id: int, brokers: dict[int, BrokerInfo],
                       unclean_default: bool = False) -> list:
    """A broker came back: leaderless partitions that can be led again get a
    leader (an ISR member; any replica where unclean election is enabled)."""
    out = []
    for t in image.topics.values():
        unclean = _unclean_enabled(t, unclean_default)
        for p in t.partitions.values():
            if p.leader == NO_LEADER and broker_id in p.replicas:
                r = change(t.topic_id, p, brokers, unclean=unclean)
                if r is not None:
                    out.append(r)
    return out


def preferred_elections(image, brokers: dict[int, BrokerInfo], partitions=None) -> list:
    """ElectLeaders(PREFERRED) / auto.leader.rebalance.enable: the first
    replica leads again where it is in the ISR and may lead."""
    out = []
    for t in image.topics.values():
        for p in t.partitions.values():
            if partitions is not None and (t.name, p.partition) not in partitions:
                continue
            r = change(t.topic_id, p, brokers, preferred=True)
            if r is not None:
                out.append(r)
    return out


def sweep(image, brokers: dict[int, BrokerInfo], unclean_default: bool = False, keys=None,
          topics=None) -> list:
    """What the active controller writes to bring every partition in line
    with the broker registrations: replicas that cannot lead (fenced, in
    controlled shutdown, unregistered) leave the ISR, partitions whose leader
    is one of them or that have none get a new leader. Run after every
    registration change and periodically, so nothing is missed across
    controller failovers. ``keys``: only these (topic, index), those a metadata change
    named (broker/metadata/delta.py); ``topics``: only these topic names (a slice of the
    periodic sweep)."""
    out = []
    if keys is not None:
        for name, index in keys:
            t = image.topics.get(name)
            p = t.partitions.get(index) if t is not None else None
            if p is not None:
                _sweep_one(t, p, brokers, _unclean_enabled(t, unclean_default), out)
        return out
    for t in (image.topics.values() if topics is None else
              [image.topics[n] for n in topics if n in image.topics]):
        unclean = _unclean_enabled(t, unclean_default)
        for p in t.partitions.values():
            _sweep_one(t, p, brokers, unclean, out)
    return out


def _sweep_one(t, p, brokers: dict[int, BrokerInfo], unclean: bool, out: list) -> None:
    isr = [b for b in p.isr if _acceptable(brokers, b, p)]
    if not isr:
        # Kafka keeps the last member in the ISR of a partition that lost them all
        isr = [p.leader] if p.leader in p.isr else list(p.isr[:1])
    if isr == list(p.isr) and p.leader != NO_LEADER and _acceptable(brokers, p.leader, p):
        return
    r = change(t.topic_id, p, brokers, target_isr=isr, unclean=unclean)
    if r is not None:
        out.append(r)

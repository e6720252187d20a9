"""Replica placement for new partitions, the way Kafka's KRaft controller
does it (StripedReplicaPlacer): the partitions' leaders rotate over the racks
and over the brokers of each rack, each partition's replicas go to distinct
racks as long as there are racks left, the first replica (the preferred
leader) is always an unfenced broker and fenced brokers are used only when
the unfenced ones are not enough. Errors and messages as Kafka's."""
from __future__ import annotations

import random

from kproto.errors import ErrorCode, KafkaError

from broker.replication.brokers import BrokerInfo


class _Rack:
    def __init__(self, unfenced: list[int], fenced: list[int]):
        self.unfenced = unfenced
        self.fenced = fenced
        self.offset = 0          # rotates the rack's brokers between partitions

    def next(self, taken: set[int], unfenced_only: bool) -> int | None:
        """The rack's next broker not yet taken, unfenced first."""
        for pool in ((self.unfenced,) if unfenced_only else (self.unfenced, self.fenced)):
            n = len(pool)
            for k in range(n):
                b = pool[(self.offset + k) % n]
                if b not in taken:
                    return b
        return None


def check_replication_factor(rf: int, brokers: dict[int, BrokerInfo]) -> None:
    """Kafka's checks and messages (StripedReplicaPlacer), wrapped by the
    controller as 'Unable to replicate the partition N time(s): ...'."""
    if rf <= 0:
        reason = f"Invalid replication factor {rf}: the replication factor must be positive."
    elif not any(not b.fenced for b in brokers.values()):
        reason = "All brokers are currently fenced."
    elif rf > len(brokers):
        reason = (f"The target replication factor of {rf} cannot be reached because only "
                  f"{len(brokers)} broker(s) are registered.")
    else:
        return
    raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                     f"Unable to replicate the partition {rf} time(s): {reason}")


def place(brokers: dict[int, BrokerInfo], num_partitions: int, rf: int,
          rng: random.Random | None = None) -> list[list[int]]:
    """Replica lists for `num_partitions` new partitions of `rf` replicas."""
    check_replication_factor(rf, brokers)
    rng = rng or random.Random()
    by_rack: dict[str | None, tuple[list[int], list[int]]] = {}
    for b in sorted(brokers.values(), key=lambda b: b.id):
        unfenced, fenced = by_rack.setdefault(b.rack, ([], []))
        (fenced if b.fenced else unfenced).append(b.id)
    names = sorted(by_rack, key=lambda r: (r is not None, r or ""))
    racks = []
    for name in names:
        unfenced, fenced = by_rack[name]
        rng.shuffle(unfenced)          # Kafka shuffles each rack's brokers
        rng.shuffle(fenced)
        racks.append(_Rack(unfenced, fenced))
    # the leaders' rack rotation starts at a random rack holding unfenced brokers
    leader_racks = [i for i, r in enumerate(racks) if r.unfenced]
    start = rng.randrange(len(leader_racks))
    out = []
    for p in range(num_partitions):
        first_rack = leader_racks[(start + p) % len(leader_racks)]
        taken: set[int] = set()
        replicas: list[int] = []
        leader = racks[first_rack].next(taken, unfenced_only=True)
        replicas.append(leader)
        taken.add(leader)
        used_racks = {first_rack}
        # one replica per other rack in turn, then fill from any rack
        i = first_rack
        while len(replicas) < rf:
            i = (i + 1) % len(racks)
            if i in used_racks and len(used_racks) < len(racks):
                continue
            b = racks[i].next(taken, unfenced_only=False)
            used_racks.add(i)
            if b is None:
                continue
            replicas.append(b)
            taken.add(b)
        # the next partition starts one broker further in each rack
        for r in racks:
            r.offset += 1 if r is racks[first_rack] or len(racks) == 1 else 0
        out.append(replicas)
    return out

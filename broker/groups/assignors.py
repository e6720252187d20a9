"""The server-side assignors of KIP-848 consumer groups, `uniform` and
`range` (Kafka's UniformAssignor and RangeAssignor in
org.apache.kafka.coordinator.group.assignor).

An assignor maps the group's members to partitions. Input: each member's
subscribed topic ids, the partition count of each topic, and the current
target assignment (for stickiness). Output: member id -> {topic id: set of
partitions}. Every partition of a subscribed topic goes to exactly one
member subscribed to it. Pure functions; no I/O.
"""
from __future__ import annotations

# the names of the assignors are configuration (group.consumer.assignors): broker/config/groups.py
from broker.config.groups import CLASS_NAMES, RANGE, UNIFORM, assignor_names  # noqa: F401


def _empty_result(members) -> dict:
    return {m: {} for m in members}


def uniform(members: dict, topics: dict, current: dict) -> dict:
    """members: member id -> set of topic ids; topics: topic id -> partition
    count; current: member id -> {topic id: set} (the previous target).

    Sticky and balanced, like Kafka's UniformAssignor: a member keeps the
    partitions it had while they are still subscribed and it is not over its
    share; the rest go to the least loaded subscribed member; then partitions
    move from the most to the least loaded member until no subscribed member
    has two fewer partitions than another."""
    result = _empty_result(members)
    counts = {m: 0 for m in members}
    taken: set = set()
    subscribers: dict = {}
    for m in sorted(members):
        for t in members[m]:
            if t in topics:
                subscribers.setdefault(t, []).append(m)
    total = sum(topics[t] for t in subscribers)
    # a member keeps at most its fair share (rounded up) of what it subscribes to
    share = -(-total // max(1, len(members)))
    for m in sorted(members):
        for t, parts in sorted((current.get(m) or {}).items(), key=lambda kv: str(kv[0])):
            if t not in members[m] or t not in topics:
                continue
            for p in sorted(parts):
                if p < topics[t] and (t, p) not in taken and counts[m] < share:
                    taken.add((t, p))
                    result[m].setdefault(t, set()).add(p)
                    counts[m] += 1
    # topics with the fewest subscribers first: they have the least choice
    for t in sorted(subscribers, key=lambda t: (len(subscribers[t]), str(t))):
        for p in range(topics[t]):
            if (t, p) in taken:
                continue
            m = min(subscribers[t], key=lambda m: (counts[m], m))
            taken.add((t, p))
            result[m].setdefault(t, set()).add(p)
            counts[m] += 1
    _balance(result, counts, members, topics)
    return result


def _balance(result: dict, counts: dict, members: dict, topics: dict) -> None:
    moved = True
    while moved:
        moved = False
        for a in sorted(counts, key=lambda m: (-counts[m], m)):
            for t in sorted(result[a], key=str):
                for p in sorted(result[a][t], reverse=True):
                    candidates = [b for b in members if t in members[b] and counts[b] < counts[a] - 1]
                    if not candidates:
                        continue
                    b = min(candidates, key=lambda m: (counts[m], m))
                    result[a][t].discard(p)
                    result[b].setdefault(t, set()).add(p)
                    counts[a] -= 1
                    counts[b] += 1
                    moved = True
                    break
                if moved:
                    break
            if moved:
                break
    for m in result:
        result[m] = {t: ps for t, ps in result[m].items() if ps}


def range_(members: dict, topics: dict, current: dict) -> dict:
    """Per topic, its subscribers in member-id order each take a contiguous
    range; the first `partitions % subscribers` take one more (as the
    client-side RangeAssignor does, so co-partitioned topics line up)."""
    result = _empty_result(members)
    subscribers: dict = {}
    for m in sorted(members):
        for t in members[m]:
            if t in topics:
                subscribers.setdefault(t, []).append(m)
    for t, subs in subscribers.items():
        n = topics[t]
        per, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            size = per + (1 if i < extra else 0)
            if size:
                result[m][t] = set(range(start, start + size))
            start += size
    return result


ASSIGNORS = {UNIFORM: uniform, RANGE: range_}

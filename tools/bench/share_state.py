"""Share-state writes in process: whole state against deltas (batches, bytes, coordinator CPU per write).

One partition of a share group whose members take `--fetch` records per ShareFetch and accept them a
few at a time (5% released), in random turns; every acquisition and every acknowledgement batch is a
WriteShareGroupState to a real ShareCoordinatorShard, as a share-partition leader makes them. Per
write: the state batches sent, the bytes of the record the coordinator appends, the coordinator's
CPU (its decision and the record's encoding), the leader's CPU building the write. `whole` is what leaders sent before issue #31's deltas
(their whole in-flight state), `delta` what they send now (`changed_batches`). No broker, no I/O.

    python -m tools.bench share_state [--members 6] [--writes 3000] [--fetch 50] [--seed 1]
"""
from __future__ import annotations

import argparse
import random
import time
import uuid

from broker.share.coordinator import ShareCoordinatorShard
from broker.share.partition import ACCEPT, RELEASE, SharePartition, changed_batches


def run(delta: bool, members: int, writes_wanted: int, fetch: int, seed: int) -> dict:
    rng = random.Random(seed)
    key = ("g", uuid.UUID(int=7), 0)
    shard = ShareCoordinatorShard()
    shard.initialize(key, 0, 0, True, 0)
    sp = SharePartition(0, max_record_locks=2000, lock_duration_ms=30000)
    held = {f"m{i}": [] for i in range(members)}
    sent, totals = None, {"batches": 0, "bytes": 0, "cpu_s": 0.0, "leader_s": 0.0, "writes": 0}

    def write(now: int) -> None:
        nonlocal sent
        t = time.process_time()
        whole = sp.state_batches()
        batches = changed_batches(sent, whole) if delta and sent is not None else whole
        totals["leader_s"] += time.process_time() - t
        t = time.process_time()
        out = shard.write(key, -1, 0, sp.start_offset, sp.delivery_complete_count(), batches, True, now)
        totals["cpu_s"] += time.process_time() - t
        assert shard.states[key].batches == whole
        sent = whole
        totals["batches"] += len(batches)
        totals["bytes"] += len(out.record[1])
        totals["writes"] += 1

    for now in range(1, 50 * writes_wanted):          # bounded: a write at least every few turns
        if totals["writes"] >= writes_wanted:
            break
        m = f"m{rng.randrange(members)}"
        if held[m] and rng.random() < 0.6:
            offsets = held[m][:rng.randrange(1, 6)]
            del held[m][:len(offsets)]
            for o in offsets:
                sp.acknowledge(m, o, o, [RELEASE if rng.random() < 0.05 else ACCEPT], now)
            write(now)
            continue
        start = sp.fetch_offset()
        got = sp.acquire(m, [(start, start + fetch - 1)], fetch, now) if start is not None else []
        for a in got:
            held[m].extend(range(a.first_offset, a.last_offset + 1))
        rng.shuffle(held[m])
        if got:
            write(now)
    n = max(1, totals["writes"])
    return {"writes": totals["writes"], "batches_per_write": totals["batches"] / n,
            "bytes_per_write": totals["bytes"] / n, "coordinator_ms_per_write": totals["cpu_s"] * 1000 / n,
            "leader_ms_per_write": totals["leader_s"] * 1000 / n,
            "in_flight_batches": len(sp.state_batches())}


def main(args=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench share_state", description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=6)
    parser.add_argument("--writes", type=int, default=3000)
    parser.add_argument("--fetch", type=int, default=50, help="records per ShareFetch")
    parser.add_argument("--seed", type=int, default=1)
    a = parser.parse_args(args)
    for mode in ("whole", "delta"):
        r = run(mode == "delta", a.members, a.writes, a.fetch, a.seed)
        print(f"{mode:6s} {r['writes']} writes: {r['batches_per_write']:.1f} batches/write, "
              f"{r['bytes_per_write'] / 1024:.2f} KB/write, coordinator CPU {r['coordinator_ms_per_write']:.3f} ms/write, "
              f"leader CPU building it {r['leader_ms_per_write']:.3f} ms/write "
              f"(in-flight state at the end: {r['in_flight_batches']} batches)")


if __name__ == "__main__":
    main()

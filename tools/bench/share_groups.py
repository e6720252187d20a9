"""share groups: records/s acknowledged by 1, 3 and 6 share-group members, beside a classic group

One broker is started here (kproto), one topic of --partitions partitions (1) is filled with
--records small records, then each run reads all of them from the start:

  classic   one confluent-kafka Consumer in a classic group (auto-commit), the baseline
  share-N   N confluent-kafka ShareConsumer processes in one share group (share.auto.offset.reset=
            earliest, implicit acknowledgement: a poll's records are accepted by the next poll)

Reported per run: wall time from the first record delivered to the last record acknowledged (the
members' close sends the last acknowledgements), records/s, and the broker's CPU time per record
(from /proc) — the share runs' extra CPU per record over the classic one is the cost of acquiring
and acknowledging a record.

  python -m tools.bench share_groups --records 50000 --members 1,3,6
  python -m tools.bench share_groups --nodes 3      # a 3-node cluster, the topic and the share state
                                                    # replicated 3 times (CPU: all nodes together)
  python -m tools.bench share_groups --nodes 3 --partitions 12 --members 6   # many share-partitions
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

MEMBER = r"""
import json, select, sys, time
from confluent_kafka import Consumer, ShareConsumer
bootstrap, group, kind, total = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if kind == "share":
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
else:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": True})
c.subscribe(["bench-share"])
n, first = 0, None
while True:
    if kind == "share":
        msgs = [m for m in c.poll(0.2) if not m.error()]
    else:
        msgs = [m for m in c.consume(500, 0.2) if not m.error()]
    if msgs and first is None:
        first = time.time()
    n += len(msgs)
    sys.stdout.write(json.dumps({"n": n, "first": first}) + "\n"); sys.stdout.flush()
    if select.select([sys.stdin], [], [], 0)[0]:
        break
c.close()
sys.stdout.write(json.dumps({"closed": time.time(), "n": n, "first": first}) + "\n"); sys.stdout.flush()
"""


def run(bootstrap: str, broker_pids, group: str, kind: str, members: int, records: int) -> dict:
    from tools.bench.procstat import cpu_seconds
    if kind == "share":
        from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
        res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.incremental_alter_configs([res]).values():
            f.result(15)
    pids = [broker_pids] if isinstance(broker_pids, int) else list(broker_pids)
    cpu0 = sum(cpu_seconds(pid) for pid in pids)
    procs = [subprocess.Popen([sys.executable, "-c", MEMBER, bootstrap, group, kind, str(records)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for _ in range(members)]
    last = [{"n": 0, "first": None} for _ in procs]
    import selectors
    sel = selectors.DefaultSelector()
    for i, p in enumerate(procs):
        sel.register(p.stdout, selectors.EVENT_READ, i)
    deadline = time.monotonic() + 300
    while sum(x["n"] for x in last) < records and time.monotonic() < deadline:
        for key, _ in sel.select(1):
            line = key.fileobj.readline()
            if line:
                last[key.data] = json.loads(line)
    for p in procs:
        p.stdin.write("close\n")
        p.stdin.flush()
    closed = []
    for i, p in enumerate(procs):
        for line in p.stdout:
            ev = json.loads(line)
            if "closed" in ev:
                closed.append(ev["closed"])
                last[i] = ev
        p.wait(60)
    cpu = sum(cpu_seconds(pid) for pid in pids) - cpu0
    delivered = sum(x["n"] for x in last)
    first = min(x["first"] for x in last if x["first"] is not None)
    wall = max(closed) - first
    return {"run": f"{kind}-{members}" if kind == "share" else "classic", "members": members,
            "delivered": delivered, "seconds": round(wall, 3), "records_per_s": round(delivered / wall),
            "broker_cpu_us_per_record": round(cpu / max(delivered, 1) * 1e6, 1)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench share_groups", description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=50000)
    ap.add_argument("--members", default="1,3,6", help="share-group sizes to run (comma-separated)")
    ap.add_argument("--json", action="store_true", help="one JSON object per run")
    ap.add_argument("--nodes", type=int, default=1, help="1: one broker; more: a KRaft cluster of that many nodes")
    ap.add_argument("--partitions", type=int, default=1,
                    help="partitions of the topic (more: more share-partitions writing their state at once)")
    args = ap.parse_args(argv)
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from broker.launch.process import BrokerProcess
    if args.nodes > 1:
        from tools.cluster_client import create_topic
        from tools.quorum_cluster import QuorumCluster
        rf = str(min(3, args.nodes))
        proc = QuorumCluster(args.nodes, settings={"offsets.topic.replication.factor": rf,
                                                   "offsets.topic.num.partitions": "3"})
        proc.format()
        proc.start()
        b, pids = proc.bootstrap, [n.proc.pid for n in proc.nodes.values()]
    else:
        proc = BrokerProcess(tempfile.mkdtemp(prefix="bench-share-"), new_session=True).start()
        b, pids = proc.bootstrap, proc.proc.pid
    try:
        admin = AdminClient({"bootstrap.servers": b})
        if args.nodes > 1:
            import confluent_kafka
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if create_topic(admin, "bench-share", args.partitions, int(rf)):
                        break
                except confluent_kafka.KafkaException:      # not every broker registered yet
                    pass
                time.sleep(0.5)
        else:
            for f in admin.create_topics([NewTopic("bench-share", args.partitions, 1)]).values():
                f.result(15)
        p = Producer({"bootstrap.servers": b, "linger.ms": 20, "batch.num.messages": 1000})
        for i in range(args.records):
            p.produce("bench-share", value=b"x" * 100)
            if i % 10000 == 0:
                p.poll(0)
        p.flush(60)
        results = [run(b, pids, "bench-classic", "classic", 1, args.records)]
        for n in [int(x) for x in args.members.split(",")]:
            results.append(run(b, pids, f"bench-share-{n}", "share", n, args.records))
        base = results[0]["broker_cpu_us_per_record"]
        for r in results:
            r["extra_cpu_us_per_record_vs_classic"] = round(r["broker_cpu_us_per_record"] - base, 1)
            if args.json:
                print(json.dumps(r))
            else:
                print(f"{r['run']:<9} {r['delivered']:>7} records  {r['seconds']:>7.2f} s  {r['records_per_s']:>7} rec/s  "
                      f"broker CPU {r['broker_cpu_us_per_record']:>6.1f} us/record "
                      f"({r['extra_cpu_us_per_record_vs_classic']:+.1f} vs classic)")
    finally:
        proc.cleanup() if args.nodes > 1 else proc.stop()


if __name__ == "__main__":
    main()

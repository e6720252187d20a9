"""broker/metrics/cluster.py and broker/metadata/raft_metrics.py on made-up states the 3-process
test (tests/test_metrics_cluster.py) does not reach: a failed log directory, a reassignment
adding a replica, an ISR below min.insync.replicas, a fenced leader, raft roles and latencies."""
from __future__ import annotations

import math
import os
from types import SimpleNamespace as NS

from broker.metadata.image import PartitionImage
from broker.metrics.cluster import offline_partitions, replica_states
from broker.metadata.raft_metrics import RaftMetrics, WindowedStat, state_name
from raft.node import CANDIDATE, FOLLOWER, LEADER, UNATTACHED


def _image(parts, brokers=None):
    topics = {}
    for topic, p in parts:
        topics.setdefault(topic, NS(partitions={})).partitions[p.partition] = p
    return NS(topics=topics, brokers=brokers or {})


def _part(topic, index, log_dir, min_isr="1"):
    return NS(topic=topic, index=index, config={"min.insync.replicas": min_isr},
              log=NS(dir=os.path.join(log_dir, f"{topic}-{index}")))


def _pi(index, leader, replicas, isr, adding=()):
    return PartitionImage(partition=index, replicas=list(replicas), isr=list(isr), leader=leader,
                          leader_epoch=0, partition_epoch=0, adding_replicas=list(adding))


def test_replica_states_follow_kafka_semantics(tmp_path):
    good, bad = str(tmp_path / "a"), str(tmp_path / "b")
    image = _image([
        ("t", _pi(0, 1, [1, 2, 3], [1, 2, 3])),         # led, full ISR
        ("t", _pi(1, 1, [1, 2, 3], [1, 2])),            # led, under-replicated, at min ISR 2
        ("t", _pi(2, 1, [1, 2, 3], [1])),               # led, under min ISR
        ("t", _pi(3, 2, [2, 1, 3], [2])),               # followed: the leader counts it, not us
        ("t", _pi(4, 1, [1, 2, 4], [1, 2], adding=[4])),  # a reassignment adds 4: not under-replicated
        ("t", _pi(5, 1, [1, 2, 3], [1, 2, 3])),         # in a failed log dir: offline, not led
    ])
    parts = [_part("t", i, good, "2") for i in range(5)] + [_part("t", 5, bad, "2")]
    # and t-6, whose log could not be made (no Partition): hosted offline, as Kafka's
    # HostedPartition.Offline, in both PartitionCount and OfflineReplicaCount
    b = NS(node_id=1, image=image, partitions=NS(all=lambda: parts, offline_count=lambda: 1),
           dir_failures=NS(failed={os.path.abspath(bad): "I/O error"}))
    count, leaders, under, under_min, at_min, offline, reassigning = replica_states(b)
    assert (count, leaders, offline, reassigning) == (7, 4, 2, 1)
    assert under == 2            # partitions 1 and 2
    assert under_min == 1        # partition 2
    assert at_min == 2           # partitions 1 and 4 (ISR 2 == min.insync.replicas 2)
    # min.insync.replicas above the replica count: the effective minimum is the replica count
    one = [_part("s", 0, good, "3")]
    b1 = NS(node_id=1, image=_image([("s", _pi(0, 1, [1], [1]))]),
            partitions=NS(all=lambda: one, offline_count=lambda: 0),
            dir_failures=NS(failed={}))
    assert replica_states(b1) == (1, 1, 0, 0, 1, 0, 0)


def test_offline_partitions_count_no_leader_and_a_fenced_leader():
    brokers = {1: NS(fenced=False), 2: NS(fenced=True)}
    image = _image([("t", _pi(0, 1, [1, 2], [1, 2])), ("t", _pi(1, -1, [1, 2], [2])),
                    ("t", _pi(2, 2, [2, 1], [2]))], brokers)
    assert offline_partitions(image) == 2
    brokers[2].fenced = False
    assert offline_partitions(image) == 1


def test_raft_state_names_and_latencies():
    node = NS(role=LEADER, is_voter=True, voted_id=1, end_offset=10, hwm=10)
    assert state_name(node) == "leader"
    assert state_name(NS(role=FOLLOWER, is_voter=False, voted_id=-1)) == "observer"
    assert state_name(NS(role=UNATTACHED, is_voter=True, voted_id=3)) == "voted"
    assert state_name(NS(role=UNATTACHED, is_voter=True, voted_id=-1)) == "unattached"
    rm = RaftMetrics()
    rm.after_pump(node, 0.0)
    node.end_offset = 12          # an append at t=1.0 ...
    rm.after_pump(node, 1.0)
    node.hwm = 12                 # ... committed at t=1.25
    rm.after_pump(node, 1.25)
    assert rm.commit_latency.avg(2.0) == rm.commit_latency.max(2.0) == 250.0
    assert math.isnan(rm.commit_latency.avg(200.0))   # out of the 60 s window
    # an election: candidate at t=5, a leader known at t=5.4
    node.role = CANDIDATE
    rm.after_pump(node, 5.0)
    node.role = FOLLOWER
    rm.after_pump(node, 5.4)
    assert round(rm.election_latency.max(6.0)) == 400
    w = WindowedStat()
    for t, v in ((0, 1.0), (10, 3.0), (40, 8.0), (70, 2.0)):
        w.record(v, t)
    assert (w.avg(70), w.max(70)) == (5.0, 8.0)   # two 30 s samples kept (from 40 and 70): 1 and 3 are gone


def test_lag_uses_only_a_high_watermark_this_broker_knows():
    from broker.metrics.lag import consumer_lag
    # node 1 is the group coordinator; five partitions of t, committed offset 10 on each
    image = _image([("t", _pi(0, 1, [1, 2], [1, 2])),     # led here: its own high watermark
                    ("t", _pi(1, 2, [2, 1], [2, 1])),     # in-sync follower, fetched from the leader
                    ("t", _pi(2, 2, [2, 1], [2])),        # follower out of the ISR
                    ("t", _pi(3, 2, [2, 1], [2, 1])),     # follower of a new leader epoch, no fetch yet
                    ("t", _pi(4, 2, [2, 3], [2, 3]))])    # not hosted here

    def part(index, hw, is_leader, epoch=0, hw_epoch=0):
        return NS(topic="t", index=index, high_watermark=hw, is_leader=is_leader, replication=object(),
                  leader_epoch=epoch, hw_epoch=hw_epoch, log_start_offset=0,
                  log=NS(read=lambda *a, **k: NS(length=0)))
    hosted = {("t", 0): part(0, 15, True), ("t", 1): part(1, 12, False),
              ("t", 2): part(2, 11, False), ("t", 3): part(3, 11, False, epoch=1, hw_epoch=0)}
    group = NS(group_id="g", offsets={("t", i): NS(offset=10) for i in range(5)})
    b = NS(node_id=1, image=image, partitions=NS(get=lambda t, i: hosted.get((t, i))),
           groups=NS(state=NS(groups={"g": group})))
    rows = {r.partition: r.lag for r in consumer_lag(b, 0)}
    assert rows == {0: 5, 1: 2}
    # the single-node case: a partition without replication reports its own high watermark
    hosted[("t", 2)].replication = None
    assert {r.partition: r.lag for r in consumer_lag(b, 0)} == {0: 5, 1: 2, 2: 1}

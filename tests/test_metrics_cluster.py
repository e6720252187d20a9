"""The replication, controller and raft metrics of a real 3-node cluster (three `kproto serve`
processes, combined broker,controller, tools/quorum_cluster.py), scraped from every node's
/metrics: they describe the cluster as it is, not a single node. A follower stopped (SIGSTOP)
makes its leaders' partitions under-replicated (ISR shrink through AlterPartition); resumed, it
rejoins the ISR (ISR expand) and nothing is under-replicated any more; a Produce
with acks=all then spends its wait for the ISR in RemoteTimeMs."""
from __future__ import annotations

import signal
import urllib.request

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from tools.cluster_client import QUIET, wait_until  # noqa: E402
from tools.quorum_cluster import QuorumCluster  # noqa: E402

# the follower's death is seen by its leaders (replica.lag.time.max.ms), not by the controller:
# the session timeout is long, so the ISR shrink is the leader's AlterPartition (as in Kafka,
# a shrink the controller makes when it fences a broker is not the leader's IsrShrinks)
SETTINGS = {"broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "60000",
            "replica.lag.time.max.ms": "1500", "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100", "kproto.metrics.listener": "http://127.0.0.1:0",
            "offsets.topic.num.partitions": "3",
            # the stopped follower must stay registered so that its leaders shrink the ISR
            # themselves (AlterPartition): no fencing on its silent metadata fetches
            "kproto.broker.failure.detection.ms": "-1"}
RM = "kafka_server_replicamanager_"
KC = "kafka_controller_kafkacontroller_"
RAFT = "kafka_server_raft_metrics_"


def scrape(node) -> dict:
    """{sample name (with labels as name{k=v}): value} of one node's /metrics."""
    with urllib.request.urlopen(node.metrics_url, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def scrape_all(cluster, ids=None) -> dict:
    return {i: scrape(cluster.nodes[i]) for i in (ids or cluster.nodes)}


def shown(cluster, ids=None):
    """What a failed wait shows: the cluster families of each node (the rest is noise)."""
    return lambda: {i: {k: v for k, v in m.items() if k.startswith((RM, KC, RAFT))}
                    for i, m in scrape_all(cluster, ids).items()}


@pytest.fixture(scope="module")
def cluster():
    with QuorumCluster(3, settings=SETTINGS) as c:
        for n in c.nodes.values():
            assert n.metrics_url, n.ready_line
        yield c


def _active_controller(cluster) -> int:
    """The active controller's id, once there is one and every broker has registered."""
    def ready(m):
        active = [i for i, v in m.items() if v[KC + "activecontrollercount"] == 1]
        return len(active) == 1 and m[active[0]][KC + "activebrokercount"] == 3
    m = wait_until(lambda: (lambda m: m if ready(m) else None)(scrape_all(cluster)), 60,
                   "one active controller and 3 registered brokers", detail=shown(cluster))
    return next(i for i, v in m.items() if v[KC + "activecontrollercount"] == 1)


def test_replication_controller_and_raft_metrics_follow_the_cluster(cluster):
    c_id = _active_controller(cluster)
    leader, victim = [i for i in sorted(cluster.nodes) if i != c_id]
    # the victim follows every partition and leads none: leader leads 0 and 2, the controller 1
    assignment = [[leader, c_id, victim], [c_id, leader, victim], [leader, victim, c_id]]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
    topic = NewTopic("watched", num_partitions=3, replica_assignment=assignment,
                     config={"min.insync.replicas": "2"})
    admin.create_topics([topic], request_timeout=30)["watched"].result(60)

    def settled(m):
        # every node hosts 3 replicas; 3 partitions, each led once; ISR 3 > min.insync.replicas 2
        return (all(v[RM + "partitioncount"] == 3 for v in m.values())
                and [m[i][RM + "leadercount"] for i in (leader, c_id, victim)] == [2, 1, 0]
                and all(v[RM + "underreplicatedpartitions"] == 0 for v in m.values()))
    m = wait_until(lambda: (lambda m: m if settled(m) else None)(scrape_all(cluster)), 60,
                   "partition and leader counts", detail=shown(cluster))
    assert sum(v[KC + "activecontrollercount"] for v in m.values()) == 1
    assert m[c_id][KC + "activecontrollercount"] == 1
    for v in m.values():
        assert v[RM + "atminisrpartitioncount"] == 0 and v[RM + "underminisrpartitioncount"] == 0
        assert v[KC + "globalpartitioncount"] == 3 and v[KC + "offlinepartitionscount"] == 0
        # the quorum: every node names the active controller as the raft leader, in one epoch
        assert v[RAFT + "current_leader"] == c_id
        assert v[RAFT + "current_epoch"] == m[c_id][RAFT + "current_epoch"]
        assert v[RAFT + "high_watermark"] > 0
    assert m[c_id][RAFT + "current_state{state=leader}"] == 1
    assert all(m[i][RAFT + "current_state{state=follower}"] == 1 for i in (leader, victim))
    # the leader committed the topic's records: its commit latency is measured
    assert 0 <= m[c_id][RAFT + "commit_latency_max"] < 60000
    shrinks = {i: m[i][RM + "isrshrinks_total"] for i in (leader, c_id)}
    expands = {i: m[i][RM + "isrexpands_total"] for i in (leader, c_id)}

    # stop the follower; records keep coming (acks=1): its leaders drop it from the ISR. (Not a
    # kill -9 and restart: within the long session the new process would wait for the old one's
    # session to expire before it registers, DUPLICATE_BROKER_REGISTRATION, as Kafka's does.)
    cluster.nodes[victim].signal(signal.SIGSTOP)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", **QUIET})

    def produce():
        for p in range(3):
            producer.produce("watched", b"x", partition=p)
        producer.flush(10)
        return True

    def shrunk():
        produce()
        m = scrape_all(cluster, (leader, c_id))
        return m if (m[leader][RM + "underreplicatedpartitions"] == 2
                     and m[c_id][RM + "underreplicatedpartitions"] == 1) else None
    m = wait_until(shrunk, 60, "the ISR shrinks", interval=0.3, detail=shown(cluster, (leader, c_id)))
    assert m[leader][RM + "isrshrinks_total"] >= shrinks[leader] + 2
    assert m[c_id][RM + "isrshrinks_total"] >= shrinks[c_id] + 1
    # ISR 2 == min.insync.replicas: at min ISR, not under it
    assert m[leader][RM + "atminisrpartitioncount"] == 2 and m[leader][RM + "underminisrpartitioncount"] == 0
    assert sum(v[KC + "activecontrollercount"] for v in m.values()) == 1
    assert m[leader][RAFT + "current_leader"] == m[c_id][RAFT + "current_leader"] == c_id

    # resumed, it catches up and rejoins: expansions counted, nothing under-replicated
    cluster.nodes[victim].signal(signal.SIGCONT)

    # (a voter resumed after its fetch timeout stands for election at once: KRaft 3.9 has no
    # pre-vote, so the quorum may get a new leader; what holds is one leader that everyone names)
    def healed():
        produce()
        m = scrape_all(cluster)
        named = {v[RAFT + "current_leader"] for v in m.values()}
        active = [i for i, v in m.items() if v[KC + "activecontrollercount"] == 1]
        agreed = len(named) == 1 and active == list(named)
        return m if agreed and all(v[RM + "underreplicatedpartitions"] == 0 for v in m.values()) else None
    m = wait_until(healed, 60, "the ISR expands", interval=0.3, detail=shown(cluster))
    assert m[leader][RM + "isrexpands_total"] >= expands[leader] + 2
    assert m[c_id][RM + "isrexpands_total"] >= expands[c_id] + 1
    assert m[victim][RM + "partitioncount"] == 3 and m[victim][RM + "leadercount"] == 0
    raft_leader = m[leader][RAFT + "current_leader"]
    assert raft_leader in cluster.nodes
    assert [i for i, v in m.items() if v[KC + "activecontrollercount"] == 1] == [raft_leader]
    producer.flush(10)

    # acks=all waits for the ISR: RemoteTimeMs of Produce on the leader (acks=1 waited for nothing)
    remote = "kafka_network_requestmetrics_remotetimems_sum{request=Produce}"
    before = scrape(cluster.nodes[leader]).get(remote, 0)
    assert before == 0
    acked = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                                      **QUIET})
    for _ in range(5):
        acked.produce("watched", b"y", partition=0)
        assert acked.flush(30) == 0
    wait_until(lambda: scrape(cluster.nodes[leader]).get(remote, 0) > 0, 10, "RemoteTimeMs of acks=all")


    # consumer lag: exported by the group's coordinator alone, from the high watermark of its own
    # replica of each partition, led or followed in sync (all three here)
    # (committed by a consumer: librdkafka 2.x's admin AlterConsumerGroupOffsets can abort the
    # whole process when one of its requests times out, librdkafka issue 4605)
    from confluent_kafka import TopicPartition

    def committed(committer):
        done = committer.commit(offsets=[TopicPartition("watched", p, 1) for p in range(3)], asynchronous=False)
        return done if all(tp.error is None for tp in done) else None
    committer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "lagging",
                                          "enable.auto.commit": False, **QUIET})
    try:
        wait_until(lambda: committed(committer), 60, "offsets committed")
    finally:
        committer.close()
    ends = {p: scrape(cluster.nodes[leader if p != 1 else c_id])[
        f"kafka_log_log_logendoffset{{partition={p},topic=watched}}"] for p in range(3)}

    def lag_rows():
        rows = {i: {k: v for k, v in scrape(n).items() if k.startswith("kafka_consumergroup_group_lag{")}
                for i, n in cluster.nodes.items()}
        exporting = {i: r for i, r in rows.items() if r}
        if len(exporting) != 1:
            return None
        (_i, r), = exporting.items()
        want = {f"kafka_consumergroup_group_lag{{group=lagging,partition={p},topic=watched}}": ends[p] - 1
                for p in range(3)}
        return r if r == want else None
    wait_until(lag_rows, 30, "the coordinator's lag of every partition",
               detail=lambda: {i: {k: v for k, v in scrape(n).items() if "consumergroup" in k}
                               for i, n in cluster.nodes.items()})

"""`kproto cluster info|health|quorum`: brokers and controller (DescribeCluster), the health a
script can test (exit status 4 when a partition is offline or under-replicated, a replica's broker
is gone, or the quorum has no leader), and the metadata quorum as kafka-metadata-quorum.sh shows it
(DescribeQuorum: leader, epoch, high watermark, each voter's and observer's lag)."""
from __future__ import annotations

import time

from kproto.messages.describe_cluster_request import DescribeClusterRequest
from kproto.messages.describe_quorum_request import DescribeQuorumRequest

from broker.admin import output
from broker.admin.errors import OK, UNHEALTHY, AdminError, check

VERBS = ("info", "health", "quorum")
METADATA_TOPIC = "__cluster_metadata"


def add_verbs(s, leaf) -> None:
    leaf(s, "info", "cluster id, controller and brokers")
    leaf(s, "health", "offline and under-replicated partitions, brokers down; exit 4 when unhealthy")
    leaf(s, "quorum", "the metadata quorum: leader, epoch, high watermark, voters' and observers' lag")


def run(args, admin) -> int:
    return {"info": info, "health": health, "quorum": quorum}[args.action](args, admin)


def describe_quorum(admin):
    """The __cluster_metadata partition's DescribeQuorum answer, or None when the cluster does
    not answer it (a ZooKeeper-mode Kafka)."""
    req = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name=METADATA_TOPIC, partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])
    try:
        resp = admin.call(req, 1)
    except AdminError:
        return None
    check(resp.error_code, "DescribeQuorum")
    p = resp.topics[0].partitions[0]
    check(p.error_code, "DescribeQuorum")
    return p


def _brokers(admin) -> tuple[str, int, list[dict]]:
    resp = admin.call(DescribeClusterRequest(include_cluster_authorized_operations=False), 0)
    check(resp.error_code, "DescribeCluster", resp.error_message)
    brokers = [{"id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}
               for b in sorted(resp.brokers, key=lambda b: b.broker_id)]
    return resp.cluster_id, resp.controller_id, brokers


def info(args, admin) -> int:
    cluster_id, controller, brokers = _brokers(admin)
    q = describe_quorum(admin)
    md = admin.metadata(None)
    data = {"cluster_id": cluster_id,
            # a KRaft broker names a random broker as "controller" (clients cannot reach the
            # controllers); the quorum leader is the active controller
            "controller_id": q.leader_id if q is not None else controller,
            "brokers": brokers, "topics": len(md.topics),
            "partitions": sum(len(t.partitions) for t in md.topics)}

    def render(d):
        output.fields([("Cluster", d["cluster_id"]), ("Controller", d["controller_id"]),
                       ("Topics", d["topics"]), ("Partitions", d["partitions"])])
        output.table(d["brokers"], [("id", "ID"), ("host", "HOST"), ("port", "PORT"), ("rack", "RACK")])
    output.emit(args, data, render)
    return OK


def health(args, admin) -> int:
    md = admin.metadata(None)
    alive = {b.node_id for b in md.brokers}
    q = describe_quorum(admin)
    offline, under, down = [], [], set()
    for t in md.topics:
        for p in t.partitions:
            name = f"{t.name}-{p.partition_index}"
            if p.leader_id < 0:
                offline.append(name)
            if len(p.isr_nodes) < len(p.replica_nodes):
                under.append(name)
            down.update(r for r in p.replica_nodes if r not in alive)
    controller = q.leader_id if q is not None else md.controller_id
    healthy = not offline and not under and not down and controller >= 0
    data = {"healthy": healthy, "controller_id": controller, "brokers": sorted(alive),
            "brokers_down": sorted(down), "offline_partitions": sorted(offline),
            "under_replicated_partitions": sorted(under)}

    def render(d):
        output.fields([("Healthy", d["healthy"]), ("Controller", d["controller_id"]),
                       ("Brokers", d["brokers"]), ("Brokers down", d["brokers_down"] or "none"),
                       ("Offline partitions", len(d["offline_partitions"])),
                       ("Under-replicated partitions", len(d["under_replicated_partitions"]))])
        for key, title in (("offline_partitions", "offline"), ("under_replicated_partitions", "under-replicated")):
            if d[key]:
                print(f"{title}: {', '.join(d[key][:50])}{' ...' if len(d[key]) > 50 else ''}")
    output.emit(args, data, render)
    return OK if healthy else UNHEALTHY


def quorum(args, admin) -> int:
    q = describe_quorum(admin)
    if q is None:
        raise AdminError("UNSUPPORTED_VERSION: the cluster does not answer DescribeQuorum (not KRaft?)")
    now = int(time.time() * 1000)
    hw = q.high_watermark

    def replica(r, voter: bool) -> dict:
        status = "Leader" if r.replica_id == q.leader_id else "Follower" if voter else "Observer"
        return {"id": r.replica_id, "log_end_offset": r.log_end_offset, "lag": max(0, hw - r.log_end_offset),
                "last_fetch_timestamp": r.last_fetch_timestamp,
                "last_caught_up_timestamp": r.last_caught_up_timestamp, "status": status}
    voters = [replica(r, True) for r in q.current_voters]
    observers = [replica(r, False) for r in q.observers]
    followers = [v for v in voters if v["status"] != "Leader"]
    worst = max(followers, key=lambda v: v["lag"], default=None)
    lag_time = 0
    if worst is not None and worst["last_caught_up_timestamp"] >= 0:
        lag_time = max(0, now - worst["last_caught_up_timestamp"])
    data = {"leader_id": q.leader_id, "leader_epoch": q.leader_epoch, "high_watermark": hw,
            "max_follower_lag": worst["lag"] if worst else 0, "max_follower_lag_time_ms": lag_time,
            "voters": voters, "observers": observers}

    def render(d):
        output.fields([("LeaderId", d["leader_id"]), ("LeaderEpoch", d["leader_epoch"]),
                       ("HighWatermark", d["high_watermark"]), ("MaxFollowerLag", d["max_follower_lag"]),
                       ("MaxFollowerLagTimeMs", d["max_follower_lag_time_ms"]),
                       ("CurrentVoters", [v["id"] for v in d["voters"]]),
                       ("CurrentObservers", [o["id"] for o in d["observers"]])])
        output.table(d["voters"] + d["observers"], [
            ("id", "NODE"), ("log_end_offset", "LOG-END-OFFSET"), ("lag", "LAG"),
            ("last_fetch_timestamp", "LAST-FETCH"), ("last_caught_up_timestamp", "LAST-CAUGHT-UP"),
            ("status", "STATUS")])
    output.emit(args, data, render)
    return OK

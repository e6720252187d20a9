"""The replication, controller and metadata-quorum families of one node, read at scrape time
from its replica state (broker/partitions/replicas.py, broker/replication/manager.py), its metadata image
and its quorum shell (broker/quorum/shell.py). The values are what Kafka 3.9 exports:

ReplicaManager (Kafka's ReplicaManager / Partition gauges)
  PartitionCount       replicas hosted on this broker (led or followed, offline ones too)
  LeaderCount          online partitions this broker leads
  UnderReplicatedPartitions  led here, ISR smaller than the replication factor (the replicas
                       less those a reassignment is adding)
  UnderMinIsrPartitionCount / AtMinIsrPartitionCount  led here, ISR below / equal to the
                       effective min.insync.replicas (the topic's, at most the replica count)
  OfflineReplicaCount  replicas in a failed log directory (broker/storage/dir_failure.py), and
                       those whose log could not be made (Kafka's HostedPartition.Offline;
                       PartitionCount counts them too). As Kafka 4.3.1: Kafka 3.9.0's gauge stays 0
                       (it compares with the class of Offline's companion object), checked side by side
  ReassigningPartitions  led here, with replicas being added or removed
  ProducerIdCount      producer ids with state on the hosted partitions
  IsrShrinks / IsrExpands / FailedIsrUpdates  AlterPartition ISR changes this broker asked for
                       as a leader, counted when the controller accepted (failed: refused)

Controller (Kafka's QuorumController and ControllerMetadataMetrics)
  ActiveControllerCount  1 on the active controller only (0 on other controllers and brokers)
  OfflinePartitionsCount, GlobalTopicCount, GlobalPartitionCount, FencedBrokerCount,
  ActiveBrokerCount      from the metadata image, on nodes with the controller role (as
                       Kafka: every controller reports them; alert on max(), not sum())

raft-metrics (KafkaRaftMetrics), of the metadata quorum
  current_leader (-1: none known), current_epoch, current_vote, high_watermark,
  log_end_offset, log_end_epoch, commit_latency_avg/max (ms from the leader's append to its
  commit, Kafka's 30 s x 2 windows; NaN without commits), election_latency_avg/max (ms from
  standing for election to a known leader), number_unknown_voter_connections, and
  current_state as `kafka_server_raft_metrics_current_state{state="leader"} 1` (one series
  per Kafka state name, 1 for the node's own: Kafka exports a string the JMX exporter cannot).

A single node (`kproto serve` without a cluster) is its own quorum's leader and the active
controller; its partitions have one replica each. Names and values were compared with a Kafka
3.9 single node behind the JMX exporter (1.0.1, the kafka-2_0_0 rules): the same families and
names, `atminisrpartitioncount` = the RF-1 partitions there too, `current-state` not exported.
"""
from __future__ import annotations

import math
import os
import time

from broker.metrics.families import counter, gauge

NO_LEADER = -1


def cluster_metrics(b):
    yield from replica_manager_metrics(b)
    yield from controller_metrics(b)
    yield from raft_metrics(b)
    # Kafka's broker-metadata-metrics: records of the metadata log the image could not apply
    yield gauge("kafka_server_broker_metadata_metrics_metadata_apply_error_count",
                "Metadata records that named a topic, partition or broker the image does not have "
                "(each reported with an ERROR line)", b.image.apply_errors)


# -- ReplicaManager -------------------------------------------------------------------------

def _min_isr(part) -> int:
    try:
        return int(part.config.get("min.insync.replicas", 1))
    except (TypeError, ValueError, AttributeError):
        return 1


def replica_states(b):
    """(partition count, leaders, under-replicated, under min ISR, at min ISR, offline replicas,
    reassigning partitions led here)."""
    node = b.node_id
    topics = b.image.topics
    failures = getattr(b, "dir_failures", None)
    failed = set(failures.failed) if failures is not None and failures.failed else None
    count = leaders = under = under_min = at_min = offline = reassigning = 0
    for part in list(b.partitions.all()) if b.partitions is not None else ():
        count += 1
        if failed is not None:
            d = getattr(part.log, "dir", None)
            if d is not None and os.path.dirname(os.path.abspath(d)) in failed:
                offline += 1   # Kafka's HostedPartition.Offline: neither led nor followed
                continue
        t = topics.get(part.topic)
        p = t.partitions.get(part.index) if t is not None else None
        if p is None or p.leader != node:
            continue
        leaders += 1
        isr = len(p.isr)
        # Kafka's AssignmentState.replicationFactor: replicas being added by a reassignment
        # do not count until it completes
        adding = getattr(p, "adding_replicas", None) or ()
        rf = len(p.replicas) - len(adding)
        if adding or getattr(p, "removing_replicas", None):
            reassigning += 1
        if isr < rf:
            under += 1
        effective = min(_min_isr(part), len(p.replicas))   # Kafka's effectiveMinIsr
        if isr < effective:
            under_min += 1
        elif isr == effective:
            at_min += 1
    # logs that could not be made: no Partition here, but hosted (offline) in Kafka's allPartitions
    unmade = b.partitions.offline_count() if b.partitions is not None else 0
    count += unmade
    offline += unmade
    return count, leaders, under, under_min, at_min, offline, reassigning


def producer_id_count(b) -> int:
    """Producer ids with state on the hosted partitions (Kafka's ProducerIdCount)."""
    by_partition = getattr(b.producers, "_by_partition", None) or {}
    n = 0
    for part in list(b.partitions.all()) if b.partitions is not None else ():
        state = by_partition.get((part.topic, part.index))
        if state is not None:
            n += len(state.producers)
    return n


def replica_manager_metrics(b):
    count, leaders, under, under_min, at_min, offline, reassigning = replica_states(b)
    p = "kafka_server_replicamanager_"
    yield gauge(p + "partitioncount", "Replicas hosted on this broker", count)
    yield gauge(p + "leadercount", "Partitions this broker leads", leaders)
    yield gauge(p + "underreplicatedpartitions",
                "Partitions led here whose ISR is smaller than their replica set", under)
    yield gauge(p + "underminisrpartitioncount",
                "Partitions led here whose ISR is below min.insync.replicas", under_min)
    yield gauge(p + "atminisrpartitioncount",
                "Partitions led here whose ISR is exactly min.insync.replicas", at_min)
    yield gauge(p + "offlinereplicacount", "Replicas in a failed log directory", offline)
    yield gauge(p + "reassigningpartitions", "Partitions led here with a reassignment in progress", reassigning)
    yield gauge(p + "produceridcount", "Producer ids with state on the partitions hosted here", producer_id_count(b))
    rm = getattr(b, "replication", None)
    yield counter(p + "isrshrinks", "ISR shrinks this broker made as a leader (AlterPartition accepted)",
                  [({}, rm.isr_shrinks if rm is not None else 0)])
    yield counter(p + "isrexpands", "ISR expansions this broker made as a leader (AlterPartition accepted)",
                  [({}, rm.isr_expands if rm is not None else 0)])
    yield counter(p + "failedisrupdates", "ISR changes the controller refused or did not answer",
                  [({}, rm.failed_isr_updates if rm is not None else 0)])
    quotas = getattr(rm, "quotas", None)
    if quotas is not None:
        # ReplicationQuotaManager's sensors (Kafka metrics: kafka.server:type=LeaderReplication,
        # attribute byte-rate), named as kafka-jmx-exporter.yml's rule names them
        yield gauge("kafka_server_leaderreplication_byte_rate",
                    "Bytes/s this broker sent to followers for leader-throttled partitions "
                    "(replication quota window)", quotas.leader.byte_rate())
        yield gauge("kafka_server_followerreplication_byte_rate",
                    "Bytes/s this broker fetched for follower-throttled partitions "
                    "(replication quota window)", quotas.follower.byte_rate())


# -- controller -----------------------------------------------------------------------------

def _kraft(b):
    return getattr(b.config, "kraft", None)


def is_controller_node(b) -> bool:
    k = _kraft(b)
    return k is None or bool(k.is_controller)


def is_active_controller(b) -> bool:
    q = getattr(b, "quorum", None)
    if q is None:
        return is_controller_node(b)   # a single node is its own quorum
    return bool(q.is_active_controller)


def offline_partitions(image) -> int:
    """Partitions without a leader: none elected (-1), or a leader whose broker is fenced (the
    moment before the controller's election moves it)."""
    brokers = getattr(image, "brokers", None) or {}
    n = 0
    for t in image.topics.values():
        for p in t.partitions.values():
            if p.leader == NO_LEADER:
                n += 1
            elif brokers:
                reg = brokers.get(p.leader)
                if reg is not None and getattr(reg, "fenced", False):
                    n += 1
    return n


def controller_metrics(b):
    p = "kafka_controller_kafkacontroller_"
    yield gauge(p + "activecontrollercount", "1 on the active controller, 0 on every other node",
                1 if is_active_controller(b) else 0)
    if not is_controller_node(b):
        return   # a broker-only node: Kafka's ControllerMetadataMetrics live on controllers
    image = b.image
    topics = image.topics
    yield gauge(p + "offlinepartitionscount", "Partitions without a live leader", offline_partitions(image))
    yield gauge(p + "globaltopiccount", "Topics in the cluster", len(topics))
    yield gauge(p + "globalpartitioncount", "Partitions in the cluster",
                sum(len(t.partitions) for t in topics.values()))
    regs = getattr(image, "brokers", None) or {}
    fenced = sum(1 for r in regs.values() if getattr(r, "fenced", False))
    yield gauge(p + "fencedbrokercount", "Registered brokers that are fenced", fenced)
    if not regs:   # a single node registers nowhere: it is the one broker if it has the role
        k = _kraft(b)
        active = 1 if k is None or k.is_broker else 0
    else:
        active = len(regs) - fenced
    yield gauge(p + "activebrokercount", "Registered brokers that are not fenced", active)


# -- raft-metrics ---------------------------------------------------------------------------

def raft_metrics(b):
    from broker.metadata.raft_metrics import STATES, state_name
    q = getattr(b, "quorum", None)
    shell = getattr(q, "shell", None) if q is not None else None
    now = None
    if shell is not None:
        import trio
        node = shell.node
        leader, epoch, vote = node.leader_id, node.epoch, node.voted_id
        hwm, leo, leo_epoch = node.hwm, node.end_offset, node.last_epoch
        state = state_name(node)
        rm = shell.raft_metrics
        now = trio.current_time()
        commit = (rm.commit_latency.avg(now), rm.commit_latency.max(now))
        election = (rm.election_latency.avg(now), rm.election_latency.max(now))
        unknown = sum(1 for v in node.voters if v != node.id and v not in shell.peers)
    else:
        # a single node: the sole voter leads its own metadata log
        md = b.metadata
        sole = is_controller_node(b)
        leader = b.node_id if sole else NO_LEADER
        epoch = getattr(md, "leader_epoch", None) or 0
        vote = b.node_id if sole else NO_LEADER
        hwm = leo = md.plog.log_end_offset if md is not None else 0
        leo_epoch = epoch
        state = "leader" if sole else "unattached"
        # its commit is the flush of its own append; it never stands for election
        stat = getattr(md, "commit_latency", None)
        now = time.monotonic()
        commit = (stat.avg(now), stat.max(now)) if stat is not None else (math.nan, math.nan)
        election = (math.nan, math.nan)
        unknown = 0
    p = "kafka_server_raft_metrics_"
    yield gauge(p + "current_leader", "Leader of the metadata quorum (-1: none known)", leader)
    yield gauge(p + "current_epoch", "Epoch of the metadata quorum", epoch)
    yield gauge(p + "current_vote", "The voter this node voted for this epoch (-1: none)", vote)
    yield gauge(p + "high_watermark", "Metadata log high watermark (committed end)", hwm)
    yield gauge(p + "log_end_offset", "Metadata log end offset on this node", leo)
    yield gauge(p + "log_end_epoch", "Epoch of the last entry of the metadata log", leo_epoch)
    yield gauge(p + "current_state",
                "1 for this node's quorum state (Kafka's current-state names), 0 for the others",
                samples=[({"state": s}, 1 if s == state else 0) for s in STATES])
    yield gauge(p + "commit_latency_avg", "Average ms from the leader's append to its commit (last 60 s)",
                commit[0])
    yield gauge(p + "commit_latency_max", "Largest ms from the leader's append to its commit (last 60 s)",
                commit[1])
    yield gauge(p + "election_latency_avg", "Average ms from standing for election to a known leader (last 60 s)",
                election[0])
    yield gauge(p + "election_latency_max", "Largest ms from standing for election to a known leader (last 60 s)",
                election[1])
    yield gauge(p + "number_unknown_voter_connections", "Voters whose endpoint this node does not know", unknown)

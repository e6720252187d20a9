"""DescribeQuorum (v0-2): the metadata quorum as its leader describes it (KafkaRaftClient's
handleDescribeQuorumRequest and LeaderState.describeQuorum), so that `kafka-metadata-quorum.sh
describe --status / --replication` and Admin.describeMetadataQuorum work.

This node leads its quorum alone (broker/quorum/leadership.py): it is the one voter, its log end is
the high watermark, and it reports the current time as its fetch and caught-up timestamps, as
Kafka's leader does for itself. A static quorum (controller.quorum.voters) has no directory ids, so
voters report the zero id, as the observed Kafka cluster did.
"""
from __future__ import annotations

import time

from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.describe_quorum_response import (
    DescribeQuorumResponse, Listener, Node, PartitionData, ReplicaState, TopicData)

from broker.handlers import handles
from broker.metadata.log import METADATA_TOPIC

UNKNOWN_PARTITION_MESSAGE = "This server does not host this topic-partition."


def _valid(req) -> bool:
    # hasValidTopicPartition: exactly one topic with exactly one partition, __cluster_metadata-0
    return (len(req.topics) == 1 and req.topics[0].topic_name == METADATA_TOPIC
            and len(req.topics[0].partitions) == 1 and req.topics[0].partitions[0].partition_index == 0)


@handles(ApiKey.DESCRIBE_QUORUM, 0, 2)
async def describe_quorum(ctx, req):
    broker = ctx.broker
    if not _valid(req):
        # DescribeQuorumRequest.getPartitionLevelErrorResponse: the error for every partition asked
        return DescribeQuorumResponse(error_code=0, error_message=None, topics=[
            TopicData(topic_name=t.topic_name, partitions=[
                PartitionData(partition_index=p.partition_index,
                              error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              error_message=UNKNOWN_PARTITION_MESSAGE,
                              leader_id=0, leader_epoch=0, high_watermark=0, current_voters=[], observers=[])
                for p in t.partitions]) for t in req.topics], nodes=[])
    if getattr(broker, "quorum", None) is not None:   # a multi-node quorum: as its raft node knows it
        return broker.quorum.describe(ctx.api_version)
    k = broker.config.kraft
    now = int(time.time() * 1000)
    end = broker.metadata.plog.log_end_offset
    voter_set = getattr(broker, "quorum_voter_set", None)
    if voter_set is not None:   # a dynamic quorum (KIP-853): voters with directory ids and endpoints
        return _describe_dynamic(ctx, broker, voter_set, end, now)
    me = ReplicaState(replica_id=broker.node_id, log_end_offset=end,
                      last_fetch_timestamp=now, last_caught_up_timestamp=now)
    # other configured voters have not fetched from this node (no replication before raft/):
    # Kafka's leader reports such voters with unknown (-1) offsets and times
    others = [ReplicaState(replica_id=v, log_end_offset=-1) for v in sorted(k.voters) if v != broker.node_id] \
        if k is not None else []
    nodes = []
    if ctx.api_version >= 2 and k is not None:
        name = k.controller_listener_names[0] if k.controller_listener_names else "CONTROLLER"
        for node_id, (host, port) in sorted(k.voters.items()):
            if port == 0:   # the embedded quorum's ephemeral controller listener
                port = next((p for n, _h, p in broker.bound if n == name), 0)
            nodes.append(Node(node_id=node_id, listeners=[Listener(name=name, host=host, port=port)]))
    return DescribeQuorumResponse(error_code=0, topics=[TopicData(topic_name=METADATA_TOPIC, partitions=[
        PartitionData(partition_index=0, error_code=0, leader_id=broker.node_id,
                      leader_epoch=broker.metadata.leader_epoch, high_watermark=end,
                      current_voters=[me] + others, observers=[])])], nodes=nodes)


def _describe_dynamic(ctx, broker, voter_set, end: int, now: int):
    voters = []
    for v in sorted(voter_set.voters, key=lambda v: v.voter_id):
        if v.voter_id == broker.node_id:
            voters.append(ReplicaState(replica_id=v.voter_id, replica_directory_id=v.voter_directory_id,
                                       log_end_offset=end, last_fetch_timestamp=now, last_caught_up_timestamp=now))
        else:
            voters.append(ReplicaState(replica_id=v.voter_id, replica_directory_id=v.voter_directory_id,
                                       log_end_offset=-1))
    nodes = [Node(node_id=v.voter_id, listeners=[Listener(name=e.name, host=e.host, port=e.port)
                                                 for e in v.endpoints])
             for v in sorted(voter_set.voters, key=lambda v: v.voter_id)] if ctx.api_version >= 2 else []
    return DescribeQuorumResponse(error_code=0, topics=[TopicData(topic_name=METADATA_TOPIC, partitions=[
        PartitionData(partition_index=0, error_code=0, leader_id=broker.node_id,
                      leader_epoch=broker.metadata.leader_epoch, high_watermark=end,
                      current_voters=voters, observers=[])])], nodes=nodes)

"""DescribeCluster and DescribeLogDirs: the cluster's brokers and what this
broker keeps on disk."""
from __future__ import annotations

import os

from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.describe_cluster_response import DescribeClusterBroker, DescribeClusterResponse
from kproto.messages.describe_log_dirs_response import (
    DescribeLogDirsPartition, DescribeLogDirsResponse, DescribeLogDirsResult, DescribeLogDirsTopic)

from broker.handlers import handles
from broker.handlers.metadata import (AUTHORIZED_OPERATIONS_OMITTED, CLUSTER_OPERATIONS_ALL, controller_id,
                                     registered_brokers)
from broker.metadata.log import METADATA_TOPIC
from broker.storage.jbod import managers

ENDPOINT_TYPES = {1: "BROKER", 2: "CONTROLLER"}
BROKER_ENDPOINT = 1


def endpoint_type_error(version: int, req, serving: int) -> DescribeClusterResponse | None:
    """Kafka's check of DescribeCluster's endpoint type on a listener serving `serving` endpoints
    (a broker listener BROKER, a controller listener CONTROLLER): an unknown type, or one this
    listener does not serve, gets its error (INVALID_REQUEST in v0, which has no type); else None."""
    endpoint_type = req.endpoint_type if version >= 1 else BROKER_ENDPOINT
    if endpoint_type not in ENDPOINT_TYPES:
        return DescribeClusterResponse(
            error_code=ErrorCode.INVALID_REQUEST if version == 0 else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message=f"Unsupported endpoint type {endpoint_type}", brokers=[])
    if endpoint_type != serving:
        return DescribeClusterResponse(
            error_code=ErrorCode.INVALID_REQUEST if version == 0 else ErrorCode.MISMATCHED_ENDPOINT_TYPE,
            error_message=(f"The request was sent to an endpoint of type {ENDPOINT_TYPES[serving]}, but we "
                           f"wanted an endpoint of type {ENDPOINT_TYPES[endpoint_type]}"), brokers=[])
    return None


@handles(ApiKey.DESCRIBE_CLUSTER, 0, 2)   # v2: fenced brokers on request (KIP-1073)
async def describe_cluster(ctx, req):
    broker = ctx.broker
    refused = endpoint_type_error(ctx.api_version, req, BROKER_ENDPOINT)
    if refused is not None:
        return refused
    host, port = broker.advertised_address(ctx.conn.listener if ctx.conn else None)
    brokers = [DescribeClusterBroker(broker_id=broker.node_id, host=host, port=port,
                                     rack=broker.config.get("broker.rack") or None)]
    registered = registered_brokers(broker, ctx.conn.listener if ctx.conn else None)
    if registered:   # a multi-node cluster: every registered broker
        brokers = [DescribeClusterBroker(broker_id=i, host=h, port=p, rack=r) for i, h, p, r in registered]
        if ctx.api_version >= 2 and req.include_fenced_brokers:
            brokers += _fenced_brokers(broker, ctx.conn.listener if ctx.conn else None)
            brokers.sort(key=lambda b: b.broker_id)
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=BROKER_ENDPOINT,
        cluster_id=broker.cluster_id, controller_id=controller_id(broker),
        brokers=brokers,
        cluster_authorized_operations=(CLUSTER_OPERATIONS_ALL if req.include_cluster_authorized_operations
                                       else AUTHORIZED_OPERATIONS_OMITTED))


def _fenced_brokers(broker, listener) -> list:
    out = []
    for bid, r in sorted(broker.image.brokers.items()):
        eps = [e for e in r.end_points if listener is None or e.name == listener] or list(r.end_points)
        if r.fenced and eps:
            out.append(DescribeClusterBroker(broker_id=bid, host=eps[0].host, port=eps[0].port, rack=r.rack,
                                             is_fenced=True))
    return out


def _disk_space(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding `path`, as Java's FileStore reports them."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


@handles(ApiKey.DESCRIBE_LOG_DIRS, 0, 5)   # v5: IsCordoned, always false (no cordoned directories)
async def describe_log_dirs(ctx, req):
    broker = ctx.broker
    if req.topics is None:
        wanted = None
    else:
        wanted = {(t.topic, p) for t in req.topics for p in t.partitions}
    failures = getattr(broker, "dir_failures", None)
    failed = failures.failed if failures is not None else {}
    # one result per log directory (JBOD: log.dirs names several), as Kafka's; a failed one
    # answers KAFKA_STORAGE_ERROR and nothing else (ReplicaManager.describeLogDirs: "Log
    # directory ... is offline")
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=[
        DescribeLogDirsResult(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=path, topics=[])
        if os.path.abspath(path) in failed else _log_dir_result(path, mgr.logs, wanted)
        for path, mgr in managers(broker.logs)])


def _log_dir_result(path: str, logs: dict, wanted) -> DescribeLogDirsResult:
    by_topic: dict[str, list] = {}
    for (topic, index), plog in sorted(logs.items()):
        # the metadata log belongs to the quorum, not the log manager Kafka reports on
        if topic == METADATA_TOPIC or (wanted is not None and (topic, index) not in wanted):
            continue
        by_topic.setdefault(topic, []).append(DescribeLogDirsPartition(
            partition_index=index, partition_size=plog.size, offset_lag=0, is_future_key=False))
    result = DescribeLogDirsResult(
        error_code=0, log_dir=path,
        topics=[DescribeLogDirsTopic(name=t, partitions=parts) for t, parts in by_topic.items()])
    try:
        result.total_bytes, result.usable_bytes = _disk_space(path)
    except OSError:
        result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        result.topics = []
    return result

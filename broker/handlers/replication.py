"""AlterPartition (API 56): a partition leader asks the active controller to
change its ISR (broker/replication/alter_partition.py validates it as Kafka
3.9 does). Another node answers NOT_CONTROLLER, as Kafka's brokers do."""
from __future__ import annotations

from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.allocate_producer_ids_response import AllocateProducerIdsResponse
from kproto.messages.alter_partition_response import AlterPartitionResponse

from broker.producer_ids import BLOCK_SIZE

from broker.handlers import advertised_when, handles


@handles(ApiKey.ALTER_PARTITION, 0, 3)
async def alter_partition(ctx, req):
    broker = ctx.broker
    quorum = getattr(broker, "quorum", None)
    manager = getattr(broker, "replication", None)
    if manager is None or (quorum is not None and not quorum.is_active_controller):
        return AlterPartitionResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER, topics=[])
    _code, resp = manager.handle_alter_partition(req, ctx.api_version)
    return resp


@handles(ApiKey.BROKER_HEARTBEAT, 0, 1)
async def broker_heartbeat(ctx, req):
    """BrokerHeartbeat from a broker of the cluster (broker/replication/liveness.py)."""
    return ctx.broker.replication.liveness.handle(req)


@handles(ApiKey.ALLOCATE_PRODUCER_IDS, 0, 0)
async def allocate_producer_ids(ctx, req):
    """A broker's next block of producer ids, from the active controller (as Kafka's brokers get them)."""
    broker = ctx.broker
    quorum = getattr(broker, "quorum", None)
    if quorum is not None and not quorum.is_active_controller:
        return AllocateProducerIdsResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER,
                                           producer_id_start=-1, producer_id_len=0)
    start = broker.producer_ids.allocate_block(req.broker_id)
    return AllocateProducerIdsResponse(throttle_time_ms=0, error_code=0, producer_id_start=start,
                                       producer_id_len=BLOCK_SIZE)


# served between kproto nodes; like Kafka's brokers, not advertised to clients
advertised_when(ApiKey.ALTER_PARTITION, lambda _broker: False)
advertised_when(ApiKey.BROKER_HEARTBEAT, lambda _broker: False)
advertised_when(ApiKey.ALLOCATE_PRODUCER_IDS, lambda _broker: False)

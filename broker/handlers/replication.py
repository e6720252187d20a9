"""AlterPartition (API 56): a partition leader asks the active controller to
change its ISR (broker/replication/alter_partition.py validates it as Kafka
3.9 does). Another node answers NOT_CONTROLLER, as Kafka's brokers do."""
from __future__ import annotations

from kproto.api import ApiKey
from kproto.errors import ErrorCode

from broker.handlers import advertised_when, handles


@handles(ApiKey.ALTER_PARTITION, 0, 3)
async def alter_partition(ctx, req):
    broker = ctx.broker
    quorum = getattr(broker, "quorum", None)
    manager = getattr(broker, "replication", None)
    if manager is None or (quorum is not None and not quorum.is_active_controller):
        # (its codec at the first AlterPartition: only a cluster's leaders send one, issue 26)
        from kproto.messages.alter_partition_response import AlterPartitionResponse
        return AlterPartitionResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER, topics=[])
    _code, resp = manager.handle_alter_partition(req, ctx.api_version)
    return resp


# served between kproto nodes; like Kafka's brokers, not advertised to clients
advertised_when(ApiKey.ALTER_PARTITION, lambda _broker: False)

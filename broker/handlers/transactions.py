"""InitProducerId (idempotent producers). Transactional ids are served by the
transaction coordinator when one is configured."""
from __future__ import annotations

from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.init_producer_id_response import InitProducerIdResponse

from broker.handlers import handles


@handles(ApiKey.INIT_PRODUCER_ID, 0, 5)
async def init_producer_id(ctx, req):
    broker = ctx.broker
    if req.transactional_id is not None:
        coordinator = getattr(broker, "transactions", None)
        if coordinator is None:
            return InitProducerIdResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                          producer_id=-1, producer_epoch=-1)
        return await coordinator.init_producer_id(ctx, req)
    if ctx.api_version >= 3 and req.producer_id >= 0:
        # KIP-360: an idempotent producer asking to bump its epoch after an
        # error; without a transactional id a fresh id serves the same end
        pass
    return InitProducerIdResponse(error_code=0, producer_id=broker.producer_ids.next_id(), producer_epoch=0,
                                  throttle_time_ms=0)

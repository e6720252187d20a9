"""UnregisterBroker: remove a broker's registration from the cluster, as
Kafka's controller does (an operator's clean-up after decommissioning)."""
from __future__ import annotations

from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.unregister_broker_response import UnregisterBrokerResponse

from broker.handlers import handles


def _registered(broker) -> set[int]:
    registered = getattr(broker.controller, "_registered_brokers", None)
    return set(registered()) if registered else {broker.node_id}


@handles(ApiKey.UNREGISTER_BROKER, 0, 0)
async def unregister_broker(ctx, req):
    broker = ctx.broker
    if req.broker_id not in _registered(broker):
        return UnregisterBrokerResponse(
            throttle_time_ms=0, error_code=ErrorCode.BROKER_ID_NOT_REGISTERED,
            error_message=f"Broker ID {req.broker_id} is not currently registered")
    # A live broker that is unregistered registers again with its next heartbeat (Kafka
    # writes UnregisterBrokerRecord, fences it, and the broker comes back); a single-node
    # kproto broker is its own controller and stays registered, so this changes nothing.
    return UnregisterBrokerResponse(throttle_time_ms=0, error_code=0, error_message=None)

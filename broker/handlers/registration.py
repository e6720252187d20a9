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
        # Kafka's controller answers the error code alone (an empty message)
        return UnregisterBrokerResponse(
            throttle_time_ms=0, error_code=ErrorCode.BROKER_ID_NOT_REGISTERED, error_message="")
    # Kafka writes UnregisterBrokerRecord and the live broker is gone from the cluster until
    # it registers again (a single-node Kafka 3.9 had no broker for its clients for a
    # while); a single-node kproto broker is its own controller and stays registered.
    return UnregisterBrokerResponse(throttle_time_ms=0, error_code=0, error_message="")

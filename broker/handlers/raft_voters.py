"""AddRaftVoter (80) and RemoveRaftVoter (81) on the broker listener (KIP-853), as Kafka 3.9's
brokers serve them: forwarded to the active controller (broker/quorum/replicated.py FORWARDED), where
its raft client checks and commits the new voter set (broker/quorum/shell.py voter_change, the same
code that answers them on the controller listener). ALTER on CLUSTER with an authorizer
(broker/security/authz.py), as Kafka's ControllerApis.

A node that leads its quorum alone (kproto's embedded default, a static one-voter quorum) answers as
Kafka's raft client does for a static quorum: UNSUPPORTED_VERSION, the kraft.version is 0."""
from __future__ import annotations

from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.add_raft_voter_response import AddRaftVoterResponse
from kproto.messages.remove_raft_voter_response import RemoveRaftVoterResponse

from broker.handlers import handles


# v1 (Kafka 4.2) adds AckWhenCommitted; kproto answers once the new voter set is committed either
# way (Kafka answers AckWhenCommitted=false once the leader appended it)
@handles(ApiKey.ADD_RAFT_VOTER, 0, 1)
async def add_raft_voter(ctx, req):
    code, message = await _change(ctx, ApiKey.ADD_RAFT_VOTER, req, "adding")
    return AddRaftVoterResponse(throttle_time_ms=0, error_code=code, error_message=message)


@handles(ApiKey.REMOVE_RAFT_VOTER, 0, 0)
async def remove_raft_voter(ctx, req):
    code, message = await _change(ctx, ApiKey.REMOVE_RAFT_VOTER, req, "removing")
    return RemoveRaftVoterResponse(throttle_time_ms=0, error_code=code, error_message=message)


async def _change(ctx, key: int, req, verb: str) -> tuple:
    broker = ctx.broker
    quorum = getattr(broker, "quorum", None)
    if quorum is not None:   # the active controller (a request reaches it forwarded from any node)
        return await quorum.shell.voter_change(int(key), req)
    from broker.config.voters import kraft_version, request_refusal
    k = broker.config.kraft
    refused = request_refusal(int(key), req, broker.cluster_id,
                              (k.controller_listener_names or [None])[0] if k is not None else None, True)
    if refused is not None:
        return refused
    level = kraft_version(broker)
    # (KafkaRaftClient: the leader's checks before the kraft.version's come out the same here)
    return ErrorCode.UNSUPPORTED_VERSION, (f"Cluster doesn't support {verb} voter because the "
                                           f"kraft.version feature is {level}")

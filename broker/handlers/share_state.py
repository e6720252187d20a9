"""The share-state RPCs between share-partition leaders and the share coordinator (Kafka 4.3,
KIP-932): InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState (85),
DeleteShareGroupState (86), ReadShareGroupStateSummary (87), served by the share coordinator of the
key's `__share_group_state` partition (broker/share/coordinator_shell.py). Inter-broker requests:
the authorizer asks CLUSTER_ACTION (broker/security/authz.py)."""
from __future__ import annotations

from kproto.api import ApiKey

from broker.handlers import handles


def _coordinator(ctx):
    return ctx.broker.share.coordinator


@handles(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, 0)
async def initialize_share_group_state(ctx, req):
    return await _coordinator(ctx).initialize(req)


@handles(ApiKey.READ_SHARE_GROUP_STATE, 0, 0)
async def read_share_group_state(ctx, req):
    return await _coordinator(ctx).read(req)


@handles(ApiKey.WRITE_SHARE_GROUP_STATE, 0, 1)
async def write_share_group_state(ctx, req):
    return await _coordinator(ctx).write(req)


@handles(ApiKey.DELETE_SHARE_GROUP_STATE, 0, 0)
async def delete_share_group_state(ctx, req):
    return await _coordinator(ctx).delete(req)


@handles(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, 1)
async def read_share_group_state_summary(ctx, req):
    return await _coordinator(ctx).summary(req)

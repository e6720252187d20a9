"""UpdateFeatures: finalize cluster feature levels (KIP-584) with the controller's rules
(broker/controller/features.py); ApiVersions reports the result.

Answered as Kafka 4.3's QuorumController.updateFeatures, at every version: the update is all or
nothing. One refused feature fails the whole request with a top-level INVALID_UPDATE_VERSION
("The update failed for all features since ...") and no results, and nothing is applied (Kafka
3.9 answered per feature and applied the rest). A success lists each requested feature with
error message "NONE" (Kafka's Errors.NONE.message()) in v0-1; v2 (KIP-1022) has no results."""
from __future__ import annotations

from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.update_features_response import UpdatableFeatureResult, UpdateFeaturesResponse

from broker.controller import features
from broker.handlers import handles

_FAILED_PREFIX = "The update failed for all features since the following feature had an error: "


@handles(ApiKey.UPDATE_FEATURES, 0, 2)
async def update_features(ctx, req):
    broker = ctx.broker
    # Kafka's controller reads UpgradeType, whose default (UPGRADE) is all a v0 request has: a v0
    # AllowDowngrade is ignored there, so a v0 downgrade is refused (as Kafka 3.9 and 4.3.1 answer)
    updates = {u.feature: (u.max_version_level, u.upgrade_type if ctx.api_version >= 1 else features.UPGRADE)
               for u in req.feature_updates}
    records = []
    for name, (level, kind) in updates.items():
        result, recs = features.plan_update(broker.image, broker.node_id, name, level, kind)
        if result.error_code != ErrorCode.NONE:
            return UpdateFeaturesResponse(throttle_time_ms=0, error_code=result.error_code,
                                          error_message=_FAILED_PREFIX + result.message, results=[])
        records += recs
    if records and not req.validate_only:
        broker.controller.log.append(records)
    results = []
    if ctx.api_version <= 1:
        results = [UpdatableFeatureResult(feature=name, error_code=ErrorCode.NONE, error_message="NONE")
                   for name in updates]
    return UpdateFeaturesResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                                  results=results)

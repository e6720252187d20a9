"""UpdateFeatures: finalize cluster feature levels (KIP-584) with the controller's rules
(broker/controller/features.py); ApiVersions reports the result.

Each version is answered as the Kafka that introduced it last: v0-1 as Kafka 3.9 (the
specification for what 3.9 clients send: each feature answered on its own, in name order, and
what succeeded applied; a success's message null), v2 (KIP-1022, new in 4.x) as Kafka 4.3's
QuorumController.updateFeatures: all or nothing, one refused feature fails the whole request with a
top-level INVALID_UPDATE_VERSION ("The update failed for all features since ...") and nothing is
applied; a success has no results. (Kafka 4.3 answers v0-1 the 4.3 way too, with message "NONE";
kafka-features.sh of 3.9 and of 4.3 each print what their own broker's would.)"""
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
    all_or_nothing = ctx.api_version >= 2
    results, records = [], []
    # Kafka 3.9 answers in feature name order (a TreeMap)
    for name in (updates if all_or_nothing else sorted(updates)):
        level, kind = updates[name]
        result, recs = features.plan_update(broker.image, broker.node_id, name, level, kind)
        if result.error_code != ErrorCode.NONE and all_or_nothing:
            return UpdateFeaturesResponse(throttle_time_ms=0, error_code=result.error_code,
                                          error_message=_FAILED_PREFIX + result.message, results=[])
        results.append(UpdatableFeatureResult(feature=name, error_code=result.error_code,
                                              error_message=result.message))
        records += recs
    if records and not req.validate_only:
        broker.controller.log.append(records)
    return UpdateFeaturesResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                                  results=[] if all_or_nothing else results)

"""UpdateFeatures: finalize cluster feature levels (KIP-584), as Kafka 3.9's
controller does; ApiVersions reports the result (broker/controller/features.py)."""
from __future__ import annotations

from kproto.api import ApiKey
from kproto.messages.update_features_response import UpdatableFeatureResult, UpdateFeaturesResponse

from broker.controller import features
from broker.handlers import handles


@handles(ApiKey.UPDATE_FEATURES, 0, 1)
async def update_features(ctx, req):
    broker = ctx.broker
    updates: dict[str, tuple[int, int]] = {}
    for u in req.feature_updates:
        if ctx.api_version == 0:
            kind = features.SAFE_DOWNGRADE if u.allow_downgrade else features.UPGRADE
        else:
            kind = u.upgrade_type
        updates[u.feature] = (u.max_version_level, kind)
    results, records = [], []
    # Kafka answers in feature name order (a TreeMap) and applies what succeeded
    for name in sorted(updates):
        level, kind = updates[name]
        result, recs = features.plan_update(broker.image, broker.node_id, name, level, kind)
        results.append(UpdatableFeatureResult(feature=name, error_code=result.error_code,
                                              error_message=result.message))
        records += recs
    if records and not req.validate_only:
        broker.controller.log.append(records)
    return UpdateFeaturesResponse(throttle_time_ms=0, error_code=0, error_message=None, results=results)

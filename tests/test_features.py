"""Cluster features: ApiVersions' supported and finalized features as Kafka 3.9
reports them, and UpdateFeatures with Kafka's controller rules."""
from __future__ import annotations

import json
import os

import pytest

from broker.controller import features
from broker.metadata.image import MetadataImage
from kproto.errors import ErrorCode
from kproto.messages.api_versions_request import ApiVersionsRequest
from kproto.messages.update_features_request import FeatureUpdateKey, UpdateFeaturesRequest
from tests.wire_client import WireClient

pytestmark = pytest.mark.timeout(60)

OBSERVATIONS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "kafka-observations",
                            "api-versions.json")


def _api_versions(c: WireClient, version: int):
    return c.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), version)


def _update(c: WireClient, version=1, validate_only=False, **levels):
    ups = []
    for name, (level, kind) in levels.items():
        if version == 0:
            u = FeatureUpdateKey(feature=name.replace("_", "."), max_version_level=level,
                                 allow_downgrade=kind != features.UPGRADE)
        else:
            u = FeatureUpdateKey(feature=name.replace("_", "."), max_version_level=level, upgrade_type=kind)
        ups.append(u)
    resp = c.call(UpdateFeaturesRequest(timeout_ms=1000, feature_updates=ups, validate_only=validate_only),
                  version)
    assert resp.error_code == 0
    return {r.feature: (r.error_code, r.error_message) for r in resp.results}


def _finalized(c: WireClient) -> dict:
    return {f.name: f.max_version_level for f in _api_versions(c, 3).finalized_features}


def test_api_versions_features_as_kafka(broker):
    with WireClient(broker.bootstrap) as c:
        v3, v4 = _api_versions(c, 3), _api_versions(c, 4)
    got = {
        3: [(f.name, f.min_version, f.max_version) for f in v3.supported_features],
        4: [(f.name, f.min_version, f.max_version) for f in v4.supported_features],
        "finalized": [(f.name, f.min_version_level, f.max_version_level) for f in v3.finalized_features],
    }
    expected = {3: [("metadata.version", 1, 21)],
                4: [("kraft.version", 0, 1), ("metadata.version", 1, 21)],
                "finalized": [("metadata.version", 21, 21)]}
    if os.path.exists(OBSERVATIONS):
        with open(OBSERVATIONS) as f:
            obs = json.load(f)
        expected = {3: [(f["name"], f["min_version"], f["max_version"]) for f in obs["supported_features"]],
                    4: [(f["name"], f["min_version"], f["max_version"])
                        for f in obs["v4_response"]["supported_features"]],
                    "finalized": [(f["name"], f["min_version_level"], f["max_version_level"])
                                  for f in obs["finalized_features"]]}
    # transaction.version is a Kafka 4.x feature: advertised 0-2 (v4 only, its minimum is 0), not finalized;
    # share.version too (0-1), finalized at 1 as on a fresh Kafka 4.2+ cluster (share groups on)
    expected[4] = sorted(expected[4] + [("share.version", 0, 1), ("transaction.version", 0, 2)])
    expected["finalized"] = sorted(expected["finalized"] + [("share.version", 1, 1)])
    assert got == expected



def _update_response(c: WireClient, version, validate_only=False, **levels):
    ups = [FeatureUpdateKey(feature=name.replace("_", "."), max_version_level=level,
                            allow_downgrade=kind != features.UPGRADE) if version == 0 else
           FeatureUpdateKey(feature=name.replace("_", "."), max_version_level=level, upgrade_type=kind)
           for name, (level, kind) in levels.items()]
    return c.call(UpdateFeaturesRequest(timeout_ms=1000, feature_updates=ups, validate_only=validate_only),
                  version)


def test_v2_is_all_or_nothing_as_kafka_4_and_v0_1_answer_each_feature_as_kafka_3_9(broker):
    """v2 (new in Kafka 4.x) as a Kafka 4.3.1 broker answers it (checked side by side): one refused
    feature fails the whole request with a top-level error and no results, and nothing is applied;
    a success has no results. v0-1 keep Kafka 3.9's per-feature answers. A v0 AllowDowngrade is not a
    downgrade (Kafka's controller reads UpgradeType), on both."""
    sv, why = "share_version", ("Invalid update version 0 for feature share.version. Can't downgrade the version "
                                "of this feature without setting the upgrade type to either safe or unsafe "
                                "downgrade.")
    failed = "The update failed for all features since the following feature had an error: "
    with WireClient(broker.bootstrap) as c:
        resp = _update_response(c, 2, **{sv: (0, features.UPGRADE)})
        assert (resp.error_code, resp.error_message, resp.results) == (
            ErrorCode.INVALID_UPDATE_VERSION, failed + why, [])
        for version in (0, 1):
            resp = _update_response(c, version, **{sv: (0, features.UPGRADE if version else features.SAFE_DOWNGRADE)})
            assert resp.error_code == 0
            assert [(r.feature, r.error_code, r.error_message) for r in resp.results] == [
                ("share.version", ErrorCode.INVALID_UPDATE_VERSION, why)]
        resp = _update_response(c, 2, validate_only=True, **{sv: (0, features.SAFE_DOWNGRADE)})
        assert (resp.error_code, resp.error_message, resp.results) == (0, None, [])
        # nothing of a refused v2 update is applied; v1 applies what succeeded
        resp = _update_response(c, 2, **{"transaction_version": (1, features.UPGRADE), "no_such": (1, features.UPGRADE)})
        assert resp.error_code == ErrorCode.INVALID_UPDATE_VERSION and resp.results == []
        assert "transaction.version" not in _finalized(c)
        resp = _update_response(c, 1, validate_only=True,
                                **{"transaction_version": (1, features.UPGRADE), "no_such": (1, features.UPGRADE)})
        assert [(r.feature, r.error_code) for r in resp.results] == [
            ("no.such", ErrorCode.INVALID_UPDATE_VERSION), ("transaction.version", 0)]

def test_transaction_version_update_and_restart(fresh_broker):
    tv = "transaction_version"
    with WireClient(fresh_broker.bootstrap) as c:
        assert "transaction.version" not in _finalized(c)
        assert _update(c, **{tv: (3, features.UPGRADE)})["transaction.version"] == (
            ErrorCode.INVALID_UPDATE_VERSION,
            "Invalid update version 3 for feature transaction.version. Local controller 1 only supports versions 0-2")
        assert _update(c, **{tv: (2, features.UPGRADE)}) == {"transaction.version": (0, None)}
        assert _finalized(c)["transaction.version"] == 2
        code, msg = _update(c, **{tv: (1, features.UPGRADE)})["transaction.version"]
        assert code == ErrorCode.INVALID_UPDATE_VERSION and "Can't downgrade" in msg
    fresh_broker.stop()
    fresh_broker.start()
    with WireClient(fresh_broker.bootstrap) as c:
        assert _finalized(c)["transaction.version"] == 2   # kept in the metadata log
        assert _update(c, **{tv: (0, features.SAFE_DOWNGRADE)}) == {"transaction.version": (0, None)}
        assert "transaction.version" not in _finalized(c)


def test_update_metadata_version(fresh_broker):
    mv = "metadata_version"
    with WireClient(fresh_broker.bootstrap) as c:
        epoch = _api_versions(c, 3).finalized_features_epoch
        # a downgrade needs a downgrade type
        code, msg = _update(c, **{mv: (20, features.UPGRADE)})["metadata.version"]
        assert code == ErrorCode.INVALID_UPDATE_VERSION and "Can't downgrade" in msg
        # 3.9-IV0 -> 3.8-IV0 changes no metadata: allowed; validate_only changes nothing
        assert _update(c, validate_only=True, **{mv: (20, features.SAFE_DOWNGRADE)}) == {"metadata.version": (0, None)}
        assert _finalized(c) == {"metadata.version": 21, "share.version": 1}
        assert _update(c, **{mv: (20, features.SAFE_DOWNGRADE)}) == {"metadata.version": (0, None)}
        assert _finalized(c) == {"metadata.version": 20, "share.version": 1}
        # 3.7-IV2 changed the metadata format: no safe downgrade below it (as a Kafka 3.9 answered)
        assert _update(c, **{mv: (17, features.SAFE_DOWNGRADE)}) == {"metadata.version": (0, None)}
        code, msg = _update(c, **{mv: (16, features.SAFE_DOWNGRADE)})["metadata.version"]
        assert (code, msg) == (ErrorCode.INVALID_UPDATE_VERSION, "Invalid metadata.version 16. Refusing to "
                               "perform the requested downgrade because it might delete metadata information.")
        # v0: allow_downgrade=false is an upgrade; unknown features and levels out of range fail alone
        results = _update(c, version=0, **{mv: (21, features.UPGRADE), "no_such": (1, features.UPGRADE)})
        assert results["metadata.version"] == (0, None)
        # the epoch is the offset of the metadata the levels come from: it moves with each change
        assert _api_versions(c, 3).finalized_features_epoch > epoch
        assert results["no.such"] == (ErrorCode.INVALID_UPDATE_VERSION, "Invalid update version 1 for feature "
                                      "no.such. Local controller 1 does not support this feature.")
        assert _update(c, **{mv: (22, features.UPGRADE)})["metadata.version"] == (
            ErrorCode.INVALID_UPDATE_VERSION,
            "Invalid update version 22 for feature metadata.version. Local controller 1 only supports versions 1-21")
        assert _update(c, **{mv: (20, features.SAFE_DOWNGRADE)}) == {"metadata.version": (0, None)}
    fresh_broker.stop()
    fresh_broker.start()
    with WireClient(fresh_broker.bootstrap) as c:
        assert _finalized(c) == {"metadata.version": 20, "share.version": 1}   # kept in the metadata log


def test_plan_update_rules():
    image = MetadataImage()
    ok, recs = features.plan_update(image, 1, "metadata.version", 21, features.UPGRADE)
    assert ok.error_code == 0 and recs[0].feature_level == 21
    bad, recs = features.plan_update(image, 1, "metadata.version", 3, features.SAFE_DOWNGRADE)
    assert bad.message == "Invalid metadata.version 3. Unable to set a metadata.version less than 3.3-IV0"
    assert recs == []
    bad, _ = features.plan_update(image, 1, "metadata.version", 5, features.UNSAFE_DOWNGRADE)
    assert bad.message.endswith("Unsafe metadata downgrade is not supported in this version.")
    ok, recs = features.plan_update(image, 1, "kraft.version", 1, features.UPGRADE)
    assert ok.error_code == 0 and recs == []          # Kafka 3.9: success, the level stays 0
    bad, _ = features.plan_update(image, 1, "metadata.version", 21, 0)
    assert bad.message.endswith("The controller does not support the given upgrade type.")

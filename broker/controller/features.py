"""Cluster features (KIP-584): what this broker supports, what the metadata
log finalized, and the controller's rules for changing a level
(FeatureControlManager of Kafka 3.9), with Kafka's messages.

Finalized levels live in the metadata image (FeatureLevelRecord); a cluster
without a record for metadata.version runs at the level a fresh Kafka 3.9
cluster is formatted with.
"""
from __future__ import annotations

from dataclasses import dataclass

from kproto.errors import ErrorCode
from kproto.metadata.feature_level_record import FeatureLevelRecord

METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
# KIP-890 (Kafka 4.x's TransactionVersion): 0 and 1 keep the classic protocol, 2 bumps the
# producer epoch at every EndTxn and adds partitions implicitly (Produce v12, TxnOffsetCommit v5).
# Not finalized (0) on a new cluster, as Kafka formats a 3.9-IV0 cluster; set it with
# UpdateFeatures (kafka-features.sh upgrade --feature transaction.version=2) or at format time.
TRANSACTION_VERSION = "transaction.version"
# KIP-932 (Kafka 4.x's ShareVersion): share groups are served from level 1, which a fresh Kafka 4.2+
# cluster is formatted with (LATEST_PRODUCTION); `kafka-features.sh downgrade --feature
# share.version=0` (or `disable --feature share.version`) turns them off: the share-group APIs then
# answer UNSUPPORTED_VERSION (KafkaApis.isShareGroupProtocolEnabled).
SHARE_VERSION = "share.version"
# the level of a feature the metadata log has no record of (a fresh cluster's)
DEFAULT_LEVELS = {SHARE_VERSION: 1}

# (level, name, did the metadata format change from the previous level): MetadataVersion of Kafka 3.9
METADATA_VERSIONS = (
    (1, "3.0-IV1", True), (2, "3.1-IV0", False), (3, "3.2-IV0", True), (4, "3.3-IV0", True),
    (5, "3.3-IV1", True), (6, "3.3-IV2", True), (7, "3.3-IV3", True), (8, "3.4-IV0", True),
    (9, "3.5-IV0", False), (10, "3.5-IV1", True), (11, "3.5-IV2", True), (12, "3.6-IV0", False),
    (13, "3.6-IV1", True), (14, "3.6-IV2", True), (15, "3.7-IV0", True), (16, "3.7-IV1", False),
    (17, "3.7-IV2", True), (18, "3.7-IV3", False), (19, "3.7-IV4", False), (20, "3.8-IV0", False),
    (21, "3.9-IV0", False),
)
_MV = {level: (name, changed) for level, name, changed in METADATA_VERSIONS}
LATEST_METADATA_VERSION = 21          # what a fresh Kafka 3.9 cluster is formatted with
MINIMUM_BOOTSTRAP_VERSION = 4         # 3.3-IV0, the first level with FeatureLevelRecord

# What this broker (and its controller) supports: Kafka 3.9's production features with a
# maximum above 0 (BrokerFeatures.defaultSupportedFeatures leaves the others out).
SUPPORTED: dict[str, tuple[int, int]] = {
    METADATA_VERSION: (1, LATEST_METADATA_VERSION),
    KRAFT_VERSION: (0, 1),
    TRANSACTION_VERSION: (0, 2),     # a Kafka 4.x feature (3.9 does not advertise it)
    SHARE_VERSION: (0, 1),           # a Kafka 4.x feature
}

# FeatureUpdate.UpgradeType
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def metadata_version_name(level: int) -> str:
    return _MV[level][0] if level in _MV else str(level)


def transaction_version(image) -> int:
    """The finalized transaction.version (0 when not finalized)."""
    return image.features.get(TRANSACTION_VERSION, 0)


def finalized(image) -> dict[str, int]:
    """Finalized feature levels (level 0 means not finalized and is left out)."""
    levels = {k: v for k, v in image.features.items() if v > 0}
    levels.setdefault(METADATA_VERSION, LATEST_METADATA_VERSION)
    for name, level in DEFAULT_LEVELS.items():
        if name not in image.features:
            levels[name] = level
    return levels


def share_groups_enabled(image) -> bool:
    """share.version 1 or more finalized (the default)."""
    return finalized(image).get(SHARE_VERSION, 0) >= 1


@dataclass
class UpdateResult:
    """UpdateFeatures' answer for one feature."""
    error_code: int = 0
    message: str | None = None


def _invalid(feature: str, level: int, message: str) -> UpdateResult:
    return UpdateResult(ErrorCode.INVALID_UPDATE_VERSION,
                        f"Invalid update version {level} for feature {feature}. {message}")


def _range_text(lo: int, hi: int) -> str:
    return f"{lo}-{hi}"


def plan_update(image, node_id: int, feature: str, level: int, upgrade_type: int) -> tuple[UpdateResult, list]:
    """The outcome of one feature update and the records that perform it."""
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return _invalid(feature, level, "The controller does not support the given upgrade type."), []
    current = finalized(image).get(feature, 0)
    if level < 0:
        return _invalid(feature, level, "A feature version cannot be less than 0."), []
    supported = SUPPORTED.get(feature)
    if supported is None:
        if level != 0:
            return _invalid(feature, level, f"Local controller {node_id} does not support this feature."), []
    elif not supported[0] <= level <= supported[1] and not (level == 0 and feature != METADATA_VERSION):
        return _invalid(feature, level, f"Local controller {node_id} only supports versions "
                        f"{_range_text(*supported)}"), []
    if level < current and upgrade_type == UPGRADE:
        return _invalid(feature, level, "Can't downgrade the version of this feature without setting the "
                        "upgrade type to either safe or unsafe downgrade."), []
    if level > current and upgrade_type != UPGRADE:
        return _invalid(feature, level, "Can't downgrade to a newer version."), []
    if feature == METADATA_VERSION:
        problem = _metadata_version_problem(current, level, upgrade_type == UNSAFE_DOWNGRADE)
        if problem:
            return UpdateResult(ErrorCode.INVALID_UPDATE_VERSION,
                                f"Invalid metadata.version {level}. {problem}"), []
    elif feature == KRAFT_VERSION:
        # Kafka 3.9 answers success but the level stays (the quorum keeps its own version)
        return UpdateResult(), []
    return UpdateResult(), [FeatureLevelRecord(name=feature, feature_level=level)]


def _metadata_version_problem(current: int, level: int, unsafe: bool) -> str | None:
    if level not in _MV:
        return "Unknown metadata.version."
    if level < MINIMUM_BOOTSTRAP_VERSION:
        return f"Unable to set a metadata.version less than {metadata_version_name(MINIMUM_BOOTSTRAP_VERSION)}"
    if level < current:
        # a downgrade is safe only if no level above the target changed the metadata format
        changed = any(_MV[v][1] for v in range(level + 1, current + 1) if v in _MV)
        if changed:
            if unsafe:
                return "Unsafe metadata downgrade is not supported in this version."
            return "Refusing to perform the requested downgrade because it might delete metadata information."
    return None

"""The broker settings tiered storage reads, including the prefixed namespaces Kafka hands to its
plugins (`rsm.config.` for the object store, `rlmm.config.` for the metadata topic)."""
from __future__ import annotations

METADATA_TOPIC = "__remote_log_metadata"

# RemoteLogMetadataManager's topic defaults (TopicBasedRemoteLogMetadataManagerConfig)
_RLMM_DEFAULTS = {
    "remote.log.metadata.topic.num.partitions": 50,
    "remote.log.metadata.topic.replication.factor": 3,
    "remote.log.metadata.topic.retention.ms": -1,
}


def raw_config(config) -> dict[str, str]:
    """Every raw setting of the broker (defaults, then static, then dynamic), as strings."""
    out: dict[str, str] = {}
    for _source, layer in reversed(list(config.layers())):
        for k, v in layer.items():
            if v is not None:
                out[k] = str(v)
    return out


def rlmm_setting(config, name: str) -> int:
    raw = raw_config(config)
    prefix = raw.get("remote.log.metadata.manager.impl.prefix") or "rlmm.config."
    value = raw.get(prefix + name)
    return int(value) if value not in (None, "") else _RLMM_DEFAULTS[name]

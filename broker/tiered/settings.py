"""The broker settings tiered storage reads, including the prefixed namespaces Kafka hands to its
plugins (`rsm.config.` for the object store, `rlmm.config.` for the metadata topic)."""
from __future__ import annotations

from broker.config.types import StartupError

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


# Kafka 4's limit on ListOffsets timestamp lookups that read remote storage (KIP-1075,
# RemoteLogManagerConfig: LONG, default 30000, at least 1); a request's own TimeoutMs (v10+) wins
# when positive. kproto's broker config catalog is Kafka 3.9's, so it is read here from the raw
# settings (static: a restart changes it; Kafka 4 can also change it dynamically).
LIST_OFFSETS_TIMEOUT = "remote.list.offsets.request.timeout.ms"


def list_offsets_timeout_ms(config) -> int:
    value = raw_config(config).get(LIST_OFFSETS_TIMEOUT)
    if value in (None, ""):
        return 30000
    try:
        n = int(value.strip())
    except ValueError:
        raise StartupError(f"Invalid value {value} for configuration {LIST_OFFSETS_TIMEOUT}: "
                           "Not a number of type LONG") from None
    if n < 1:
        raise StartupError(f"Invalid value {n} for configuration {LIST_OFFSETS_TIMEOUT}: Value must be at least 1")
    return n


def remote_enabled(part) -> bool:
    return str(part.config.get("remote.storage.enable", "false")).lower() == "true"

"""Kafka's config validators (ConfigDef.Range, ValidString, ValidList, ...) with Kafka's messages.

Each validator is called with the config name and the *parsed* value, like ConfigDef.Validator
.ensureValid, and raises ConfigError worded exactly as Kafka's ConfigException.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from broker.config.types import ConfigError, invalid_value, java_str


@dataclass(frozen=True)
class Range:
    """ConfigDef.Range: inclusive bounds; either may be open."""
    min: int | float | None
    max: int | float | None = None

    def __call__(self, name: str, value) -> None:
        if value is None:
            raise invalid_value(name, None, "Value must be non-null")
        if self.min is not None and value < self.min:
            raise invalid_value(name, value, f"Value must be at least {java_str(self.min)}")
        if self.max is not None and value > self.max:
            raise invalid_value(name, value, f"Value must be no more than {java_str(self.max)}")


def at_least(n: int | float) -> Range:
    return Range(n)


def between(lo: int | float, hi: int | float) -> Range:
    return Range(lo, hi)


@dataclass(frozen=True)
class OneOf:
    """ConfigDef.ValidString.in(...): exact, case-sensitive match."""
    choices: tuple[str, ...]

    def __call__(self, name: str, value) -> None:
        if value not in self.choices:
            raise invalid_value(name, value, "String must be one of: " + ", ".join(self.choices))


@dataclass(frozen=True)
class ListOf:
    """ConfigDef.ValidList.in(...): every element must be one of the choices (empty list is fine)."""
    choices: tuple[str, ...]

    def __call__(self, name: str, value) -> None:
        item_check = OneOf(self.choices)
        for item in value:
            item_check(name, item)


def one_of(*choices: str) -> OneOf:
    return OneOf(choices)


def list_of(*choices: str) -> ListOf:
    return ListOf(choices)


def non_empty_string(name: str, value) -> None:
    if value is not None and value == "":
        raise invalid_value(name, value, "String must be non-empty")


def non_null(name: str, value) -> None:
    if value is None:
        raise invalid_value(name, "null", "entry must be non null")


def gzip_level(name: str, value) -> None:
    # Deflater levels 1..9, or -1 for zlib's own default
    if value is None:
        raise invalid_value(name, None, "Value must be non-null")
    if value > 9 or (value < 1 and value != -1):
        raise invalid_value(name, value, "Value must be between 1 and 9 or equal to -1")


def thread_pool_size(name: str, value) -> None:
    # -1 means "fall back to remote.log.manager.thread.pool.size"
    if value < -1 or value == 0:
        raise invalid_value(name, value, "Value can be -1 or greater than 0")


# MetadataVersion.fromVersionString accepts any IBP version string, plus a bare release for
# production releases (3.9 and below); extra dotted segments are ignored ("3.9.1" is "3.9").
_RELEASE_IVS = {
    "0.10.0": 2, "0.10.1": 3, "0.10.2": 1, "0.11.0": 3, "1.0": 1, "1.1": 1, "2.0": 2, "2.1": 3,
    "2.2": 2, "2.3": 2, "2.4": 2, "2.5": 1, "2.6": 1, "2.7": 3, "2.8": 2, "3.0": 2, "3.1": 1,
    "3.2": 1, "3.3": 4, "3.4": 1, "3.5": 3, "3.6": 3, "3.7": 5, "3.8": 1, "3.9": 1, "4.0": 2,
}
_METADATA_VERSIONS = frozenset(
    ["0.8.0", "0.8.1", "0.8.2", "0.9.0"]
    + [f"{r}-IV{i}" for r, n in _RELEASE_IVS.items() for i in range(n)]
    + [r for r in _RELEASE_IVS if r != "4.0"])


def metadata_version(name: str, value) -> None:
    text = java_str(value)
    segments = text.split(".")
    while segments and segments[-1] == "":   # Java's split drops trailing empty strings
        segments.pop()
    keep = 3 if text.startswith("0.") else 2
    key = text if keep >= len(segments) else ".".join(segments[:keep])
    if key not in _METADATA_VERSIONS:
        raise invalid_value(name, text, f"Version {text} is not a valid version")


_HOST_PORT = re.compile(r"(?:[0-9a-zA-Z\-%._]*://)?\[?([0-9a-zA-Z\-%._:]*)]?:([0-9]+)\Z")


def _host_port(address: str) -> tuple[str, int] | None:
    m = _HOST_PORT.match(address)
    if not m or int(m.group(2)) > 0x7FFFFFFF:
        return None
    return m.group(1), int(m.group(2))


def parse_quorum_voters(entries: list[str]) -> dict[int, tuple[str, int]]:
    """controller.quorum.voters entries `{id}@{host}:{port}` -> {id: (host, port)}."""
    voters = {}
    for entry in entries:
        parts = entry.split("@")
        while parts and parts[-1] == "":
            parts.pop()
        if len(parts) != 2:
            raise ConfigError("Invalid configuration value for controller.quorum.voters. "
                              "Each entry should be in the form `{id}@{host}:{port}`.")
        id_text, address = parts
        if not re.fullmatch(r"[+-]?[0-9]+", id_text) or not -(1 << 31) <= int(id_text) < (1 << 31):
            raise ConfigError(f"Failed to parse voter ID as an integer from {id_text}")
        hp = _host_port(address)
        if hp is None:
            what = "name" if _HOST_PORT.match(address) is None else "port"
            raise ConfigError(f"Failed to parse host {what} from entry {entry} for the configuration "
                              "controller.quorum.voters. Each entry should be in the form "
                              "`{id}@{host}:{port}`.")
        voters[int(id_text)] = hp
    return voters


def quorum_voters(name: str, value) -> None:
    parse_quorum_voters(value)


def quorum_bootstrap_servers(name: str, value) -> None:
    for entry in value:
        if _host_port(entry) is None:
            raise ConfigError(f"Failed to parse host name from {entry} for the configuration "
                              f"{name}. Each entry should be in the form \"{{host}}:{{port}}\"")


def throttled_replicas(name: str, value) -> None:
    proposed = [v.strip() for v in value]
    if not (all(re.fullmatch(r"(?:[0-9]+:[0-9]+)?", p) for p in proposed) or "".join(proposed) == "*"):
        raise invalid_value(name, value, f"{name} must be the literal '*' or a list of replicas in the "
                                         "following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


CLEANUP_POLICIES = list_of("compact", "delete")
COMPRESSION_TYPES = one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = one_of("CreateTime", "LogAppendTime")

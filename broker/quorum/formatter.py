"""Storage formatting, as `kafka-storage.sh format` does it in Kafka 3.9 (StorageTool and
org.apache.kafka.metadata.storage.Formatter): meta.properties (version 1, cluster.id, node.id, a new
directory.id) and bootstrap.checkpoint in every log directory not yet formatted, and for a dynamic
quorum (KIP-853: --standalone / --initial-controllers) the `00000000000000000000-0000000000.checkpoint`
snapshot with the initial voters in the metadata log directory. Messages and their order are Kafka's.
"""
from __future__ import annotations

import os
import time
import uuid

from kproto.metadata.feature_level_record import FeatureLevelRecord

from broker.metadata import snapshots
from broker.config import voters as dynamic_voters
from broker.storage.checkpoints import (
    meta_properties, read_meta_properties, uuid_to_str, write_meta_properties)

META_PROPERTIES = "meta.properties"
METADATA_PARTITION_DIR = "__cluster_metadata-0"

# metadata.version feature levels (MetadataVersion) of the KRaft releases; 3.9-IV0 is the latest
# production version of Kafka 3.9 and the default
_LEVELS = {"3.0-IV1": 1, "3.1-IV0": 2, "3.2-IV0": 3, "3.3-IV0": 4, "3.3-IV1": 5, "3.3-IV2": 6,
           "3.3-IV3": 7, "3.4-IV0": 8, "3.5-IV0": 9, "3.5-IV1": 10, "3.5-IV2": 11, "3.6-IV0": 12,
           "3.6-IV1": 13, "3.6-IV2": 14, "3.7-IV0": 15, "3.7-IV1": 16, "3.7-IV2": 17, "3.7-IV3": 18,
           "3.7-IV4": 19, "3.8-IV0": 20, "3.9-IV0": 21}
LATEST_PRODUCTION = "3.9-IV0"


class FormatError(Exception):
    """A refusal: the message is printed alone on stderr and the tool exits with 1."""


def release_version(text: str) -> tuple[str, int]:
    """(name, feature level) of a --release-version / inter.broker.protocol.version value, with
    MetadataVersion.fromVersionString's parsing and the Formatter's refusals."""
    from broker.config.validators import _METADATA_VERSIONS, _RELEASE_IVS
    text = text.strip()
    segments = [s for s in text.split(".")]
    while segments and segments[-1] == "":
        segments.pop()
    key = text if (3 if text.startswith("0.") else 2) >= len(segments) else \
        ".".join(segments[:3 if text.startswith("0.") else 2])
    if key not in _METADATA_VERSIONS:
        raise FormatError(f"Version {text} is not a valid version")
    name = key if "-IV" in key or key.startswith(("0.8", "0.9")) else f"{key}-IV{_RELEASE_IVS[key] - 1}"
    if name in _LEVELS:
        return name, _LEVELS[name]
    if name.startswith("4."):
        raise FormatError(f"metadata.version {name} is not yet stable.")
    raise FormatError(f"metadata.version {name} is too old to be supported.")


def bootstrap_records(level: int) -> list:
    return [FeatureLevelRecord(name="metadata.version", feature_level=level)]


def load_directory(directory: str):
    """('empty' | 'error' | 'formatted', meta.properties or None) for one directory."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        return "error", None
    try:
        props = read_meta_properties(os.path.join(directory, META_PROPERTIES))
    except OSError:
        return "error", None
    return ("empty", None) if props is None else ("formatted", props)


def verify(directory: str, props: dict, cluster_id: str | None, node_id: int) -> None:
    """MetaPropertiesEnsemble.verify for one formatted directory (Kafka's messages)."""
    path = os.path.join(directory, META_PROPERTIES)
    stored_cluster = props.get("cluster.id")
    if props.get("version", "0") == "1" and stored_cluster is None:
        raise FormatError(f"cluster.id was not specified in the v1 file: {path}")
    if cluster_id is not None and stored_cluster != cluster_id:
        raise FormatError(f"Invalid cluster.id in: {path}. Expected {cluster_id}, but read {stored_cluster}")
    stored_node = props.get("node.id")
    if stored_node is None:
        raise FormatError(f"node.id was not specified in {path}")
    if stored_node != str(node_id):
        raise FormatError(f"Stored node id {stored_node} doesn't match previous node id {node_id} in "
                          f"{path}. If you moved your data, make sure your configured node id matches. "
                          "If you intend to create a new node, you should remove all data in your data "
                          "directories.")


def format_directories(*, node_id: int, cluster_id: str, directories: list[str], metadata_log_dir: str,
                       controller_listener: str, release: str = LATEST_PRODUCTION,
                       initial_controllers: dict | None = None, ignore_formatted: bool = False,
                       out=print, sync: bool = True, extra_records: list | None = None) -> None:
    """Formatter.run: validate, then write every directory that has no meta.properties yet."""
    if node_id < 0:
        raise FormatError("You must specify a valid non-negative node ID.")
    if not cluster_id:
        raise FormatError("You must specify the cluster id.")
    if not directories:
        raise FormatError("You must specify at least one directory to format")
    if not controller_listener:
        raise FormatError("You must specify the name of the initial controller listener.")
    if metadata_log_dir not in directories:
        raise FormatError(f"The specified metadata log directory, {metadata_log_dir} was not one of the "
                          f"given directories: [{', '.join(directories)}]")
    release_name, level = release_version(release)

    empty, formatted, errors = [], [], []
    for d in sorted(set(directories)):
        state, props = load_directory(d)
        if state == "formatted":
            verify(d, props, cluster_id, node_id)
            formatted.append(d)
        elif state == "empty":
            empty.append(d)
        else:
            errors.append(d)
    if formatted and not ignore_formatted:
        raise FormatError(f"Log directory {formatted[0]} is already formatted. Use --ignore-formatted "
                          "to ignore this directory and format the others.")
    if errors:
        for d in errors:
            out(f"I/O error trying to read log directory {d}. Ignoring...")
        if not empty and not formatted:
            raise FormatError("No available log directories to format.")
    if not empty:
        out("All of the log directories are already formatted.")
        return
    records = bootstrap_records(level) + list(extra_records or [])   # (--add-scram credentials)
    for d in empty:
        if d != metadata_log_dir:
            kind, directory_id = "data directory", None
        elif initial_controllers is None:
            kind, directory_id = "metadata directory", None
        elif node_id in initial_controllers:
            kind, directory_id = "dynamic metadata voter directory", initial_controllers[node_id].directory_id
        else:
            kind, directory_id = "dynamic metadata directory", None
        if directory_id is None:
            directory_id = _new_directory_id()
        out(f"Formatting {kind} {d} with metadata.version {release_name}.")
        os.makedirs(d, exist_ok=True)
        snapshots.write_bootstrap(d, records, sync=sync)
        if d == metadata_log_dir and initial_controllers is not None:
            partition_dir = os.path.join(d, METADATA_PARTITION_DIR)
            os.makedirs(partition_dir, exist_ok=True)
            voters = dynamic_voters.voters_record(initial_controllers, controller_listener)
            snapshots.write_snapshot(partition_dir, 0, 0, [], last_contained_timestamp=_now_ms(),
                                     voters=voters, kraft_version=1, sync=sync)
        write_meta_properties(os.path.join(d, META_PROPERTIES),
                              meta_properties(node_id, cluster_id, uuid_to_str(directory_id)), sync)


def _now_ms() -> int:
    return int(time.time() * 1000)


def random_uuid() -> uuid.UUID:
    """Kafka's Uuid.randomUuid: a random (version 4) UUID whose text form does not start with '-'."""
    while True:
        u = uuid.uuid4()
        if not uuid_to_str(u).startswith("-"):
            return u


def _new_directory_id() -> uuid.UUID:
    # Copier.generateValidDirectoryId: random and never one of the few reserved ids (all < 100)
    while True:
        u = random_uuid()
        if u.int > 100:
            return u

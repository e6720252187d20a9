"""Start-up of a node's storage (KafkaRaftServer.initializeLogDirs): every log directory and the
metadata log directory must be formatted for this node and one cluster. A node of a multi-voter (or
dynamic) quorum whose directories are not formatted refuses to start and says to run the format
command; a single-node quorum (kproto's embedded default) formats itself on first start, with a new
cluster id, exactly as `kproto storage format` would."""
from __future__ import annotations

import logging
import os

from broker.quorum import formatter
from broker.quorum.formatter import FormatError
from broker.storage.checkpoints import uuid_to_str

log = logging.getLogger("kproto.quorum")


class StartupError(Exception):
    """The node cannot start with this storage; the message is printed alone, exit code 1."""


def directories(config) -> list[str]:
    k = config.kraft
    return sorted(set(config.log_dirs) | {k.metadata_log_dir})


def prepare_storage(config, sync: bool = True) -> str:
    """Check (or, for a single-node quorum, create) the formatted directories; returns the cluster id."""
    k = config.kraft
    dirs = directories(config)
    cluster_id = None
    missing = []
    try:
        for d in dirs:
            state, props = formatter.load_directory(d)
            if state == "error":
                raise StartupError(f"Encountered I/O error in log directory {d} (log.dirs): {_why(d)}. "
                                   "Cannot continue; choose a directory kproto can create and write with "
                                   "--set log.dirs=PATH")
            if state == "empty":
                missing.append(d)
                continue
            formatter.verify(d, props, cluster_id, k.node_id)
            cluster_id = props["cluster.id"]
        if not missing:
            return cluster_id
        if not k.single_node_quorum:
            if len(missing) == len(dirs):
                # Kafka's words, then what to do about it
                raise StartupError("No readable meta.properties files found. Format the log directories "
                                   "first: kproto storage format -t <cluster id> -c <server.properties>")
            raise StartupError(f"No `meta.properties` found in {missing[0]} (have you run `kproto storage "
                               "format` to format the directory?)")
        cluster_id = cluster_id or uuid_to_str(formatter.random_uuid())
        formatter.format_directories(
            node_id=k.node_id, cluster_id=cluster_id, directories=dirs, metadata_log_dir=k.metadata_log_dir,
            controller_listener=k.controller_listener_names[0], ignore_formatted=True,
            out=lambda line: log.info("%s", line), sync=sync)
    except FormatError as exc:
        raise StartupError(str(exc)) from None
    except OSError as exc:
        raise StartupError(f"Unable to format {os.path.commonpath(dirs) or dirs[0]}: {exc}") from None
    return cluster_id


def _why(directory: str) -> str:
    """The OS's reason a log directory cannot be used, for the one-line start-up error."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        return "Not a directory"
    try:
        os.listdir(directory)
    except FileNotFoundError:
        parent = os.path.dirname(os.path.abspath(directory))
        while parent and not os.path.exists(parent):
            parent = os.path.dirname(parent)
        return "Not a directory" if os.path.exists(parent) and not os.path.isdir(parent) else "No such file or directory"
    except OSError as exc:
        return exc.strerror or str(exc)
    return "unreadable meta.properties"

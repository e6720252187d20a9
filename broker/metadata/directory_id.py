"""Kafka's DirectoryId (KIP-858): the reserved log-dir ids a partition's Directories may hold,
and whether a replica's dir is online for its broker's registration."""
from __future__ import annotations

import uuid

UNASSIGNED = uuid.UUID(int=0)   # the broker has not said which of its dirs holds the replica
LOST = uuid.UUID(int=1)         # the replica's dir is gone
MIGRATING = uuid.UUID(int=2)    # a broker registered without dirs (before 3.7-IV2)


def is_online(d, online_dirs) -> bool:
    """DirectoryId.isOnline: UNASSIGNED and MIGRATING count as online, LOST never; a broker
    registered without dirs has every dir online (it halts when all have failed)."""
    if d in (UNASSIGNED, MIGRATING):
        return True
    if d == LOST:
        return False
    # (no copy: an election sweep asks this for every replica of every partition)
    return not online_dirs or d in online_dirs


def replica_dir(p, broker_id: int):
    """The dir partition image `p` names for the replica on `broker_id` (UNASSIGNED if none)."""
    dirs = getattr(p, "directories", None) or ()
    replicas = p.replicas
    if len(dirs) == len(replicas) and broker_id in replicas:
        return dirs[replicas.index(broker_id)]
    return UNASSIGNED


def replica_in_offline_dir(reg, p, broker_id: int) -> bool:
    """KRaftMetadataCache.isReplicaInOfflineDir."""
    return not is_online(replica_dir(p, broker_id), getattr(reg, "log_dirs", None))

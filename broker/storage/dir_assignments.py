"""Log directories in the metadata (KIP-858), broker side, as Kafka 3.9's BrokerLifecycleManager
and AssignmentsManager:

- the broker registers the `directory.id` of each of its log dirs (their meta.properties);
- where a replica's log lives in another dir than the one the metadata names for it (a new
  replica on a broker with several dirs is UNASSIGNED), the broker tells the active controller
  with AssignReplicasToDirs (the controller listener), batched, until the metadata agrees;
- a failed dir (broker/storage/dir_failure.py) goes to the controller in the next heartbeat's
  OfflineLogDirs, sent at once (broker/quorum/liveness.py), so the controller moves leadership
  of the partitions there to replicas on healthy brokers; a broker that cannot get one such
  heartbeat answered within `log.dir.failure.timeout.ms` shuts down (OfflineDirReports), since
  the controller would otherwise keep it leading partitions it cannot serve.
"""
from __future__ import annotations

import logging
import os

import trio

from kproto.messages.assign_replicas_to_dirs_request import (
    AssignReplicasToDirsRequest, DirectoryData, PartitionData, TopicData,
)

from .checkpoints import read_meta_properties, uuid_from_str
from .files import META_PROPERTIES, METADATA_TOPIC

log = logging.getLogger("kproto.storage")


# log dir -> directory.id, as read once: a failed disk may not answer a read any more
_ids: dict = {}


def directory_ids(log_dirs: list[str]) -> dict:
    """log dir (absolute path) -> its directory.id (uuid.UUID), for the dirs that have one."""
    out = {}
    for d in log_dirs:
        d = os.path.abspath(d)
        if d not in _ids:
            try:
                props = read_meta_properties(os.path.join(d, META_PROPERTIES)) or {}
                _ids[d] = uuid_from_str(props["directory.id"])
            except (OSError, KeyError, ValueError):
                continue
        out[d] = _ids[d]
    return out


def online_dir_ids(broker) -> list:
    """directory.id of each log dir that has not failed (BrokerRegistration.LogDirs)."""
    failed = set(getattr(getattr(broker, "dir_failures", None), "failed", {}) or {})
    return [i for d, i in directory_ids(broker.log_dirs).items() if d not in failed]


def offline_dir_ids(broker) -> list:
    """directory.id of each failed log dir (BrokerHeartbeat.OfflineLogDirs)."""
    failures = getattr(broker, "dir_failures", None)
    if failures is None or not failures.failed:
        return []
    ids = directory_ids(list(failures.failed))
    return [ids[d] for d in failures.failed if d in ids]


def pending(broker, node_id: int, ids: dict) -> dict:
    """{dir id: {topic id: [partition]}}: this broker's replicas whose log is in another dir than
    the one the metadata names. A failed dir's too: the controller then moves the replica out of
    the ISR and leadership (handleAssignReplicasToDirs), which an UNASSIGNED one escapes."""
    logs = broker.logs
    dir_of = getattr(logs, "dir_of", None)
    out: dict = {}
    for t in broker.image.topics.values():
        if t.name == METADATA_TOPIC:
            continue
        for p in t.partitions.values():
            if node_id not in p.replicas or len(p.directories) != len(p.replicas):
                continue
            where = dir_of(t.name, p.partition) if dir_of else (logs.log_dir if logs.get(t.name, p.partition) else None)
            if where is None:
                # offline: its log is in a failed dir, or failed to be made there
                where = broker.partitions.offline_dir(t.name, p.partition)
            if where is None or where not in ids:
                continue
            if p.directories[p.replicas.index(node_id)] != ids[where]:
                out.setdefault(ids[where], {}).setdefault(t.topic_id, []).append(p.partition)
    return out


class DirAssignments:
    """AssignmentsManager: sends AssignReplicasToDirs for replicas placed in a dir the metadata
    does not name yet (a batch per round, again while the metadata still disagrees)."""

    def __init__(self, quorum, interval_s: float = 0.5):
        self.q = quorum
        self.interval_s = interval_s
        self.sent = 0

    async def run(self):
        q = self.q
        ids = directory_ids(q.broker.log_dirs)
        if len(ids) < 2:
            return   # a broker's only dir is the one the controller names at creation
        while True:
            await trio.sleep(self.interval_s)
            reg = q.image.brokers.get(q.node_id)
            if reg is None:
                continue
            todo = pending(q.broker, q.node_id, ids)
            if not todo:
                continue
            req = AssignReplicasToDirsRequest(
                broker_id=q.node_id, broker_epoch=reg.broker_epoch,
                directories=[DirectoryData(id=d, topics=[
                    TopicData(topic_id=tid, partitions=[PartitionData(partition_index=i) for i in parts])
                    for tid, parts in topics.items()]) for d, topics in todo.items()])
            try:
                resp = await q.to_controller(req, timeout_s=5)
                self.sent += 1
                if resp is not None and resp.error_code:
                    log.debug("AssignReplicasToDirs: error %d", resp.error_code)
            except Exception as exc:   # noqa: BLE001 - the next round tries again
                log.debug("AssignReplicasToDirs: %s", exc)


class OfflineDirReports:
    """BrokerLifecycleManager's offlineDirs: each failed dir from when it was noticed until a
    heartbeat naming it is answered without error; overdue() are those still unanswered after
    `log.dir.failure.timeout.ms` ("Shutting down because couldn't communicate offline log dir
    ... with controllers")."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.since: dict = {}
        self.acked: set = set()

    def noticed(self, dirs, now: float) -> None:
        for d in dirs:
            self.since.setdefault(d, now)

    def answered(self, dirs) -> None:
        self.acked |= set(dirs)

    def overdue(self, now: float) -> list:
        return [d for d, t in self.since.items() if d not in self.acked and now - t >= self.timeout_s]

"""Log directories in the metadata (JBOD in KRaft, KIP-858), controller side, as Kafka 3.9:

- A broker registers every log dir's `directory.id` (BrokerRegistration.LogDirs, kept in the
  image as RegisterBrokerRecord.LogDirs: the broker's online dirs).
- Each partition names one directory per replica (PartitionRecord / PartitionChangeRecord
  Directories). At creation the controller puts the broker's only dir there, or UNASSIGNED for a
  broker with several (ClusterControlManager.defaultDir); a broker that placed a replica in one
  of its dirs says so with AssignReplicasToDirs (ReplicationControlManager
  .handleAssignReplicasToDirs), written as a PartitionChangeRecord.
- A failed dir reaches the controller in the broker's heartbeat (OfflineLogDirs); in one batch
  the controller takes that broker's replicas in those dirs out of the ISR, gives the partitions
  it led there new leaders, and writes a BrokerRegistrationChangeRecord whose LogDirs are the
  dirs still online (handleDirectoriesOffline). Metadata then lists those replicas as offline
  (KRaftMetadataCache.isReplicaInOfflineDir); the broker's partitions in healthy dirs keep
  their leader.
"""
from __future__ import annotations

from kproto.errors import ErrorCode
from kproto.metadata.broker_registration_change_record import BrokerRegistrationChangeRecord
from kproto.metadata.partition_change_record import PartitionChangeRecord

from broker.metadata.directory_id import (LOST, MIGRATING, UNASSIGNED, is_online,  # noqa: F401
                                          replica_dir, replica_in_offline_dir)
from broker.replication import election

ASSIGN_REPLICAS_TO_DIRS = 73


def default_dir(image, broker_id: int):
    """ClusterControlManager.defaultDir: a new replica's dir (the broker's only one; UNASSIGNED
    when it has several, or is not registered; MIGRATING when it registered none)."""
    reg = getattr(image, "brokers", {}).get(broker_id)
    if reg is None:
        return UNASSIGNED
    dirs = list(getattr(reg, "log_dirs", None) or [])
    if not dirs:
        return MIGRATING
    return dirs[0] if len(dirs) == 1 else UNASSIGNED


def offline_records(image, broker_id: int, broker_epoch: int, offline_dirs, brokers,
                    unclean_default: bool = False) -> list:
    """handleDirectoriesOffline: for dirs of the broker's registration reported offline for the
    first time, the elections that move its replicas there out (ISR, leadership), then the
    BrokerRegistrationChangeRecord with the dirs still online. [] when nothing is new."""
    reg = getattr(image, "brokers", {}).get(broker_id)
    if reg is None:
        return []
    registered = list(getattr(reg, "log_dirs", None) or [])
    offline = set(offline_dirs or [])
    newly = [d for d in registered if d in offline]
    if not newly:
        return []
    records = election.on_dirs_offline(image, broker_id, set(newly), brokers, unclean_default)
    online = [d for d in registered if d not in offline]
    return records + [BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_epoch,
                                                     log_dirs=online)]


def assign(image, req, brokers, unclean_default: bool = False):
    """handleAssignReplicasToDirs: (response, records). Each named replica's dir is set with a
    PartitionChangeRecord; a replica assigned to a dir already offline leaves the ISR and
    leadership as in handleDirectoriesOffline."""
    # (the codec at the first request: only a multi-voter quorum's brokers send one, issue 26)
    from kproto.messages.assign_replicas_to_dirs_response import (
        AssignReplicasToDirsResponse, DirectoryData, PartitionData, TopicData)
    bid = req.broker_id
    reg = getattr(image, "brokers", {}).get(bid)
    if reg is None:
        return AssignReplicasToDirsResponse(error_code=ErrorCode.BROKER_ID_NOT_REGISTERED, directories=[]), []
    if req.broker_epoch != reg.broker_epoch:
        return AssignReplicasToDirsResponse(error_code=ErrorCode.STALE_BROKER_EPOCH, directories=[]), []
    records, moved, out = [], [], []
    for d in req.directories:
        offline = not is_online(d.id, getattr(reg, "log_dirs", None))
        res_topics = []
        for td in d.topics:
            t = image.topics_by_id.get(td.topic_id)
            res_parts = []
            for pd in td.partitions:
                p = t.partitions.get(pd.partition_index) if t is not None else None
                if t is None:
                    code = ErrorCode.UNKNOWN_TOPIC_ID
                elif p is None:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif bid not in p.replicas:
                    code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                else:
                    code = 0
                    dirs = _directories(image, p)
                    if dirs[p.replicas.index(bid)] != d.id:
                        dirs[p.replicas.index(bid)] = d.id
                        records.append(PartitionChangeRecord(partition_id=p.partition, topic_id=t.topic_id,
                                                             directories=dirs))
                    if offline:
                        moved.append((t, p))
                res_parts.append(PartitionData(partition_index=pd.partition_index, error_code=code))
            res_topics.append(TopicData(topic_id=td.topic_id, partitions=res_parts))
        out.append(DirectoryData(id=d.id, topics=res_topics))
    elect = election.without_leader(brokers, bid)
    for t, p in moved:
        r = election.change(t.topic_id, p, elect, remove=bid,
                            unclean=election._unclean_enabled(t, unclean_default))
        if r is not None:
            records.append(r)
    return AssignReplicasToDirsResponse(error_code=0, directories=out), records


def _directories(image, p) -> list:
    dirs = list(getattr(p, "directories", None) or [])
    if len(dirs) != len(p.replicas):
        dirs = [default_dir(image, b) for b in p.replicas]
    return dirs


def new_directories(image, replicas) -> list:
    """Directories of a new partition's replicas (PartitionRecord.Directories)."""
    return [default_dir(image, b) for b in replicas]

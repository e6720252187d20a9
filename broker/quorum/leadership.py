"""A one-voter quorum's election, as KafkaRaftClient does it for a single voter at start: the next
epoch (one past both the stored quorum-state and the log's last leader epoch), written to
quorum-state, then a LeaderChange control record appended at the log end in that epoch. The metadata
log's later batches carry that epoch, so `__cluster_metadata-0` and its leader-epoch-checkpoint look
like Kafka's. A multi-voter quorum's elections belong to raft/."""
from __future__ import annotations

import os
import time

from kproto.messages.k_raft_version_record import KRaftVersionRecord
from kproto.messages.leader_change_message import LeaderChangeMessage, Voter

from broker.metadata import control, snapshots
from broker.quorum import state_file
from broker.quorum.state_file import QuorumState


def next_epoch(partition_dir: str, plog) -> int:
    stored = state_file.read(partition_dir)
    return max(stored.leader_epoch if stored else 0, plog.latest_epoch or 0, 0) + 1


def leader_change_batch(leader_id: int, voters: list[int], granting: list[int], epoch: int,
                        timestamp: int, voter_set=None) -> bytes:
    """The epoch's first batch: LeaderChange, then, for a dynamic quorum whose voter set is not in
    the log yet (the first epoch after formatting), KRaftVersionRecord and the VotersRecord."""
    msg = LeaderChangeMessage(version=0, leader_id=leader_id, voters=[Voter(voter_id=v) for v in voters],
                              granting_voters=[Voter(voter_id=v) for v in granting])
    messages = [msg]
    if voter_set is not None:
        messages += [KRaftVersionRecord(version=0, k_raft_version=1), voter_set]
    return control.control_batch(messages, base_offset=0, leader_epoch=epoch, timestamp=timestamp)


def bootstrap_voters(partition_dir: str):
    """The VotersRecord of a dynamic quorum, from the snapshot `format --standalone /
    --initial-controllers` wrote (or a later one); None for a static quorum."""
    for end_offset, epoch in reversed(snapshots.list_snapshots(partition_dir)):
        snap = snapshots.read(os.path.join(partition_dir, snapshots.file_name(end_offset, epoch)))
        if snap.kraft_version >= 1 and snap.voters is not None:
            return snap.voters
    return None


def become_sole_leader(plog, node_id: int, voters: list[int] | None = None, sync: bool = True,
                       voter_set=None) -> int:
    """Elect this node in a new epoch (alone: it is the only voter, or the only one running until
    raft/ replicates the log); `voters` are the configured voter ids, `voter_set` the VotersRecord of
    a dynamic quorum (kraft.version 1: quorum-state data_version 1). Returns the epoch."""
    partition_dir = plog.dir
    if voter_set is not None:
        voters = [v.voter_id for v in voter_set.voters]
    voters = sorted(voters or [node_id])
    epoch = next_epoch(partition_dir, plog)
    state = (QuorumState(leader_id=node_id, leader_epoch=epoch, data_version=1) if voter_set is not None
             else QuorumState(leader_id=node_id, leader_epoch=epoch, current_voters=voters))
    state_file.write(partition_dir, state, sync)
    now = int(time.time() * 1000)
    first_epoch_after_format = voter_set if plog.log_end_offset == 0 else None
    plog.append(bytearray(leader_change_batch(node_id, voters, [node_id], epoch, now,
                                              first_epoch_after_format)), epoch, now)
    if sync:
        plog.flush()
    return epoch


def quorum_state_path(plog) -> str:
    return os.path.join(plog.dir, state_file.FILE_NAME)


def bootstrap_batch_records(metadata_log_dir: str, default_level: int) -> list:
    """What Kafka's controller writes as the first metadata of a new cluster: the bootstrap records
    of bootstrap.checkpoint (metadata.version) between BeginTransaction("Bootstrap records") and
    EndTransaction, with a ZkMigrationStateRecord (NONE)."""
    from kproto.metadata.begin_transaction_record import BeginTransactionRecord
    from kproto.metadata.end_transaction_record import EndTransactionRecord
    from kproto.metadata.feature_level_record import FeatureLevelRecord
    from kproto.metadata.zk_migration_state_record import ZkMigrationStateRecord
    path = os.path.join(metadata_log_dir, snapshots.BOOTSTRAP_FILE)
    try:
        records = snapshots.read(path).records
    except FileNotFoundError:
        records = [FeatureLevelRecord(name="metadata.version", feature_level=default_level)]
    return ([BeginTransactionRecord(name="Bootstrap records")] + list(records)
            + [ZkMigrationStateRecord(zk_migration_state=0), EndTransactionRecord()])

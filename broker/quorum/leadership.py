"""A one-voter quorum's election, as KafkaRaftClient does it for a single voter at start: the next
epoch (one past both the stored quorum-state and the log's last leader epoch), written to
quorum-state, then a LeaderChange control record appended at the log end in that epoch. The metadata
log's later batches carry that epoch, so `__cluster_metadata-0` and its leader-epoch-checkpoint look
like Kafka's. A multi-voter quorum's elections belong to raft/."""
from __future__ import annotations

import os
import time

from kproto.messages.leader_change_message import LeaderChangeMessage, Voter

from broker.quorum import control, state_file
from broker.quorum.state_file import QuorumState


def next_epoch(partition_dir: str, plog) -> int:
    stored = state_file.read(partition_dir)
    return max(stored.leader_epoch if stored else 0, plog.latest_epoch or 0, 0) + 1


def leader_change_batch(leader_id: int, voters: list[int], granting: list[int], epoch: int,
                        timestamp: int) -> bytes:
    msg = LeaderChangeMessage(version=0, leader_id=leader_id, voters=[Voter(voter_id=v) for v in voters],
                              granting_voters=[Voter(voter_id=v) for v in granting])
    return control.control_batch([msg], base_offset=0, leader_epoch=epoch, timestamp=timestamp)


def become_sole_leader(plog, node_id: int, sync: bool = True) -> int:
    """Elect this node in a new epoch of its one-voter quorum; returns the epoch."""
    partition_dir = plog.dir
    epoch = next_epoch(partition_dir, plog)
    state_file.write(partition_dir, QuorumState(leader_id=node_id, leader_epoch=epoch,
                                                current_voters=[node_id]), sync)
    now = int(time.time() * 1000)
    plog.append(bytearray(leader_change_batch(node_id, [node_id], [node_id], epoch, now)), epoch, now)
    if sync:
        plog.flush()
    return epoch


def quorum_state_path(plog) -> str:
    return os.path.join(plog.dir, state_file.FILE_NAME)

"""The `quorum-state` file in `__cluster_metadata-0/`: Kafka's FileQuorumStateStore JSON.

Kafka writes QuorumStateData as compact JSON plus a `data_version` field, with no trailing newline,
through `quorum-state.tmp` and an atomic rename. Version 0 (kraft.version 0, a static quorum) has
`clusterId` (always ""), `appliedOffset` (always 0) and `currentVoters`; version 1 (kraft.version 1,
KIP-853 dynamic quorum) drops those and adds `votedDirectoryId`.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from broker.storage.checkpoints import atomic_write

FILE_NAME = "quorum-state"
NO_DIRECTORY_ID = "AAAAAAAAAAAAAAAAAAAAAA"


class QuorumStateError(ValueError):
    pass


@dataclass
class QuorumState:
    """The quorum-state file: leader, epoch, vote and voters."""
    leader_id: int = -1
    leader_epoch: int = -1
    voted_id: int = -1
    voted_directory_id: str = NO_DIRECTORY_ID
    current_voters: list = field(default_factory=list)   # voter ids (version 0 only)
    data_version: int = 0

    def to_json(self) -> bytes:
        if self.data_version == 0:
            doc = {"clusterId": "", "leaderId": self.leader_id, "leaderEpoch": self.leader_epoch,
                   "votedId": self.voted_id, "appliedOffset": 0,
                   "currentVoters": [{"voterId": v} for v in self.current_voters]}
        elif self.data_version == 1:
            doc = {"leaderId": self.leader_id, "leaderEpoch": self.leader_epoch, "votedId": self.voted_id,
                   "votedDirectoryId": self.voted_directory_id}
        else:
            raise QuorumStateError(f"unknown quorum state data_version {self.data_version}")
        doc["data_version"] = self.data_version
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes, path: str = FILE_NAME) -> "QuorumState":
        try:
            doc = json.loads(data)
            version = doc["data_version"]
            if version not in (0, 1):
                raise QuorumStateError(f"Unknown data version {version} in {path}")
            voters = doc.get("currentVoters") or []
            return cls(leader_id=doc.get("leaderId", -1), leader_epoch=doc.get("leaderEpoch", -1),
                       voted_id=doc.get("votedId", -1),
                       voted_directory_id=doc.get("votedDirectoryId", NO_DIRECTORY_ID),
                       current_voters=[v["voterId"] for v in voters], data_version=version)
        except (ValueError, KeyError, TypeError) as exc:
            if isinstance(exc, QuorumStateError):
                raise
            raise QuorumStateError(f"Error while reading the Quorum status from the file {path}: {exc}") from None


def read(directory: str) -> QuorumState | None:
    """The stored state of `directory` (the metadata partition's directory), or None if absent."""
    path = os.path.join(directory, FILE_NAME)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return QuorumState.from_json(data, path)


def write(directory: str, state: QuorumState, sync: bool = True) -> None:
    atomic_write(os.path.join(directory, FILE_NAME), state.to_json(), sync)

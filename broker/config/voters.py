"""`--initial-controllers` voter strings (Kafka's DynamicVoters.parse):
`id@host:port:directoryId,...`, with Kafka's messages for malformed entries."""
from __future__ import annotations

import uuid
from dataclasses import dataclass

from kproto.messages.voters_record import Endpoint, KRaftVersionFeature, Voter, VotersRecord

from broker.storage.checkpoints import uuid_from_str, uuid_to_str


@dataclass(frozen=True)
class DynamicVoter:
    """One `--initial-controllers` voter: id@host:port:directoryId."""
    node_id: int
    host: str
    port: int
    directory_id: uuid.UUID

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.node_id}@{host}:{self.port}:{uuid_to_str(self.directory_id)}"


def _parse_one(text: str) -> DynamicVoter:
    text = text.strip()
    at = text.find("@")
    if at < 0:
        raise ValueError("No @ found in dynamic voter string.")
    if at == 0:
        raise ValueError("Invalid @ at beginning of dynamic voter string.")
    try:
        node_id = int(text[:at])
    except ValueError:
        raise ValueError("Failed to parse node id in dynamic voter string.") from None
    if node_id < 0:
        raise ValueError(f"Invalid negative node id {node_id} in dynamic voter string.")
    rest = text[at + 1:]
    if not rest:
        raise ValueError("No hostname found after node id.")
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise ValueError("Hostname began with left bracket, but no right bracket was found.")
        host, rest = rest[1:end], rest[end + 1:]
    else:
        colon = rest.find(":")
        if colon < 0:
            raise ValueError("No colon following hostname could be found.")
        host, rest = rest[:colon], rest[colon:]
    if not rest.startswith(":"):
        raise ValueError("Port section must start with a colon.")
    rest = rest[1:]
    colon = rest.find(":")
    if colon < 0:
        raise ValueError("No colon following port could be found.")
    try:
        port = int(rest[:colon])
    except ValueError:
        raise ValueError("Failed to parse port in dynamic voter string.") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"Invalid port {port} in dynamic voter string.")
    try:
        directory_id = uuid_from_str(rest[colon + 1:])
    except ValueError:
        raise ValueError("Failed to parse directory ID in dynamic voter string.") from None
    return DynamicVoter(node_id, host, port, directory_id)


def parse(text: str) -> dict[int, DynamicVoter]:
    """{node id: voter}, in node id order (Kafka keeps them in a TreeMap)."""
    voters: dict[int, DynamicVoter] = {}
    for entry in text.split(","):
        if not entry.strip():
            continue
        v = _parse_one(entry)
        if v.node_id in voters:
            raise ValueError(f"Node id {v.node_id} was specified more than once.")
        voters[v.node_id] = v
    if not voters:
        raise ValueError("No voters given.")
    return dict(sorted(voters.items()))


def voters_record(voters: dict[int, DynamicVoter], listener_name: str) -> VotersRecord:
    """The VotersRecord of a dynamic quorum (DynamicVoters.toVoterSet): each voter on the controller
    listener, supporting kraft.version 0-1."""
    return VotersRecord(version=0, voters=[
        Voter(voter_id=v.node_id, voter_directory_id=v.directory_id,
              endpoints=[Endpoint(name=listener_name, host=v.host, port=v.port)],
              k_raft_version_feature=KRaftVersionFeature(min_supported_version=0, max_supported_version=1))
        for v in voters.values()])


def kraft_version(broker) -> int:
    """The quorum's kraft.version: 1 for a dynamic quorum (a voter set in the bootstrap checkpoint or
    the log), 0 for a static one (controller.quorum.voters). Kafka's brokers report level 1 among the
    finalized features of ApiVersions (KRaftMetadataCache.features), level 0 not at all."""
    quorum = getattr(broker, "quorum", None)
    shell = getattr(quorum, "shell", None)
    if shell is not None:
        return shell.node.kraft_version
    return 1 if getattr(broker, "quorum_voter_set", None) is not None else 0


ADD_RAFT_VOTER = 80
NOT_LEADER_OR_FOLLOWER, INVALID_REQUEST, INCONSISTENT_CLUSTER_ID = 6, 42, 104


def request_refusal(key: int, req, cluster_id: str, listener_name: str | None, is_leader: bool):
    """(error code, message) when an AddRaftVoter / RemoveRaftVoter request is refused before the
    voter set is looked at, in KafkaRaftClient's order (cluster id, leadership, the voter key, the
    endpoint on the controller listener); None when it goes on."""
    if req.cluster_id is not None and req.cluster_id != cluster_id:
        # (Kafka 3.9 names its own cluster id as "" here, on either listener: observed)
        return INCONSISTENT_CLUSTER_ID, f'The given id "{req.cluster_id}" doesn\'t match the cluster id ""'
    if not is_leader:
        return NOT_LEADER_OR_FOLLOWER, None
    verb = "Add" if key == ADD_RAFT_VOTER else "Remove"
    if req.voter_id < 0 or req.voter_directory_id is None or req.voter_directory_id.int == 0:
        return INVALID_REQUEST, f"{verb} voter request didn't include a valid voter"
    if key == ADD_RAFT_VOTER and listener_name is not None and all(x.name != listener_name for x in req.listeners):
        listed = ", ".join(f"ListenerName({x.name})={x.host}/<unresolved>:{x.port}" for x in req.listeners)
        return INVALID_REQUEST, (f"Add voter request didn't include the endpoint (Endpoints(endpoints={{{listed}}})) "
                                 f"for the default listener ListenerName({listener_name})")
    return None

"""A dynamic KRaft quorum (KIP-853) of real `kproto serve` processes: the nodes name the controllers
with controller.quorum.bootstrap.servers (no controller.quorum.voters) and are formatted as a Kafka
operator formats them: `--standalone` (the first controller), `--no-initial-controllers` (the
controllers added later, which start as observers), or `--initial-controllers` (all voters at once).
`add_controller` / `remove_controller` send AddRaftVoter / RemoveRaftVoter as
`kafka-metadata-quorum.sh add-controller / remove-controller` do, with kproto's codecs.
Used by tests/test_dynamic_quorum.py."""
from __future__ import annotations

import os
import socket
import struct

from kproto import api
from kproto.messages.add_raft_voter_request import AddRaftVoterRequest, Listener
from kproto.messages.remove_raft_voter_request import RemoveRaftVoterRequest

from broker.net.framing import recv_exact
from broker.storage.checkpoints import read_meta_properties, uuid_from_str
from tools.quorum_cluster import QuorumCluster

NOT_LEADER_OR_FOLLOWER = 6


class DynamicQuorum(QuorumCluster):
    """QuorumCluster with controller.quorum.bootstrap.servers: `controllers` controllers (ids 1..),
    then `nodes - controllers` brokers (roles=broker), or combined nodes when controllers is None."""

    def __init__(self, nodes: int = 3, controllers: int | None = None, settings: dict | None = None, **kw):
        super().__init__(nodes, controllers, settings={"controller.quorum.voters": "", **(settings or {})}, **kw)
        servers = ",".join(f"{self.host}:{p}" for p in self.controller_ports.values())
        self.settings["controller.quorum.bootstrap.servers"] = servers
        for i, roles in list(self.roles.items()):
            self._write_node(i, roles)

    def format_dynamic(self, mode: str = "standalone") -> dict:
        """Format every node. mode "standalone": controller 1 --standalone, the other controllers
        --no-initial-controllers; "initial": every controller with --initial-controllers naming them
        all. Brokers are formatted without those flags. Returns {node id: directory id text}."""
        ids = {}
        if mode == "initial":
            from broker.quorum.formatter import random_uuid
            from broker.storage.checkpoints import uuid_to_str
            ids = {i: uuid_to_str(random_uuid()) for i in self.controller_ports}
            initial = ",".join(f"{i}@{self.host}:{p}:{ids[i]}" for i, p in self.controller_ports.items())
        for i, n in self.nodes.items():
            if i not in self.controller_ports:
                args = ()
            elif mode == "initial":
                args = ("--initial-controllers", initial)
            else:
                args = ("--standalone",) if i == min(self.controller_ports) else ("--no-initial-controllers",)
            self._format(n, extra_args=args)
        return {i: self.directory_id(i) for i in self.controller_ports}

    def directory_id(self, node_id: int) -> str:
        return read_meta_properties(os.path.join(self.nodes[node_id].data_dir, "meta.properties"))["directory.id"]

    def controller_address(self, node_id: int) -> str:
        return f"{self.host}:{self.controller_ports[node_id]}"

    def add_controller(self, node_id: int, timeout_ms: int = 10000, address: str | None = None):
        """AddRaftVoter for node_id (its directory id from meta.properties, its controller listener),
        sent to `address` (e.g. a broker listener, which forwards it), or else to the controllers in
        turn until one is the leader: (error code, message)."""
        req = AddRaftVoterRequest(cluster_id=self.cluster_id, timeout_ms=timeout_ms, voter_id=node_id,
                                  voter_directory_id=uuid_from_str(self.directory_id(node_id)),
                                  listeners=[Listener(name="CONTROLLER", host=self.host,
                                                      port=self.controller_ports[node_id])])
        return self._to_leader(req, address, timeout_ms / 1000 + 5)

    def remove_controller(self, node_id: int, directory_id: str | None = None, address: str | None = None):
        req = RemoveRaftVoterRequest(cluster_id=self.cluster_id, voter_id=node_id,
                                     voter_directory_id=uuid_from_str(directory_id or self.directory_id(node_id)))
        return self._to_leader(req, address, 35)

    def _to_leader(self, req, address, timeout_s):
        targets = [address] if address is not None else [
            self.controller_address(i) for i in self.controller_ports if self.nodes[i].alive()]
        answer = None
        for target in targets:
            try:
                resp = call(target, req, timeout_s)
            except OSError:
                continue
            answer = (resp.error_code, resp.error_message)
            if resp.error_code != NOT_LEADER_OR_FOLLOWER:
                return answer
        return answer


def call(address: str, request, timeout_s: float = 30.0):
    """One request on a new connection (the highest version the codec has); the decoded answer."""
    host, port = address.rsplit(":", 1)
    version = api.version_range(request.API_KEY)[1]
    with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
        s.sendall(api.encode_request(request, version, 7, client_id="kproto-dynamic-quorum"))
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        _corr, resp = api.decode_response(recv_exact(s, size), request.API_KEY, version)
    return resp


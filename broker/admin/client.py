"""The admin CLI's view of a cluster: a bootstrap connection, connections to each broker by node
id (leaders for produce/fetch/offsets, coordinators for groups, every broker for log dirs and group
lists), and the lookups several command families share (metadata, offsets, coordinators)."""
from __future__ import annotations

import time
from datetime import datetime

from kproto.messages.find_coordinator_request import FindCoordinatorRequest
from kproto.messages.list_offsets_request import ListOffsetsRequest
from kproto.messages.metadata_request import MetadataRequest

from broker.admin.connection import Connection, ConnectionFailed
from broker.admin.errors import USAGE, AdminError, KafkaError, check
from broker.admin.settings import bootstrap_addresses

EARLIEST, LATEST = -2, -1
METADATA_V = 12
# errors worth another try after a moment: the cluster is electing or loading
RETRIABLE = {3, 5, 6, 14, 15, 16}
# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: find it again, retry
COORDINATOR_RETRIABLE = {14, 15, 16}
# LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER: a partition's leader (or its log) is on its way
LEADER_RETRIABLE = {5, 6}


class Admin:
    def __init__(self, settings: dict):
        self.settings = settings
        self.timeout = int(settings.get("request.timeout.ms", 30000)) / 1000
        self._by_node: dict[int, Connection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        errors = []
        for host, port in bootstrap_addresses(settings):
            try:
                self.bootstrap = Connection(host, port, settings, self.timeout)
                break
            except ConnectionFailed as exc:
                errors.append(str(exc))
        else:
            raise ConnectionFailed("; ".join(errors))

    def close(self) -> None:
        self.bootstrap.close()
        for c in self._by_node.values():
            c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- connections -------------------------------------------------------------------------

    def node(self, node_id: int) -> Connection:
        """A connection to a broker by node id (from the last Metadata answer)."""
        conn = self._by_node.get(node_id)
        if conn is None:
            if node_id not in self._brokers:
                self.metadata([])
            if node_id not in self._brokers:
                raise AdminError(f"LEADER_NOT_AVAILABLE: broker {node_id} is not in the cluster's metadata")
            host, port = self._brokers[node_id]
            conn = self._by_node[node_id] = Connection(host, port, self.settings, self.timeout)
        return conn

    def call(self, request, version: int):
        return self.bootstrap.call(request, version)

    # -- metadata ----------------------------------------------------------------------------

    def metadata(self, topics: list[str] | None = None, allow_auto_create: bool = False):
        """Metadata for the named topics (None: every topic; []: brokers only)."""
        req = MetadataRequest(
            topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=allow_auto_create)
        resp = self.call(req, METADATA_V)
        self._brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        return resp

    def brokers(self) -> dict[int, tuple[str, int]]:
        if not self._brokers:
            self.metadata([])
        return self._brokers

    def topic(self, name: str):
        """The metadata of one existing topic, its partitions sorted."""
        t = self.metadata([name]).topics[0]
        check(t.error_code, f"topic {name}")
        t.partitions.sort(key=lambda p: p.partition_index)
        return t

    # -- offsets -----------------------------------------------------------------------------

    def list_offsets(self, topic: str, partitions: dict[int, int], timestamp: int) -> dict[int, int]:
        """{partition: offset} for ListOffsets at `timestamp` (EARLIEST, LATEST or a time in ms),
        each asked of the partition's leader; -1 where no record is that recent. Asked again, on
        fresh metadata, while a partition has no leader or its leader answers that it is not (its
        log still being made after CreateTopics, a leadership moving), within request.timeout.ms:
        Kafka's AdminClient.listOffsets retries the same errors."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return self._list_offsets(topic, partitions, timestamp)
            except KafkaError as exc:
                if exc.code not in LEADER_RETRIABLE or time.monotonic() > deadline:
                    raise
            time.sleep(0.1)

    def _list_offsets(self, topic: str, partitions: dict[int, int], timestamp: int) -> dict[int, int]:
        t = self.topic(topic)
        by_leader: dict[int, list[int]] = {}
        for p in t.partitions:
            if p.partition_index in partitions:
                if p.leader_id < 0:
                    raise KafkaError(5, f"{topic}-{p.partition_index}")
                by_leader.setdefault(p.leader_id, []).append(p.partition_index)
        out = {}
        for leader, parts in by_leader.items():
            req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
                ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1,
                                                            timestamp=timestamp) for p in parts])])
            for rt in self.node(leader).call(req, 7).topics:
                for rp in rt.partitions:
                    check(rp.error_code, f"{topic}-{rp.partition_index}")
                    out[rp.partition_index] = rp.offset
        return out

    def coordinator(self, group: str) -> Connection:
        """A connection to the group's coordinator; again while the cluster is still creating
        __consumer_offsets or electing its leaders (COORDINATOR_NOT_AVAILABLE), as clients do."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return self._coordinator(group)
            except KafkaError as exc:
                if exc.code not in RETRIABLE or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def at_coordinator(self, group: str, call):
        """``call(conn)`` on the group's coordinator, again on a fresh lookup while it answers
        that it is loading the group or is not (or no longer) its coordinator: what a client does
        with those errors. Kafka answers NOT_COORDINATOR for a while after it has created
        __consumer_offsets, even to a request sent where FindCoordinator pointed."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return call(self.coordinator(group))
            except KafkaError as exc:
                if exc.code not in COORDINATOR_RETRIABLE or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def _coordinator(self, group: str) -> Connection:
        conn = self.bootstrap
        v = conn.version(FindCoordinatorRequest, 4)
        if v >= 4:
            resp = conn.call(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), v)
            c = resp.coordinators[0]
            code, message, node_id, host, port = c.error_code, c.error_message, c.node_id, c.host, c.port
        else:
            resp = conn.call(FindCoordinatorRequest(key=group, key_type=0), v)
            code, message = resp.error_code, resp.error_message
            node_id, host, port = resp.node_id, resp.host, resp.port
        check(code, f"group {group}", message)
        self._brokers.setdefault(node_id, (host, port))
        return self.node(node_id)


def parse_time(text: str) -> int:
    """A time given as ms since the epoch or ISO-8601 (naive times are local), in ms."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise AdminError(f"{text!r}: not ms since the epoch nor ISO-8601", USAGE) from None
    return int(dt.timestamp() * 1000)

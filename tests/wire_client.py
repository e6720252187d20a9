"""A blocking raw-socket Kafka client for integration tests: whole request
frames out (kproto.api.encode_request or hand-made bytes), response frames
in, and a way to tell whether the broker closed the connection."""
from __future__ import annotations

import socket
import struct
import time
import uuid

from kproto import api
from kproto.messages.api_versions_request import ApiVersionsRequest
from kproto.messages.create_topics_request import CreateTopicsRequest
from kproto.messages.delete_records_request import DeleteRecordsRequest
from kproto.messages.fetch_request import FetchRequest
from kproto.messages.list_offsets_request import ListOffsetsRequest
from kproto.messages.metadata_request import MetadataRequest
from kproto.messages.produce_request import ProduceRequest

_SIZE = struct.Struct(">i")


class WireClient:
    def __init__(self, bootstrap: str, timeout: float = 10.0):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._next_cid = 1

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- sending -------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, request, version: int, client_id: str | None = "kproto-tests") -> int:
        cid = self._next_cid
        self._next_cid += 1
        self.send_raw(api.encode_request(request, version, cid, client_id))
        return cid

    # -- receiving -----------------------------------------------------------

    def _recv_exact(self, n: int) -> bytes | None:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                return None
            out += chunk
        return bytes(out)

    def recv_frame(self) -> bytes | None:
        """The next response frame without its size prefix; None when the
        broker closed the connection."""
        head = self._recv_exact(4)
        if head is None:
            return None
        body = self._recv_exact(_SIZE.unpack(head)[0])
        return body

    def call(self, request, version: int):
        cid = self.send(request, version)
        frame = self.recv_frame()
        if frame is None:
            raise ConnectionError(f"broker closed the connection instead of answering {request.NAME} v{version}")
        got_cid, response = api.decode_response(frame, request.API_KEY, version)
        assert got_cid == cid, (got_cid, cid)
        return response

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True if the broker closes the connection (EOF or reset) within
        timeout without sending anything; False if it stays open."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1)
        except socket.timeout:
            return False
        except (ConnectionResetError, BrokenPipeError):
            return True
        finally:
            self.sock.settimeout(10.0)
        if data:
            raise AssertionError(f"expected the connection to close, got data {data!r}")
        return True


# -- request builders (the versions the observations used) -------------------------------------

PRODUCE_V = 9
FETCH_V = 12
LIST_OFFSETS_V = 9
METADATA_V = 12

def produce_req(topic: str, data, partition: int = 0, acks: int = -1, transactional_id=None) -> ProduceRequest:
    return ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=data)])])


def produce(c: WireClient, topic: str, data, partition: int = 0, **kw):
    resp = c.call(produce_req(topic, data, partition, **kw), PRODUCE_V)
    return resp.responses[0].partition_responses[0]


def fetch_req(topic: str, offset: int, partition: int = 0, topic_id=None, leader_epoch: int = -1,
              session_id: int = 0, session_epoch: int = -1, max_wait_ms: int = 0) -> FetchRequest:
    ft = FetchRequest.FetchTopic(topic=topic, topic_id=topic_id or uuid.UUID(int=0), partitions=[
        FetchRequest.FetchPartition(partition=partition, current_leader_epoch=leader_epoch,
                                    fetch_offset=offset, partition_max_bytes=1 << 20)])
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 24,
                        isolation_level=0, session_id=session_id, session_epoch=session_epoch, topics=[ft])


def fetch(c: WireClient, topic: str, offset: int, version: int = FETCH_V, **kw):
    resp = c.call(fetch_req(topic, offset, **kw), version)
    return resp


def list_offset(c: WireClient, topic: str, timestamp: int, partition: int = 0, leader_epoch: int = -1):
    req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(
            partition_index=partition, current_leader_epoch=leader_epoch, timestamp=timestamp)])])
    return c.call(req, LIST_OFFSETS_V).topics[0].partitions[0]


def metadata(c: WireClient, name=None, topic_id=None, auto_create: bool = False, version: int = METADATA_V):
    t = MetadataRequest.MetadataRequestTopic(name=name, topic_id=topic_id or uuid.UUID(int=0))
    return c.call(MetadataRequest(topics=[t], allow_auto_topic_creation=auto_create), version).topics[0]


def delete_records(c: WireClient, topic: str, offset: int, partition: int = 0):
    req = DeleteRecordsRequest(timeout_ms=5000, topics=[DeleteRecordsRequest.DeleteRecordsTopic(
        name=topic, partitions=[DeleteRecordsRequest.DeleteRecordsPartition(partition_index=partition,
                                                                               offset=offset)])])
    return c.call(req, 2).topics[0].partitions[0]


def api_versions_ok(c: WireClient) -> bool:
    resp = c.call(ApiVersionsRequest(client_software_name="kproto-tests", client_software_version="1"), 3)
    return resp.error_code == 0 and len(resp.api_keys) > 3



def create_topic(bootstrap: str, name: str, partitions: int | None = None, timeout: float = 10.0):
    """Create a topic through Metadata auto-creation (the broker's
    num.partitions decides the count) and wait until it has its partitions.
    Returns the topic's metadata entry."""
    deadline = time.monotonic() + timeout
    with WireClient(bootstrap) as c:
        while True:
            req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                  allow_auto_topic_creation=True)
            resp = c.call(req, 12)
            t = resp.topics[0]
            if t.error_code == 0 and t.partitions and (partitions is None or len(t.partitions) == partitions):
                return t
            if time.monotonic() > deadline:
                raise AssertionError(f"topic {name} did not appear: error {t.error_code}")
            time.sleep(0.05)


# -- the command-line tools' set-up against kproto or a real Kafka (errors end the tool) ----------

def create_led_topic(c: WireClient, name: str, partitions: int, hint: str = "", timeout: float = 30.0):
    """CreateTopics (replication factor 1), then Metadata until every partition has a leader;
    the topic's metadata entry. A refusal or no leaders in time ends the tool (SystemExit)."""
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=30000)
    code = c.call(req, 5).topics[0].error_code
    if code:
        raise SystemExit(f"CreateTopics {name}: error {code}{hint}")
    deadline = time.monotonic() + timeout
    while True:
        t = c.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)]), METADATA_V).topics[0]
        if t.error_code == 0 and len(t.partitions) == partitions and all(p.leader_id >= 0 for p in t.partitions):
            return t
        if time.monotonic() > deadline:
            raise SystemExit(f"topic {name} has no leaders")
        time.sleep(0.1)


def produce_once_led(c: WireClient, req: ProduceRequest, what: str) -> None:
    """Send a one-partition ProduceRequest, again while the partition has no leader yet (a new Kafka
    partition's leader needs a moment: UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
    NOT_LEADER_OR_FOLLOWER); any other error ends the tool (SystemExit naming `what`)."""
    for _ in range(100):
        err = c.call(req, PRODUCE_V).responses[0].partition_responses[0].error_code
        if err not in (3, 5, 6):
            break
        time.sleep(0.2)
    if err:
        raise SystemExit(f"{what}: error {err}")


def finalize_feature(c: WireClient, feature: str, level: int) -> None:
    """UpdateFeatures v1 upgrade of one feature to level, which must succeed."""
    from kproto.messages.update_features_request import FeatureUpdateKey, UpdateFeaturesRequest
    resp = c.call(UpdateFeaturesRequest(timeout_ms=5000, feature_updates=[
        FeatureUpdateKey(feature=feature, max_version_level=level, upgrade_type=1)]), 1)
    assert [(r.feature, r.error_code) for r in resp.results] == [(feature, 0)]


def create_topics(c: WireClient, names, partitions: int) -> None:
    """CreateTopics v5 of names with replication factor 1, which must all succeed."""
    resp = c.call(CreateTopicsRequest(timeout_ms=10000, topics=[
        CreateTopicsRequest.CreatableTopic(name=n, num_partitions=partitions, replication_factor=1, assignments=[],
                                           configs=[]) for n in names]), 5)
    assert [t.error_code for t in resp.topics] == [0] * len(names)

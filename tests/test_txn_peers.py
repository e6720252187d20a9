"""The transaction code's per-partition requests to other brokers (WriteTxnMarkers to leaders,
AddPartitionsToTxn verify_only to coordinators) share one path: partitions grouped by topic into
the request, the answer read back per partition, NETWORK_EXCEPTION for every partition when the
broker has no endpoint or does not answer."""
import trio

from kproto.errors import ErrorCode
from kproto.messages.write_txn_markers_response import (
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse)

from broker.transactions.peers import PeerConnections, errors_by_partition

TPS = [("a", 0), ("b", 1), ("a", 2)]


class _Peers(PeerConnections):
    def __init__(self, answer):
        super().__init__(None, "test")
        self.answer, self.sent = answer, []

    async def request(self, broker_id, endpoint, req, version, timeout):
        self.sent.append(req)
        return self.answer


def _read(resp):
    return errors_by_partition(resp.markers, "topics", "partitions", "error_code")


def _ask(peers, endpoint=("h", 1)):
    return trio.run(peers.partition_errors, 2, endpoint, TPS, lambda by_topic: by_topic, 1, 5, _read)


def test_the_answer_per_partition_from_a_request_grouped_by_topic():
    resp = WriteTxnMarkersResponse(markers=[WritableTxnMarkerResult(producer_id=1, topics=[
        WritableTxnMarkerTopicResult(name="a", partitions=[
            WritableTxnMarkerPartitionResult(partition_index=0, error_code=0),
            WritableTxnMarkerPartitionResult(partition_index=2, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)]),
        WritableTxnMarkerTopicResult(name="b", partitions=[
            WritableTxnMarkerPartitionResult(partition_index=1, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)])])])
    peers = _Peers(resp)
    assert _ask(peers) == {("a", 0): 0, ("a", 2): ErrorCode.NOT_LEADER_OR_FOLLOWER,
                           ("b", 1): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert peers.sent == [{"a": [0, 2], "b": [1]}]


def test_no_endpoint_or_no_answer_is_a_network_exception_for_every_partition():
    peers = _Peers(None)
    assert _ask(peers) == {tp: ErrorCode.NETWORK_EXCEPTION for tp in TPS}
    assert _ask(_Peers(None), endpoint=None) == {tp: ErrorCode.NETWORK_EXCEPTION for tp in TPS}


def test_a_request_goes_at_the_newest_version_the_peer_serves():
    """WriteTxnMarkers v2 to a leader that serves it, v1 to one of an older release (a rolling
    upgrade), the wanted version when the peer's versions are unknown; asked again after a failure."""
    from kproto.messages.api_versions_response import ApiVersion, ApiVersionsResponse

    def versions(hi):
        return ApiVersionsResponse(error_code=0, api_keys=[ApiVersion(api_key=27, min_version=0, max_version=hi)])

    peers = _Peers(versions(1))
    assert trio.run(peers.version, 2, ("h", 1), 27, 2, 5) == 1
    peers.answer = versions(2)
    assert trio.run(peers.version, 2, ("h", 1), 27, 2, 5) == 1          # known for this connection
    assert trio.run(peers.version, 2, ("h", 2), 27, 2, 5) == 2          # another endpoint: asked again
    assert trio.run(peers.version, 3, ("h", 3), 18, 3, 5) == 3          # an API it did not list
    peers.answer = None
    assert _ask(peers, endpoint=("h", 2)) == {tp: ErrorCode.NETWORK_EXCEPTION for tp in TPS}
    assert trio.run(peers.version, 2, ("h", 2), 27, 2, 5) == 2          # unknown: the wanted version
    peers.answer = versions(1)
    assert trio.run(peers.version, 2, ("h", 2), 27, 2, 5) == 1          # forgotten after the failure

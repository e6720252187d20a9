"""A follower's fetch that gets no answer in replica.socket.timeout.ms is given up: the fetcher
closes its connection, its next fetch is a full one (a new fetch session) on a new connection
(Kafka's ReplicaFetcherThread after a NetworkClient request timeout). The fetcher keeps one cancel
scope for the timeout across its requests (broker/replication/manager.py): a leader that stops
answering after some answers must still time out."""
from __future__ import annotations

import trio

from kproto import api
from kproto.messages.fetch_request import FetchRequest
from kproto.messages.fetch_response import FetchResponse

from broker.net.framing import take_frame
from broker.replication.client import BrokerConnection
from broker.replication.fetch_session_handler import FetchSessionHandler
from broker.replication.manager import FETCH_VERSION, Fetcher


class _Manager:
    node_id = 2

    def __init__(self, port: int):
        self.port = port

    def _cfg_int(self, key: str, default: int) -> int:
        return {"replica.socket.timeout.ms": 300, "replica.fetch.backoff.ms": 50}.get(key, default)

    def endpoint_of(self, _leader):
        return "127.0.0.1", self.port

    def connection(self, host, port, client_id):
        return BrokerConnection(host, port, client_id)


def test_unanswered_fetch_times_out_and_the_next_is_full_on_a_new_connection():
    async def main():
        connections = []   # [fetch session epochs asked on it]
        answered = 3       # answers the leader gives before it goes silent

        async def leader(stream):
            epochs = []
            connections.append(epochs)
            buf = bytearray()
            while True:
                data = await stream.receive_some(1 << 16)
                if not data:
                    return
                buf += data
                while (frame := take_frame(buf)) is not None:
                    header, req = api.decode_request(frame)
                    epochs.append(req.session_epoch)
                    if sum(len(e) for e in connections) > answered and len(connections) == 1:
                        continue   # silent from now on (on the first connection)
                    resp = FetchResponse(throttle_time_ms=0, error_code=0, session_id=7, responses=[])
                    out = bytearray(8)
                    out[4:8] = header.correlation_id.to_bytes(4, "big")
                    out.append(0)   # (flexible response header: no tagged fields)
                    resp.encode_into(out, FETCH_VERSION, [], strict=False)
                    out[0:4] = (len(out) - 4).to_bytes(4, "big")
                    await stream.send_all(bytes(out))

        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(trio.serve_tcp, leader, 0)
            port = listeners[0].socket.getsockname()[1]
            fetcher = Fetcher(_Manager(port), leader_id=1)
            fetcher.partitions[("t", 0)] = object()
            fetcher.session = FetchSessionHandler()

            async def request():
                await trio.sleep(0.01)
                req = FetchRequest(replica_state=FetchRequest.ReplicaState(replica_id=2, replica_epoch=-1),
                                   max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                                   session_id=fetcher.session.session_id, session_epoch=fetcher.session.epoch,
                                   topics=[], forgotten_topics_data=[], rack_id="")
                return req, {"x": None}

            async def handle(resp, parts):
                fetcher.session.handle_response(resp)
                return False

            fetcher._request, fetcher._handle = request, handle
            nursery.start_soon(fetcher.run)
            with trio.fail_after(10):
                while len(connections) < 2 or not connections[1]:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        first, second = connections[0], connections[1]
        assert len(first) == answered + 1          # the unanswered fetch was the last on that connection
        assert first[0] == 0 and first[1] > 0      # a full fetch, then incremental ones in the session
        assert second[0] == 0                      # after the timeout: full again, on a new connection

    trio.run(main)

"""A ceiling for the benchmark: a Kafka endpoint that does no broker work.

It answers ApiVersions, Metadata, Produce and Fetch with kproto's codecs.
Produce succeeds without storing anything (only a per-partition record count
and the last few batches, so an end-to-end latency probe sees its own records);
Fetch below those returns copies of a pre-built batch of records of the size the
topic was produced with. Run in the same benchmark as the broker, its figures
show what the client, Python's codecs and loopback TCP allow, so the broker's
figures read as a fraction of that.

    python -m tools.bench.sink --port 9092     # prints "sink ready: host:port"

Topic names say their partition count as `-p<N>` (default 1).
"""
from __future__ import annotations

import argparse
from collections import deque
import re
import socket
import struct
import time

import trio

from kproto import api
from kproto import records as rec
from kproto._codec import ZERO_UUID, i32
from kproto.api import ApiKey
from kproto.messages.api_versions_response import ApiVersionsResponse
from kproto.messages.fetch_response import FetchResponse
from kproto.messages.metadata_response import MetadataResponse
from kproto.messages.produce_response import ProduceResponse

# Versions with topic names, not ids (Fetch 13+ needs topic ids).
VERSIONS = {ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (1, 12),
            ApiKey.PRODUCE: (3, 9), ApiKey.FETCH: (4, 12)}
_SIZE = struct.Struct(">i")
_PARTITIONS = re.compile(r"-p(\d+)(?:-|$)")
_PREBUILT_BATCH = 64 << 10
RECENT_BYTES = 4 << 20


class Partition:
    __slots__ = ("next_offset", "recent", "recent_bytes", "value_size")

    def __init__(self):
        self.next_offset = 0
        # the last few produced batches as (base offset, batch), so a consumer
        # that keeps up (the latency probe) reads real records
        self.recent: deque = deque()
        self.recent_bytes = 0
        self.value_size = None   # value size of the first produced record

    @property
    def recent_base(self) -> int:
        return self.recent[0][0] if self.recent else self.next_offset


class Sink:
    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.produced = trio.Event()
        self.prebuilt: dict[tuple[int, int], bytes] = {}

    def partition(self, topic: str, index: int) -> Partition:
        p = self.partitions.get((topic, index))
        if p is None:
            p = self.partitions[(topic, index)] = Partition()
        return p

    # -- handlers ------------------------------------------------------------

    def api_versions(self, req, v):
        return ApiVersionsResponse(error_code=0, throttle_time_ms=0, api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(VERSIONS.items())])

    def metadata(self, req, v):
        topics = []
        for t in req.topics or []:
            m = _PARTITIONS.search(t.name or "")
            n = int(m.group(1)) if m else 1
            topics.append(MetadataResponse.MetadataResponseTopic(
                error_code=0, name=t.name, topic_id=ZERO_UUID, is_internal=False,
                topic_authorized_operations=-2147483648,
                partitions=[MetadataResponse.MetadataResponsePartition(
                    error_code=0, partition_index=i, leader_id=0, leader_epoch=0, replica_nodes=[0],
                    isr_nodes=[0], offline_replicas=[]) for i in range(n)]))
        return MetadataResponse(
            throttle_time_ms=0, cluster_id="sink", controller_id=0, topics=topics,
            brokers=[MetadataResponse.MetadataResponseBroker(node_id=0, host=self.host, port=self.port, rack=None)],
            cluster_authorized_operations=-2147483648)

    def produce(self, req, v):
        out = []
        for td in req.topic_data:
            parts = []
            for pd in td.partition_data:
                p = self.partition(td.name, pd.index)
                data = pd.records
                count = rec.BatchHeader(data).record_count
                if not p.value_size:  # (a warm-up record may be empty)
                    first = next(rec.iter_records(bytes(data)))
                    p.value_size = len(first.value or b"")
                base = p.next_offset
                batch = bytearray(data)
                rec.set_base_offset(batch, 0, base)
                p.recent.append((base, batch))
                p.recent_bytes += len(batch)
                while p.recent_bytes > RECENT_BYTES and len(p.recent) > 1:
                    p.recent_bytes -= len(p.recent.popleft()[1])
                p.next_offset = base + count
                parts.append(ProduceResponse.PartitionProduceResponse(
                    index=pd.index, error_code=0, base_offset=base, log_append_time_ms=-1,
                    log_start_offset=0, record_errors=[], error_message=None))
            out.append(ProduceResponse.TopicProduceResponse(name=td.name, partition_responses=parts))
        self.produced.set()
        self.produced = trio.Event()
        return None if req.acks == 0 else ProduceResponse(responses=out, throttle_time_ms=0)

    def _records(self, p: Partition, offset: int, max_bytes: int) -> bytes:
        if offset >= p.next_offset:
            return b""
        if offset >= p.recent_base:
            # newest first: a reader that keeps up needs only the last few
            found = []
            for base, batch in reversed(p.recent):
                found.append(batch)
                if base <= offset:
                    break
            out = bytearray()
            for batch in reversed(found):
                out += batch
                if len(out) >= max_bytes:
                    break
            return out
        # copies of one pre-built batch of about the size a producer's
        # linger makes, numbered on from `offset`, up to max_bytes
        size = p.value_size or 0
        per_batch = max(1, _PREBUILT_BATCH // (size + 12))
        remaining = p.recent_base - offset
        out = bytearray()
        while remaining > 0 and len(out) < max_bytes:
            count = min(per_batch, remaining)
            batch = self.prebuilt.get((size, count))
            if batch is None:
                value = b"\x00" * size
                batch = self.prebuilt[(size, count)] = rec.build_batch((None, value) for _ in range(count))
            pos = len(out)
            out += batch
            rec.set_base_offset(out, pos, offset)
            offset += count
            remaining -= count
        return out

    def _fetch_once(self, req):
        total = 0
        topics = []
        for ft in req.topics:
            parts = []
            for fp in ft.partitions:
                p = self.partition(ft.topic, fp.partition)
                data = self._records(p, fp.fetch_offset, fp.partition_max_bytes)
                total += len(data)
                parts.append(FetchResponse.PartitionData(
                    partition_index=fp.partition, error_code=0, high_watermark=p.next_offset,
                    last_stable_offset=p.next_offset, log_start_offset=0, aborted_transactions=None,
                    preferred_read_replica=-1, records=data))
            topics.append(FetchResponse.FetchableTopicResponse(topic=ft.topic, partitions=parts))
        return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics), total

    async def fetch(self, req, v):
        resp, total = self._fetch_once(req)
        if total or req.max_wait_ms <= 0:
            return resp
        with trio.move_on_after(req.max_wait_ms / 1000):
            await self.produced.wait()
            resp, total = self._fetch_once(req)
        return resp

    # -- connections -----------------------------------------------------------

    async def respond(self, frame) -> bytes | None:
        api_key, version, correlation_id = api.peek_header(frame)
        lo, hi = VERSIONS.get(api_key, (0, -1))
        if not lo <= version <= hi:
            if api_key != ApiKey.API_VERSIONS:
                raise ConnectionError(f"unsupported API {api_key} v{version}")
            version = 0
            response = ApiVersionsResponse(error_code=35, api_keys=[
                ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=3)])
        else:
            _header, req = api.decode_request(frame)
            handler = {ApiKey.API_VERSIONS: self.api_versions, ApiKey.METADATA: self.metadata,
                       ApiKey.PRODUCE: self.produce}.get(api_key)
            response = handler(req, version) if handler else await self.fetch(req, version)
            if response is None:
                return None
        out = bytearray(8)
        i32.pack_into(out, 4, correlation_id)
        if api.response_header_version(api_key, version) >= 1:
            out.append(0)
        response.encode_into(out, version, None, strict=False)
        i32.pack_into(out, 0, len(out) - 4)
        return out

    async def connection(self, stream) -> None:
        sock = stream.socket
        # trio sets TCP_NOTSENT_LOWAT to 16 KiB, which slows bulk sends (as in broker/server/listener.py)
        sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, "TCP_NOTSENT_LOWAT", 25), 0x7FFFFFFF)
        buf = bytearray()
        try:
            while True:
                data = await stream.receive_some(256 * 1024)
                if not data:
                    return
                buf += data
                out = bytearray()
                while len(buf) >= 4:
                    size = _SIZE.unpack_from(buf, 0)[0]
                    if len(buf) < 4 + size:
                        break
                    frame = bytes(buf[4:4 + size])
                    del buf[:4 + size]
                    answer = await self.respond(frame)
                    if answer:
                        out += answer
                if out:
                    await stream.send_all(out)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            return


async def serve(host: str, port: int) -> None:
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()
    sink = Sink(bound[0], bound[1])
    print(f"sink ready: {bound[0]}:{bound[1]} in {time.monotonic() - _started:.2f} s", flush=True)
    await trio.serve_listeners(sink.connection, listeners)


_started = time.monotonic()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.sink", description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        trio.run(serve, args.host, args.port)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()

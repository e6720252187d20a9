"""Codec micro-benchmarks: what the generated protocol codec costs per request.

    python -m tools.bench codec            # ~30-60 s
    python -m tools.bench codec --quick    # a few seconds, for a smoke run

1. Record batches are never copied: decoding a Produce v9 request and encoding
   a Fetch v12 response take the same time whether the batch is 1 KiB or
   16 MiB (FileRegion records are left for sendfile; plain bytes records are
   copied once into the response buffer, which is the one size-dependent cost).
2. The generated straight-line decoder against a declarative `construct`
   decoder of the same messages (Metadata v12 and Fetch v12 requests).
3. CRC-32C throughput: the `crc32c` package against a pure-Python table loop
   (and crcmod, when it is installed).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import crc32c

from kproto import records
from kproto._codec import FileRegion
from kproto.api import decode_request, encode_request
from kproto.messages.fetch_request import FetchRequest
from kproto.messages.fetch_response import FetchResponse
from kproto.messages.metadata_request import MetadataRequest
from kproto.messages.produce_request import ProduceRequest

SIZES = [("1 KiB", 1 << 10), ("64 KiB", 64 << 10), ("1 MiB", 1 << 20), ("16 MiB", 16 << 20)]


# ---------------------------------------------------------------------------
# timing

def per_op(fn, budget: float) -> float:
    """Seconds per call: calibrate a loop to ~budget/5, keep the best of 5."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= budget / 5 or n >= 1 << 22:
            break
        n = max(n * 2, int(n * (budget / 5) / max(dt, 1e-9)))
    best = dt / n
    for _ in range(4):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def table(title, header, rows):
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    print(f"\n{title}")
    print("  " + "  ".join(str(h).rjust(w) for h, w in zip(header, widths)))
    print("  " + "  ".join("-" * w for w in widths))
    for row in rows:
        print("  " + "  ".join(str(c).rjust(w) for c, w in zip(row, widths)))


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.2f}"


# ---------------------------------------------------------------------------
# 1. flat with batch size

def make_batch(size: int) -> bytes:
    """One v2 record batch of about `size` bytes (one record with a big value)."""
    build = getattr(records, "build_batch", None)
    if build is None:
        return bytes(size)   # the request codec does not look inside records
    overhead = len(build([(b"k", b"")]))
    return build([(b"k", b"v" * max(0, size - overhead - 4))])


def bench_sizes(budget: float):
    rows = []
    with tempfile.TemporaryFile() as f:
        for label, size in SIZES:
            batch = make_batch(size)
            P = ProduceRequest
            produce = encode_request(P(acks=-1, timeout_ms=30000, topic_data=[P.TopicProduceData(
                name="bench", partition_data=[P.PartitionProduceData(index=0, records=batch)])]),
                9, 1, "bench")[4:]
            _h, req = decode_request(produce)
            assert bytes(req.topic_data[0].partition_data[0].records) == batch

            f.seek(0)
            f.truncate()
            f.write(batch)
            f.flush()
            region = FileRegion(f.fileno(), 0, len(batch))

            def fetch_response(recs):
                F = FetchResponse
                return F(responses=[F.FetchableTopicResponse(topic="bench", partitions=[F.PartitionData(
                    partition_index=0, high_watermark=1000, last_stable_offset=1000, log_start_offset=0,
                    records=recs)])])

            as_bytes, as_region = fetch_response(batch), fetch_response(region)

            def encode_bytes():
                out = bytearray(8)
                as_bytes.encode_into(out, 12)

            def encode_region():
                out = bytearray(8)
                as_region.encode_into(out, 12, [])

            check = bytearray()
            regions = []
            as_region.encode_into(check, 12, regions)
            assert regions and len(check) < 200

            rows.append([label, len(produce),
                         us(per_op(lambda: decode_request(produce), budget)),
                         us(per_op(encode_bytes, budget)),
                         us(per_op(encode_region, budget))])
    table("1. Record batch size vs codec time (µs per op)",
          ["batch", "frame bytes", "Produce v9 decode", "Fetch v12 encode (bytes)",
           "Fetch v12 encode (FileRegion)"], rows)
    return rows


# ---------------------------------------------------------------------------
# 2. generated codec vs construct

def construct_decoders():
    """Declarative decoders of the same frames (request header v2 + body)."""
    from construct import (
        Array, Bytes, ExprAdapter, Flag, If, Int8sb, Int16sb, Int32sb, Int64sb, Struct, VarInt, this,
    )

    def text(length):
        return ExprAdapter(Bytes(length), lambda b, ctx: b.decode("utf-8"), lambda s, ctx: s.encode("utf-8"))

    tagged = Struct("count" / VarInt,
                    "fields" / Array(this.count, Struct("tag" / VarInt, "size" / VarInt, "data" / Bytes(this.size))))
    compact_string = Struct("n" / VarInt, "value" / If(this.n > 0, text(this.n - 1)))

    def compact_array(element):
        return Struct("n" / VarInt, "items" / If(this.n > 0, Array(this.n - 1, element)))

    header = Struct(
        "api_key" / Int16sb, "api_version" / Int16sb, "correlation_id" / Int32sb,
        "client_id" / Struct("n" / Int16sb, "value" / If(this.n >= 0, text(this.n))),
        "tags" / tagged,
    )
    metadata_v12 = Struct(
        "header" / header,
        "topics" / compact_array(Struct("topic_id" / Bytes(16), "name" / compact_string, "tags" / tagged)),
        "allow_auto_topic_creation" / Flag,
        "include_topic_authorized_operations" / Flag,
        "tags" / tagged,
    )
    fetch_partition = Struct(
        "partition" / Int32sb, "current_leader_epoch" / Int32sb, "fetch_offset" / Int64sb,
        "last_fetched_epoch" / Int32sb, "log_start_offset" / Int64sb, "partition_max_bytes" / Int32sb,
        "tags" / tagged,
    )
    fetch_v12 = Struct(
        "header" / header,
        "replica_id" / Int32sb, "max_wait_ms" / Int32sb, "min_bytes" / Int32sb, "max_bytes" / Int32sb,
        "isolation_level" / Int8sb, "session_id" / Int32sb, "session_epoch" / Int32sb,
        "topics" / compact_array(Struct("topic" / compact_string, "partitions" / compact_array(fetch_partition),
                                        "tags" / tagged)),
        "forgotten_topics_data" / compact_array(Struct("topic" / compact_string,
                                                       "partitions" / compact_array(Int32sb), "tags" / tagged)),
        "rack_id" / compact_string,
        "tags" / tagged,
    )
    return metadata_v12, fetch_v12


def typical_metadata_frame() -> bytes:
    M = MetadataRequest
    req = M(topics=[M.MetadataRequestTopic(name=f"orders.events.{i}") for i in range(5)],
            allow_auto_topic_creation=False)
    return encode_request(req, 12, 42, "rdkafka-producer-1")[4:]


def typical_fetch_frame() -> bytes:
    F = FetchRequest
    req = F(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=52428800, isolation_level=1,
            session_id=1234, session_epoch=7, rack_id="rack-a",
            topics=[F.FetchTopic(topic=f"orders.events.{t}", partitions=[
                F.FetchPartition(partition=p, current_leader_epoch=3, fetch_offset=100000 + p,
                                 last_fetched_epoch=3, log_start_offset=0, partition_max_bytes=1048576)
                for p in range(4)]) for t in range(3)])
    return encode_request(req, 12, 43, "rdkafka-consumer-1")[4:]


def bench_vs_construct(budget: float):
    try:
        metadata_c, fetch_c = construct_decoders()
    except ImportError:
        print("\n2. construct is not installed: skipped")
        return []
    rows = []
    for name, frame, parser in (("Metadata v12 request (5 topics)", typical_metadata_frame(), metadata_c),
                                ("Fetch v12 request (3 topics x 4 partitions)", typical_fetch_frame(), fetch_c)):
        # both decoders read the same values
        _h, ours = decode_request(frame)
        theirs = parser.parse(frame)
        if name.startswith("Metadata"):
            assert [t.name for t in ours.topics] == [t.name.value for t in theirs.topics["items"]]
        else:
            assert [p.fetch_offset for t in ours.topics for p in t.partitions] == \
                [p.fetch_offset for t in theirs.topics["items"] for p in t.partitions["items"]]
            assert ours.rack_id == theirs.rack_id.value
        t_ours = per_op(lambda: decode_request(frame), budget)
        t_construct = per_op(lambda: parser.parse(frame), budget)
        rows.append([name, len(frame), us(t_ours), us(t_construct), f"{t_construct / t_ours:.0f}x"])
    table("2. Request decode, µs per frame (header + body)",
          ["message", "bytes", "kproto generated", "construct", "construct / kproto"], rows)
    return rows


# ---------------------------------------------------------------------------
# 3. CRC-32C

def _crc32c_table():
    poly = 0x82F63B78
    tab = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        tab.append(c)
    return tab


_TABLE = _crc32c_table()


def crc32c_python(data: bytes) -> int:
    crc = 0xFFFFFFFF
    tab = _TABLE
    for b in data:
        crc = tab[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def bench_crc(budget: float, quick: bool):
    mib = os.urandom(1 << 20)
    small = mib[: (16 if quick else 64) << 10]
    assert crc32c_python(small) == crc32c.crc32c(small)
    rows = []
    t = per_op(lambda: crc32c.crc32c(mib), budget)
    rows.append(["crc32c package", "1 MiB", f"{1 / t:,.0f}"])
    try:
        import crcmod.predefined
        fn = crcmod.predefined.mkCrcFun("crc-32c")
        t = per_op(lambda: fn(mib), budget)
        rows.append(["crcmod", "1 MiB", f"{1 / t:,.0f}"])
    except ImportError:
        rows.append(["crcmod", "-", "not installed"])
    t = per_op(lambda: crc32c_python(small), budget) * ((1 << 20) / len(small))
    rows.append(["pure-Python table loop", f"{len(small) >> 10} KiB, scaled", f"{1 / t:,.1f}"])
    table("3. CRC-32C throughput (MB/s, MiB-based)", ["implementation", "buffer", "MB/s"], rows)
    return rows


# ---------------------------------------------------------------------------

def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench codec", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a short smoke run (a few seconds)")
    args = ap.parse_args(argv)
    budget = 0.05 if args.quick else 0.6
    t0 = time.perf_counter()
    print(f"kproto codec benchmark ({'quick' if args.quick else 'full'}), Python {sys.version.split()[0]}")
    bench_sizes(budget)
    bench_vs_construct(budget)
    bench_crc(budget, args.quick)
    print(f"\n(done in {time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()

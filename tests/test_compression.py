"""kproto.compression: round trips, wire formats Kafka clients expect, bad input."""
from __future__ import annotations

import gzip
import os
import struct
import types

import cramjam
import kafka.codec
import lz4.frame
import pytest
import zstandard

from kproto import compression as c

CODECS = [c.NONE, c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD]
COMPRESSING = [c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD]

PAYLOADS = {
    "empty": b"",
    "one byte": b"x",
    "text": b"the quick brown fox jumps over the lazy dog " * 50,
    "random 1MiB": os.urandom(1 << 20),
    "compressible 1MiB": (b"kafka record " * 90000)[: 1 << 20],
}


@pytest.fixture
def kafka_python_snappy(monkeypatch):
    """kafka-python's own xerial framing code, over real snappy from cramjam.

    kafka-python looks for the python-snappy module, which is not installed;
    its framing logic only needs raw block compress/decompress.
    """
    shim = types.SimpleNamespace(
        compress=lambda data: bytes(cramjam.snappy.compress_raw(data)),
        decompress=lambda data: bytes(cramjam.snappy.decompress_raw(data)),
    )
    monkeypatch.setattr(kafka.codec, "snappy", shim)


@pytest.mark.parametrize("codec", CODECS, ids=lambda x: c.codec_name(x))
@pytest.mark.parametrize("name", list(PAYLOADS))
def test_round_trip(codec, name):
    data = PAYLOADS[name]
    packed = c.compress(codec, data)
    assert type(packed) is bytes
    assert c.decompress(codec, packed) == data


@pytest.mark.parametrize("codec", COMPRESSING, ids=lambda x: c.codec_name(x))
def test_accepts_memoryview_and_bytearray(codec):
    data = PAYLOADS["text"]
    packed = c.compress(codec, memoryview(bytearray(data)))
    assert c.decompress(codec, memoryview(packed)) == data
    assert c.decompress(codec, bytearray(packed)) == data


def test_compressible_data_shrinks():
    data = PAYLOADS["compressible 1MiB"]
    for codec in COMPRESSING:
        assert len(c.compress(codec, data)) < len(data) // 10, c.codec_name(codec)


def test_gzip_writes_gzip_container():
    packed = c.compress(c.GZIP, b"hello")
    assert packed[:2] == b"\x1f\x8b"
    assert gzip.decompress(packed) == b"hello"


def test_gzip_reads_concatenated_members():
    assert c.decompress(c.GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"


def test_snappy_writes_xerial_framing_with_32k_blocks():
    data = os.urandom(100_000)
    packed = c.compress(c.SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, blocks = 16, []
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4:pos + 4 + n])))
        pos += 4 + n
    assert pos == len(packed)
    assert [len(b) for b in blocks] == [32768, 32768, 32768, 100_000 - 3 * 32768]
    assert b"".join(blocks) == data


def test_snappy_reads_raw_blocks():
    data = PAYLOADS["text"]
    assert c.decompress(c.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


def test_snappy_empty_stream_is_header_only():
    assert c.compress(c.SNAPPY, b"") == c.XERIAL_HEADER
    assert c.decompress(c.SNAPPY, c.XERIAL_HEADER) == b""


def test_lz4_writes_independent_blocks_without_checksums():
    packed = c.compress(c.LZ4, PAYLOADS["compressible 1MiB"])
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 1  # frame version 01
    assert flg & 0x20  # block independence: Kafka's Java reader needs it
    assert not flg & 0x10 and not flg & 0x04 and not flg & 0x08  # no checksums, no size
    assert (bd >> 4) & 0x7 == 4  # 64 KiB blocks, as Java writes
    assert lz4.frame.decompress(packed) == PAYLOADS["compressible 1MiB"]


def test_zstd_reads_frames_without_content_size():
    data = PAYLOADS["compressible 1MiB"]
    streamed = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert zstandard.frame_content_size(streamed) == -1
    assert c.decompress(c.ZSTD, streamed) == data


def test_zstd_reads_concatenated_frames():
    cctx = zstandard.ZstdCompressor(write_content_size=False)
    assert c.decompress(c.ZSTD, cctx.compress(b"ab") + cctx.compress(b"cd")) == b"abcd"


def test_lz4_reads_concatenated_frames():
    assert c.decompress(c.LZ4, lz4.frame.compress(b"ab") + lz4.frame.compress(b"cd")) == b"abcd"


# ------------------------------------------------------------------ interop

@pytest.mark.usefixtures("kafka_python_snappy")
@pytest.mark.parametrize("codec,encode,decode", [
    (c.GZIP, kafka.codec.gzip_encode, kafka.codec.gzip_decode),
    (c.SNAPPY, kafka.codec.snappy_encode, kafka.codec.snappy_decode),
    (c.LZ4, kafka.codec.lz4_encode, kafka.codec.lz4_decode),
    (c.ZSTD, kafka.codec.zstd_encode, kafka.codec.zstd_decode),
], ids=["gzip", "snappy", "lz4", "zstd"])
def test_interop_with_kafka_python_codecs(codec, encode, decode):
    data = PAYLOADS["compressible 1MiB"][:200_000] + os.urandom(1000)
    assert c.decompress(codec, encode(data)) == data
    assert decode(c.compress(codec, data)) == data


# ----------------------------------------------------------------- bad input

GARBAGE = b"this is not compressed data at all \x00\x01\x02\xff" * 3


@pytest.mark.parametrize("codec", COMPRESSING, ids=lambda x: c.codec_name(x))
def test_garbage_raises(codec):
    with pytest.raises(c.CorruptCompressionError):
        c.decompress(codec, GARBAGE)


@pytest.mark.parametrize("codec", [c.GZIP, c.LZ4, c.ZSTD], ids=lambda x: c.codec_name(x))
def test_empty_input_raises(codec):
    with pytest.raises(c.CorruptCompressionError):
        c.decompress(codec, b"")


@pytest.mark.parametrize("codec", COMPRESSING, ids=lambda x: c.codec_name(x))
def test_truncated_stream_raises(codec):
    packed = c.compress(codec, os.urandom(50_000))
    with pytest.raises(c.CorruptCompressionError):
        c.decompress(codec, packed[:-7])


@pytest.mark.parametrize("codec", [c.LZ4, c.ZSTD], ids=lambda x: c.codec_name(x))
def test_trailing_junk_after_frame_raises(codec):
    with pytest.raises(c.CorruptCompressionError):
        c.decompress(codec, c.compress(codec, b"data") + b"junk")


def test_snappy_block_length_overrunning_stream_raises():
    packed = c.XERIAL_HEADER + struct.pack(">i", 1000) + b"\x05abc"
    with pytest.raises(c.CorruptCompressionError, match="overruns"):
        c.decompress(c.SNAPPY, packed)


@pytest.mark.parametrize("codec", CODECS, ids=lambda x: c.codec_name(x))
def test_max_size_bounds_output(codec):
    data = bytes(3 << 20)  # compresses to almost nothing: a small "bomb"
    packed = c.compress(codec, data)
    with pytest.raises(c.DecompressedTooLargeError):
        c.decompress(codec, packed, max_size=(1 << 20))
    assert c.decompress(codec, packed, max_size=len(data)) == data


def test_zstd_bomb_without_content_size_is_stopped_early():
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(64 << 20))
    assert len(bomb) < 10_000
    with pytest.raises(c.DecompressedTooLargeError):
        c.decompress(c.ZSTD, bomb, max_size=1 << 20)


def test_unknown_codec():
    for op in (c.compress, c.decompress):
        with pytest.raises(c.UnknownCodecError) as info:
            op(5, b"x")
        assert info.value.codec == 5
        assert isinstance(info.value, c.CorruptCompressionError)
    with pytest.raises(c.UnknownCodecError):
        c.codec_name(7)


def test_levels_are_honoured():
    data = PAYLOADS["text"] * 20
    assert len(c.compress(c.GZIP, data, level=9)) <= len(c.compress(c.GZIP, data, level=1))
    assert c.decompress(c.ZSTD, c.compress(c.ZSTD, data, level=19)) == data
    assert c.decompress(c.LZ4, c.compress(c.LZ4, data, level=9)) == data

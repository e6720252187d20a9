"""Compression codecs of record batches (attributes bits 0-2).

Every codec writes what the Java client writes, so any consumer can read
batches the broker (re)compresses, and reads what any client writes:

- gzip: gzip container (RFC 1952), as java.util.zip.GZIPOutputStream.
- snappy: xerial framing (the Java client's snappy-java stream) on write;
  xerial-framed or raw snappy on read (librdkafka and some ports send raw).
- lz4: LZ4 frame format with independent blocks; Kafka's Java reader
  decompresses every block on its own, so linked blocks would break it.
- zstd: standard zstd frames; Java writes them without a content size.

Decompression is bounded by ``max_size`` because a few hundred bytes of
compressed input can expand to gigabytes.
"""
from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame
import zstandard

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

DEFAULT_MAX_SIZE = 256 * 1024 * 1024

# Kafka's defaults: compression.gzip.level -1 (zlib's 6), compression.zstd.level 3;
# compression.lz4.level's default selects lz4-java's fast (non-HC) compressor.
GZIP_DEFAULT_LEVEL = 6
ZSTD_DEFAULT_LEVEL = 3
LZ4_DEFAULT_LEVEL = 0

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024  # snappy-java's default, which Kafka uses
_XERIAL_HEADER_SIZE = len(XERIAL_HEADER)  # 16
_INT32 = struct.Struct(">i")

# Largest expansion of one zstd input byte (an RLE block: 4 bytes -> 128 KiB).
# Feeding input in slices sized by the remaining budget keeps a bomb from
# materialising far past max_size before we notice.
_ZSTD_MAX_RATIO = 32 * 1024


class CorruptCompressionError(ValueError):
    """Compressed data could not be decoded (or would exceed ``max_size``)."""


class UnknownCodecError(CorruptCompressionError):
    """A codec id outside 0-4."""

    def __init__(self, codec: int):
        super().__init__(f"unknown compression codec id {codec}")
        self.codec = codec


class DecompressedTooLargeError(CorruptCompressionError):
    """Decompressed output would exceed the caller's ``max_size``."""


def codec_name(codec: int) -> str:
    try:
        return CODEC_NAMES[codec]
    except KeyError:
        raise UnknownCodecError(codec) from None


# --------------------------------------------------------------------- compress

def compress(codec: int, data, level: int | None = None) -> bytes:
    """Compress ``data`` (bytes-like) as Kafka's Java client would for ``codec``."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        c = zlib.compressobj(GZIP_DEFAULT_LEVEL if level is None else level,
                             zlib.DEFLATED, 31)  # wbits 16+15: gzip container
        return c.compress(data) + c.flush()
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        return lz4.frame.compress(
            data,
            compression_level=LZ4_DEFAULT_LEVEL if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == ZSTD:
        c = zstandard.ZstdCompressor(level=ZSTD_DEFAULT_LEVEL if level is None else level)
        return c.compress(data)
    raise UnknownCodecError(codec)


def _xerial_compress(data) -> bytes:
    view = memoryview(data).cast("B")
    out = bytearray(XERIAL_HEADER)
    compress_raw = cramjam.snappy.compress_raw
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = compress_raw(view[start:start + XERIAL_BLOCK_SIZE])
        out += _INT32.pack(len(block))
        out += block
    return bytes(out)


# ------------------------------------------------------------------- decompress

def decompress(codec: int, data, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """Decompress ``data``; raise CorruptCompressionError on any bad input.

    Raises DecompressedTooLargeError (a CorruptCompressionError) when the
    output would be longer than ``max_size`` bytes.
    """
    try:
        if codec == NONE:
            out = bytes(data)
            _check_size(len(out), max_size)
            return out
        if codec == GZIP:
            return _gzip_decompress(data, max_size)
        if codec == SNAPPY:
            return _snappy_decompress(data, max_size)
        if codec == LZ4:
            return _lz4_decompress(data, max_size)
        if codec == ZSTD:
            return _zstd_decompress(data, max_size)
    except CorruptCompressionError:
        raise
    except (zlib.error, cramjam.DecompressionError, zstandard.ZstdError,
            RuntimeError, ValueError, TypeError, OverflowError, MemoryError) as exc:
        # lz4 reports frame errors as RuntimeError
        raise CorruptCompressionError(
            f"corrupt {CODEC_NAMES[codec]} data: {exc}") from exc
    raise UnknownCodecError(codec)


def _check_size(size: int, max_size: int) -> None:
    if size > max_size:
        raise DecompressedTooLargeError(
            f"decompressed data exceeds the limit of {max_size} bytes")


def _gzip_decompress(data, max_size: int) -> bytes:
    out = bytearray()
    rest = bytes(data)
    if not rest:
        raise CorruptCompressionError("corrupt gzip data: empty input")
    # GZIPInputStream reads concatenated members; so do we.
    while rest:
        d = zlib.decompressobj(31)
        chunk = rest
        while True:
            out += d.decompress(chunk, max_size - len(out) + 1)
            _check_size(len(out), max_size)
            if d.eof or not d.unconsumed_tail:
                break
            chunk = d.unconsumed_tail
        if not d.eof:
            raise CorruptCompressionError("corrupt gzip data: truncated stream")
        rest = d.unused_data
    return bytes(out)


def _snappy_decompress(data, max_size: int) -> bytes:
    view = memoryview(data).cast("B")
    if view[:len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return _snappy_raw_block(view, max_size)
    if len(view) < _XERIAL_HEADER_SIZE:
        raise CorruptCompressionError("corrupt snappy data: truncated xerial header")
    out = bytearray()
    pos, end = _XERIAL_HEADER_SIZE, len(view)
    while pos < end:
        if end - pos < 4:
            raise CorruptCompressionError("corrupt snappy data: truncated block length")
        (n,) = _INT32.unpack_from(view, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise CorruptCompressionError(
                f"corrupt snappy data: block of {n} bytes overruns the stream")
        out += _snappy_raw_block(view[pos:pos + n], max_size - len(out))
        pos += n
    return bytes(out)


def _snappy_raw_block(view, max_size: int) -> bytes:
    # The raw format starts with the uncompressed length: check it before
    # allocating anything.
    _check_size(cramjam.snappy.decompress_raw_len(view), max_size)
    return bytes(cramjam.snappy.decompress_raw(view))


def _lz4_decompress(data, max_size: int) -> bytes:
    out = bytearray()
    rest = bytes(data)
    if not rest:
        raise CorruptCompressionError("corrupt lz4 data: empty input")
    while rest:
        d = lz4.frame.LZ4FrameDecompressor()
        chunk = rest
        while True:
            out += d.decompress(chunk, max_length=max_size - len(out) + 1)
            _check_size(len(out), max_size)
            chunk = b""
            if d.eof:
                break
            if d.needs_input:
                raise CorruptCompressionError("corrupt lz4 data: truncated frame")
        rest = d.unused_data or b""
    return bytes(out)


def _zstd_decompress(data, max_size: int) -> bytes:
    view = memoryview(data).cast("B")
    if not len(view):
        raise CorruptCompressionError("corrupt zstd data: empty input")
    out = bytearray()
    dctx = zstandard.ZstdDecompressor()
    pos, end = 0, len(view)
    # zstd-jni and librdkafka read concatenated frames; so do we.
    while pos < end:
        d = dctx.decompressobj()
        while pos < end and not d.eof:
            step = max(64, (max_size - len(out)) // _ZSTD_MAX_RATIO + 1)
            chunk = view[pos:pos + step]
            out += d.decompress(chunk)
            _check_size(len(out), max_size)
            pos += len(chunk)
            if d.eof:
                # rewind over input that belongs to the next frame
                pos -= len(d.unused_data)
        if not d.eof:
            raise CorruptCompressionError("corrupt zstd data: truncated frame")
    return bytes(out)

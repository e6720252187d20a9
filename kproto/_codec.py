"""Runtime support for the generated message codecs.

The generated modules are straight-line code over these primitives; nothing
here walks a schema. Readers take (memoryview, position) and return the value
and the new position; writers append to a bytearray.
"""
from __future__ import annotations

import struct
import uuid as _uuid


class DecodeError(ValueError):
    """Bytes that are not a valid encoding of the message they claim to be."""


class EncodeError(ValueError):
    """A message that cannot be encoded at the requested version."""


class UnsupportedVersionError(ValueError):
    """A version the codec does not define for that message."""


class FileRegion:
    """Record bytes that stay in a file: the response writer sends them with
    os.sendfile instead of copying them through Python. ``owner``, if given, is
    what keeps ``fd`` open (a file object): the region holds it until sent."""

    __slots__ = ("fd", "offset", "length", "owner")

    def __init__(self, fd: int, offset: int, length: int, owner=None):
        self.fd = fd
        self.offset = offset
        self.length = length
        self.owner = owner

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        import os
        return os.pread(self.fd, self.length, self.offset)

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, offset={self.offset}, length={self.length})"

    def __eq__(self, other):
        if isinstance(other, FileRegion):
            return (self.fd, self.offset, self.length) == (other.fd, other.offset, other.length)
        if isinstance(other, (bytes, bytearray, memoryview)):
            return self.read() == bytes(other)
        return NotImplemented


class _Unset:
    __slots__ = ()

    def __repr__(self):
        return "UNSET"


UNSET = _Unset()
ZERO_UUID = _uuid.UUID(int=0)

_S = struct.Struct
i8 = _S(">b")
i16 = _S(">h")
i32 = _S(">i")
i64 = _S(">q")
u16 = _S(">H")
u32 = _S(">I")
f64 = _S(">d")


def read_uvarint(mv, pos: int):
    """Unsigned LEB128 varint of at most 5 bytes (32 bits), as Kafka reads it."""
    result = 0
    shift = 0
    while True:
        b = mv[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise DecodeError("varint is too long")


def write_uvarint(out: bytearray, n: int) -> None:
    if n < 0x80:
        out.append(n)
        return
    if n >> 32:
        raise EncodeError(f"unsigned varint out of range: {n}")
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def uvarint_size(n: int) -> int:
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def read_str(mv, pos: int, n: int):
    end = pos + n
    if end > len(mv):
        raise DecodeError(f"string of {n} bytes runs past the end of the frame")
    if n > 0x7FFF:
        # only a compact (varint) length can get here; Kafka refuses it too
        raise DecodeError(f"string field had invalid length {n}")
    try:
        return str(mv[pos:end], "utf-8"), end
    except UnicodeDecodeError as exc:
        raise DecodeError(f"string is not valid UTF-8: {exc.reason}") from None


def read_bytes(mv, pos: int, n: int):
    end = pos + n
    if end > len(mv):
        raise DecodeError(f"bytes field of {n} bytes runs past the end of the frame")
    return bytes(mv[pos:end]), end


def read_records(mv, pos: int, n: int):
    end = pos + n
    if end > len(mv):
        raise DecodeError(f"records field of {n} bytes runs past the end of the frame")
    return mv[pos:end], end


_ZERO_UUID_BYTES = bytes(16)


def read_uuid(mv, pos: int):
    end = pos + 16
    if end > len(mv):
        raise DecodeError("uuid runs past the end of the frame")
    raw = bytes(mv[pos:end])
    # most uuids on the wire are the zero "unset" id: skip UUID's constructor
    if raw == _ZERO_UUID_BYTES:
        return ZERO_UUID, end
    return _uuid.UUID(bytes=raw), end


def check_count(mv, pos: int, n: int, min_size: int):
    """Reject an array count the remaining bytes cannot hold, before allocating."""
    if n * min_size > len(mv) - pos:
        raise DecodeError(f"array of {n} elements is longer than the frame")


def read_array_fixed(mv, pos: int, n: int, code: str, size: int):
    end = pos + n * size
    if end > len(mv):
        raise DecodeError(f"array of {n} elements is longer than the frame")
    return list(struct.unpack_from(f">{n}{code}", mv, pos)), end


def write_array_fixed(out: bytearray, values, code: str) -> None:
    out += struct.pack(f">{len(values)}{code}", *values)


def write_str(out: bytearray, s: str, flex: bool, nullable: bool, name: str) -> None:
    if s is None:
        if not nullable:
            raise EncodeError(f"non-nullable field {name} is None")
        if flex:
            out.append(0)
        else:
            out += b"\xff\xff"
        return
    try:
        b = s.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EncodeError(f"string field {name} is not encodable as UTF-8: {exc.reason}") from None
    if len(b) > 0x7FFF:
        # compact strings too: Kafka's readers refuse longer ones
        raise EncodeError(f"string field {name} is longer than 32767 bytes")
    if flex:
        write_uvarint(out, len(b) + 1)
    else:
        out += i16.pack(len(b))
    out += b


def write_bytes(out: bytearray, b, flex: bool, nullable: bool, name: str) -> None:
    if b is None:
        if not nullable:
            raise EncodeError(f"non-nullable field {name} is None")
        if flex:
            out.append(0)
        else:
            out += b"\xff\xff\xff\xff"
        return
    if flex:
        write_uvarint(out, len(b) + 1)
    else:
        out += i32.pack(len(b))
    out += b


def write_records(out: bytearray, regions, b, flex: bool, nullable: bool, name: str) -> None:
    if b is None or type(b) is not FileRegion:
        write_bytes(out, b, flex, nullable, name)
        return
    n = b.length
    if flex:
        write_uvarint(out, n + 1)
    else:
        out += i32.pack(n)
    if regions is None:
        out += b.read()
    else:
        regions.append((len(out), b))


def write_uuid(out: bytearray, u) -> None:
    out += u.bytes


def read_unknown_tag(mv, pos: int, size: int):
    end = pos + size
    if end > len(mv):
        raise DecodeError("tagged field runs past the end of the frame")
    return bytes(mv[pos:end]), end


def write_tagged(out: bytearray, tagged) -> None:
    """tagged: list of (tag, bytes) in ascending tag order."""
    write_uvarint(out, len(tagged))
    for tag, data in tagged:
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data


class Message:
    """Base of every generated struct: equality, repr and keyword construction."""

    __slots__ = ()
    _fields: tuple = ()

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        for f in self._fields:
            if getattr(self, f) != getattr(other, f):
                return False
        return True

    def __repr__(self):
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({inner})"

    def to_dict(self):
        def conv(v):
            if isinstance(v, Message):
                return v.to_dict()
            if isinstance(v, list):
                return [conv(x) for x in v]
            if isinstance(v, memoryview):
                return bytes(v)
            return v
        return {f: conv(getattr(self, f)) for f in self._fields}

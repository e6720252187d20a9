"""Kafka's size-prefixed frames (a 4-byte big-endian length, then the bytes) taken out of a
receive buffer, for the broker's own outbound connections (replica fetchers and other node-to-node
requests, their SASL login, the raft transport). The client listener has its own zero-copy
reader (broker/net/transport.py)."""
from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


def take_frame(buf: bytearray, max_size: int | None = None) -> bytes | None:
    """The first complete frame's bytes, removed from buf; None until all of it has arrived.
    With max_size, a length outside 0..max_size raises ValueError (a peer that is not speaking
    the protocol, or a corrupt stream)."""
    if len(buf) < 4:
        return None
    size = _SIZE.unpack_from(buf, 0)[0]
    if max_size is not None and (size < 0 or size > max_size):
        raise ValueError(f"frame of {size} bytes")
    if len(buf) < 4 + size:
        return None
    frame = bytes(buf[4:4 + size])
    del buf[:4 + size]
    return frame


def recv_exact(sock, n: int) -> bytes:
    """n bytes from a blocking socket (the command-line tools' and benches' one-request clients);
    ConnectionError if the peer closes first."""
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return buf

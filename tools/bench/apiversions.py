"""Ask an endpoint which API versions it serves (one ApiVersions v0 request
over a plain socket, encoded with kproto's codecs)."""
from __future__ import annotations

import socket
import struct

from kproto import api
from kproto.messages.api_versions_request import ApiVersionsRequest


def supported(bootstrap: str, timeout: float = 10.0) -> dict[int, tuple[int, int]]:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(api.encode_request(ApiVersionsRequest(), 0, 1, "kproto-bench"))
        size = struct.unpack(">i", _read(sock, 4))[0]
        _cid, resp = api.decode_response(_read(sock, size), 18, 0)
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def _read(sock, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("connection closed during ApiVersions")
        out += chunk
    return bytes(out)

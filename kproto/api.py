"""The API table and message framing: which class and header version goes
with each (API key, version), and decoding of whole request frames."""
from __future__ import annotations

import importlib
from functools import lru_cache

from kproto._api_table import APIS, ApiKey
from kproto._codec import DecodeError, UnsupportedVersionError, i16, i32
from kproto.messages.request_header import RequestHeader
from kproto.messages.response_header import ResponseHeader

__all__ = [
    "ApiKey", "APIS", "RequestHeader", "ResponseHeader", "request_class", "response_class",
    "version_range", "request_header_version", "response_header_version", "decode_request",
    "encode_request", "decode_response", "UnknownApiError",
]


class UnknownApiError(DecodeError):
    """A request for an API key the codec does not define."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int):
        super().__init__(f"unknown API key {api_key}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


@lru_cache(maxsize=None)
def _cls(module: str, name: str):
    return getattr(importlib.import_module(f"kproto.messages.{module}"), name)


def request_class(api_key: int):
    return _cls(APIS[api_key][1], APIS[api_key][0] + "Request")


def response_class(api_key: int):
    return _cls(APIS[api_key][2], APIS[api_key][0] + "Response")


def version_range(api_key: int) -> tuple[int, int]:
    entry = APIS[api_key]
    return entry[3], entry[4]


def request_header_version(api_key: int, version: int) -> int:
    flexible_from = APIS[api_key][5]
    if flexible_from is not None and version >= flexible_from:
        return 2
    if api_key == ApiKey.CONTROLLED_SHUTDOWN and version == 0:
        return 0
    return 1


def response_header_version(api_key: int, version: int) -> int:
    # ApiVersionsResponse always uses header v0, so that a client that asked
    # with a version the broker does not know can still read the answer.
    if api_key == ApiKey.API_VERSIONS:
        return 0
    flexible_from = APIS[api_key][6]
    if flexible_from is not None and version >= flexible_from:
        return 1
    return 0


def peek_header(frame) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame, without
    decoding anything else."""
    if len(frame) < 8:
        raise DecodeError("request frame is shorter than a request header")
    return i16.unpack_from(frame, 0)[0], i16.unpack_from(frame, 2)[0], i32.unpack_from(frame, 4)[0]


def decode_request(frame):
    """Decode one request frame (without its size prefix).

    Returns (header, request). Raises UnknownApiError for an API key the codec
    does not define, UnsupportedVersionError for a version it lacks and
    DecodeError for malformed bytes."""
    mv = memoryview(frame)
    api_key, api_version, correlation_id = peek_header(mv)
    if api_key not in APIS:
        raise UnknownApiError(api_key, api_version, correlation_id)
    lo, hi = version_range(api_key)
    if not lo <= api_version <= hi:
        raise UnsupportedVersionError(f"{APIS[api_key][0]} has no version {api_version}")
    header, pos = RequestHeader.decode_from(mv, 0, request_header_version(api_key, api_version))
    request, pos = request_class(api_key).decode_from(mv, pos, api_version)
    return header, request


def encode_request(request, version: int, correlation_id: int, client_id: str | None = "kproto") -> bytes:
    """A whole request frame, size prefix included (for tools and tests)."""
    api_key = request.API_KEY
    header = RequestHeader(request_api_key=api_key, request_api_version=version,
                           correlation_id=correlation_id, client_id=client_id)
    out = bytearray(4)
    header.encode_into(out, request_header_version(api_key, version))
    request.encode_into(out, version)
    i32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_response(frame, api_key: int, version: int):
    """Decode a response frame (without size prefix): (correlation_id, response)."""
    mv = memoryview(frame)
    header, pos = ResponseHeader.decode_from(mv, 0, response_header_version(api_key, version))
    response, _ = response_class(api_key).decode_from(mv, pos, version)
    return header.correlation_id, response

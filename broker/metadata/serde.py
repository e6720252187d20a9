"""KRaft metadata record framing: frame version, api key and record version
as unsigned varints, then the record (as Kafka's MetadataRecordSerde)."""
from __future__ import annotations

import importlib
from functools import lru_cache

from kproto._codec import DecodeError, read_uvarint, write_uvarint
from kproto.metadata._types import RECORD_TYPES

FRAME_VERSION = 1
# Record versions newer than Kafka 3.9's metadata.version writes (4.3's
# cordoned log directories): records are written at the 3.9 maximum.
_WRITE_VERSION = {"RegisterBrokerRecord": 3, "BrokerRegistrationChangeRecord": 2}
_BY_KEY = {key: (name, module) for name, (key, module) in RECORD_TYPES.items() if key is not None}


@lru_cache(maxsize=None)
def record_class(api_key: int):
    name, module = _BY_KEY[api_key]
    return getattr(importlib.import_module(f"kproto.metadata.{module}"), name)


def encode(record, version: int | None = None) -> bytes:
    cls = type(record)
    if version is None:
        version = _WRITE_VERSION.get(cls.__name__, cls.MAX_VERSION)
    out = bytearray()
    write_uvarint(out, FRAME_VERSION)
    write_uvarint(out, cls.API_KEY)
    write_uvarint(out, version)
    record.encode_into(out, version)
    return bytes(out)


def decode(data):
    mv = memoryview(data)
    frame, pos = read_uvarint(mv, 0)
    if frame != FRAME_VERSION:
        raise DecodeError(f"unknown metadata record frame version {frame}")
    api_key, pos = read_uvarint(mv, pos)
    version, pos = read_uvarint(mv, pos)
    if api_key not in _BY_KEY:
        raise DecodeError(f"unknown metadata record type {api_key}")
    record, _ = record_class(api_key).decode_from(mv, pos, version)
    return record

"""The topics of a consumer-protocol subscription (JoinGroup metadata of
protocol type "consumer"). Read with the version-0 layout, which prefixes
every later version, as Kafka's coordinator does."""
from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class SubscriptionError(ValueError):
    pass


def subscribed_topics(metadata: bytes) -> list[str]:
    try:
        pos = 2  # version
        count, = _I32.unpack_from(metadata, pos)
        pos += 4
        if count < 0:
            raise SubscriptionError("null topic array")
        topics = []
        for _ in range(count):
            n, = _I16.unpack_from(metadata, pos)
            pos += 2
            if n < 0 or pos + n > len(metadata):
                raise SubscriptionError("bad topic name")
            topics.append(bytes(metadata[pos:pos + n]).decode("utf-8"))
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError) as exc:
        raise SubscriptionError(str(exc)) from None

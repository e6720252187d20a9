"""Which `__consumer_offsets` partition holds a group: Kafka's
`Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount`."""
from __future__ import annotations

import functools

OFFSETS_TOPIC = "__consumer_offsets"

_INT_MIN = -(1 << 31)


def java_string_hashcode(s: str) -> int:
    """java.lang.String#hashCode: over UTF-16 code units, in int32 arithmetic."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_abs(n: int) -> int:
    """org.apache.kafka.common.utils.Utils#abs: Integer.MIN_VALUE maps to 0."""
    return 0 if n == _INT_MIN else abs(n)


# every commit, group write and FindCoordinator of a group asks again, and the hash walks
# the id a character at a time in Python (a few µs for a typical id)
@functools.lru_cache(maxsize=8192)
def partition_for(group_id: str, num_partitions: int) -> int:
    return java_abs(java_string_hashcode(group_id)) % num_partitions

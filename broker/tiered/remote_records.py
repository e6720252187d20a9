"""Checking record batches read back from the object store before they are served.

Bytes fetched from a remote segment should be whole v2 record batches. A flipped bit (bad disk,
bad copy) or a truncated object (an interrupted upload, a short range) must be reported, never
handed to a consumer as data: `verify_remote_batches` checks every batch's length and CRC-32C
(kproto/records.py) and raises CorruptRemoteData naming the object and the offset.
"""
from __future__ import annotations

from kproto.errors import ErrorCode
from kproto.records import LOG_OVERHEAD, CorruptRecordError, TruncatedBatchError, validate_batch


class CorruptRemoteData(Exception):
    """A remote object's bytes are not the record batches they should be.

    Not an ObjectStoreError: reading it again gives the same bytes, so it is not retriable.
    `error_code` is what a Fetch of that data answers: CORRUPT_MESSAGE, Kafka's
    CorruptRecordException (its remote log input stream raises that on a short batch)."""

    error_code = ErrorCode.CORRUPT_MESSAGE

    def __init__(self, key: str, offset: int, position: int, reason: str):
        super().__init__(f"corrupt remote data in {key} at offset {offset} "
                         f"(byte {position} of the data read): {reason}")
        self.key = key
        self.offset = offset
        self.position = position
        self.reason = reason


def verify_remote_batches(key: str, data, *, first_offset: int | None = None,
                          allow_partial_tail: bool = False) -> list:
    """Check that `data` is a run of complete, CRC-valid v2 record batches; return their headers.

    `first_offset` is the offset the data was expected to start at (named in the error when the
    first batch is unreadable; later errors name the offset after the last good batch).
    `allow_partial_tail` accepts a last incomplete batch (a range read that cut a batch, as a
    fetch with max bytes does) and returns only the complete ones; a whole object must not end
    mid-batch."""
    headers = []
    pos, end = 0, len(data)
    next_offset = -1 if first_offset is None else first_offset
    while pos < end:
        try:
            header = validate_batch(data, pos, end)
            if next_offset >= 0 and header.base_offset < next_offset:
                raise CorruptRecordError(
                    f"base offset {header.base_offset} goes back before {next_offset}")
        except TruncatedBatchError as e:
            if allow_partial_tail:
                break
            raise CorruptRemoteData(key, next_offset, pos, f"truncated: {e}") from None
        except CorruptRecordError as e:
            raise CorruptRemoteData(key, next_offset, pos, str(e)) from None
        headers.append(header)
        next_offset = header.base_offset + header.last_offset_delta + 1
        pos += LOG_OVERHEAD + header.batch_length
    return headers

"""What the remote log manager does next for one partition, decided from plain values (no I/O):
which closed local segments to copy, how far local retention may delete, which remote segments
total retention expires. Kafka's RemoteLogManager.RLMCopyTask / RLMExpirationTask rules."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LocalSegment:
    base_offset: int
    next_offset: int        # the next segment's base offset (the log end for the active one)
    size: int
    max_timestamp_ms: int


@dataclass(frozen=True)
class RemoteSeg:
    key: object
    start_offset: int
    end_offset: int
    size: int
    max_timestamp_ms: int


def effective_local_retention(local: int, total: int) -> int:
    """local.retention.ms/bytes: -2 means the total retention's value."""
    return total if local == -2 else local


def segments_to_copy(segments: list[LocalSegment], highest_copied: int, last_stable_offset: int) -> list[LocalSegment]:
    """Closed segments (never the active, the last one) holding offsets above the highest copied
    offset and wholly below the last stable offset, oldest first (RLMCopyTask.candidateLogSegments)."""
    out = []
    for seg in segments[:-1]:
        if seg.next_offset - 1 <= highest_copied:
            continue
        if seg.next_offset > last_stable_offset:
            break
        if seg.next_offset <= seg.base_offset:
            continue    # an empty segment has nothing to copy
        out.append(seg)
    return out


def remote_to_expire(remote: list[RemoteSeg], now_ms: int, retention_ms: int, retention_bytes: int,
                     local_only_bytes: int, log_start_offset: int = 0) -> list[RemoteSeg]:
    """Remote segments (oldest first) that total retention deletes: wholly below the log start
    offset, older than retention.ms (by their largest timestamp), or the oldest ones while the
    remote size plus the not yet copied local bytes exceeds retention.bytes (RLMExpirationTask)."""
    remaining = sum(s.size for s in remote) + local_only_bytes
    out = []
    for seg in sorted(remote, key=lambda s: s.start_offset):
        if seg.end_offset < log_start_offset:
            pass
        elif retention_ms >= 0 and now_ms - seg.max_timestamp_ms > retention_ms:
            pass
        elif retention_bytes >= 0 and remaining - seg.size >= retention_bytes:
            pass
        else:
            break
        out.append(seg)
        remaining -= seg.size
    return out

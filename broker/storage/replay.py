"""Reading a whole partition log back, batch by batch: what the metadata log
and the coordinators replay at start."""
from __future__ import annotations

from kproto import records as rec

CHUNK_BYTES = 1 << 20


def stored_batches(plog, end: int | None = None, chunk_bytes: int = CHUNK_BYTES):
    """Yield chunks (lists of (header, batch view)) of the stored batches from
    the log start up to `end` (default: the log end). Chunks let an async
    caller yield to other tasks between them."""
    offset = plog.log_start_offset
    end = plog.log_end_offset if end is None else end
    while offset < end:
        data = plog.read_bytes(offset, chunk_bytes, end)
        if not data:
            return
        view = memoryview(data)
        chunk = [(header, view[pos:pos + header.size])
                 for pos, header in rec.iter_batch_headers(data, allow_partial_tail=True)]
        if not chunk:
            return
        yield chunk
        offset = chunk[-1][0].last_offset + 1

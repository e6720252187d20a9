"""The object store as the remote log manager uses it: any store (object_store.py) with the bytes
and requests of its reads counted, for /metrics (`kproto_tiered_store_read_bytes_total`,
`kproto_tiered_store_reads_total`): what an object store bills by, and how an operator sees that
a timestamp lookup or a fetch reads byte ranges, not whole segments."""
from __future__ import annotations


class CountedStore:
    """Delegates every call to ``store``; counts the bytes ``get`` returns into ``metrics``
    (``store_read_bytes``, ``store_reads``)."""

    def __init__(self, store, metrics):
        self.inner = store
        self.metrics = metrics
        self.name = store.name

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        data = await self.inner.get(key, start, end)
        self.metrics.store_reads += 1
        self.metrics.store_read_bytes += len(data)
        return data

    def __getattr__(self, name):
        # put, put_file, size, delete, list, aclose: unchanged
        return getattr(self.inner, name)

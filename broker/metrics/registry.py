"""What the request path counts: plain ints and lists updated inline.

Nothing here takes a lock or builds a label set: every update runs on the
trio thread (the only one that touches broker state), and the scrape reads
the same structures on that thread too (broker/metrics/http.py hands the
scrape over with trio.from_thread). Label sets, quantiles and the text
format are built only at scrape time (broker/metrics/collector.py).
"""
from __future__ import annotations

import struct
from bisect import bisect_left
from time import perf_counter

# request latency buckets, in ms (upper bounds; one more bucket is +Inf)
LATENCY_BUCKETS_MS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0,
                      500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0)

_HEADER = struct.Struct(">hh")


class Histogram:
    """Cumulative counts per latency bucket, their sum and count (ms)."""
    __slots__ = ("counts", "sum", "count")

    def __init__(self):
        self.counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, ms: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS_MS, ms)] += 1
        self.sum += ms
        self.count += 1

    def quantile(self, q: float) -> float:
        """Estimated by linear interpolation inside the bucket holding it
        (as Prometheus' histogram_quantile does)."""
        if not self.count:
            return 0.0
        rank = q * self.count
        seen = 0
        for i, n in enumerate(self.counts):
            if n and seen + n >= rank:
                lo = LATENCY_BUCKETS_MS[i - 1] if i else 0.0
                hi = LATENCY_BUCKETS_MS[i] if i < len(LATENCY_BUCKETS_MS) else lo * 2
                return lo + (hi - lo) * ((rank - seen) / n)
            seen += n
        return LATENCY_BUCKETS_MS[-1]


class RequestStats:
    """Kafka's RequestMetrics for one API: requests per version and the
    time a request spends queued behind earlier ones of its connection,
    in its handler, and sending its response."""
    __slots__ = ("versions", "total", "queue", "local", "send")

    def __init__(self):
        self.versions: dict[int, int] = {}
        self.total = Histogram()
        self.queue = Histogram()
        self.local = Histogram()
        self.send = Histogram()


class TopicStats:
    """Kafka's BrokerTopicMetrics for one topic (client produce and fetch)."""
    __slots__ = ("messages_in", "bytes_in", "bytes_out", "produce_requests", "fetch_requests",
                 "failed_produce", "failed_fetch")

    def __init__(self):
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.produce_requests = 0
        self.fetch_requests = 0
        self.failed_produce = 0
        self.failed_fetch = 0


class BrokerMetrics:
    """The counters of one broker. `Broker.metrics` is None when metrics
    are off, so every hook on the request path is one `is not None` test."""

    def __init__(self):
        self.requests: dict[int, RequestStats] = {}
        self.topics: dict[str, TopicStats] = {}
        # listener name -> [open, created, closed]
        self.connections: dict[str, list[int]] = {}
        self.loop_lag_s = 0.0
        self.loop_lag_max_s = 0.0
        self.loop_heartbeat = perf_counter()

    # -- the request path ----------------------------------------------------------

    def topic(self, name: str) -> TopicStats:
        stats = self.topics.get(name)
        if stats is None:
            stats = self.topics[name] = TopicStats()
        return stats

    def produced(self, topic: str, records: int, size: int) -> None:
        stats = self.topics.get(topic) or self.topic(topic)
        stats.produce_requests += 1
        stats.messages_in += records
        stats.bytes_in += size

    def produce_failed(self, topic: str) -> None:
        stats = self.topics.get(topic) or self.topic(topic)
        stats.produce_requests += 1
        stats.failed_produce += 1

    def fetched(self, response) -> None:
        """BytesOut and fetch counts of one answered Fetch, per topic."""
        for t in response.responses:
            if not t.topic:
                continue   # an unknown topic id
            stats = self.topics.get(t.topic) or self.topic(t.topic)
            for p in t.partitions:
                stats.fetch_requests += 1
                if p.error_code:
                    stats.failed_fetch += 1
                elif p.records:
                    stats.bytes_out += len(p.records)

    def requests_answered(self, done: list, sent: float) -> None:
        """`done` holds (frame, received, started, finished) of the requests
        whose responses just went out in one send that finished at `sent`."""
        for frame, received, started, finished in done:
            api_key, version = _HEADER.unpack_from(frame, 0)
            stats = self.requests.get(api_key)
            if stats is None:
                stats = self.requests[api_key] = RequestStats()
            versions = stats.versions
            versions[version] = versions.get(version, 0) + 1
            stats.queue.observe((started - received) * 1000.0)
            stats.local.observe((finished - started) * 1000.0)
            stats.send.observe((sent - finished) * 1000.0)
            stats.total.observe((sent - received) * 1000.0)

    # -- connections (not per request) --------------------------------------------------

    def connection_opened(self, listener: str) -> None:
        c = self.connections.get(listener)
        if c is None:
            c = self.connections[listener] = [0, 0, 0]
        c[0] += 1
        c[1] += 1

    def connection_closed(self, listener: str) -> None:
        c = self.connections.get(listener)
        if c is not None:
            c[0] -= 1
            c[2] += 1

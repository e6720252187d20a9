"""What the request path counts: plain ints and lists updated inline.

Nothing here takes a lock or builds a label set: every update runs on the
trio thread (the only one that touches broker state), and the scrape reads
the same structures on that thread too (broker/metrics/http.py hands the
scrape over with trio.from_thread). Label sets, quantiles and the text
format are built only at scrape time (broker/metrics/collector.py).
"""
from __future__ import annotations

import struct
from time import perf_counter

# Request latency buckets: powers of two of microseconds, so a duration's
# bucket is int(us).bit_length() (no search): bucket i holds durations
# below 2**i us (bucket 0: under 1 us); LATENCY_BUCKETS bounds them up to
# 2**26 us (67 s), later buckets count as +Inf.
LATENCY_BUCKETS = 27
LATENCY_BOUNDS_MS = tuple(2 ** i / 1000.0 for i in range(LATENCY_BUCKETS))
_SLOTS = 64   # int.bit_length() of any duration in us
# the queue/local/send split is recorded for one request in PHASE_SAMPLING
# of each API (Kafka's own histograms are sampled reservoirs too); counts
# and the total time are recorded for every request
PHASE_SAMPLING = 8

_HEADER = struct.Struct(">hh")


def new_counts() -> list[int]:
    return [0] * _SLOTS


def quantile(counts: list[int], q: float) -> float:
    """q-quantile in ms of a bucket count list, interpolated linearly inside
    its bucket (as Prometheus' histogram_quantile does)."""
    n = sum(counts)
    if not n:
        return 0.0
    rank = q * n
    seen = 0
    for i, c in enumerate(counts):
        if c and seen + c >= rank:
            if i >= LATENCY_BUCKETS:
                return LATENCY_BOUNDS_MS[-1]
            lo = LATENCY_BOUNDS_MS[i - 1] if i else 0.0
            return lo + (LATENCY_BOUNDS_MS[i] - lo) * ((rank - seen) / c)
        seen += c
    return LATENCY_BOUNDS_MS[-1]


class Histogram:
    """Bucket counts, sum (ms) and count of observations."""
    __slots__ = ("counts", "sum", "count")

    def __init__(self):
        self.counts = new_counts()
        self.sum = 0.0
        self.count = 0

    def observe(self, ms: float) -> None:
        self.counts[int(ms * 1000.0).bit_length()] += 1
        self.sum += ms
        self.count += 1

    def quantile(self, q: float) -> float:
        return quantile(self.counts, q)


class RequestStats:
    """Kafka's RequestMetrics for one API: requests per version, the total
    time of every request, the time it waited in purgatory (remote), and
    (sampled) the time a request waited behind earlier ones of its
    connection, spent in its handler less the purgatory wait (local), and
    sending its response. Times are kept in whole microseconds."""
    __slots__ = ("api_key", "versions", "count", "total", "total_us", "sampled",
                 "queue", "queue_us", "local", "local_us", "send", "send_us", "remote", "remote_us", "waited")

    def __init__(self, api_key: int):
        self.api_key = api_key
        self.versions: dict[int, "_VersionSlot"] = {}
        self.count = 0
        self.total = new_counts()
        self.total_us = 0
        self.sampled = 0
        self.queue = new_counts()
        self.queue_us = 0
        self.local = new_counts()
        self.local_us = 0
        self.send = new_counts()
        self.send_us = 0
        # RemoteTime (purgatory: acks=all waiting for the ISR, a fetch waiting for data): every
        # request that waited, exactly; the others waited 0 (added at scrape time)
        self.remote = new_counts()
        self.remote_us = 0
        self.waited = 0


class _VersionSlot:
    __slots__ = ("stats", "count")

    def __init__(self, stats: RequestStats):
        self.stats = stats
        self.count = 0


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
        self.slots: dict[int, _VersionSlot] = {}   # by the request header's first four bytes
        self.topics: dict[str, TopicStats] = {}
        # listener name -> [open, created, closed]
        self.connections: dict[str, list[int]] = {}
        self.loop_lag_s = 0.0
        self.loop_lag_max_s = 0.0
        self.loop_delay = Histogram()   # sample_loop_delay: every 10 ms, how late, ms
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

    def requests_answered(self, done: list, received: float, sent: float) -> None:
        """`done` holds (frame, finished, remote) of requests that arrived
        together at `received`, were handled one after another, and whose
        responses went out in one send that finished at `sent`: a request
        started when the one before it finished; `remote` is the seconds its
        handler waited in purgatory (remote_time(), 0 for most requests).
        The per-request work is a few integer operations, no calls."""
        slots = self.slots
        started = received
        for frame, finished, remote in done:
            key = frame[1] | frame[0] << 8 | frame[3] << 16 | frame[2] << 24   # api key, version
            slot = slots.get(key)
            if slot is None:
                slot = self._slot(key, frame)
            slot.count += 1
            s = slot.stats
            s.count += 1
            us = int((sent - received) * 1e6)
            s.total[us.bit_length()] += 1
            s.total_us += us
            if remote:
                us = int(remote * 1e6)
                s.remote[us.bit_length()] += 1
                s.remote_us += us
                s.waited += 1
            if not s.count % PHASE_SAMPLING:
                s.sampled += 1
                us = int((started - received) * 1e6)
                s.queue[us.bit_length()] += 1
                s.queue_us += us
                us = max(int((finished - started - remote) * 1e6), 0)
                s.local[us.bit_length()] += 1
                s.local_us += us
                us = int((sent - finished) * 1e6)
                s.send[us.bit_length()] += 1
                s.send_us += us
            started = finished

    def _slot(self, key: int, frame) -> _VersionSlot:
        api_key, version = _HEADER.unpack_from(frame, 0)
        stats = self.requests.get(api_key)
        if stats is None:
            stats = self.requests[api_key] = RequestStats(api_key)
        slot = self.slots[key] = stats.versions[version] = _VersionSlot(stats)
        return slot

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


def remote_time(ctx, since: float) -> None:
    """Kafka's RemoteTime of the request being handled: it waited in purgatory (acks=all for
    the ISR, a fetch for data) from `since` (perf_counter) until now. Kept on its connection,
    where the server picks it up with the request's finish time (broker/server/listener.py); called
    only after a wait, never on the path of a request that did not wait."""
    conn = ctx.conn
    waited = perf_counter() - since
    if hasattr(ctx, "remote_s"):
        ctx.remote_s += waited   # not the broker's work: client quotas leave it out (security/throttle.py)
    if getattr(ctx.broker, "metrics", None) is not None and hasattr(conn, "remote"):   # not a forwarded one
        conn.remote += waited

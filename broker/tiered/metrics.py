"""Tiered storage's metrics on the /metrics endpoint, under the names the Prometheus JMX exporter
gives Kafka's (BrokerTopicMetrics Remote*PerSec meters as counters, RemoteCopyLag*/RemoteLogSizeBytes
gauges per partition), plus kproto's count of local segments kept only because they are not copied."""
from __future__ import annotations

PREFIX = "kafka_server_brokertopicmetrics_"


class TieredMetrics:
    """The remote counters Kafka exposes (RemoteStorageMetrics / BrokerTopicMetrics names)."""

    def __init__(self):
        self.copy_bytes = 0
        self.copy_requests = 0
        self.copy_errors = 0
        self.fetch_bytes = 0
        self.fetch_requests = 0
        self.fetch_errors = 0
        self.delete_requests = 0
        self.delete_errors = 0
        self.copy_lag_bytes: dict[tuple[str, int], int] = {}
        self.copy_lag_segments: dict[tuple[str, int], int] = {}
        self.remote_log_size: dict[tuple[str, int], int] = {}
        self.local_deletes_held_back = 0
        # ListOffsets lookups and fetches answered without their remote read, out of time
        # (Kafka's DelayedRemoteListOffsetsMetrics / DelayedRemoteFetchMetrics ExpiresPerSec)
        self.list_offsets_expired = 0
        self.fetch_expired = 0
        self.store_read_bytes = 0     # every GET of the object store (fetches, indexes, lookups)
        self.store_reads = 0


def tiered_metrics(broker):
    """The families of broker.tiered's counters; zeros on a broker without tiered storage (no
    remote log manager: broker.tiered is None), so the dashboard's panel stays valid."""
    tiered = getattr(broker, "tiered", None)
    # (imported here, at the first scrape: prometheus_client is loaded only with the metrics listener on)
    from broker.metrics.families import counter, gauge
    m = tiered.metrics if tiered is not None else TieredMetrics()
    for short, value, doc in (
            ("remotecopybytes", m.copy_bytes, "Bytes copied to remote storage"),
            ("remotecopyrequests", m.copy_requests, "Segments copied to remote storage"),
            ("remotecopyerrors", m.copy_errors, "Segment copies that failed"),
            ("remotefetchbytes", m.fetch_bytes, "Bytes read from remote storage for fetches"),
            ("remotefetchrequests", m.fetch_requests, "Fetches served from remote storage"),
            ("remotefetcherrors", m.fetch_errors, "Fetches from remote storage that failed"),
            ("remotedeleterequests", m.delete_requests, "Remote segments deleted"),
            ("remotedeleteerrors", m.delete_errors, "Remote segment deletions that failed")):
        yield counter(PREFIX + short, doc, [({}, value)])

    yield counter("kafka_server_delayedremotelistoffsetsmetrics_expirespersec",
                  "ListOffsets timestamp lookups in remote storage answered REQUEST_TIMED_OUT",
                  [({}, m.list_offsets_expired)])
    yield counter("kafka_server_delayedremotefetchmetrics_expirespersec",
                  "Remote fetches answered without records after remote.fetch.max.wait.ms",
                  [({}, m.fetch_expired)])
    yield counter("kproto_tiered_store_read_bytes",
                  "Bytes read from the object store (fetches, indexes, timestamp lookups)",
                  [({}, m.store_read_bytes)])
    yield counter("kproto_tiered_store_reads", "Reads (GET requests) of the object store",
                  [({}, m.store_reads)])

    def per_partition(values):
        return [({"topic": t, "partition": str(p)}, v) for (t, p), v in sorted(values.items())]
    yield gauge(PREFIX + "remotecopylagbytes", "Bytes of closed segments not copied yet",
                samples=per_partition(m.copy_lag_bytes))
    yield gauge(PREFIX + "remotecopylagsegments", "Closed segments not copied yet",
                samples=per_partition(m.copy_lag_segments))
    yield gauge(PREFIX + "remotelogsizebytes", "Bytes of the partition in remote storage",
                samples=per_partition(m.remote_log_size))
    yield gauge("kproto_tiered_local_segments_held_back",
                "Local segments past local retention kept because they are not copied to remote storage",
                m.local_deletes_held_back)

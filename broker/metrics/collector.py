"""The metric families of one broker, built at scrape time from the
counters of registry.py and the broker's own state.

Names are what the Prometheus JMX exporter's usual Kafka rules (its
example kafka-2_0_0.yml, Strimzi's) make of Kafka's MBeans, lowercased:
`kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=t` Count
becomes `kafka_server_brokertopicmetrics_messagesin_total{topic="t"}`, a
RequestMetrics histogram becomes quantile gauges plus `_count`, so existing
dashboards and alerts mostly work. Consumer lag uses kafka-lag-exporter's
names. kproto-only values are `kproto_*`.

The ReplicaManager, controller and raft-metrics families come from the
node's replica state, metadata image and quorum (broker/metrics/cluster.py
says what each value is); a single node is its own quorum's leader and
the active controller.
"""
from __future__ import annotations

import time

from prometheus_client.samples import Sample

from kproto.api import ApiKey

from broker.metrics.cluster import cluster_metrics
from broker.metrics.families import counter as _counter, gauge as _gauge, metric as _metric
from broker.metrics.lag import consumer_lag
from broker.metrics.memory import heap_metrics
from broker.metrics.registry import LATENCY_BOUNDS_MS, LATENCY_BUCKETS, quantile

# the quantiles the JMX exporter exports of a Yammer histogram, labelled as its Kafka rules write
# them ("0.$N" of the NthPercentile attribute: 50thPercentile is "0.50")
QUANTILES = ((0.5, "0.50"), (0.75, "0.75"), (0.95, "0.95"), (0.98, "0.98"), (0.99, "0.99"), (0.999, "0.999"))
_TOPIC_COUNTERS = (
    ("messagesin", "messages_in", "Records appended by produce requests"),
    ("bytesin", "bytes_in", "Bytes of record batches appended by produce requests"),
    ("bytesout", "bytes_out", "Bytes of record batches sent in fetch responses"),
    ("totalproducerequests", "produce_requests", "Produce requests, counted per partition"),
    ("totalfetchrequests", "fetch_requests", "Fetch requests, counted per partition"),
    ("failedproducerequests", "failed_produce", "Produce requests that failed, per partition"),
    ("failedfetchrequests", "failed_fetch", "Fetch requests that failed, per partition"),
)
_REQUEST_TIMES = (
    ("totaltimems", "total", "Time from receiving a request to its response sent, ms"),
    ("requestqueuetimems", "queue",
     "Time a request waited behind earlier requests of its connection, ms (sampled: 1 request in 8)"),
    ("localtimems", "local",
     "Time in the request handler less its purgatory wait, ms (sampled: 1 request in 8)"),
    ("remotetimems", "remote",
     "Time waiting in purgatory: acks=all for the ISR, a fetch for data (long poll), ms"),
    ("responsesendtimems", "send", "Time sending the response, ms (sampled: 1 request in 8)"),
)
_GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")


def request_name(api_key: int) -> str:
    """Kafka's name of an API, as in RequestMetrics' request tag (Produce, ApiVersions)."""
    try:
        return "".join(w.capitalize() for w in ApiKey(api_key).name.split("_"))
    except ValueError:
        return str(api_key)


class BrokerCollector:
    """A prometheus_client collector over one Broker. collect() reads broker
    state: it runs on the broker's trio thread once the broker is ready,
    and before that yields only readiness (broker/metrics/http.py)."""

    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        b = self.broker
        yield _gauge("kproto_broker_ready", "1 once listeners are bound and storage is open",
                     1 if b.ready else 0)
        if not b.ready:
            return
        yield _gauge("kafka_server_kafkaserver_brokerstate", "Kafka's broker state (3: RUNNING)", 3)
        m = b.metrics
        yield from self._topic_metrics(m)
        yield from self._request_metrics(m)
        yield from self._partitions(b)
        yield from self._groups(b)
        yield from self._transactions(b)
        yield from self._lag(b)
        yield from self._connections(m)
        yield from fetch_session_metrics(b)
        yield from client_telemetry_metrics(b)
        for source in getattr(b, "metric_sources", ()):   # services above this room add theirs (schema registry)
            yield from source()
        yield _gauge("kproto_event_loop_lag_seconds",
                     "How late the event loop ran a 1 s timer, last measurement", m.loop_lag_s)
        yield _gauge("kproto_event_loop_lag_max_seconds", "Largest event-loop lag measured", m.loop_lag_max_s)
        yield self._loop_delay(m.loop_delay)
        yield from heap_metrics()

    def _loop_delay(self, h):
        """Every bucket (powers of two of us): the scheduling delay's tail
        is the point of this one."""
        name = "kproto_event_loop_delay_seconds"
        fam = _metric(name, "How late the event loop ran a 10 ms timer, sampled continuously", "histogram")
        cumulative = 0
        for i, n in enumerate(h.counts[:LATENCY_BUCKETS]):
            cumulative += n
            fam.samples.append(Sample(name + "_bucket", {"le": repr(LATENCY_BOUNDS_MS[i] / 1000.0)}, cumulative))
        fam.samples.append(Sample(name + "_bucket", {"le": "+Inf"}, h.count))
        fam.samples.append(Sample(name + "_count", {}, h.count))
        fam.samples.append(Sample(name + "_sum", {}, h.sum / 1000.0))
        return fam

    # -- BrokerTopicMetrics --------------------------------------------------------------

    def _topic_metrics(self, m):
        topics = list(m.topics.items())
        for short, attr, doc in _TOPIC_COUNTERS:
            samples = [({"topic": t}, getattr(s, attr)) for t, s in topics]
            samples.append(({}, sum(getattr(s, attr) for _t, s in topics)))
            yield _counter(f"kafka_server_brokertopicmetrics_{short}", doc, samples)

    # -- RequestMetrics ------------------------------------------------------------------

    def _request_metrics(self, m):
        stats = sorted(m.requests.items())
        yield _counter("kafka_network_requestmetrics_requests", "Requests answered, per API and version",
                       [({"request": request_name(k), "version": str(v)}, slot.count)
                        for k, s in stats for v, slot in sorted(s.versions.items())])
        for short, attr, doc in _REQUEST_TIMES:
            name = f"kafka_network_requestmetrics_{short}"
            fam = _metric(name, doc, "summary")
            for k, s in stats:
                counts = getattr(s, attr)
                total_us = getattr(s, attr + "_us")
                if attr == "remote":
                    counts = list(counts)
                    counts[0] += s.count - s.waited   # every request that did not wait: 0 ms
                elif attr != "total" and s.sampled:
                    total_us = total_us * s.count / s.sampled   # the phases are sampled: scaled up
                req = request_name(k)
                for q, label in QUANTILES:
                    fam.samples.append(Sample(name, {"request": req, "quantile": label}, quantile(counts, q)))
                fam.samples.append(Sample(name + "_count", {"request": req}, s.count))
                fam.samples.append(Sample(name + "_sum", {"request": req}, total_us / 1000.0))
            yield fam
        # the total time as a Prometheus histogram too, for histogram_quantile over any window
        name = "kproto_request_total_time_ms"
        fam = _metric(name, "Time from receiving a request to its response sent, ms", "histogram")
        for k, s in stats:
            req = request_name(k)
            cumulative = 0
            for i, n in enumerate(s.total[:LATENCY_BUCKETS]):
                cumulative += n
                if i % 2 == 0:   # every power of 4 us: 1 us, 4 us, ... 67 s
                    fam.samples.append(Sample(name + "_bucket", {"request": req, "le": repr(LATENCY_BOUNDS_MS[i])},
                                              cumulative))
            fam.samples.append(Sample(name + "_bucket", {"request": req, "le": "+Inf"}, s.count))
            fam.samples.append(Sample(name + "_count", {"request": req}, s.count))
            fam.samples.append(Sample(name + "_sum", {"request": req}, s.total_us / 1000.0))
        yield fam

    # -- partitions: log, ReplicaManager, controller, raft ------------------------------------

    def _partitions(self, b):
        parts = list(b.partitions.all())
        log_size, segments, leo, lso = [], [], [], []
        for p in parts:
            labels = {"topic": p.topic, "partition": str(p.index)}
            log = p.log
            log_size.append((labels, log.size))
            segments.append((labels, len(log.segments)))
            leo.append((labels, log.log_end_offset))
            lso.append((labels, log.log_start_offset))
        yield _gauge("kafka_log_log_size", "Bytes of the partition's segments", samples=log_size)
        yield _gauge("kafka_log_log_numlogsegments", "Segments of the partition", samples=segments)
        yield _gauge("kafka_log_log_logendoffset", "Log end offset", samples=leo)
        yield _gauge("kafka_log_log_logstartoffset", "Log start offset", samples=lso)
        yield from cluster_metrics(b)   # ReplicaManager, controller, raft-metrics (cluster.py)

    # -- groups and lag --------------------------------------------------------------------

    def _groups(self, b):
        groups = list(b.groups.state.groups.values()) if b.groups is not None else []
        by_state = dict.fromkeys(_GROUP_STATES, 0)
        for g in groups:
            by_state[g.state] = by_state.get(g.state, 0) + 1
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        yield _gauge(prefix + "numgroups", "Consumer groups", len(groups))
        for state, n in by_state.items():
            yield _gauge(prefix + "numgroups" + state.lower(), f"Groups in state {state}", n)
        yield _gauge(prefix + "numoffsets", "Committed offsets", sum(len(g.offsets) for g in groups))
        # a group's generation grows by one per rebalance: rate() of it is the rebalance rate
        yield _gauge("kproto_group_generation", "Generation of each group (one per rebalance)",
                     samples=[({"group": g.group_id}, g.generation) for g in groups])

    def _transactions(self, b):
        # the coordinator names its states (broker/transactions/): metrics import nothing above them
        by_state = b.transactions.count_by_state() if b.transactions is not None else {}
        yield _gauge("kproto_transactions", "Transactional ids known to the coordinator, by state",
                     samples=[({"state": st}, n) for st, n in by_state.items()])
        loading = b.transactions.partitions_loading() if b.transactions is not None else 0
        yield _gauge("kproto_transaction_coordinator_partitions_loading",
                     "__transaction_state partitions still being loaded", loading)

    def _lag(self, b):
        rows = consumer_lag(b, int(time.time() * 1000))
        yield _gauge("kafka_consumergroup_group_offset", "Committed offset",
                     samples=[(_lag_labels(r), r.offset) for r in rows])
        yield _gauge("kafka_consumergroup_group_lag", "High watermark minus committed offset",
                     samples=[(_lag_labels(r), r.lag) for r in rows])
        yield _gauge("kafka_consumergroup_group_lag_seconds",
                     "Age of the first record not yet consumed (0 without lag)",
                     samples=[(_lag_labels(r), r.lag_seconds) for r in rows if r.lag_seconds is not None])
        max_lag, sum_lag = {}, {}
        for r in rows:
            max_lag[r.group] = max(max_lag.get(r.group, 0), r.lag)
            sum_lag[r.group] = sum_lag.get(r.group, 0) + r.lag
        yield _gauge("kafka_consumergroup_group_max_lag", "Largest partition lag of the group",
                     samples=[({"group": g}, v) for g, v in max_lag.items()])
        yield _gauge("kafka_consumergroup_group_sum_lag", "Total lag of the group",
                     samples=[({"group": g}, v) for g, v in sum_lag.items()])

    # -- connections -----------------------------------------------------------------------

    def _connections(self, m):
        rows = list(m.connections.items())
        prefix = "kafka_server_socket_server_metrics_"
        yield _gauge(prefix + "connection_count", "Open client connections",
                     samples=[({"listener": n}, c[0]) for n, c in rows])
        yield _counter(prefix + "connection_creation", "Client connections accepted",
                       [({"listener": n}, c[1]) for n, c in rows])
        yield _counter(prefix + "connection_close", "Client connections closed",
                       [({"listener": n}, c[2]) for n, c in rows])


def _lag_labels(r) -> dict:
    return {"group": r.group, "topic": r.topic, "partition": str(r.partition)}


def fetch_session_metrics(b):
    """Kafka's FetchSessionCache gauges and eviction meter (KIP-227 sessions)."""
    cache = getattr(b, "fetch_sessions", None)
    prefix = "kafka_server_fetchsessioncache_"
    yield _gauge(prefix + "numincrementalfetchsessions", "Incremental fetch sessions cached",
                 cache.size if cache is not None else 0)
    yield _gauge(prefix + "numincrementalfetchpartitionscached", "Partitions of the cached fetch sessions",
                 cache.total_partitions if cache is not None else 0)
    yield _counter(prefix + "incrementalfetchsessionevictions", "Fetch sessions evicted to make room",
                   [({}, cache.evictions if cache is not None else 0)])


def client_telemetry_metrics(b):
    """KIP-714 client telemetry: Kafka's client-metrics group (instance count, pushes handed
    to the receiver, throttled and unknown-subscription requests) plus what was pushed."""
    m = getattr(b, "client_metrics", None)
    if m is None:
        return
    prefix = "kafka_server_client_metrics_"
    yield _gauge(prefix + "instance_count", "Client instances known to the telemetry manager", len(m.instances))
    yield _counter(prefix + "plugin_export", "Telemetry pushes accepted", [({}, m.pushes)])
    yield _counter(prefix + "throttle", "Telemetry requests throttled", [({}, m.throttled)])
    yield _counter(prefix + "unknown_subscription_request", "Pushes with an unknown subscription id",
                   [({}, m.unknown_subscription)])
    yield _counter("kproto_client_telemetry_bytes", "Bytes of telemetry pushed (uncompressed)", [({}, m.bytes)])
    yield _gauge("kproto_client_telemetry_metrics", "Metrics in each client's latest push",
                 samples=[({"client_instance_id": str(i.instance_id), "client_id": i.client_id or ""},
                           len(i.metric_names)) for i in m.instances.values() if i.pushes])

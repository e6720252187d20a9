"""The registry's metric families for the broker's /metrics endpoint
(broker/metrics/collector.py yields them when the registry is on)."""
from __future__ import annotations

from broker.metrics.families import counter, gauge


def registry_metrics(broker):
    registry = getattr(broker, "schema_registry", None)
    if registry is None:
        return
    m = registry.metrics
    store = registry.store
    yield counter("kproto_schema_registry_requests", "HTTP requests the schema registry answered",
                  [({}, m.requests)])
    yield counter("kproto_schema_registry_registrations", "Schema versions this node registered as the writer",
                  [({}, m.registrations)])
    yield counter("kproto_schema_registry_forwarded", "Writes this node forwarded to the writer node",
                  [({}, m.forwarded)])
    yield counter("kproto_schema_registry_forward_connections",
                  "HTTP connections this node opened to the writer node to forward writes (kept alive)",
                  [({}, m.forward_connections)])
    yield counter("kproto_schema_registry_errors", "Error answers, by Confluent error_code",
                  [({"error_code": str(code)}, n) for code, n in sorted(m.errors.items())])
    yield gauge("kproto_schema_registry_schemas", "Schema ids known", len(store.by_id))
    yield gauge("kproto_schema_registry_subjects", "Subjects with a live version", len(store.subject_names()))
    yield gauge("kproto_schema_registry_writer", "1 when this node writes _schemas (the elected writer)",
                1 if registry.is_writer() else 0)
    yield gauge("kproto_schema_registry_applied_offset", "The last _schemas offset this node has applied",
                store.applied)

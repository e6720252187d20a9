"""kproto's schema registry: Confluent Schema Registry's REST API, served by
the broker on `schema.registry.listeners`, its state kept in the cluster's
compacted `_schemas` topic in Confluent's record layout.

  settings.py       the schema.registry.* settings
  schemas.py        parsing Avro / JSON Schema / Protobuf (their libraries)
  compatibility.py  compatibility levels and rules
  store.py          the state the `_schemas` records make
  topic.py          reading and writing `_schemas` as a client of the cluster
  registry.py       what each call does (validation, ids, versions, records)
  app.py            the ASGI app: routes, JSON, Confluent's error bodies
  election.py       one writer per cluster, elected through a consumer group
  forward.py        writes that reach another node go to the writer
  server.py         hypercorn's trio worker on the broker's event loop
"""
from __future__ import annotations

import logging

import trio

log = logging.getLogger("kproto.schema_registry")


class RegistryMetrics:
    """Counters for the /metrics endpoint (broker/metrics)."""

    def __init__(self):
        self.requests = 0
        self.registrations = 0
        self.errors: dict[int, int] = {}


async def run(broker, settings, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve the registry until cancelled. task_status gets its URL once bound; the store then
    reads `_schemas` (created if missing) to the end, and requests wait for that."""
    from broker.schema_registry.app import App
    from broker.schema_registry.registry import Registry
    from broker.schema_registry.server import hypercorn_config, serve
    from broker.schema_registry.topic import SchemasTopic
    from broker.config.types import StartupError

    rf = int(broker.config.static_configs.get("schema.registry.topic.replication.factor") or 3)
    topic = SchemasTopic(broker, settings.topic, rf if _multi_node(broker) else 1)
    metrics = RegistryMetrics()
    registry = Registry(topic, settings.level, metrics)
    broker.schema_registry = registry
    from broker.schema_registry.metrics import registry_metrics
    broker.metric_sources = [*getattr(broker, "metric_sources", []), lambda: registry_metrics(broker)]
    auth = None
    if settings.authentication == "basic":
        from broker.schema_registry.auth import BasicAuth
        auth = BasicAuth(broker)
    election = forwarder = None
    if _multi_node(broker):
        from broker.schema_registry.election import WriterElection
        from broker.schema_registry.forward import Forwarder
        election = WriterElection(broker, settings)
        registry.is_writer = election.is_writer
        registry.writer_generation = lambda: election.generation
        forwarder = Forwarder(election)
    app = App(registry, forwarder, auth, metrics)
    try:
        async with trio.open_nursery() as nursery:
            try:
                binds = await nursery.start(serve, app, hypercorn_config(settings, _ssl_files(broker, settings)))
            except OSError as exc:
                raise StartupError(f"cannot listen on {settings.scheme}://{settings.bind} "
                                   f"(schema.registry.listeners): {(exc.strerror or str(exc)).lower()}") from None
            url = binds[0] if binds else f"{settings.scheme}://{settings.bind}"
            broker.schema_registry_url = url
            task_status.started(url)
            await nursery.start(topic.tail, registry.store.apply)
            registry.ready.set()
            log.info("schema registry on %s: %d schemas, %d subjects", url, len(registry.store.by_id),
                     len(registry.store.subject_names()))
            if election is not None:
                election.url = url
                nursery.start_soon(election.run)
    finally:
        with trio.CancelScope(shield=True):
            await topic.aclose()


def _multi_node(broker) -> bool:
    return getattr(broker, "quorum", None) is not None


def _ssl_files(broker, settings):
    """PEM files of the broker's ssl.* settings for an https listener (ssl.keystore.type=PEM with
    ssl.keystore.location naming a file with the certificate chain and the key)."""
    if settings.scheme != "https":
        return None
    cfg = broker.config.static_configs
    location = cfg.get("ssl.keystore.location")
    if not location:
        from broker.config.types import StartupError
        raise StartupError("schema.registry.listeners is https but ssl.keystore.location is not set")
    return (location, cfg.get("schema.registry.ssl.key.location") or location, cfg.get("ssl.truststore.location"))

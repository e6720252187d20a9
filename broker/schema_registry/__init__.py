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
from functools import partial

import trio

log = logging.getLogger("kproto.schema_registry")


class RegistryMetrics:
    """Counters for the /metrics endpoint (broker/metrics)."""

    def __init__(self):
        self.requests = 0
        self.registrations = 0
        self.errors: dict[int, int] = {}
        self.forwarded = 0             # writes this node sent on to the writer
        self.forward_connections = 0   # HTTP connections it opened to the writer for them


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
    registry.check_budget_s = settings.check_timeout_ms / 1000
    broker.schema_registry = registry
    from broker.schema_registry.metrics import registry_metrics
    broker.metric_sources = [*getattr(broker, "metric_sources", []), lambda: registry_metrics(broker)]
    auth = None
    if settings.authentication == "basic":
        from broker.schema_registry.acls import SubjectAcls
        from broker.schema_registry.auth import BasicAuth
        auth = SubjectAcls(broker, BasicAuth(broker))   # checks subjects only with an authorizer
    election = forwarder = None
    if _multi_node(broker):
        from broker.schema_registry.election import WriterElection
        from broker.schema_registry.forward import Forwarder
        election = WriterElection(broker, settings)
        registry.is_writer = election.is_writer
        registry.writer_generation = lambda: election.generation
        forwarder = Forwarder(election, metrics)
    app = App(registry, forwarder, auth, metrics)
    try:
        async with trio.open_nursery() as nursery:
            try:
                binds = await nursery.start(serve, app, hypercorn_config(settings, _ssl_context(broker, settings)))
            except (OSError, BaseExceptionGroup) as exc:   # (hypercorn's nursery wraps the bind error)
                bind_error = _os_error(exc)
                if bind_error is None:
                    raise
                raise StartupError(f"cannot listen on {settings.scheme}://{settings.bind} (schema.registry."
                                   f"listeners): {(bind_error.strerror or str(bind_error)).lower()}") from None
            url = binds[0] if binds else f"{settings.scheme}://{settings.bind}"
            broker.schema_registry_url = url
            task_status.started(url)
            await nursery.start(partial(topic.tail, registry.store.apply, advance=registry.store.advance,
                                        prepare=registry.identify))
            registry.ready.set()
            log.info("schema registry on %s: %d schemas, %d subjects", url, len(registry.store.by_id),
                     len(registry.store.subject_names()))
            if election is not None:
                election.url = url
                nursery.start_soon(election.run)
    finally:
        if forwarder is not None:
            forwarder.close()
        with trio.CancelScope(shield=True):
            await topic.aclose()


def _os_error(exc: BaseException) -> OSError | None:
    if isinstance(exc, OSError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _os_error(inner)
        if found is not None:
            return found
    return None


def _multi_node(broker) -> bool:
    """A node of a cluster (a multi-voter quorum, or a broker-only node of any quorum): its registry
    takes part in the writer election. kproto's single node writes alone, without a group."""
    if getattr(broker, "quorum", None) is not None:
        return True
    kraft = broker.config.kraft
    return kraft is not None and not kraft.is_controller


def _ssl_context(broker, settings):
    """The broker's TLS settings (ssl.* or listener.name.schema_registry.ssl.*) for an https
    listener, as broker/security/tls.py builds them for Kafka listeners."""
    if settings.scheme != "https":
        return None
    from broker.config.types import ConfigError, StartupError
    from broker.security.tls import ListenerTls
    try:
        ctx = ListenerTls(broker.config, "schema_registry", "SSL").context()
    except (ConfigError, OSError, ValueError) as exc:
        raise StartupError(f"schema.registry.listeners is https: {exc}") from None
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx

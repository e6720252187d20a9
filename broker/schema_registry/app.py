"""The ASGI application: Confluent Schema Registry's REST routes, JSON in
and out (application/vnd.schemaregistry.v1+json), Confluent's error bodies.
Writes that reach a node that is not the writer are forwarded to it."""
from __future__ import annotations

import json
import logging
import re
from urllib.parse import parse_qs, unquote

import trio

from broker.schema_registry import errors
from broker.schema_registry.registry import parse_version
from broker.schema_registry.schemas import TYPES

log = logging.getLogger("kproto.schema_registry")

CONTENT_TYPE = b"application/vnd.schemaregistry.v1+json"
MAX_BODY = 16 << 20   # a schema larger than this is a mistake, not a schema
READY_WAIT_S = 30.0   # a request at start-up waits this long for the store to catch up


def _format(query: dict) -> str | None:
    return query.get("format", [None])[-1]


def _flag(query: dict, name: str) -> bool:
    return (query.get(name, ["false"])[-1] or "").lower() == "true"


class App:
    def __init__(self, registry, forwarder=None, auth=None, metrics=None):
        self.registry = registry
        self.forwarder = forwarder   # broker/schema_registry/forward.py in a cluster
        self.auth = auth             # callable(headers) -> principal or raises RegistryError
        self.metrics = metrics
        r = []

        def route(method, pattern, handler, write=False):
            r.append((method, re.compile("^" + pattern + "/?$"), handler, write))
        s, v, i = r"/subjects/(?P<subject>[^/]+)", r"/versions/(?P<version>[^/]+)", r"/schemas/ids/(?P<id>[^/]+)"
        route("GET", r"", self.root)
        route("GET", r"/subjects", self.list_subjects)
        route("GET", s + r"/versions", self.list_versions)
        route("POST", s + r"/versions", self.register, write=True)
        route("GET", s + v, self.get_version)
        route("GET", s + v + r"/schema", self.get_version_schema)
        route("GET", s + v + r"/referencedby", self.referenced_by)
        route("DELETE", s + v, self.delete_version, write=True)
        route("POST", s, self.lookup)
        route("DELETE", s, self.delete_subject, write=True)
        route("GET", r"/schemas", self.list_schemas)
        route("GET", r"/schemas/types", self.types)
        route("GET", i, self.get_schema)
        route("GET", i + r"/schema", self.get_schema_text)
        route("GET", i + r"/subjects", self.id_subjects)
        route("GET", i + r"/versions", self.id_versions)
        route("GET", r"/config", self.get_config)
        route("PUT", r"/config", self.put_config, write=True)
        route("GET", r"/config/(?P<subject>[^/]+)", self.get_config)
        route("PUT", r"/config/(?P<subject>[^/]+)", self.put_config, write=True)
        route("DELETE", r"/config/(?P<subject>[^/]+)", self.delete_config, write=True)
        route("GET", r"/mode", self.get_mode)
        route("PUT", r"/mode", self.put_mode, write=True)
        route("GET", r"/mode/(?P<subject>[^/]+)", self.get_mode)
        route("PUT", r"/mode/(?P<subject>[^/]+)", self.put_mode, write=True)
        route("DELETE", r"/mode/(?P<subject>[^/]+)", self.delete_mode, write=True)
        route("POST", r"/compatibility/subjects/(?P<subject>[^/]+)" + v, self.compatibility)
        route("POST", r"/compatibility/subjects/(?P<subject>[^/]+)/versions", self.compatibility)
        route("GET", r"/contexts", self.contexts)
        self.routes = r

    # -- ASGI ---------------------------------------------------------------------------------

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        status, body = await self._answer(scope, receive)
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = [(b"content-type", CONTENT_TYPE), (b"content-length", str(len(payload)).encode())]
        if status == 401:
            headers.append((b"www-authenticate", b'Basic realm="kproto schema registry"'))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    async def _answer(self, scope, receive):
        method, path = scope["method"], scope["path"].rstrip("/") or ""
        if self.metrics is not None:
            self.metrics.requests += 1
        try:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            principal = self.auth(headers) if self.auth is not None else None
            raw = await _read_body(receive, headers)
            if not self.registry.ready.is_set():
                with trio.move_on_after(READY_WAIT_S):
                    await self.registry.ready.wait()
                if not self.registry.ready.is_set():
                    raise errors.operation_timeout("the registry has not read _schemas yet")
            allowed = False
            for m, pattern, handler, write in self.routes:
                match = pattern.match(path)
                if not match:
                    continue
                allowed = True
                if m != method:
                    continue
                query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
                params = {k: unquote(v) for k, v in match.groupdict().items()}
                host = (scope.get("client") or ("*",))[0]
                if principal is not None and hasattr(self.auth, "authorize"):
                    # (here, before a write is forwarded: the writer would see this node's address)
                    self.auth.authorize(principal, method, params.get("subject"), handler.__name__, host)
                if write and self.forwarder is not None and not self.registry.is_writer():
                    forwarded = await self.forwarder.forward(scope, raw, headers)
                    if forwarded is not None:
                        return forwarded
                body = _json(raw) if method in ("POST", "PUT") else None
                result = await handler(body=body, query=query, **params)
                if principal is not None and handler == self.list_subjects and hasattr(self.auth, "readable"):
                    result = self.auth.readable(principal, result, host)
                return 200, result
            raise errors.method_not_allowed() if allowed else errors.not_found_endpoint()
        except errors.RegistryError as exc:
            if self.metrics is not None:
                self.metrics.errors[exc.code] = self.metrics.errors.get(exc.code, 0) + 1
            return exc.status, exc.body()
        except Exception as exc:   # a bug must not take the broker down: Confluent's 500
            log.exception("schema registry request %s %s failed", method, path)
            return 500, {"error_code": 500, "message": f"Internal Server Error: {type(exc).__name__}"}

    # -- handlers -------------------------------------------------------------------------------

    async def root(self, body, query):
        return {}

    async def contexts(self, body, query):
        return ["."]

    async def list_subjects(self, body, query):
        names = self.registry.store.subject_names(_flag(query, "deleted"))
        prefix = query.get("subjectPrefix", [""])[-1]
        return [n for n in names if n.startswith(prefix)]

    async def list_versions(self, body, query, subject):
        return self.registry.list_versions(subject, _flag(query, "deleted"))

    async def register(self, body, query, subject):
        result = await self.registry.register(subject, body, _flag(query, "normalize"))
        return result

    async def get_version(self, body, query, subject, version):
        v = self.registry.get_version(subject, version, _flag(query, "deleted"))
        return self.registry.version_body(v, _format(query))

    async def get_version_schema(self, body, query, subject, version):
        v = self.registry.get_version(subject, version, _flag(query, "deleted"))
        return self.registry.render(v, _format(query)).encode()

    async def referenced_by(self, body, query, subject, version):
        v = self.registry.get_version(subject, version, True)
        return self.registry.store.referenced_by(subject, v.version)

    async def delete_version(self, body, query, subject, version):
        return await self.registry.delete_version(subject, version, _flag(query, "permanent"))

    async def lookup(self, body, query, subject):
        return await self.registry.lookup(subject, body, _flag(query, "normalize"), _flag(query, "deleted"))

    async def delete_subject(self, body, query, subject):
        return await self.registry.delete_subject(subject, _flag(query, "permanent"))

    async def list_schemas(self, body, query):
        """GET /schemas: every version (subjectPrefix, deleted, latestOnly), as UIs list them."""
        prefix, deleted = query.get("subjectPrefix", [""])[-1], _flag(query, "deleted")
        out = []
        for subject in self.registry.store.subject_names(deleted):
            if subject.startswith(prefix):
                versions = self.registry.store.versions(subject, deleted)
                for v in versions[-1:] if _flag(query, "latestOnly") else versions:
                    out.append(self.registry.version_body(v, _format(query)))
        return out

    async def types(self, body, query):
        return sorted(TYPES)

    def _by_id(self, schema_id: str):
        try:
            number = int(schema_id)
        except ValueError:
            raise errors.not_found_endpoint() from None
        return self.registry.schema_by_id(number)

    async def get_schema(self, body, query, id):
        v = self._by_id(id)
        out = {}
        if v.schema_type != "AVRO":
            out["schemaType"] = v.schema_type
        if v.references:
            out["references"] = v.references
        out["schema"] = self.registry.render(v, _format(query))
        return out

    async def get_schema_text(self, body, query, id):
        return self.registry.render(self._by_id(id), _format(query)).encode()

    async def id_subjects(self, body, query, id):
        v = self._by_id(id)
        return sorted({s for s, _n in self.registry.store.subjects_of_id(v.id, _flag(query, "deleted"))})

    async def id_versions(self, body, query, id):
        v = self._by_id(id)
        return [{"subject": s, "version": n} for s, n in self.registry.store.subjects_of_id(v.id, _flag(query,
                                                                                                       "deleted"))]

    async def get_config(self, body, query, subject=None):
        if subject is not None and subject not in self.registry.store.configs:
            if not _flag(query, "defaultToGlobal"):
                raise errors.subject_level_compatibility_not_configured(subject)
        return {"compatibilityLevel": self.registry.level(subject)}

    async def put_config(self, body, query, subject=None):
        return await self.registry.set_config(subject, body)

    async def delete_config(self, body, query, subject):
        return await self.registry.delete_config(subject)

    async def get_mode(self, body, query, subject=None):
        if subject is not None and subject not in self.registry.store.modes and not _flag(query, "defaultToGlobal"):
            raise errors.subject_level_mode_not_configured(subject)
        return {"mode": self.registry.mode(subject)}

    async def put_mode(self, body, query, subject=None):
        return await self.registry.set_mode(subject, body, _flag(query, "force"))

    async def delete_mode(self, body, query, subject):
        return await self.registry.delete_mode(subject)

    async def compatibility(self, body, query, subject, version=None):
        if version is not None:
            number = parse_version(version)
            if not self.registry.store.versions(subject):
                # Confluent: a given version of a subject with none is not found (40402); "latest" of
                # no version is compatible (nothing to be compatible with)
                if number != -1:
                    raise errors.version_not_found(number)
                return {"is_compatible": True, **({"messages": []} if _flag(query, "verbose") else {})}
        messages = await self.registry.check_compatibility(subject, body, version, _flag(query, "normalize"))
        out = {"is_compatible": not messages}
        if _flag(query, "verbose"):
            out["messages"] = messages
        return out


async def _read_body(receive, headers) -> bytes:
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise errors.too_large(MAX_BODY)
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise errors.too_large(MAX_BODY)
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _json(raw: bytes):
    if not raw.strip():
        raise errors.unprocessable("Request body is empty")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.bad_request(f"Unexpected character in the request body: {exc}") from None

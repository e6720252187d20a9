"""The console's request handling: which page a path is, who is asking (HTTP basic checked as a
SCRAM login on the broker's own SASL listener when an authorizer is configured; anonymous on a
PLAINTEXT listener otherwise), and the page rendered from its template. Each request runs on a
thread of the metrics listener with a Kafka client of its own, closed when the page is sent."""
from __future__ import annotations

import base64
import logging
import binascii
import time
from datetime import datetime, timezone
from urllib.parse import parse_qs, quote, unquote

from broker.admin.client import Admin, parse_time
from broker.admin.connection import ConnectionFailed
from broker.admin.errors import AdminError, KafkaError
from broker.console import views
from broker.console.charts import Sampler

log = logging.getLogger("kproto.console")

ENABLE_KEY = "kproto.console.enable"
WRITES_KEY = "kproto.console.writes.enable"
HTML = "text/html; charset=utf-8"
REALM = 'Basic realm="kproto console", charset="UTF-8"'
# Kafka error name -> HTTP status of the error page
_STATUS = {"TOPIC_AUTHORIZATION_FAILED": 403, "GROUP_AUTHORIZATION_FAILED": 403, "CLUSTER_AUTHORIZATION_FAILED": 403,
           "UNKNOWN_TOPIC_OR_PARTITION": 404, "GROUP_ID_NOT_FOUND": 404}


class Console:
    def __init__(self, broker, server):
        self.broker = broker
        self.server = server
        static = broker.config.static_configs
        self.enabled = str(static.get(ENABLE_KEY, "true")).strip().lower() not in ("false", "off", "no", "0")
        # read-only unless the operator says otherwise
        self.writes = str(static.get(WRITES_KEY, "false")).strip().lower() in ("true", "on", "yes", "1")
        self._env = None
        self.sampler = Sampler(self._read_counters, server.trio_token)

    # -- plumbing -------------------------------------------------------------------------

    def env(self):
        if self._env is None:
            import jinja2
            env = jinja2.Environment(loader=jinja2.PackageLoader("broker.console", "templates"),
                                     autoescape=True, trim_blocks=True, lstrip_blocks=True)
            env.filters["ts"] = _ts
            env.filters["bytes"] = _bytes
            self._env = env
        return self._env

    def _read_counters(self) -> tuple[int, int, int]:
        """Total bytes in, bytes out, records in (on the trio thread, where they change)."""
        m = self.broker.metrics
        if m is None:
            return 0, 0, 0
        stats = m.topics.values()
        return (sum(s.bytes_in for s in stats), sum(s.bytes_out for s in stats), sum(s.messages_in for s in stats))

    def _listener(self, secured: bool):
        wanted = ("SASL_PLAINTEXT",) if secured else ("PLAINTEXT",)
        protocols = self.broker.config.listener_security_protocol_map
        clients = {e.name for e in self.broker.config.broker_listeners}   # not the controller listener
        for name, host, port in self.broker.bound:
            if name in clients and protocols.get(name, name) in wanted:
                return ("127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host), port
        return None

    def _settings(self, headers: dict):
        """(client settings, user) for this request, or (None, the answer to send instead)."""
        secured = self.broker.authorizer is not None
        where = self._listener(secured)
        if where is None:
            need = "a SASL_PLAINTEXT listener with SCRAM (an authorizer is configured)" if secured \
                else "a PLAINTEXT listener"
            return None, self._page("error.html", {"message": f"The console needs {need}."}, 503, user=None)
        host, port = where
        settings = {"bootstrap.servers": f"{host}:{port}", "request.timeout.ms": "15000"}
        if not secured:
            return settings, None
        auth = headers.get("authorization", "")
        user = password = None
        if auth.lower().startswith("basic "):
            try:
                user, _, password = base64.b64decode(auth[6:].strip()).decode("utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError):
                user = None
        if not user:
            return None, self._page("error.html", {"message": "Log in with a SCRAM user of the cluster."}, 401,
                                    user=None, extra={"WWW-Authenticate": REALM})
        settings.update({"security.protocol": "SASL_PLAINTEXT", "sasl.username": user, "sasl.password": password})
        return settings, user

    def _admin(self, settings: dict) -> Admin:
        if settings.get("security.protocol") != "SASL_PLAINTEXT":
            return Admin(settings)
        last = None
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):   # the user's credential may be either
            try:
                return Admin(dict(settings, **{"sasl.mechanism": mech}))
            except ConnectionFailed as exc:
                last = exc
        raise last

    def _page(self, template: str, data: dict, code: int = 200, user=None, extra=None):
        body = self.env().get_template(template).render(user=user, writes=self.writes, **data).encode()
        return code, body, HTML, extra or {}

    # -- requests -------------------------------------------------------------------------

    def handle(self, path: str, query: str, headers: dict, method: str = "GET", form: bytes = b""):
        if not self.enabled:
            return 404, b"the console is off (kproto.console.enable=false)\n", "text/plain; charset=utf-8", {}
        if not self.broker.ready:
            return 503, b"starting\n", "text/plain; charset=utf-8", {}
        settings, user = self._settings(headers)
        if settings is None:
            return user   # the login page or why the console cannot serve
        if method == "POST":
            refused = self._refuse_write(headers, user)
            if refused is not None:
                return refused
        q = {k: v[-1] for k, v in parse_qs(query).items()}
        parts = [unquote(p) for p in path.split("/")[2:] if p]
        started = time.monotonic()
        try:
            admin = self._admin(settings)
        except ConnectionFailed as exc:
            if "SASL_AUTHENTICATION_FAILED" in str(exc):
                return self._page("error.html", {"message": "Wrong user name or password."}, 401, user=None,
                                  extra={"WWW-Authenticate": REALM})
            return self._page("error.html", {"message": str(exc)}, 503, user=user)
        self.sampler.start()
        try:
            with admin:
                if method == "POST":
                    form_data = {k: v[-1] for k, v in parse_qs(form.decode("utf-8", "replace")).items()}
                    routed = self._act(admin, parts, form_data)
                else:
                    routed = self._route(admin, settings, parts, q)
        except (ValueError, KeyError) as exc:
            return self._page("error.html", {"message": f"bad request: {exc}"}, 400, user=user)
        except AdminError as exc:
            name = exc.name if isinstance(exc, KafkaError) else str(exc).split(":", 1)[0]
            return self._page("error.html", {"message": str(exc)}, _STATUS.get(name, 502), user=user)
        except Exception as exc:   # noqa: BLE001 (a console bug is one page's 500, logged; never the broker's)
            log.warning("console page %s failed: %r", path, exc, exc_info=True)
            return self._page("error.html", {"message": f"internal error: {exc!r}"}, 500, user=user)
        if routed is None:
            return self._page("error.html", {"message": "No such page."}, 404, user=user)
        if isinstance(routed, str):   # a change made: see its result (POST, then redirect, then GET)
            return 303, b"", "text/plain; charset=utf-8", {"Location": routed}
        template, data = routed
        data["elapsed_ms"] = round((time.monotonic() - started) * 1000)
        return self._page(template, data, user=user)

    def _refuse_write(self, headers: dict, user):
        """Why a POST is not carried out, or None: writes off, or a form from another site (the
        browser's Origin, else Referer, must be this console's own address: no cross-site posts
        riding on a logged-in browser's credentials)."""
        if not self.writes:
            return self._page("error.html", {"message": f"The console is read-only ({WRITES_KEY}=false)."},
                              403, user=user)
        host = headers.get("host", "")
        origin = headers.get("origin") or headers.get("referer", "")
        if not host or not (origin == f"http://{host}" or origin.startswith(f"http://{host}/")):
            return self._page("error.html", {"message": "A change must come from the console's own pages."},
                              403, user=user)
        return None

    def _act(self, admin, parts: list[str], form: dict):
        """A change; the page to show next, or None for no such action."""
        from broker.console import actions
        if parts == ["topics"]:
            return "/console/topics/" + quote(actions.create_topic(admin, form), safe="")
        if len(parts) == 3 and parts[0] == "topics" and parts[2] == "delete":
            actions.delete_topic(admin, parts[1], form)
            return "/console/topics"
        if len(parts) == 3 and parts[0] == "groups" and parts[2] == "reset":
            actions.reset_group(admin, parts[1], form)
            return "/console/groups/" + quote(parts[1], safe="")
        return None

    def _route(self, admin, settings, parts: list[str], q: dict):
        page = int(q.get("page", 1) or 1)
        if not parts:
            data = views.overview(admin)
            data["charts"] = self.sampler.throughput_svg()
            return "overview.html", {"o": data, "nav": "overview"}
        if parts[0] == "topics" and len(parts) == 1:
            return "topics.html", {"t": views.topic_list(admin, q.get("q", ""), page), "q": q.get("q", ""),
                                   "nav": "topics"}
        if parts[0] == "topics" and len(parts) == 2:
            return "topic.html", {"t": views.topic_detail(admin, parts[1], page), "nav": "topics"}
        if parts[0] == "topics" and len(parts) == 3 and parts[2] == "messages":
            offset = int(q["offset"]) if q.get("offset", "") != "" else None
            ts = parse_time(q["timestamp"]) if q.get("timestamp", "") != "" else None
            limit = min(max(int(q.get("limit", 20) or 20), 1), 500)
            how = q.get("decode", "auto")
            if how not in ("auto", "text", "json", "hex"):
                raise ValueError(f"decode={how}")
            m = views.messages(admin, parts[1], int(q.get("partition", 0) or 0), offset, ts, limit, how)
            return "messages.html", {"m": m, "nav": "topics"}
        if parts[0] == "groups" and len(parts) == 1:
            return "groups.html", {"g": views.group_list(admin, q.get("q", ""), page), "q": q.get("q", ""),
                                   "nav": "groups"}
        if parts[0] == "groups" and len(parts) == 2:
            d = views.group_detail(admin, parts[1], page)
            self.sampler.follow(parts[1], _lag_reader(self, settings), d["total_lag"])
            d["chart"] = self.sampler.lag_svg(parts[1])
            return "group.html", {"g": d, "nav": "groups"}
        return None


def _lag_reader(console, settings):
    def lag_of(group: str) -> int:
        with console._admin(settings) as admin:
            return views.groups.describe_group(admin, group)["total_lag"]
    return lag_of


def _ts(ms) -> str:
    if ms is None or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _bytes(n) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024

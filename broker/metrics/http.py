"""The metrics listener: /metrics (Prometheus text format), /ready and
/health, served from threads of its own.

It is bound before the broker opens its storage, so an orchestrator gets
answers while a large log recovers (the trio thread is busy then): /ready
says 503 until the listeners are bound and storage is open, /health says
200 unless the event loop has stopped running. Once the broker is ready a
scrape is handed to the trio thread (trio.from_thread), so the counters and
broker state are only ever read on the thread that changes them.
"""
from __future__ import annotations

import logging
import socket
import threading
from time import perf_counter

import trio

log = logging.getLogger("kproto.metrics")

# /health fails when the event loop has not run its 1 s timer for this long
STUCK_AFTER_S = 30.0
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricsServer:
    def __init__(self, broker, host: str, port: int):
        self.broker = broker
        self.sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET,
                                         backlog=64)
        self.host, self.port = self.sock.getsockname()[:2]
        self.trio_token = None
        self._registry = None
        self.console = None   # broker.console.Console, made at the first /console request
        self._thread = threading.Thread(target=self._accept_loop, name="kproto-metrics", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)   # wakes the blocked accept()
        except OSError:
            pass
        self.sock.close()

    # -- serving ----------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, addr = self.sock.accept()
            except OSError:
                return   # closed
            threading.Thread(target=self._serve, args=(conn, addr), daemon=True).start()

    def _serve(self, conn, addr) -> None:
        try:
            conn.settimeout(10)
            self._answer_one(conn)
        except Exception:
            log.debug("metrics request from %s failed", addr, exc_info=True)
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def _answer_one(self, conn) -> None:
        """One GET, answered with HTTP/1.0 and the connection closed (what a
        Prometheus scrape or a probe needs; http.server would cost start-up
        time for nothing more)."""
        reader = conn.makefile("rb")
        request_line = reader.readline(8192).decode("latin-1")
        headers = {}
        for _ in range(100):   # the headers: only the console reads them (Authorization)
            line = reader.readline(8192)
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        parts = request_line.split()
        path, _, query = parts[1].partition("?") if len(parts) >= 2 else ("", "", "")
        path = path.rstrip("/") or "/"
        console = path == "/console" or path.startswith("/console/")
        form = b""
        if len(parts) >= 2 and parts[0] == "POST" and console:
            # the console's forms (only when kproto.console.writes.enable): a small urlencoded body
            raw = headers.get("content-length", "0")
            length = int(raw) if raw.isdigit() else -1
            if not 0 <= length <= 65536:
                return _send(conn, 400, b"bad Content-Length\n")
            form = reader.read(length)
        elif len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
            return _send(conn, 405, b"only GET\n")
        try:
            if console:
                # the web console (broker/console): pages of its own, off with kproto.console.enable=false
                if self.console is None:
                    from broker.console import Console
                    self.console = Console(self.broker, self)
                code, body, ctype, extra = self.console.handle(path, query, headers, parts[0], form)
                return _send(conn, code, b"" if parts[0] == "HEAD" else body, ctype, len(body), extra)
            if path == "/metrics":
                code, body, ctype = 200, self.render(), CONTENT_TYPE
            elif path == "/ready":
                code, text = self.readiness()
                body, ctype = (text + "\n").encode(), None
            elif path in ("/health", "/healthz", "/live"):
                code, text = self.health()
                body, ctype = (text + "\n").encode(), None
            elif path == "/":
                code, body, ctype = 200, b"kproto: /metrics /ready /health /console\n", None
            else:
                code, body, ctype = 404, b"not found\n", None
        except trio.RunFinishedError:
            code, body, ctype = 503, b"stopping\n", None
        _send(conn, code, b"" if parts[0] == "HEAD" else body, ctype, len(body))

    def registry(self):
        if self._registry is None:
            # prometheus_client is imported at the first scrape, not at start
            from prometheus_client import CollectorRegistry, ProcessCollector

            from broker.metrics.collector import BrokerCollector
            registry = CollectorRegistry(auto_describe=False)
            registry.register(BrokerCollector(self.broker))
            ProcessCollector(registry=registry)
            self._registry = registry
        return self._registry

    def render(self) -> bytes:
        from prometheus_client import generate_latest
        registry = self.registry()
        if not self.broker.ready or self.trio_token is None:
            return generate_latest(registry)   # touches no broker state until ready
        return trio.from_thread.run_sync(generate_latest, registry, trio_token=self.trio_token)

    def readiness(self) -> tuple[int, str]:
        b = self.broker
        if getattr(b, "_closed", False):
            return 503, "stopping"
        if b.ready:
            return 200, "ready"
        return 503, "starting: " + ("opening listeners" if b.logs is not None else "recovering logs")

    def health(self) -> tuple[int, str]:
        m = self.broker.metrics
        if self.broker.ready and m is not None:
            stalled = perf_counter() - m.loop_heartbeat
            if stalled > STUCK_AFTER_S:
                return 503, f"event loop stalled for {stalled:.0f} s"
        return 200, "ok"


_REASONS = {200: "OK", 303: "See Other", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
            404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error", 503: "Service Unavailable"}


def _send(conn, code: int, body: bytes, content_type: str | None = None, length: int | None = None,
          extra_headers: dict | None = None) -> None:
    extra = "".join(f"{k}: {v}\r\n" for k, v in (extra_headers or {}).items())
    head = (f"HTTP/1.0 {code} {_REASONS.get(code, '')}\r\nServer: kproto\r\n{extra}"
            f"Content-Type: {content_type or 'text/plain; charset=utf-8'}\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\nConnection: close\r\n\r\n")
    conn.sendall(head.encode("latin-1") + body)

"""The TCP listener and per-connection loop.

Requests on one connection are handled one after another, as Kafka does (it
mutes a connection while a request is in flight), so responses leave in
request order. Frames that already arrived are handled back to back and
their responses go out in one send.
"""
from __future__ import annotations

import errno
import itertools
import logging
import os
from time import perf_counter

import trio

from broker.server.dispatch import Dispatcher
from broker.config.types import StartupError
from broker.net.transport import CloseConnection, ConnectionClosed, FrameTooLarge, Transport, tune

log = logging.getLogger("kproto.server")


_connection_ids = itertools.count(1)


class ClientConnection:
    __slots__ = ("transport", "peer", "listener", "client_software", "session", "remote", "id", "_on_close")

    def __init__(self, transport, peer, listener, session=None):
        self.transport = transport
        self.peer = peer
        self.listener = listener
        # (name, version) the client gave in ApiVersions v3+ (client metrics match on it)
        self.client_software = None
        self.session = session  # broker.security.session.Session: principal, SASL state
        self.remote = 0.0       # RemoteTime of the request being handled (broker/metrics/registry.py)
        self.id = next(_connection_ids)   # what services that keep state per connection key it by
        self._on_close = None

    def when_closed(self, key: str, fn) -> None:
        """Call fn(connection id) when this connection ends (Kafka's ConnectionDisconnectListener):
        a service that keeps state per connection (share sessions) registers once, under `key`."""
        if self._on_close is None:
            self._on_close = {}
        self._on_close.setdefault(key, fn)

    def closed(self) -> None:
        """The connection ended: tell those that asked. One's failure does not keep it from the others."""
        listeners, self._on_close = self._on_close, None
        for fn in (listeners or {}).values():
            try:
                fn(self.id)
            except Exception:
                log.exception("a connection-close listener failed for the connection from %s", self.peer)


async def serve_connection(sock, dispatcher: Dispatcher, max_frame: int, listener: str) -> None:
    tune(sock)
    try:
        peer = sock.getpeername()
    except OSError:
        peer = None
    security = getattr(dispatcher.broker, "security", None)
    if security is not None:
        # TLS handshake and the connection's security session
        try:
            transport, session = await security.accept(sock, max_frame, listener, peer)
        except Exception:
            log.exception("closing connection from %s: its security set-up failed", peer)
            transport = None
        if transport is None:
            sock.close()
            return
    else:
        transport, session = Transport(sock, max_frame), None
    conn = ClientConnection(transport, peer, listener, session)
    # RequestMetrics (broker/metrics): (frame, finished, remote) of each request of a batch
    metrics = getattr(dispatcher.broker, "metrics", None)
    quotas = getattr(dispatcher.broker, "quotas", None)
    done = [] if metrics is not None else None
    if metrics is not None:
        metrics.connection_opened(listener)
    try:
        with sock:
            while True:
                frame = await transport.receive_frame()
                received = perf_counter() if done is not None else 0.0
                out = []
                try:
                    while frame is not None:
                        chunks = await dispatcher.handle(frame, conn)
                        if done is not None:
                            done.append((frame, perf_counter(), conn.remote))
                            conn.remote = 0.0
                        if chunks:
                            out.extend(chunks)
                        if session is not None and session.throttle_until:
                            # Kafka reads nothing more from a throttled channel, even what the
                            # client pipelined: those wait until the throttle time is up
                            break
                        frame = transport.buffered_frame()
                except (CloseConnection, FrameTooLarge) as exc:
                    # Kafka answers requests one at a time: those before the
                    # bad one got their answers before it closed
                    if getattr(exc, "chunks", None):
                        if exc.delay_s:
                            await trio.sleep(exc.delay_s)
                        out.extend(exc.chunks)
                    if out:
                        await transport.send(out)
                    raise
                writing = perf_counter()
                if out:
                    await transport.send(out)
                if done:
                    metrics.requests_answered(done, received, perf_counter())
                    done.clear()
                if session is not None and session.quota_entity is not None:
                    # (a client quota has been set: broker/security/throttle.py is loaded by then)
                    from broker.security.throttle import record_network
                    record_network(quotas, session, perf_counter() - writing)
                if session is not None and session.throttle_until:
                    from broker.security.throttle import mute_if_throttled   # (once throttled)
                    await mute_if_throttled(session)
    except (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError,
            ConnectionResetError, BrokenPipeError):
        pass
    except FrameTooLarge as exc:
        log.warning("closing connection from %s: frame size %s is out of range", peer, exc.args[0])
    except CloseConnection as exc:
        log.warning("closing connection from %s: %s", peer, exc)
    except OSError as exc:
        log.info("connection from %s ended: %s", peer, exc)
    except Exception:
        log.exception("closing connection from %s after an unexpected error", peer)
    finally:
        transport.close()
        conn.closed()
        if metrics is not None:
            metrics.connection_closed(listener)
        if session is not None:
            security.closed(session)


async def run_listener(host: str, port: int, dispatcher: Dispatcher, max_frame: int, name: str,
                       task_status=trio.TASK_STATUS_IGNORED) -> None:
    try:
        listeners = await trio.open_tcp_listeners(port, host=host or None, backlog=1024)
    except OSError as exc:
        raise listen_failed(f"{name}://{host}:{port}", exc) from None
    bound = listeners[0].socket.getsockname()
    async with trio.open_nursery() as nursery:
        task_status.started(bound)
        for listener in listeners:
            nursery.start_soon(_accept_loop, listener, dispatcher, max_frame, name, nursery)


async def _accept_loop(listener, dispatcher, max_frame, name, nursery) -> None:
    security = getattr(dispatcher.broker, "security", None)
    async with listener:
        while True:
            if security is not None:
                await security.limits.wait_for_slot()   # max.connections: stop accepting
            try:
                stream = await listener.accept()
            except OSError as exc:
                log.warning("accept failed: %s", exc)
                await trio.sleep(0.01)
                continue
            # SocketStream sets TCP_NOTSENT_LOWAT to 16 KiB, which cost 1.35x on
            # bulk sends here: take the raw socket and undo it.
            sock = stream.socket
            try:
                import socket as _s
                sock.setsockopt(_s.IPPROTO_TCP, getattr(_s, "TCP_NOTSENT_LOWAT", 25), 0xFFFFFFFF >> 1)
            except OSError:
                pass
            if security is not None:
                ip = _peer_ip(sock)
                if not security.limits.opened(ip):
                    sock.close()    # max.connections.per.ip
                    continue
                hold = security.limits.ip_throttle(ip)
                if hold:
                    # over the address's connection_creation_rate: closed after the throttle time
                    nursery.start_soon(_close_later, sock, hold, security, ip)
                    continue
                delay = security.limits.accept_delay()
                if delay:
                    nursery.start_soon(serve_connection, sock, dispatcher, max_frame, name)
                    await trio.sleep(delay)   # max.connection.creation.rate: accepting pauses
                    continue
            nursery.start_soon(serve_connection, sock, dispatcher, max_frame, name)


async def _close_later(sock, delay: float, security, ip: str) -> None:
    try:
        await trio.sleep(delay)
    finally:
        sock.close()
        security.limits.closed(ip)


def _peer_ip(sock) -> str:
    try:
        return sock.getpeername()[0]
    except OSError:
        return ""


def listen_failed(listener: str, exc: OSError) -> StartupError:
    what = os.strerror(exc.errno) if exc.errno else str(exc)
    hint = ("another process (a running kproto or Kafka?) has the port: stop it or choose another "
            "port with --set listeners=PLAINTEXT://HOST:PORT") if exc.errno == errno.EADDRINUSE else \
        "check the host and port in listeners"
    return StartupError(f"cannot listen on {listener} (listeners): {what.lower()}; {hint}")

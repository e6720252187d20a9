"""The TCP listener and per-connection loop.

Requests on one connection are handled one after another, as Kafka does (it
mutes a connection while a request is in flight), so responses leave in
request order. Frames that already arrived are handled back to back and
their responses go out in one send.
"""
from __future__ import annotations

import logging
from time import perf_counter

import trio

from broker.dispatch import CloseConnection, Dispatcher
from broker.transport import ConnectionClosed, FrameTooLarge, Transport, tune

log = logging.getLogger("kproto.server")


class ClientConnection:
    __slots__ = ("transport", "peer", "listener")

    def __init__(self, transport, peer, listener):
        self.transport = transport
        self.peer = peer
        self.listener = listener


async def serve_connection(sock, dispatcher: Dispatcher, max_frame: int, listener: str) -> None:
    tune(sock)
    try:
        peer = sock.getpeername()
    except OSError:
        peer = None
    transport = Transport(sock, max_frame)
    conn = ClientConnection(transport, peer, listener)
    # RequestMetrics (broker/metrics): (frame, finished) of each request of a batch
    metrics = getattr(dispatcher.broker, "metrics", None)
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
                            done.append((frame, perf_counter()))
                        if chunks:
                            out.extend(chunks)
                        frame = transport.buffered_frame()
                except (CloseConnection, FrameTooLarge):
                    # Kafka answers requests one at a time: those before the
                    # bad one got their answers before it closed
                    if out:
                        await transport.send(out)
                    raise
                if out:
                    await transport.send(out)
                if done:
                    metrics.requests_answered(done, received, perf_counter())
                    done.clear()
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
        if metrics is not None:
            metrics.connection_closed(listener)


async def run_listener(host: str, port: int, dispatcher: Dispatcher, max_frame: int, name: str,
                       task_status=trio.TASK_STATUS_IGNORED) -> None:
    listeners = await trio.open_tcp_listeners(port, host=host or None, backlog=1024)
    bound = listeners[0].socket.getsockname()
    async with trio.open_nursery() as nursery:
        task_status.started(bound)
        for listener in listeners:
            nursery.start_soon(_accept_loop, listener, dispatcher, max_frame, name, nursery)


async def _accept_loop(listener, dispatcher, max_frame, name, nursery) -> None:
    async with listener:
        while True:
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
            nursery.start_soon(serve_connection, sock, dispatcher, max_frame, name)

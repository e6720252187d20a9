"""Socket I/O for one client connection: frames in, gathered responses out.

Large frames are received straight into their own buffer (recv_into); the
responses that are ready are gathered and written together, and record bytes
that live in segment files go out with os.sendfile.
"""
from __future__ import annotations

import errno
import os
import socket as _socket
import struct
from time import monotonic

import trio

from kproto._codec import FileRegion

_SIZE = struct.Struct(">i")
_READ_CHUNK = 256 * 1024
# file bytes in one answer from which a worker thread writes it (a tailing
# consumer's few KiB stay on the event loop: a thread hop costs more than they do)
_THREAD_MIN = 256 * 1024
# ... and only while another connection sent a Produce this recently (a
# producer waiting for its acks): consumers reading with no producer about get
# their answers written on the loop, where they cost less CPU than with a
# thread hop each
_PRODUCER_WINDOW_S = 0.1
# the writer threads have their own limit, so many catching-up consumers never
# hold the default limiter's 40 threads that fsyncs and checkpoints wait on
_WRITERS = trio.lowlevel.RunVar("kproto_answer_writers")


class FrameTooLarge(Exception):
    pass


class ConnectionClosed(Exception):
    pass


class _Waiting:
    """When a Produce request last arrived, and on which connection: one per
    process, as there is one event loop (read and written only on it)."""
    at = float("-inf")
    by = None


_MSG_MORE = getattr(_socket, "MSG_MORE", 0)


class Transport:
    """Reads and writes go straight to the socket and fall back to trio's
    readiness waits only when the kernel says they would block: going through
    trio's socket wrapper for every call was a quarter of the broker's time
    under load (docs/performance.md)."""

    def __init__(self, sock: trio.socket.SocketType, max_frame: int):
        self.sock = sock
        self.max_frame = max_frame
        self._buf = bytearray()
        self._fd = sock.fileno()
        # a second descriptor for the same socket, for plain non-blocking calls
        self._raw = _socket.socket(fileno=os.dup(self._fd))
        self._raw.setblocking(False)

    def close(self) -> None:
        self._raw.close()

    async def _recv(self, n: int) -> bytes:
        while True:
            try:
                return self._raw.recv(n)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.sock)

    async def _recv_into(self, view) -> int:
        while True:
            try:
                return self._raw.recv_into(view)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.sock)

    # -- receiving ---------------------------------------------------------

    def buffered_frame(self) -> bytearray | None:
        """A complete frame already in the buffer, or None."""
        buf = self._buf
        if len(buf) < 4:
            return None
        size = _SIZE.unpack_from(buf, 0)[0]
        if size < 0 or size > self.max_frame:
            raise FrameTooLarge(size)
        if len(buf) - 4 < size:
            return None
        frame = buf[4:4 + size]
        del buf[:4 + size]
        self._note(frame)
        return frame

    def _note(self, frame: bytearray) -> None:
        # the api key is the frame's first int16; Produce's is 0
        if len(frame) >= 2 and not frame[0] and not frame[1]:
            _Waiting.at, _Waiting.by = monotonic(), self

    def _producer_waiting(self) -> bool:
        return _Waiting.by is not self and monotonic() - _Waiting.at < _PRODUCER_WINDOW_S

    async def receive_frame(self) -> bytearray:
        """Wait for the next complete frame."""
        while True:
            frame = self.buffered_frame()
            if frame is not None:
                return frame
            buf = self._buf
            if len(buf) >= 4:
                size = _SIZE.unpack_from(buf, 0)[0]
                if size > _READ_CHUNK:
                    return await self._receive_large(size)
            data = await self._recv(_READ_CHUNK)
            if not data:
                raise ConnectionClosed()
            buf += data

    async def _receive_large(self, size: int) -> bytearray:
        frame = bytearray(size)
        have = len(self._buf) - 4
        frame[:have] = self._buf[4:]
        self._buf.clear()
        view = memoryview(frame)
        while have < size:
            n = await self._recv_into(view[have:])
            if n == 0:
                raise ConnectionClosed()
            have += n
        self._note(frame)
        return frame

    # -- sending -----------------------------------------------------------

    async def send(self, chunks: list) -> None:
        """Send byte chunks and FileRegions in order, coalescing the bytes.
        Bytes followed by file data go with MSG_MORE, so a response header
        and its records leave in the same packets.

        An answer carrying _THREAD_MIN bytes or more of file data (a
        catching-up consumer's fetch), while another connection is sending
        Produce requests, is written by a worker thread: the
        kernel's copy of megabytes then holds that thread, not the event
        loop, so a produce on another connection is served meanwhile, on
        the other core (issue 26, docs/performance.md "Fan-out reads").
        The task waits for its thread, so answers on a connection still
        leave in request order. With no producer about, the loop writes:
        the thread would only add its hops and GIL hand-overs."""
        pieces = _coalesce(chunks)
        offload = (sum(p.length for p in pieces if type(p) is FileRegion) >= _THREAD_MIN
                   and self._producer_waiting())
        at = (0, 0)
        while True:
            if offload:
                at = await trio.to_thread.run_sync(self._write, pieces, at, limiter=_writers())
            else:
                at = self._write(pieces, at)
            if at is None:
                break
            await trio.lowlevel.wait_writable(self.sock)
        # a connection whose calls never block must still let others run
        await trio.lowlevel.checkpoint()

    def _write(self, pieces: list, at: tuple[int, int]) -> tuple[int, int] | None:
        """Write pieces from position ``at`` (piece index, offset in it) with
        non-blocking calls: None once all is written, else where the socket
        would block. Touches no trio state, so it may run in a worker thread."""
        i, done = at
        last = len(pieces) - 1
        raw, fd = self._raw, self._fd
        while i <= last:
            piece = pieces[i]
            try:
                if type(piece) is FileRegion:
                    n = os.sendfile(fd, piece.fd, piece.offset + done, piece.length - done)
                    if n == 0:
                        # the file is shorter than promised (truncated under us):
                        # the frame size is already on the wire, so the connection
                        # cannot be saved
                        raise ConnectionClosed()
                    size = piece.length
                else:
                    n = raw.send(memoryview(piece)[done:], _MSG_MORE if i < last else 0)
                    size = len(piece)
            except BlockingIOError:
                return i, done
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.ECONNRESET):
                    raise ConnectionClosed() from None
                raise
            done += n
            if done >= size:
                i, done = i + 1, 0
        return None


def _writers() -> trio.CapacityLimiter:
    try:
        return _WRITERS.get()
    except LookupError:
        limiter = trio.CapacityLimiter(max(8, os.cpu_count() or 1))
        _WRITERS.set(limiter)
        return limiter


def _coalesce(chunks: list) -> list:
    """Consecutive byte chunks joined into one piece; FileRegions kept apart."""
    pieces, pending = [], bytearray()
    for chunk in chunks:
        if type(chunk) is FileRegion:
            if pending:
                pieces.append(pending)
                pending = bytearray()
            if chunk.length:
                pieces.append(chunk)
        else:
            pending += chunk
    if pending:
        pieces.append(pending)
    return pieces


def tune(sock: trio.socket.SocketType) -> None:
    sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)


class CloseConnection(Exception):
    """The request cannot be answered; Kafka closes the connection."""
    chunks = None   # a last response to send first (failed logins)
    delay_s = 0.0   # and how long to wait before it (connection.failed.authentication.delay.ms)

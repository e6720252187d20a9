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

import trio

from kproto._codec import FileRegion

_SIZE = struct.Struct(">i")
_READ_CHUNK = 256 * 1024


class FrameTooLarge(Exception):
    pass


class ConnectionClosed(Exception):
    pass


class Transport:
    def __init__(self, sock: trio.socket.SocketType, max_frame: int):
        self.sock = sock
        self.max_frame = max_frame
        self._buf = bytearray()
        self._fd = sock.fileno()

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
        return frame

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
            data = await self.sock.recv(_READ_CHUNK)
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
            n = await self.sock.recv_into(view[have:])
            if n == 0:
                raise ConnectionClosed()
            have += n
        return frame

    # -- sending -----------------------------------------------------------

    async def send(self, chunks: list) -> None:
        """Send byte chunks and FileRegions in order, coalescing the bytes."""
        pending = bytearray()
        for chunk in chunks:
            if type(chunk) is FileRegion:
                if pending:
                    await self._send_bytes(pending)
                    pending = bytearray()
                await self._sendfile(chunk)
            else:
                pending += chunk
        if pending:
            await self._send_bytes(pending)

    async def _send_bytes(self, data) -> None:
        view = memoryview(data)
        while view:
            n = await self.sock.send(view)
            view = view[n:]

    async def _sendfile(self, region: FileRegion) -> None:
        offset, remaining = region.offset, region.length
        while remaining:
            try:
                n = os.sendfile(self._fd, region.fd, offset, remaining)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.sock)
                continue
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.ECONNRESET):
                    raise ConnectionClosed() from None
                raise
            if n == 0:
                # the file is shorter than promised (truncated under us):
                # the frame size is already on the wire, so the connection
                # cannot be saved
                raise ConnectionClosed()
            offset += n
            remaining -= n
        await trio.lowlevel.checkpoint()


def tune(sock: trio.socket.SocketType) -> None:
    sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)

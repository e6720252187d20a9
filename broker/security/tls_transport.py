"""Frames over TLS: the plaintext Transport's loop with an ssl.SSLSocket on
the non-blocking descriptor. Record bytes in segment files are read and
encrypted (no sendfile on TLS, as in Kafka)."""
from __future__ import annotations

import os
import ssl

import trio

from broker.net.transport import ConnectionClosed, Transport

HANDSHAKE_TIMEOUT_S = 30.0
_FILE_CHUNK = 256 * 1024


class TlsHandshakeFailed(Exception):
    pass


class TlsTransport(Transport):
    def __init__(self, sock, max_frame: int, context: ssl.SSLContext):
        super().__init__(sock, max_frame)
        self._raw = context.wrap_socket(self._raw, server_side=True, do_handshake_on_connect=False)

    async def handshake(self) -> None:
        with trio.move_on_after(HANDSHAKE_TIMEOUT_S) as scope:
            while True:
                try:
                    self._raw.do_handshake()
                    return
                except ssl.SSLWantReadError:
                    await trio.lowlevel.wait_readable(self.sock)
                except ssl.SSLWantWriteError:
                    await trio.lowlevel.wait_writable(self.sock)
                except (ssl.SSLError, OSError) as exc:
                    raise TlsHandshakeFailed(str(exc)) from None
        if scope.cancelled_caught:
            raise TlsHandshakeFailed("handshake timed out")

    def peer_certificate(self) -> bytes | None:
        try:
            return self._raw.getpeercert(binary_form=True)
        except (ValueError, ssl.SSLError):
            return None

    async def _recv(self, n: int) -> bytes:
        while True:
            try:
                return self._raw.recv(n)
            except ssl.SSLWantReadError:
                await trio.lowlevel.wait_readable(self.sock)
            except ssl.SSLWantWriteError:
                await trio.lowlevel.wait_writable(self.sock)
            except ssl.SSLZeroReturnError:
                return b""
            except ssl.SSLError as exc:
                raise ConnectionClosed(str(exc)) from None

    async def _recv_into(self, view) -> int:
        while True:
            try:
                return self._raw.recv_into(view)
            except ssl.SSLWantReadError:
                await trio.lowlevel.wait_readable(self.sock)
            except ssl.SSLWantWriteError:
                await trio.lowlevel.wait_writable(self.sock)
            except ssl.SSLZeroReturnError:
                return 0
            except ssl.SSLError as exc:
                raise ConnectionClosed(str(exc)) from None

    async def _send_bytes(self, data, flags: int) -> None:
        view = memoryview(data)
        raw = self._raw
        while view:
            try:
                n = raw.send(view)
            except ssl.SSLWantWriteError:
                await trio.lowlevel.wait_writable(self.sock)
                continue
            except ssl.SSLWantReadError:
                await trio.lowlevel.wait_readable(self.sock)
                continue
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                raise ConnectionClosed() from None
            view = view[n:]

    async def send(self, chunks: list) -> None:
        # file regions become bytes here, so one TLS record can carry a
        # response header and its first records
        from kproto._codec import FileRegion
        pending = bytearray()
        for chunk in chunks:
            if type(chunk) is FileRegion:
                offset, remaining = chunk.offset, chunk.length
                while remaining:
                    data = os.pread(chunk.fd, min(remaining, _FILE_CHUNK), offset)
                    if not data:
                        raise ConnectionClosed()
                    pending += data
                    offset += len(data)
                    remaining -= len(data)
                    if len(pending) >= _FILE_CHUNK:
                        await self._send_bytes(pending, 0)
                        pending = bytearray()
            else:
                pending += chunk
        if pending:
            await self._send_bytes(pending, 0)
        await trio.lowlevel.checkpoint()

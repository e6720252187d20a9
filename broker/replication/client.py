"""A connection from this broker to another one's listener, for the
follower fetcher and AlterPartition: Kafka framing, kproto's codecs, one
request at a time (each user keeps its own connection)."""
from __future__ import annotations

import os
import socket as _socket

import trio

from kproto import api

from broker.net.framing import take_frame


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str, connect=None):
        self.host, self.port = host, port
        self.client_id = client_id
        # connect(host, port, client_id) -> stream with TLS / SASL done (broker/security/outbound.py)
        self.connect = connect
        self._stream = None
        self._raw = None   # a plain connection's socket, for non-blocking calls (_PlainSocket)
        self._buf = bytearray()
        self._correlation = 0

    async def request(self, msg, version: int):
        """Send msg and return the decoded answer; OSError/EOFError when the
        connection fails (it is reopened by the next call)."""
        if self._stream is not None and self.connect is not None:
            from broker.security.outbound import expiring
            if expiring(self._stream):
                await self.aclose()   # its SASL session ends soon: log in again on a new one
        if self._stream is None:
            if self.connect is not None:
                self._stream = await self.connect(self.host, self.port, self.client_id)
            else:
                self._stream = await trio.open_tcp_stream(self.host, self.port)
                self._raw = _PlainSocket(self._stream.socket)
            self._buf.clear()
        self._correlation += 1
        try:
            data = api.encode_request(msg, version, self._correlation, self.client_id)
            if self._raw is not None:
                await self._raw.send_all(data)
            else:
                await self._stream.send_all(data)
            frame = await self._read_frame()
        except BaseException:
            await self.aclose()
            raise
        corr, resp = api.decode_response(frame, msg.API_KEY, version)
        if corr != self._correlation:
            await self.aclose()
            raise EOFError(f"answer {corr} to request {self._correlation}")
        return resp

    async def _read_frame(self):
        """The next answer's frame (bytes or a memoryview of them)."""
        buf = self._buf
        raw = self._raw
        while (frame := take_frame(buf)) is None:
            try:
                data = await (raw.receive_some(1 << 20) if raw is not None else self._stream.receive_some(1 << 20))
            except trio.BrokenResourceError as exc:
                raise EOFError(str(exc)) from None
            if not data:
                raise EOFError("connection closed")
            if not buf and len(data) >= 4 and int.from_bytes(data[:4], "big") == len(data) - 4:
                # the usual case, one whole answer in one receive: read in place (a follower's
                # answer was copied three times more through the buffer)
                return memoryview(data)[4:]
            buf += data
        return frame

    async def aclose(self) -> None:
        if self._raw is not None:
            self._raw.close()
            self._raw = None
        if self._stream is not None:
            stream, self._stream = self._stream, None
            with trio.CancelScope(shield=True):
                try:
                    await stream.aclose()
                except Exception:
                    pass


class _PlainSocket:
    """Sends and receives of a plain TCP connection as non-blocking calls, waiting on trio only
    when the kernel says they would block, as the listener's Transport (broker/net/transport.py)
    does: trio's SocketStream checks, yields and reschedules twice around every call, a follower's
    fetch loop's largest cost after the codecs. At least one yield per request is kept (a fetch
    whose answer is already there must still let others run)."""

    def __init__(self, sock: trio.socket.SocketType):
        self.sock = sock
        self._raw = _socket.socket(fileno=os.dup(sock.fileno()))
        self._raw.setblocking(False)
        self._yielded = False

    def close(self) -> None:
        self._raw.close()

    async def send_all(self, data) -> None:
        view = memoryview(data)
        self._yielded = False
        send = self._raw.send
        while view:
            view = view[await self._call(lambda: send(view), trio.lowlevel.wait_writable):]

    async def receive_some(self, max_bytes: int) -> bytes:
        recv = self._raw.recv
        data = await self._call(lambda: recv(max_bytes), trio.lowlevel.wait_readable)
        if not self._yielded:
            self._yielded = True
            await trio.lowlevel.checkpoint()
        return data

    async def _call(self, call, wait):
        """call() once the socket is ready for it: trio's BrokenResourceError if it fails."""
        while True:
            try:
                return call()
            except BlockingIOError:
                await wait(self.sock)
                self._yielded = True
            except OSError as exc:
                raise trio.BrokenResourceError(str(exc)) from exc

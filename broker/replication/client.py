"""A connection from this broker to another one's listener, for the
follower fetcher and AlterPartition: Kafka framing, kproto's codecs, one
request at a time (each user keeps its own connection)."""
from __future__ import annotations

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
            self._buf.clear()
        self._correlation += 1
        try:
            await self._stream.send_all(api.encode_request(msg, version, self._correlation, self.client_id))
            frame = await self._read_frame()
        except BaseException:
            await self.aclose()
            raise
        corr, resp = api.decode_response(frame, msg.API_KEY, version)
        if corr != self._correlation:
            await self.aclose()
            raise EOFError(f"answer {corr} to request {self._correlation}")
        return resp

    async def _read_frame(self) -> bytes:
        buf = self._buf
        while (frame := take_frame(buf)) is None:
            try:
                data = await self._stream.receive_some(1 << 20)
            except trio.BrokenResourceError as exc:
                raise EOFError(str(exc)) from None
            if not data:
                raise EOFError("connection closed")
            buf += data
        return frame

    async def aclose(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            with trio.CancelScope(shield=True):
                try:
                    await stream.aclose()
                except Exception:
                    pass

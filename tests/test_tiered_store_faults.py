"""An S3 store whose server goes away or is slow: calls fail with ObjectStoreError within the
configured timeouts (never hang), and work again once the server is back. A real moto server
over HTTP; the slow server is a small loopback proxy in front of it that delays its answers."""
from __future__ import annotations

import time

import pytest
import trio

from broker.tiered.object_store import ObjectStoreError, open_store
from tools.s3_server import MotoServer

FAST_FAILURE = {"connect_timeout_ms": "1000", "request_timeout_ms": "1500", "retries": "1",
                "retry_timeout_ms": "3000"}


@pytest.fixture
def moto():
    server = MotoServer().start()
    yield server
    server.kill()


def test_server_killed_then_back(moto):
    store = open_store(moto.config(**FAST_FAILURE))

    async def main():
        with trio.fail_after(30):
            await store.put("seg/0.log", b"before")
        moto.kill()
        for call in (lambda: store.get("seg/0.log"), lambda: store.put("seg/1.log", b"x"),
                     lambda: store.list("seg"), lambda: store.size("seg/0.log")):
            # connection refused, retried once: an error well within the retry budget, no hang
            with trio.fail_after(10):
                with pytest.raises(ObjectStoreError) as e:
                    await call()
            assert store.name in str(e.value)
        await trio.to_thread.run_sync(moto.start)     # back, same port (empty: moto keeps no data)
        with trio.fail_after(30):
            await store.put("seg/0.log", b"after")
            assert await store.get("seg/0.log") == b"after"
        await store.aclose()
    trio.run(main)


async def _delaying_proxy(upstream_port: int, delay: list[float], task_status=trio.TASK_STATUS_IGNORED):
    """Forward loopback TCP to the server; its answers held back `delay[0]` seconds per chunk."""
    async def pump(src, dst, wait):
        try:
            async for chunk in src:
                if wait:
                    await trio.sleep(delay[0])
                await dst.send_all(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await dst.aclose()

    async def handle(client):
        try:
            server = await trio.open_tcp_stream("127.0.0.1", upstream_port)
        except OSError:
            await client.aclose()
            return
        async with trio.open_nursery() as n:
            n.start_soon(pump, client, server, False)
            n.start_soon(pump, server, client, True)

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


def test_slow_server_times_out_then_recovers(moto):
    async def main():
        delay = [0.0]
        async with trio.open_nursery() as nursery:
            port = await nursery.start(_delaying_proxy, moto.port, delay)
            store = open_store(moto.config(endpoint=f"http://127.0.0.1:{port}", **{
                **FAST_FAILURE, "request_timeout_ms": "1000", "retries": "0"}))
            with trio.fail_after(30):
                await store.put("slow/0.log", b"through the proxy")   # the proxy itself works
            delay[0] = 5.0                                             # slower than 1 s timeout
            started = time.monotonic()
            with trio.fail_after(4):
                with pytest.raises(ObjectStoreError) as e:
                    await store.get("slow/0.log")
            assert "slow/0.log" in str(e.value)
            assert time.monotonic() - started >= 0.9        # it was the timeout, not a refusal
            delay[0] = 0.0
            with trio.fail_after(30):
                assert await store.get("slow/0.log") == b"through the proxy"
            await store.aclose()
            nursery.cancel_scope.cancel()
    trio.run(main)
